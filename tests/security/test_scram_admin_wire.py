"""SCRAM credentials managed over the wire on a real broker process: logstore's kio admin client,
kafka-python's and confluent-kafka's admin clients; credentials outlive a SIGKILL, and the offline
`logstore users` command and the running broker see the same file."""
from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion
from confluent_kafka.admin import UserScramCredentialUpsertion as ConfluentUpsertion
from kafka import KafkaAdminClient
from kafka.admin import UserScramCredentialUpsertion
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode

from broker_process import BrokerProcess, finish_brokers, free_port
from logstore.broker.admin_client import AdminClient
from logstore.broker.scram_store import SCRAM_CREDENTIALS_FILE, ScramCredentialStore

TIMEOUT = 15.0  # s: a bound on any single wait


@pytest.fixture
def start_broker(tmp_path):
    """`start_broker() -> BrokerProcess` on a fresh log dir; all stopped and checked at teardown."""
    started: list[BrokerProcess] = []

    def start(data_dir=None) -> BrokerProcess:
        if data_dir is None:
            data_dir = tmp_path / f"broker{len(started)}"
            data_dir.mkdir()
        broker = BrokerProcess("127.0.0.1", free_port(), data_dir)
        started.append(broker)
        return broker.start()
    yield start
    finish_brokers(started)


def kio_upsertion(name: str, mechanism: int, password: str, iterations: int = 4096, salt: bytes = b"0123456789"):
    hash_name = "sha256" if mechanism == 1 else "sha512"
    return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
                                    salted_password=hashlib.pbkdf2_hmac(hash_name, password.encode(), salt,
                                                                        iterations))


def kio_describe(client: AdminClient, users=None):
    response = client.request(DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(UserName(name=u) for u in users)))
    assert response.error_code == ErrorCode.none
    return {r.user: (r.error_code, sorted((int(i.mechanism), int(i.iterations)) for i in r.credential_infos))
            for r in response.results}


def test_kio_admin_alters_and_describes(start_broker):
    broker = start_broker()
    with AdminClient(broker.bootstrap) as client:
        assert kio_describe(client) == {}
        response = client.request(AlterUserScramCredentialsRequest(deletions=(), upsertions=(
            kio_upsertion("alice", 2, "alice-secret", 8192), kio_upsertion("bob", 1, "bob-secret"),
            kio_upsertion("carol", 1, "c", 100))))
        assert [(r.user, r.error_code) for r in response.results] == [
            ("alice", ErrorCode.none), ("bob", ErrorCode.none), ("carol", ErrorCode.unacceptable_credential)]
        assert kio_describe(client) == {"alice": (ErrorCode.none, [(2, 8192)]), "bob": (ErrorCode.none, [(1, 4096)])}
        assert kio_describe(client, ["nobody"]) == {"nobody": (ErrorCode.resource_not_found, [])}
        response = client.request(AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="bob", mechanism=1),), upsertions=()))
        assert [(r.user, r.error_code) for r in response.results] == [("bob", ErrorCode.none)]
        assert set(kio_describe(client)) == {"alice"}
    data = (broker.data_dir / SCRAM_CREDENTIALS_FILE).read_bytes()
    assert b"alice-secret" not in data and b"bob" not in data


def test_kafka_python_admin_alters_and_describes(start_broker):
    broker = start_broker()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    try:
        assert admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", "alice-secret", iterations=8192),
            UserScramCredentialUpsertion("alice,=x", "SCRAM-SHA-256", "s")]) == {"alice": None, "alice,=x": None}
        described = admin.describe_user_scram_credentials()
        assert {u: [(int(i["mechanism"]), i["iterations"]) for i in d["credential_infos"]]
                for u, d in described.items()} == {"alice": [(2, 8192)], "alice,=x": [(1, 4096)]}
        missing = admin.describe_user_scram_credentials(["nobody"])
        assert missing["nobody"]["error"] == "Attempt to describe a user credential that does not exist: nobody"
        refused = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("", "SCRAM-SHA-256", "x")])
        assert refused == {"": "Username must not be empty"}
    finally:
        admin.close()


def test_confluent_kafka_admin_alters_and_describes(start_broker):
    broker = start_broker()
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    futures = admin.alter_user_scram_credentials([
        ConfluentUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"alice-secret"),
        ConfluentUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")],
        request_timeout=TIMEOUT)
    for future in futures.values():
        assert future.result(TIMEOUT) is None
    described = admin.describe_user_scram_credentials(request_timeout=TIMEOUT).result(TIMEOUT)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "alice": [(ScramMechanism.SCRAM_SHA_512, 8192)], "bob": [(ScramMechanism.SCRAM_SHA_256, 4096)]}
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)], request_timeout=TIMEOUT)
    futures["bob"].result(TIMEOUT)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)], request_timeout=TIMEOUT)
    with pytest.raises(Exception) as refused:
        futures["bob"].result(TIMEOUT)
    assert "does not exist" in str(refused.value)
    assert set(admin.describe_user_scram_credentials(request_timeout=TIMEOUT).result(TIMEOUT)) == {"alice"}


def test_credentials_outlive_a_sigkill_and_the_offline_command_sees_them(start_broker):
    broker = start_broker()
    with AdminClient(broker.bootstrap) as client:
        response = client.request(AlterUserScramCredentialsRequest(deletions=(), upsertions=(
            kio_upsertion("alice", 2, "alice-secret", 8192),)))
        assert response.results[0].error_code == ErrorCode.none
    broker.kill()
    broker.wait_killed(TIMEOUT)
    listed = subprocess.run([sys.executable, "-m", "logstore", "users", "list", "--log-dirs", str(broker.data_dir)],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "alice" in listed.stdout and "8192" in listed.stdout
    added = subprocess.run([sys.executable, "-m", "logstore", "users", "add", "--log-dirs", str(broker.data_dir),
                            "--mechanism", "SCRAM-SHA-256", "--user", "bob", "--password", "bob-secret"],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    broker.start()
    with AdminClient(broker.bootstrap) as client:
        assert kio_describe(client) == {"alice": (ErrorCode.none, [(2, 8192)]), "bob": (ErrorCode.none, [(1, 4096)])}
    # The offline command is refused while the broker holds the directory.
    refused = subprocess.run([sys.executable, "-m", "logstore", "users", "delete", "--log-dirs", str(broker.data_dir),
                              "--user", "alice"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "in use by process" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert ScramCredentialStore([str(broker.data_dir)]).users() == {"alice": {"SCRAM-SHA-512": 8192},
                                                                    "bob": {"SCRAM-SHA-256": 4096}}
