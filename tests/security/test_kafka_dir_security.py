"""A directory Kafka (KRaft) wrote keeps its SCRAM users and ACLs: a broker started on it authenticates Kafka's
users and enforces Kafka's ACLs, takes them into its own files once, and a deletion made through the APIs
outlives a SIGKILL and restart (nothing is imported again). Kafka's metadata log is never written.

The directory's metadata log is written with logstore's batch encoder and Kafka's record schemas
(`tests/storage/test_cluster_metadata_security.py`): no public repository was found that committed a KRaft
data dir whose cluster ran with SCRAM users or ACLs.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

import logstore.formats.kafka as K  # noqa: E402
from acl_wire import errors, request  # noqa: E402
from broker_process import BrokerProcess, finish_brokers, free_port  # noqa: E402
from logstore.broker.acl_store import ACLS_FILE, AclStore, encode_acls  # noqa: E402
from logstore.broker.acls import AclBinding, AclBindingFilter  # noqa: E402
from logstore.broker.admin_client import AdminClient  # noqa: E402
from logstore.broker.authorizer import (  # noqa: E402
    STANDARD_AUTHORIZER,
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourceType,
)
from logstore.broker.scram_store import SCRAM_CREDENTIALS_FILE  # noqa: E402
from logstore.broker.standard_authorizer import StandardAuthorizer  # noqa: E402
from logstore.checkpoints import topic_id_to_string  # noqa: E402
from logstore.cluster_metadata import MetadataAcl  # noqa: E402
from secure_clients import confluent_read  # noqa: E402
from test_cluster_metadata import MetadataLog, begin, end, fingerprint, meta, uid, write_snapshot  # noqa: E402
from test_cluster_metadata_security import (  # noqa: E402
    ALL,
    ALLOW,
    DENY,
    DESCRIBE,
    GROUP,
    LITERAL,
    PREFIXED,
    READ,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    TOPIC,
    WRITE,
    acl,
    remove_acl,
    remove_user,
    user,
)

TIMEOUT = 30.0   # s: a bound on any one client operation
ORDERS_ID = 7
KAFKAS_RECORDS = [b"written by kafka 0", b"written by kafka 1", b"written by kafka 2"]
# What the metadata log leaves (pattern, entry), as DescribeAcls answers it.
KAFKAS_ACLS = {
    (TOPIC, "ord", PREFIXED, "User:alice", "*", ALL, ALLOW),
    (GROUP, "*", LITERAL, "User:alice", "*", READ, ALLOW),
    (TOPIC, "orders", LITERAL, "User:bob", "*", DESCRIBE, ALLOW),
    (TOPIC, "orders", LITERAL, "User:bob", "*", WRITE, DENY),
    (TOPIC, "orders", LITERAL, "User:erin", "*", DESCRIBE, ALLOW),
}
KAFKAS_USERS = {"alice": [(SCRAM_SHA_256, 4096), (SCRAM_SHA_512, 4096)], "bob": [(SCRAM_SHA_256, 8192)],
                "erin": [(SCRAM_SHA_512, 4096)]}


def kafka_data_dir(root: Path) -> Path:
    """A KRaft broker's log dir as Kafka leaves it: meta.properties, the metadata log (a snapshot, then a log
    with removals and transactions) and topic `orders` with three records."""
    root.mkdir()
    (root / "meta.properties").write_text("#\n#Tue Nov 14 22:13:20 UTC 2023\nnode.id=1\n"
                                          "directory.id=AAAAAAAAAAAAAAAAAAAAAQ\nversion=1\n"
                                          "cluster.id=4L6g3nShT-eMCtK--X86sw\n")
    metadata = root / "__cluster_metadata-0"
    log = MetadataLog(metadata)
    log.batch(meta("FeatureLevelRecord", name="metadata.version", featureLevel=21))             # 0
    log.batch(meta("TopicRecord", name="orders", topicId=topic_id_to_string(uid(ORDERS_ID))))   # 1
    log.batch(user("mallory", SCRAM_SHA_512, "mallory-secret"))                                 # 2: not in the snapshot
    write_snapshot(metadata, 3, 1, [
        meta("FeatureLevelRecord", name="metadata.version", featureLevel=21),
        meta("TopicRecord", name="orders", topicId=topic_id_to_string(uid(ORDERS_ID))),
        meta("PartitionRecord", 1, partitionId=0, topicId=topic_id_to_string(uid(ORDERS_ID)), replicas=[1],
             isr=[1], leader=1, directories=[topic_id_to_string(uid(200))]),
    ], [
        user("alice", SCRAM_SHA_512, "alice-secret"), user("alice", SCRAM_SHA_256, "alice-secret"),
        user("bob", SCRAM_SHA_256, "bob-secret"), user("carol", SCRAM_SHA_512, "carol-secret"),
    ], [
        acl(1, TOPIC, "ord", PREFIXED, "User:alice", ALL),
        acl(2, GROUP, "*", LITERAL, "User:alice", READ),
        acl(3, TOPIC, "orders", LITERAL, "User:bob", DESCRIBE),
        acl(4, TOPIC, "orders", LITERAL, "User:bob", READ),
    ])
    log.batch(remove_user("carol", SCRAM_SHA_512), remove_acl(4))                               # 3-4
    log.batch(user("bob", SCRAM_SHA_256, "bob-new-secret", 8192))                               # 5
    log.batch(begin(), user("erin", SCRAM_SHA_512, "erin-secret"),
              acl(5, TOPIC, "orders", LITERAL, "User:erin", DESCRIBE))                          # 6-8
    log.batch(acl(6, TOPIC, "orders", LITERAL, "User:bob", WRITE, DENY), end())                 # 9-10
    log.batch(begin(), user("dave", SCRAM_SHA_512, "dave-secret"), remove_acl(1),
              meta("AbortTransactionRecord", reason="controller failover"))                     # 11-14
    log.batch(begin(), remove_user("alice", SCRAM_SHA_512))                                      # 15-16: never ended
    orders = root / "orders-0"
    orders.mkdir()
    (orders / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id_to_string(uid(ORDERS_ID))}")
    (orders / f"{0:020d}.log").write_bytes(K.encode_batch([None] * 3, KAFKAS_RECORDS, base_offset=0,
                                                          timestamps=1_700_000_000_000))
    return root


@pytest.fixture
def kafka_broker(tmp_path):
    """`kafka_broker(*overrides) -> (BrokerProcess, sasl bootstrap)` on one directory Kafka wrote (made once):
    PLAINTEXT (whose anonymous clients are super users) first, then SASL_PLAINTEXT with both SCRAM
    mechanisms; StandardAuthorizer on unless an override says otherwise. Every broker is checked at teardown."""
    data_dir = kafka_data_dir(tmp_path / "kafka-logs")
    started: list[BrokerProcess] = []

    def start(*overrides: str) -> tuple[BrokerProcess, str]:
        plain, sasl = free_port(), free_port()
        broker = BrokerProcess("127.0.0.1", plain, data_dir, (
            f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256", "super.users=User:ANONYMOUS",
            f"authorizer.class.name={STANDARD_AUTHORIZER}", *overrides))
        started.append(broker)
        return broker.start(), f"127.0.0.1:{sasl}"
    yield start
    finish_brokers(started)


def scram(name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": name,
            "sasl.password": password}


def authenticates(bootstrap: str, settings: dict[str, str]) -> bool:
    """Whether the user gets a Metadata answer (False: the client reports the broker refused its login)."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, **settings})
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=0.5)
            return True
        except KafkaException:
            producer.poll(0)
        if errors:
            assert errors[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT), errors[0]
            return False
    raise AssertionError(f"neither a Metadata answer nor a refusal in {TIMEOUT} s")


def produce(bootstrap: str, settings: dict[str, str], value: bytes) -> int | None:
    """Produce one record to `orders`: None once written, else the error code its delivery reports."""
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": int(TIMEOUT * 1000), **settings})
    producer.produce("orders", value, on_delivery=lambda err, _: reports.append(err))
    assert producer.flush(TIMEOUT) == 0, "no delivery report"
    return None if reports[0] is None else reports[0].code()


def consume(bootstrap: str, settings: dict[str, str], count: int) -> list[bytes]:
    """Read `orders` from its start in a consumer group; the first `count` values."""
    return confluent_read(bootstrap, settings, "orders", "kafkas-group", count, timeout=TIMEOUT)


def described_acls(broker: BrokerProcess) -> set[tuple]:
    with AdminClient(broker.bootstrap) as client:
        answer = client.request(request(29, 3, resource_type_filter=1, pattern_type_filter=1, operation=1,
                                        permission_type=1))
    assert set(errors(answer)) == {0}
    return {(int(r.resource_type), r.resource_name, int(r.pattern_type), a.principal, a.host, int(a.operation),
             int(a.permission_type)) for r in answer.resources for a in r.acls}


def described_users(broker: BrokerProcess) -> dict[str, list[tuple[int, int]]]:
    with AdminClient(broker.bootstrap) as client:
        answer = client.request(request(50, 0, users=None))
    assert answer.error_code == 0
    return {r.user: sorted((int(i.mechanism), int(i.iterations)) for i in r.credential_infos)
            for r in answer.results}


# -- over the wire ----------------------------------------------------------------------------------

def test_kafkas_users_authenticate_and_its_acls_are_enforced(kafka_broker):
    broker, sasl = kafka_broker()
    metadata = broker.data_dir / "__cluster_metadata-0"
    before = fingerprint(metadata)

    alice = scram("alice", "alice-secret")
    assert consume(sasl, alice, 3) == KAFKAS_RECORDS                 # READ on the topic (ALL, prefixed) and group
    assert produce(sasl, alice, b"written by alice") is None          # WRITE: ALL, prefixed
    assert produce(sasl, scram("alice", "alice-secret", "SCRAM-SHA-256"), b"sha-256 too") is None
    bob = scram("bob", "bob-new-secret", "SCRAM-SHA-256")             # his credential replaced in the log
    assert produce(sasl, bob, b"denied") == KafkaError.TOPIC_AUTHORIZATION_FAILED   # DENY WRITE, committed
    assert authenticates(sasl, scram("erin", "erin-secret"))          # added in a committed transaction
    assert not authenticates(sasl, scram("bob", "bob-secret", "SCRAM-SHA-256"))      # the replaced password
    assert not authenticates(sasl, scram("carol", "carol-secret"))    # removed in the log
    assert not authenticates(sasl, scram("dave", "dave-secret"))      # added in an aborted transaction
    assert not authenticates(sasl, scram("mallory", "mallory-secret"))  # before the snapshot, not in it
    assert not authenticates(sasl, scram("alice", "wrong"))

    assert described_acls(broker) == KAFKAS_ACLS
    assert described_users(broker) == KAFKAS_USERS
    stored = json.loads((broker.data_dir / SCRAM_CREDENTIALS_FILE).read_text())
    assert stored["generation"] == 1 and sorted(stored["credentials"]) == ["alice", "bob", "erin"]
    assert json.loads((broker.data_dir / ACLS_FILE).read_text())["generation"] == 1
    broker.stop()
    assert fingerprint(metadata) == before, "Kafka's metadata log must be left as it was"


def test_a_deletion_through_the_apis_survives_a_restart_and_nothing_is_imported_again(kafka_broker):
    broker, sasl = kafka_broker()
    with AdminClient(broker.bootstrap) as client:
        deleted = client.request(request(31, 3, filters=[{
            "resource_type_filter": TOPIC, "resource_name_filter": "ord", "pattern_type_filter": PREFIXED,
            "principal_filter": "User:alice", "host_filter": None, "operation": 1, "permission_type": 1}]))
        assert set(errors(deleted)) == {0}
        assert sum(len(r.matching_acls) for r in deleted.filter_results) == 1
        altered = client.request(request(51, 0, deletions=[{"name": "bob", "mechanism": SCRAM_SHA_256}],
                                         upsertions=[]))
        assert set(errors(altered)) == {0}
    broker.kill()   # both changes were answered: they must be on disk

    broker, sasl = kafka_broker()
    assert described_acls(broker) == KAFKAS_ACLS - {(TOPIC, "ord", PREFIXED, "User:alice", "*", ALL, ALLOW)}
    assert described_users(broker) == {u: m for u, m in KAFKAS_USERS.items() if u != "bob"}
    assert not authenticates(sasl, scram("bob", "bob-new-secret", "SCRAM-SHA-256"))
    assert produce(sasl, scram("alice", "alice-secret"), b"no longer") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "taken from Kafka's metadata log" not in broker.log_text()
    broker.stop()


def test_kafkas_acls_are_taken_when_the_authorizer_is_first_switched_on(kafka_broker):
    broker, sasl = kafka_broker("authorizer.class.name=")
    assert authenticates(sasl, scram("alice", "alice-secret"))       # SCRAM needs no authorizer
    assert not (broker.data_dir / ACLS_FILE).exists()
    broker.stop()

    broker, sasl = kafka_broker()
    assert described_acls(broker) == KAFKAS_ACLS
    assert produce(sasl, scram("bob", "bob-new-secret", "SCRAM-SHA-256"), b"denied") == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker.stop()


# -- the authorizer's seeding, in process -------------------------------------------------------------

KAFKA = {uid(1): MetadataAcl(TOPIC, "ord", PREFIXED, "User:alice", "*", ALL, ALLOW),
         uid(2): MetadataAcl(GROUP, "*", LITERAL, "User:alice", "*", READ, ALLOW)}
ALICE = KafkaPrincipal("User", "alice")


def test_kafkas_acls_become_the_first_generation_once(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    authorizer = StandardAuthorizer(AclStore(dirs))
    assert authorizer.take_kafka_acls(KAFKA) == 2
    assert authorizer.authorize(ALICE, AclOperation.WRITE, ResourceType.TOPIC, ["orders", "other"]) == {"orders"}
    assert [json.loads(Path(d, ACLS_FILE).read_text())["generation"] for d in dirs] == [1, 1]
    assert authorizer.take_kafka_acls(KAFKA) == 0                      # the same run: the file exists now
    authorizer.delete_acls([AclBindingFilter(ResourceType.TOPIC, "ord", PatternType.PREFIXED)])
    again = StandardAuthorizer(AclStore(dirs))
    assert again.take_kafka_acls(KAFKA) == 0
    assert not again.authorize(ALICE, AclOperation.WRITE, ResourceType.TOPIC, ["orders"])


def test_an_empty_acls_file_of_ours_wins_over_kafkas(tmp_path):
    Path(tmp_path, ACLS_FILE).write_bytes(encode_acls(3, []))
    authorizer = StandardAuthorizer(AclStore([str(tmp_path)]))
    assert authorizer.take_kafka_acls(KAFKA) == 0
    assert authorizer.acls(AclBindingFilter()) == []


def test_an_acls_copy_at_generation_0_is_read(tmp_path):
    binding = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    Path(tmp_path, ACLS_FILE).write_bytes(encode_acls(0, [binding]))
    store = AclStore([str(tmp_path)])
    assert store.load() == [binding] and store.found
    authorizer = StandardAuthorizer(AclStore([str(tmp_path)]))
    assert authorizer.take_kafka_acls(KAFKA) == 0


def test_an_acl_kafka_could_not_have_written_is_left_out_and_logged(tmp_path, caplog):
    odd = {uid(9): MetadataAcl(99, "t", LITERAL, "User:alice", "*", READ, ALLOW),
           uid(10): MetadataAcl(TOPIC, "t", LITERAL, "alice", "*", READ, ALLOW),
           **KAFKA}
    authorizer = StandardAuthorizer(AclStore([str(tmp_path)]))
    with caplog.at_level(logging.WARNING):
        assert authorizer.take_kafka_acls(odd) == 2
    assert "AAAAAAAAAAAAAAAAAAAACQ" in caplog.text and "AAAAAAAAAAAAAAAAAAAACg" in caplog.text


def test_users_added_offline_to_a_kafka_dir_join_kafkas(kafka_broker, tmp_path):
    """`logstore users add` before the first start keeps the users Kafka's metadata log holds."""
    data_dir = tmp_path / "kafka-logs"   # made by the fixture, not yet started
    added = subprocess.run([sys.executable, "-m", "logstore", "users", "add", "--log-dirs", str(data_dir),
                            "--mechanism", "SCRAM-SHA-512", "--user", "zed", "--password", "zed-secret"],
                           capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    broker, sasl = kafka_broker()
    assert authenticates(sasl, scram("zed", "zed-secret"))
    assert authenticates(sasl, scram("alice", "alice-secret"))      # Kafka's user, from its metadata log
    assert not authenticates(sasl, scram("carol", "carol-secret"))  # removed in Kafka's log
