"""Transaction version 2 (KIP-890 part 2) on the wire: raw requests at Kafka's versions against a real broker.

A producer that reads `transaction.version` 2 from ApiVersions sends no
AddPartitionsToTxn or AddOffsetsToTxn: Produce v12 and TxnOffsetCommit v5
put their partitions in the transaction, and EndTxn v5 bumps the epoch,
answering the producer id and epoch to go on with. Read back by a
read_committed confluent-kafka consumer, and from the partition files.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.errors import ErrorCode
from kio.schema.produce.v11.request import PartitionProduceData as PartitionV11
from kio.schema.produce.v11.request import ProduceRequest as ProduceV11
from kio.schema.produce.v11.request import TopicProduceData as TopicV11

from logstore.broker.admin_client import AdminClient, BrokerUnavailableError
from logstore.broker.coordinator.partitioning import partition_for
from logstore.broker.coordinator.txn_log import TxnLogValue, TxnState, encode_key, encode_value
from logstore.formats import DEFAULT_FORMAT
from logstore.manager import LogManager
from txn_checker import partition_batches, read_until, stable_offsets, txn_state_records
from txn_helpers import create_topic
from txn_v2_requests import ACKS_ALL, commit_offsets, end, init, produce
from txn_v2_requests import TIMEOUT as REQUEST_TIMEOUT

TIMEOUT = 30.0   # s: a bound on any single wait
STATE_PARTITIONS = 50
CRASHING_BROKER = str(Path(__file__).with_name("crashing_broker.py"))


@pytest.fixture
def wire(broker):
    with AdminClient(broker.bootstrap) as client:
        yield client


def markers(broker, topic: str, partition: int) -> list[tuple[str, int, int]]:
    """(type, producer id, epoch) of each marker in a partition's files."""
    return [(b.marker, b.producer_id, b.producer_epoch)
            for b in partition_batches(broker.data_dir, topic, partition, whole=False) if b.marker]


def committed_offset(broker, group: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, partition)], timeout=TIMEOUT)[0].offset
    finally:
        c.close()


@pytest.mark.parametrize("request_cls, listed", [(ApiVersionsV3, []), (ApiVersionsV4, [("transaction.version", 0, 2)])])
def test_api_versions_finalize_transaction_version_2(wire, request_cls, listed):
    answer = wire.request(request_cls(client_software_name="t", client_software_version="1"))
    keys = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert keys[0][1] == 12 and keys[26][1] == 5 and keys[28][1] == 5 and keys[24][1] == 5
    # v3 leaves out a supported feature whose lowest version is 0, as Kafka does.
    assert [(f.name, f.min_version, f.max_version) for f in answer.supported_features] == listed
    assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
        ("transaction.version", 2, 2)]
    assert answer.finalized_features_epoch >= 0


def test_a_transaction_commits_without_add_partitions_and_bumps_the_epoch(wire, broker, topic):
    create_topic(broker.bootstrap, topic, 2)
    error, p = init(wire, f"{topic}-id")
    assert error == ErrorCode.none
    pid, epoch = p.producer_id, p.epoch
    assert produce(wire, p, topic, 0, b"a0", b"a1") == ErrorCode.none
    assert produce(wire, p, topic, 1, b"b0") == ErrorCode.none
    assert produce(wire, p, topic, 0, b"a2") == ErrorCode.none   # already in the transaction
    assert commit_offsets(wire, p, "tv2-group", topic, {0: 3, 1: 1}) == [ErrorCode.none, ErrorCode.none]
    # Open: read_committed stops below the transaction.
    assert {lso for lso, _ in stable_offsets(broker.bootstrap, topic, [0, 1]).values()} == {0}

    answer = end(wire, p, commit=True)
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert read_until(broker.bootstrap, topic, {0: b"a2", 1: b"b0"}, "read_committed") == {
        0: [b"a0", b"a1", b"a2"], 1: [b"b0"]}
    assert committed_offset(broker, "tv2-group", topic, 0) == 3
    # The markers carry the bumped epoch, in the data's partitions and the group's offsets partition.
    assert markers(broker, topic, 0) == markers(broker, topic, 1) == [("COMMIT", pid, epoch + 1)]
    offsets_partition = partition_for("tv2-group", 50)
    assert ("COMMIT", pid, epoch + 1) in markers(broker, "__consumer_offsets", offsets_partition)
    # Kafka's record of a TV2 transaction: the Prepare state already holds the bumped epoch.
    states = [(r.state, r.producer_epoch) for r in txn_state_records(broker.data_dir, f"{topic}-id")]
    assert states[-2:] == [("PrepareCommit", epoch + 1), ("CompleteCommit", epoch + 1)]


def test_the_epoch_goes_up_by_one_per_transaction_and_a_retry_gets_the_same_answer(wire, broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    _, p = init(wire, f"{topic}-id")
    pid, first = p.producer_id, p.epoch
    for n in range(3):
        assert produce(wire, p, topic, 0, b"v%d" % n) == ErrorCode.none   # sequence 0 again each epoch
        before = p.epoch
        answer = end(wire, p, commit=True)
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (ErrorCode.none, pid, before + 1)
        # The same EndTxn again (its answer lost): the same answer, nothing written.
        retry = end(wire, p, commit=True, epoch=before)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, pid, before + 1)
    assert p.epoch == first + 3
    # Nothing open: a commit is refused, an abort bumps the epoch and writes no marker.
    assert end(wire, p, commit=True, epoch=p.epoch).error_code == ErrorCode.invalid_txn_state
    aborted = end(wire, p, commit=False)
    assert (aborted.error_code, aborted.producer_epoch) == (ErrorCode.none, first + 4)
    assert [epoch for _, _, epoch in markers(broker, topic, 0)] == [first + 1, first + 2, first + 3]
    assert read_until(broker.bootstrap, topic, {0: b"v2"}, "read_committed") == {0: [b"v0", b"v1", b"v2"]}


def test_a_zombie_with_the_old_epoch_is_fenced(wire, broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    _, p = init(wire, f"{topic}-id")
    old_epoch = p.epoch
    assert produce(wire, p, topic, 0, b"first") == ErrorCode.none
    assert end(wire, p, commit=True).error_code == ErrorCode.none
    zombie = type(p)(p.transactional_id, p.producer_id, old_epoch, {})
    # Its write cannot join the transaction (Kafka answers the produce path INVALID_PRODUCER_EPOCH) ...
    assert produce(wire, zombie, topic, 0, b"late") == ErrorCode.invalid_producer_epoch
    assert commit_offsets(wire, zombie, "g", topic, {0: 1}) == [ErrorCode.producer_fenced]
    # ... and its EndTxn two epochs behind is no retry: fenced.
    assert end(wire, p, commit=True, epoch=old_epoch - 1).error_code == ErrorCode.producer_fenced
    # A new instance fences the current one too.
    _, successor = init(wire, p.transactional_id)
    assert successor.epoch == p.epoch + 1
    assert produce(wire, p, topic, 0, b"fenced") == ErrorCode.invalid_producer_epoch
    assert end(wire, p, commit=False).error_code == ErrorCode.producer_fenced
    assert produce(wire, successor, topic, 0, b"second") == ErrorCode.none
    assert end(wire, successor, commit=True).error_code == ErrorCode.none
    assert read_until(broker.bootstrap, topic, {0: b"second"}, "read_committed") == {0: [b"first", b"second"]}


def test_an_abort_leaves_nothing_visible(wire, broker, topic):
    create_topic(broker.bootstrap, topic, 2)
    _, p = init(wire, f"{topic}-id")
    pid, epoch = p.producer_id, p.epoch
    assert produce(wire, p, topic, 0, b"gone-0") == ErrorCode.none
    assert produce(wire, p, topic, 1, b"gone-1") == ErrorCode.none
    answer = end(wire, p, commit=False)
    assert (answer.error_code, answer.producer_epoch) == (ErrorCode.none, epoch + 1)
    assert markers(broker, topic, 0) == markers(broker, topic, 1) == [("ABORT", pid, epoch + 1)]
    assert produce(wire, p, topic, 0, b"kept") == ErrorCode.none
    assert end(wire, p, commit=True).error_code == ErrorCode.none
    assert read_until(broker.bootstrap, topic, {0: b"kept"}, "read_committed") == {0: [b"kept"]}
    assert all(lso == hw for lso, hw in stable_offsets(broker.bootstrap, topic, [0, 1]).values())


def test_a_write_outside_the_transaction_is_abortable_from_v11(wire, broker, topic):
    """Produce v11 (transaction version 0: the partition was never added) into no open transaction is
    TRANSACTION_ABORTABLE, not INVALID_TXN_STATE (KIP-890 part 1's error for clients that know it)."""
    create_topic(broker.bootstrap, topic, 1)
    _, p = init(wire, f"{topic}-id")
    batch = DEFAULT_FORMAT.encode_batch([None], [b"x"], producer_id=p.producer_id, producer_epoch=p.epoch,
                                        base_sequence=0, transactional=True)
    answer = wire.request(ProduceV11(transactional_id=p.transactional_id, acks=ACKS_ALL, timeout=REQUEST_TIMEOUT,
                                     topic_data=(TopicV11(name=topic, partition_data=(
                                         PartitionV11(index=0, records=batch),)),)))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.transaction_abortable


def _exhaust_epoch(broker, transactional_id: str, producer_id: int, epoch: int) -> None:
    """With the broker stopped, append the id's next state as its coordinator would have written it after
    `epoch` bumps (a Complete state at that epoch): thousands of InitProducerId calls, in one record."""
    store = LogManager([str(broker.data_dir)])
    try:
        log = store.log("__transaction_state", partition_for(transactional_id, STATE_PARTITIONS))
        value = TxnLogValue(producer_id, epoch, 60_000, TxnState.COMPLETE_COMMIT, frozenset(), 1, 1)
        log.append(bytearray(log.format.encode_batch([encode_key(transactional_id)], [encode_value(value)])),
                   client=False, durable=True)
    finally:
        store.close()


def test_an_exhausted_epoch_rolls_to_a_new_producer_id(start_broker, topic):
    broker = start_broker()
    create_topic(broker.bootstrap, topic, 1)
    transactional_id = f"{topic}-id"
    with AdminClient(broker.bootstrap) as wire:
        _, p = init(wire, transactional_id)
    old_pid = p.producer_id
    broker.stop()
    _exhaust_epoch(broker, transactional_id, old_pid, 32765)
    broker.start()
    with AdminClient(broker.bootstrap) as wire:
        _, p = init(wire, transactional_id)
        assert (p.producer_id, p.epoch) == (old_pid, 32766)   # the last epoch a client may hold
        assert produce(wire, p, topic, 0, b"last") == ErrorCode.none
        answer = end(wire, p, commit=True)
        assert answer.error_code == ErrorCode.none
        new_pid = answer.producer_id
        assert new_pid != old_pid and answer.producer_epoch == 0
        # The markers carry the bumped epoch, 32767, under the old producer id.
        assert markers(broker, topic, 0) == [("COMMIT", old_pid, 32767)]
        # A retry of that EndTxn, from the old id at the exhausted epoch, gets the same answer.
        retry = end(wire, p, commit=True, producer_id=old_pid, epoch=32766)
        assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, new_pid, 0)
        assert produce(wire, p, topic, 0, b"next") == ErrorCode.none
        assert end(wire, p, commit=True).error_code == ErrorCode.none
        assert (p.producer_id, p.epoch) == (new_pid, 1)
    assert read_until(broker.bootstrap, topic, {0: b"next"}, "read_committed") == {0: [b"last", b"next"]}
    last = txn_state_records(broker.data_dir, transactional_id)[-1]
    assert (last.state, last.producer_id, last.producer_epoch) == ("CompleteCommit", new_pid, 1)


@pytest.mark.parametrize("crash_at", [
    # The power goes once PrepareCommit is durable: the restart writes the markers.
    pytest.param("txn-prepared", id="after-the-decision"),
    # ... once every marker is durable, before CompleteCommit: the restart finds them written and writes
    # no second one at the same epoch (the log would refuse it: a version 2 marker must be above the epoch).
    pytest.param("txn-markers-written", id="after-the-markers"),
])
def test_a_broker_killed_after_the_decision_finishes_the_transaction_on_restart(start_broker, topic, crash_at):
    broker = start_broker("transaction.state.log.num.partitions=5")
    broker.stop()
    broker.launcher = (CRASHING_BROKER, crash_at)
    broker.start()
    create_topic(broker.bootstrap, topic, 2)
    with AdminClient(broker.bootstrap) as wire:
        _, p = init(wire, f"{topic}-id")
        pid, epoch = p.producer_id, p.epoch
        assert produce(wire, p, topic, 0, b"x0") == ErrorCode.none
        assert produce(wire, p, topic, 1, b"x1") == ErrorCode.none
        with pytest.raises(BrokerUnavailableError):
            end(wire, p, commit=True)
    broker.wait_killed(TIMEOUT)
    broker.launcher = ()
    broker.start()
    with AdminClient(broker.bootstrap) as wire:
        # The producer retries its EndTxn (as clients do while the restart's redo is under way, its answer is
        # CONCURRENT_TRANSACTIONS): the transaction is finished with the bumped epoch.
        deadline = time.monotonic() + TIMEOUT
        while (answer := end(wire, p, commit=True)).error_code == ErrorCode.concurrent_transactions:
            assert time.monotonic() < deadline, "the restart never finished the transaction"
            time.sleep(0.05)   # the client's retry backoff
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
        assert produce(wire, p, topic, 0, b"y0") == ErrorCode.none
        assert end(wire, p, commit=True).error_code == ErrorCode.none
    assert read_until(broker.bootstrap, topic, {0: b"y0", 1: b"x1"}, "read_committed") == {
        0: [b"x0", b"y0"], 1: [b"x1"]}
    assert markers(broker, topic, 1) == [("COMMIT", pid, epoch + 1)]
    assert markers(broker, topic, 0) == [("COMMIT", pid, epoch + 1), ("COMMIT", pid, epoch + 2)]
