"""The authorization hook, against real broker processes and real clients.

A broker started with an authorizer that denies some operations on some
resources (`authorizing_broker.py`) must answer Kafka's authorization codes
where Kafka's KafkaApis does: TOPIC_AUTHORIZATION_FAILED for Produce, Fetch,
Metadata and CreateTopics, GROUP_AUTHORIZATION_FAILED for the group APIs,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for a transactional producer,
CLUSTER_AUTHORIZATION_FAILED for broker configs and idempotent producers,
and Metadata leaves out what may not be seen. The default (no authorizer)
allows everything.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from confluent_kafka.admin import ResourceType as ConfigType
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

import logstore
from clients.broker_process import READY_PREFIX, START_TIMEOUT, STOP_TIMEOUT, _read_line, free_port

LAUNCHER = Path(__file__).with_name("authorizing_broker.py")
TIMEOUT = 30.0  # s: a bound on any one client call
# Topics the denying broker starts with (made in its log dir before it runs: it may not create them).
SECRET, READ_ONLY, WRITE_ONLY, OPEN = "secret", "readonly", "writeonly", "open"
RULES = (
    f"*:TOPIC:{SECRET}",             # invisible: Metadata leaves it out or refuses it
    f"WRITE:TOPIC:{READ_ONLY}",      # Produce refused
    f"READ:TOPIC:{WRITE_ONLY}",      # Fetch refused
    "CREATE:CLUSTER:*",              # so creation is decided per topic
    "CREATE:TOPIC:forbidden",
    "*:GROUP:locked",                # FindCoordinator refused
    "READ:GROUP:readlocked",         # found, but JoinGroup refused
    "*:TRANSACTIONAL_ID:locked-txn",
)


class Running:
    """A broker subprocess: started from `cmd`, stopped with SIGTERM (status 0, no traceback logged)."""

    def __init__(self, cmd: list[str], data_dir: Path, flag: str | None = None):
        self.port = free_port()
        self.data_dir = data_dir
        self.stderr_path = data_dir.parent / f"{data_dir.name}.stderr"
        for override in (f"listeners=PLAINTEXT://127.0.0.1:{self.port}", f"log.dirs={data_dir}"):
            cmd = cmd + ([flag, override] if flag else [override])
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        line = _read_line(self.proc, START_TIMEOUT)
        if line != f"{READY_PREFIX}127.0.0.1:{self.port}":
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"broker said {line!r}:\n{self.stderr_path.read_text()}")
        self.bootstrap = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(STOP_TIMEOUT)
        self.proc.stdout.close()
        log = self.stderr_path.read_text()
        assert status == 0, f"broker exited with {status}:\n{log}"
        assert "Traceback" not in log, f"the broker logged a traceback:\n{log}"


def _denying(tmp_path: Path, rules, topics=()) -> Running:
    data_dir = tmp_path / "denying"
    if topics:
        store = logstore.open(str(data_dir))
        for name in topics:
            store.create_topic(name, 1)
        store.close()
    else:
        data_dir.mkdir()
    return Running([sys.executable, str(LAUNCHER), *rules, "--"], data_dir)


@pytest.fixture
def denying(tmp_path):
    """A broker denying RULES, with the topics it may not create already in its log dir."""
    broker = _denying(tmp_path, RULES, (SECRET, READ_ONLY, WRITE_ONLY, OPEN))
    yield broker
    broker.stop()


@pytest.fixture
def deny_all(tmp_path):
    """A broker denying every operation on every resource."""
    broker = _denying(tmp_path, ("*:*:*",))
    yield broker
    broker.stop()


@pytest.fixture
def default_broker(tmp_path):
    """`logstore broker` as shipped: no authorizer."""
    data_dir = tmp_path / "default"
    data_dir.mkdir()
    broker = Running([sys.executable, "-m", "logstore", "broker"], data_dir, "--override")
    yield broker
    broker.stop()


def _code(exc: BaseException) -> int:
    return exc.args[0].code()


def _delivery(producer: Producer, topic: str) -> KafkaError | None:
    """Produce one record and wait for its delivery report: None, or the error."""
    reports = []
    producer.produce(topic, b"value", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(TIMEOUT) == 0, "no delivery report"
    return reports[0]


def test_metadata_hides_and_refuses_what_may_not_be_seen(denying):
    admin = AdminClient({"bootstrap.servers": denying.bootstrap})
    listed = admin.list_topics(timeout=TIMEOUT).topics
    assert {READ_ONLY, WRITE_ONLY, OPEN} <= set(listed)
    assert SECRET not in listed
    asked = admin.list_topics(topic=SECRET, timeout=TIMEOUT).topics[SECRET]
    assert asked.error is not None and asked.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_auto_creation_needs_create_on_the_topic(denying):
    producer = Producer({"bootstrap.servers": denying.bootstrap, "allow.auto.create.topics": True})
    asked = producer.list_topics(topic="forbidden", timeout=TIMEOUT).topics["forbidden"]
    assert asked.error is not None and asked.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert not (denying.data_dir / "forbidden-0").exists()
    made = producer.list_topics(topic="allowed-new", timeout=TIMEOUT).topics["allowed-new"]
    assert made.error is None and len(made.partitions) == 1


def test_create_topics_answers_topic_authorization_failed(denying):
    admin = AdminClient({"bootstrap.servers": denying.bootstrap})
    futures = admin.create_topics([NewTopic("forbidden", 1, 1), NewTopic("created", 2, 1)],
                                  operation_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        futures["forbidden"].result(TIMEOUT)
    assert _code(refused.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    futures["created"].result(TIMEOUT)
    assert (denying.data_dir / "created-1").is_dir()
    assert not (denying.data_dir / "forbidden-0").exists()


def test_produce_needs_write_on_the_topic(denying):
    producer = Producer({"bootstrap.servers": denying.bootstrap})
    error = _delivery(producer, READ_ONLY)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _delivery(producer, WRITE_ONLY) is None


def test_fetch_needs_read_on_the_topic(denying):
    producer = Producer({"bootstrap.servers": denying.bootstrap})
    assert _delivery(producer, WRITE_ONLY) is None
    assert _delivery(producer, OPEN) is None
    consumer = KafkaConsumer(bootstrap_servers=denying.bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([KafkaTopicPartition(OPEN, 0)])
        records = _poll_until_records(consumer)
        assert [r.value for r in records] == [b"value"]
        consumer.assign([KafkaTopicPartition(WRITE_ONLY, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            _poll_until_records(consumer)
    finally:
        consumer.close()


def _poll_until_records(consumer: KafkaConsumer) -> list:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        batches = consumer.poll(timeout_ms=1000)
        if batches:
            return [record for records in batches.values() for record in records]
    pytest.fail(f"no records within {TIMEOUT} s")


@pytest.mark.parametrize("group", ["locked", "readlocked"])
def test_group_membership_needs_the_group(denying, group):
    consumer = KafkaConsumer(OPEN, bootstrap_servers=denying.bootstrap, group_id=group,
                             auto_offset_reset="earliest")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=1000)
    finally:
        consumer.close(autocommit=False)


def test_describe_groups_answers_group_authorization_failed(denying):
    admin = AdminClient({"bootstrap.servers": denying.bootstrap})
    with pytest.raises(KafkaException) as refused:
        admin.describe_consumer_groups(["locked"])["locked"].result(TIMEOUT)
    assert _code(refused.value) == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_transactional_producer_needs_its_transactional_id(denying):
    producer = Producer({"bootstrap.servers": denying.bootstrap, "transactional.id": "locked-txn"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT)
    assert _code(refused.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    allowed = Producer({"bootstrap.servers": denying.bootstrap, "transactional.id": "free-txn"})
    allowed.init_transactions(TIMEOUT)
    allowed.begin_transaction()
    allowed.produce(WRITE_ONLY, b"in a transaction")
    allowed.commit_transaction(TIMEOUT)


def test_deny_all(deny_all):
    admin = AdminClient({"bootstrap.servers": deny_all.bootstrap})
    futures = admin.create_topics([NewTopic("anything", 1, 1)], operation_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        futures["anything"].result(TIMEOUT)
    assert _code(refused.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The internal topics exist but may not be seen either.
    assert admin.list_topics(timeout=TIMEOUT).topics == {}
    configs = admin.describe_configs([ConfigResource(ConfigType.BROKER, "1")])
    with pytest.raises(KafkaException) as refused:
        list(configs.values())[0].result(TIMEOUT)
    assert _code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    errors = []
    idempotent = Producer({"bootstrap.servers": deny_all.bootstrap, "enable.idempotence": True,
                           "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT
    try:
        while not errors and time.monotonic() < deadline:
            idempotent.poll(0.2)
    except KafkaException as exc:  # the fatal error, raised by poll rather than given to error_cb
        errors.append(exc.args[0])
    assert errors and errors[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, errors


def test_default_allows_everything(default_broker):
    bootstrap = default_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("plain", 1, 1)], operation_timeout=TIMEOUT)["plain"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    assert _delivery(producer, "plain") is None
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "plain-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["plain"])
        deadline = time.monotonic() + TIMEOUT
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
        assert message is not None and message.error() is None and message.value() == b"value"
        consumer.commit(message, asynchronous=False)
        committed = consumer.committed([TopicPartition("plain", 0)], TIMEOUT)
        assert committed[0].offset == 1
    finally:
        consumer.close()
    configs = admin.describe_configs([ConfigResource(ConfigType.BROKER, "1")])
    assert list(configs.values())[0].result(TIMEOUT)
    assert "plain" in admin.list_topics(timeout=TIMEOUT).topics
