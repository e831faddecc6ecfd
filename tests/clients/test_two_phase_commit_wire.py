"""KIP-939 two-phase commit on the wire: raw InitProducerId v6 and EndTxn requests against a real broker.

An external transaction manager's participant: one producer instance writes
and leaves its transaction open (prepared) past its timeout; another
instance keeps it (InitProducerId keepPreparedTxn) and commits or aborts it;
a third instance fences the second. The broker allows it only with
`transaction.two.phase.commit.enable` and the TWO_PHASE_COMMIT ACL, and a
prepared transaction survives a SIGKILL of the broker.
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kio.index import load_request_schema
from kio.static.primitive import i32Timedelta

from broker_process import BrokerProcess, finish_brokers, free_port
from logstore.broker.admin_client import AdminClient
from logstore.broker.authorizer import STANDARD_AUTHORIZER, AclOperation, ResourceType
from logstore.broker.client_security import ClientSecurity
from logstore.broker.protocol import ErrorCode
from txn_checker import read_until, stable_offsets, txn_state_records
from txn_helpers import create_topic
from txn_v2_requests import end, init, produce

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from acl_wire import make  # noqa: E402 (found through the path set just above)

TIMEOUT = 30.0        # s: a bound on any single wait
SHORT = i32Timedelta.parse(datetime.timedelta(milliseconds=500))   # the timeout a 2PC transaction outlives
TWO_PHASE = "transaction.two.phase.commit.enable=true"
SWEEP = "transaction.abort.timed.out.transaction.cleanup.interval.ms=100"
ADMIN = ClientSecurity("SASL_PLAINTEXT", mechanism="PLAIN", username="admin", password="admin-secret")
ADMIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'


def prepare(wire, broker, topic: str, transactional_id: str, **v6):
    """A first instance opens a two-phase-commit transaction over both partitions and leaves it open."""
    error, p = init(wire, transactional_id, SHORT, enable2_pc=True, **v6)
    assert error == ErrorCode.none
    assert produce(wire, p, topic, 0, b"p0") == ErrorCode.none
    assert produce(wire, p, topic, 1, b"p1") == ErrorCode.none
    return p


def outlive_its_timeout(broker, topic: str) -> None:
    """Wait until the timeout sweep has aborted an ordinary transaction begun after the prepared one, with the
    same timeout: the prepared one's timeout has passed too, and it stays open (KIP-939)."""
    witness = f"{topic}-witness"
    create_topic(broker.bootstrap, witness, 1)
    with AdminClient(broker.bootstrap) as wire:
        error, p = init(wire, f"{witness}-id", SHORT)
        assert error == ErrorCode.none
        assert produce(wire, p, witness, 0, b"w") == ErrorCode.none
    deadline = time.monotonic() + TIMEOUT
    while stable_offsets(broker.bootstrap, witness, [0])[0][0] == 0:
        assert time.monotonic() < deadline, "the timeout sweep never aborted the witness transaction"
        time.sleep(0.05)
    assert {lso for lso, _ in stable_offsets(broker.bootstrap, topic, [0, 1]).values()} == {0}


def keep(wire, transactional_id: str):
    """A second instance keeps the prepared transaction; (its producer, the ongoing producer id and epoch)."""
    error, p = init(wire, transactional_id, SHORT, enable2_pc=True, keep_prepared_txn=True)
    assert error == ErrorCode.none
    return p, (p.answer.ongoing_txn_producer_id, p.answer.ongoing_txn_producer_epoch)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_prepared_transaction_is_kept_and_completed_by_a_second_instance(start_broker, topic, commit):
    broker = start_broker(TWO_PHASE, SWEEP)
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"{topic}-id"
    with AdminClient(broker.bootstrap) as wire:
        first = prepare(wire, broker, topic, transactional_id)
        outlive_its_timeout(broker, topic)
        second, ongoing = keep(wire, transactional_id)
        assert ongoing == (first.producer_id, first.epoch)
        assert (second.producer_id, second.epoch) == (first.producer_id, first.epoch + 1)
        # The first instance is fenced: it can neither write nor end the transaction.
        assert produce(wire, first, topic, 0, b"zombie") == ErrorCode.invalid_producer_epoch
        assert end(wire, first, commit=True).error_code == ErrorCode.producer_fenced
        answer = end(wire, second, commit=commit)
        assert (answer.error_code, answer.producer_epoch) == (ErrorCode.none, first.epoch + 2)
        # A third instance takes over from the second, which is fenced in turn.
        _, third = init(wire, transactional_id, SHORT, enable2_pc=True)
        assert third.epoch == second.epoch + 1
        assert end(wire, second, commit=False).error_code == ErrorCode.producer_fenced
        assert produce(wire, third, topic, 0, b"after") == ErrorCode.none
        assert end(wire, third, commit=True).error_code == ErrorCode.none
    committed = read_until(broker.bootstrap, topic, {0: b"after"}, "read_committed")
    assert committed == {0: ([b"p0"] if commit else []) + [b"after"]}
    assert all(lso == hw for lso, hw in stable_offsets(broker.bootstrap, topic, [0, 1]).values())
    # The two-phase-commit mark is the record's timeout: Integer.MAX_VALUE, as Kafka records it.
    assert {r.timeout_ms for r in txn_state_records(broker.data_dir, transactional_id)} == {2_147_483_647}


def test_without_keep_the_prepared_transaction_is_aborted_as_force_terminate_does(start_broker, topic):
    broker = start_broker(TWO_PHASE)
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"{topic}-id"
    with AdminClient(broker.bootstrap) as wire:
        first = prepare(wire, broker, topic, transactional_id)
        # A plain InitProducerId aborts it (CONCURRENT_TRANSACTIONS until the abort is done), then answers.
        error, _ = init(wire, transactional_id, SHORT, enable2_pc=True)
        assert error == ErrorCode.concurrent_transactions
        error, p = init(wire, transactional_id, SHORT, enable2_pc=True)
        assert (error, p.epoch) == (ErrorCode.none, first.epoch + 2)
        assert p.answer.ongoing_txn_producer_id == -1
    assert all(lso == hw for lso, hw in stable_offsets(broker.bootstrap, topic, [0, 1]).values())


def test_keep_refuses_what_is_not_a_prepared_two_phase_transaction(start_broker, topic):
    broker = start_broker(TWO_PHASE)
    create_topic(broker.bootstrap, topic, 1)
    with AdminClient(broker.bootstrap) as wire:
        error, p = init(wire, f"{topic}-id", SHORT)   # an ordinary transaction
        assert produce(wire, p, topic, 0, b"v") == ErrorCode.none
        error, _ = init(wire, f"{topic}-id", SHORT, enable2_pc=True, keep_prepared_txn=True)
        assert error == ErrorCode.invalid_txn_state
        error, _ = init(wire, f"{topic}-other", SHORT, enable2_pc=False, keep_prepared_txn=True)
        assert error == ErrorCode.invalid_request
        # Nothing open: keep answers no ongoing transaction.
        error, fresh = init(wire, f"{topic}-fresh", SHORT, enable2_pc=True, keep_prepared_txn=True)
        assert error == ErrorCode.none
        assert (fresh.answer.ongoing_txn_producer_id, fresh.answer.ongoing_txn_producer_epoch) == (-1, -1)


def test_two_phase_commit_is_refused_unless_the_broker_enables_it(wire_default_broker):
    error, _ = init(wire_default_broker, "no-2pc", SHORT, enable2_pc=True)
    assert error == ErrorCode.transactional_id_authorization_failed
    error, _ = init(wire_default_broker, "no-2pc", SHORT)   # without 2PC, the same id is served
    assert error == ErrorCode.none


@pytest.fixture
def wire_default_broker(broker):
    with AdminClient(broker.bootstrap) as client:
        yield client


@pytest.fixture
def secured(tmp_path):
    """A 2PC-enabled broker with the StandardAuthorizer: (admin client as the super user, client bootstrap
    for User:ANONYMOUS)."""
    admin_port, client_port = free_port(), free_port()
    broker = BrokerProcess("127.0.0.1", admin_port, tmp_path, (
        f"listeners=ADMIN://127.0.0.1:{admin_port},CLIENT://127.0.0.1:{client_port}",
        "listener.security.protocol.map=ADMIN:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
        "listener.name.admin.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.admin.plain.sasl.jaas.config={ADMIN_JAAS}",
        f"authorizer.class.name={STANDARD_AUTHORIZER}", "super.users=User:admin", TWO_PHASE))
    broker.start()
    with AdminClient(f"127.0.0.1:{admin_port}", security=ADMIN) as admin:
        yield admin, f"127.0.0.1:{client_port}"
    finish_brokers([broker])


def allow(admin: AdminClient, name: str, operation: AclOperation) -> None:
    response = admin.request(make(load_request_schema(30, 3), creations=[{
        "resource_type": int(ResourceType.TRANSACTIONAL_ID), "resource_name": name, "resource_pattern_type": 3,
        "principal": "User:ANONYMOUS", "host": "*", "operation": int(operation), "permission_type": 3}]))
    assert [r.error_code for r in response.results] == [ErrorCode.none]


def test_two_phase_commit_needs_the_two_phase_commit_acl(secured):
    admin, bootstrap = secured
    allow(admin, "acl-2pc", AclOperation.WRITE)
    with AdminClient(bootstrap) as wire:
        assert init(wire, "acl-2pc", SHORT)[0] == ErrorCode.none   # WRITE is enough without 2PC
        assert init(wire, "acl-2pc", SHORT, enable2_pc=True)[0] == ErrorCode.transactional_id_authorization_failed
        allow(admin, "acl-2pc", AclOperation.TWO_PHASE_COMMIT)
        assert init(wire, "acl-2pc", SHORT, enable2_pc=True)[0] == ErrorCode.none


def test_a_prepared_transaction_survives_a_broker_sigkill(start_broker, topic):
    broker = start_broker(TWO_PHASE, SWEEP)
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"{topic}-id"
    with AdminClient(broker.bootstrap) as wire:
        first = prepare(wire, broker, topic, transactional_id)
    broker.kill()
    broker.start()
    outlive_its_timeout(broker, topic)   # the mark came back from `__transaction_state`: no timeout abort
    with AdminClient(broker.bootstrap) as wire:
        second, ongoing = keep(wire, transactional_id)
        assert ongoing == (first.producer_id, first.epoch)
        assert end(wire, second, commit=True).error_code == ErrorCode.none
    assert read_until(broker.bootstrap, topic, {0: b"p0", 1: b"p1"}, "read_committed") == {0: [b"p0"], 1: [b"p1"]}


def transactions_cli(broker, *args: str) -> dict:
    """`logstore transactions ARGS --json` run as a process: its JSON answer."""
    done = subprocess.run([sys.executable, "-m", "logstore", "transactions", "--bootstrap-server", broker.bootstrap,
                           *args, "--json"], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("command", ["force-terminate", "abort"])
def test_the_transactions_tool_lists_describes_and_ends_a_prepared_transaction(start_broker, topic, command):
    broker = start_broker(TWO_PHASE, SWEEP)
    create_topic(broker.bootstrap, topic, 2)
    transactional_id = f"{topic}-id"
    with AdminClient(broker.bootstrap) as wire:
        first = prepare(wire, broker, topic, transactional_id)
    outlive_its_timeout(broker, topic)
    listed = transactions_cli(broker, "list")["transactions"]
    assert [(t["producerId"], t["transactionState"]) for t in listed if t["transactionalId"] == transactional_id] \
        == [(first.producer_id, "Ongoing")]
    described = transactions_cli(broker, "describe", "--transactional-id", transactional_id)
    assert (described["transactionState"], described["transactionTimeoutMs"]) == ("Ongoing", 2_147_483_647)
    assert sorted((t["topic"], t["partition"]) for t in described["topicPartitions"]) == [(topic, 0), (topic, 1)]
    ended = transactions_cli(broker, command, "--transactional-id", transactional_id)
    assert ended["producerEpoch"] > first.epoch
    assert all(lso == hw for lso, hw in stable_offsets(broker.bootstrap, topic, [0, 1]).values())
    after = transactions_cli(broker, "describe", "--transactional-id", transactional_id)
    assert after["transactionState"] == "Empty" and after["transactionTimeoutMs"] == 60_000
