"""`logstore transactions abort` and `force-terminate` end real hanging transactions; WriteTxnMarkers on the wire.

A hanging transaction (one no coordinator knows, which no client can make
against a broker that checks KIP-890's rule) is written into a stopped
broker's partition with the storage library, as tests/clients/
test_transactions_admin.py does; `abort` ends it with Kafka's
WriteTxnMarkers, after which a read_committed consumer gets past it.
`force-terminate` fences a live confluent-kafka transactional producer whose
transaction is open: its records are aborted and its commit fails.
"""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.write_txn_markers.v1 import request as markers_v1
from kio.schema.write_txn_markers.v2 import request as markers_v2

import logstore
from admin_cli_broker import TIMEOUT, BrokerProcess, cli, free_port, one_line_error
from logstore.broker.admin_client import AdminClient

PRODUCER_ID, EPOCH = 424242, 3


@pytest.fixture
def hanging(tmp_path):
    """A broker whose `hangs` partition 0 holds "before", then an open transaction of producer PRODUCER_ID
    (records "x", "y") that no coordinator knows; yields (broker, the transaction's first offset)."""
    data = tmp_path / "data"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data).start()
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("hangs", 2, 1)])["hangs"].result(TIMEOUT)
    broker.stop()
    written = int(time.time() * 1000) - 3_600_000
    with logstore.open(str(data)) as store:
        partition = store.log("hangs", 0)
        partition.append_records([b"before"], timestamps=[written])
        result = partition.append_records([b"x", b"y"], timestamps=[written, written], producer_id=PRODUCER_ID,
                                          producer_epoch=EPOCH, base_sequence=0, transactional=True)
    broker.start()
    yield broker, result.first_offset
    if broker.running:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


def produce(broker, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("hangs", value, partition=0)
    assert producer.flush(TIMEOUT) == 0


def read_committed(broker, topic: str, partition: int, count: int) -> list[bytes]:
    """The first `count` values a read_committed consumer gets from the partition (fails if it cannot)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(values) < count:
            assert time.monotonic() < deadline, values
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def open_transactions(broker, topic: str, partition: int) -> list[int]:
    done = cli(broker, "transactions", "describe-producers", "--topic", topic, "--partition", str(partition), "--json")
    return [p["currentTransactionStartOffset"] for p in json.loads(done.stdout)["activeProducers"]
            if p["currentTransactionStartOffset"] is not None]


def hanging_rows(broker, *args: str) -> list[tuple[str, int, int]]:
    done = cli(broker, "transactions", "find-hanging", "--json", *args)
    assert done.returncode == 0, done.stderr
    return [(t["topic"], t["partition"], t["startOffset"]) for t in json.loads(done.stdout)["hangingTransactions"]]


def test_abort_by_start_offset_ends_a_hanging_transaction(hanging):
    broker, start = hanging
    assert open_transactions(broker, "hangs", 0) == [start]
    # Kafka's tool searches a broker's partitions: this node leads them all, another id none.
    assert hanging_rows(broker, "--broker-id", "1") == [("hangs", 0, start)]
    assert hanging_rows(broker, "--broker-id", "2") == []
    done = cli(broker, "transactions", "abort", "--topic", "hangs", "--partition", "0", "--start-offset", str(start))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert open_transactions(broker, "hangs", 0) == []
    assert hanging_rows(broker, "--max-transaction-timeout", "0") == []
    # The last stable offset moved past it: a read_committed consumer reads on, without x and y.
    produce(broker, b"after")
    assert read_committed(broker, "hangs", 0, 2) == [b"before", b"after"]
    one_line_error(cli(broker, "transactions", "abort", "--topic", "hangs", "--partition", "0", "--start-offset",
                       str(start)), 1, f"Could not find any open transactions starting at offset {start} on "
                                       "partition hangs-0")


def test_abort_by_producer_id_epoch_and_coordinator_epoch(hanging):
    broker, start = hanging
    # An older epoch than the producer's is refused by the partition's producer state.
    one_line_error(cli(broker, "transactions", "abort", "--topic", "hangs", "--partition", "0", "--producer-id",
                       str(PRODUCER_ID), "--producer-epoch", str(EPOCH - 1), "--coordinator-epoch", "-1"),
                   1, "INVALID_PRODUCER_EPOCH")
    assert open_transactions(broker, "hangs", 0) == [start]
    done = cli(broker, "transactions", "--json", "abort", "--topic", "hangs", "--partition", "0", "--producer-id",
               str(PRODUCER_ID), "--producer-epoch", str(EPOCH), "--coordinator-epoch", "-1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"topic": "hangs", "partition": 0, "producerId": PRODUCER_ID,
                                       "producerEpoch": EPOCH, "coordinatorEpoch": 0}
    assert open_transactions(broker, "hangs", 0) == []


@pytest.mark.parametrize("version", [1, 2])
def test_write_txn_markers_answers_each_partition(hanging, version):
    broker, start = hanging
    m = markers_v1 if version == 1 else markers_v2
    marker = m.WritableTxnMarker(producer_id=PRODUCER_ID, producer_epoch=EPOCH, transaction_result=False,
                                 coordinator_epoch=0, topics=(
                                     m.WritableTxnMarkerTopic(name="hangs", partition_indexes=(0, 5)),
                                     m.WritableTxnMarkerTopic(name="no-such-topic", partition_indexes=(0,))))
    with AdminClient(broker.bootstrap) as client:
        (result,) = client.request(m.WriteTxnMarkersRequest(markers=(marker,))).markers
    assert result.producer_id == PRODUCER_ID
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in result.topics] == [
        ("hangs", [(0, ErrorCode.none), (5, ErrorCode.unknown_topic_or_partition)]),
        ("no-such-topic", [(0, ErrorCode.unknown_topic_or_partition)])]
    assert open_transactions(broker, "hangs", 0) == []


def test_force_terminate_fences_the_producer_and_aborts_its_transaction(start_broker_for_force):
    broker = start_broker_for_force
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("ft", 1, 1)])["ft"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ft-app",
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce("ft", b"never committed")
    assert producer.flush(TIMEOUT) == 0
    before = json.loads(cli(broker, "transactions", "describe", "--transactional-id", "ft-app", "--json").stdout)
    assert before["transactionState"] == "Ongoing"

    done = cli(broker, "transactions", "force-terminate", "--transactional-id", "ft-app", "--json")
    assert done.returncode == 0, done.stderr
    fenced = json.loads(done.stdout)
    assert (fenced["transactionalId"], fenced["producerId"]) == ("ft-app", before["producerId"])
    assert fenced["producerEpoch"] > before["producerEpoch"]
    after = json.loads(cli(broker, "transactions", "describe", "--transactional-id", "ft-app", "--json").stdout)
    # Aborted, then the id taken over at the new epoch: Empty, as Kafka's fenceProducers leaves it.
    assert (after["transactionState"], after["producerEpoch"]) == ("Empty", fenced["producerEpoch"])
    assert after["transactionTimeoutMs"] == 600_000
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("ft", b"after")
    assert plain.flush(TIMEOUT) == 0
    assert read_committed(broker, "ft", 0, 1) == [b"after"]
    one_line_error(cli(broker, "transactions", "force-terminate", "--transactional-id", "ft-unknown"), 1,
                   "TRANSACTIONAL_ID_NOT_FOUND")


@pytest.fixture
def start_broker_for_force(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data, ("transaction.state.log.num.partitions=3",)).start()
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


def test_abort_needs_a_transaction_to_name(hanging):
    broker, _ = hanging
    for args, fragment in [((), "must be identified either with --start-offset"),
                           (("--start-offset", "1", "--producer-id", "5"), "not both"),
                           (("--producer-id", "5", "--coordinator-epoch", "0"), "Missing required argument "
                                                                                "--producer-epoch"),
                           (("--producer-id", "5", "--producer-epoch", "0"), "Missing required argument "
                                                                             "--coordinator-epoch")]:
        one_line_error(cli(broker, "transactions", "abort", "--topic", "hangs", "--partition", "0", *args), 2,
                       fragment)
    one_line_error(cli(broker, "transactions", "abort", "--partition", "0", "--start-offset", "1"), 2,
                   "Missing required argument --topic (or give --transactional-id)")
    one_line_error(cli(broker, "transactions", "abort", "--transactional-id", "app", "--topic", "hangs"), 2,
                   "--transactional-id names the transaction by itself, without --topic")


def test_abort_in_consumer_offsets_drops_the_transactions_pending_offsets(start_broker_for_offsets):
    broker = start_broker_for_offsets
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("fo", 1, 1)])["fo"].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "fo-app"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    metadata = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fo-group"})
    producer.send_offsets_to_transaction([TopicPartition("fo", 0, 7)], metadata.consumer_group_metadata(), TIMEOUT)
    metadata.close()
    # One __consumer_offsets partition: the group's, where the pending commit opened the producer's transaction.
    (start,) = open_transactions(broker, "__consumer_offsets", 0)
    fetch = OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id="fo-group", topics=(
        OffsetFetchRequestTopics(name="fo", partition_indexes=(0,)),)),), require_stable=True)
    with AdminClient(broker.bootstrap) as client:
        (before,) = client.request(fetch).groups[0].topics[0].partitions
        assert before.error_code == ErrorCode.unstable_offset_commit
        done = cli(broker, "transactions", "abort", "--topic", "__consumer_offsets", "--partition", "0",
                   "--start-offset", str(start))
        assert (done.returncode, done.stderr) == (0, "")
        (after,) = client.request(fetch).groups[0].topics[0].partitions
    assert (after.error_code, after.committed_offset) == (ErrorCode.none, -1)   # dropped, never applied
    assert open_transactions(broker, "__consumer_offsets", 0) == []


@pytest.fixture
def start_broker_for_offsets(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data, ("offsets.topic.num.partitions=1",
                                                             "transaction.state.log.num.partitions=1")).start()
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()
