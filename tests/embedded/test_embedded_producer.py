"""The embedded producer: Kafka's partitioning, batches with producer ids and sequences, linger, acks, and
transactions with Kafka's fencing and state errors."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from logstore.broker import embedded
from logstore.broker.embedded.partitioner import murmur2, partition_for_key
from logstore.errors import InvalidConfigError, ProducerFencedError, UnknownTopicOrPartitionError


def _values(node, topic, isolation="read_uncommitted"):
    store = node.store
    return [(p, r.offset, r.value) for p in range(store.partitions(topic))
            for r in store.log(topic, p).iter_records(isolation=isolation)]


def test_keys_land_where_the_java_client_puts_them(node):
    node.store.create_topic("t", 7)
    producer = embedded.Producer(node)
    keys = [b"", b"a", b"key-1", b"\xff\x00\x10", b"x" * 37]
    futures = {key: producer.send("t", b"v", key=key) for key in keys}
    producer.flush()
    for key, future in futures.items():
        # kafka-python's partitioner is the oracle: (murmur2(key) & 0x7fffffff) % partitions.
        assert future.result().partition == partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7
    assert murmur2(b"21") == (-973932308) & 0xFFFFFFFF  # Kafka's UtilsTest value


def test_batches_carry_the_producer_id_and_consecutive_sequences(node):
    node.store.create_topic("t", 1)
    producer = embedded.Producer(node, {"batch.size": 400, "linger.ms": 60_000})
    futures = [producer.send("t", b"%03d" % i, key=b"k") for i in range(100)]
    producer.flush()
    assert [f.result().offset for f in futures] == list(range(100))
    batches = [header for header, _ in node.store.log("t").iter_batches()]
    assert len(batches) > 2  # batch.size cut them
    assert {(b.producer_id, b.producer_epoch) for b in batches} == {(producer.producer_id, 0)}
    sequence = 0
    for b in batches:
        assert b.base_sequence == sequence
        sequence += b.last_offset_delta + 1
    other = embedded.Producer(node)
    assert other.producer_id != producer.producer_id


def test_keys_and_partitions_sent_to_open_batches_land_where_kafka_puts_them(node):
    node.store.create_topic("t", 7)
    producer = embedded.Producer(node, {"linger.ms": 60_000})
    keys = [b"key-%d" % i for i in range(500)]
    keyed = [producer.send("t", b"v", key=key) for key in keys]
    placed = [producer.send("t", b"v", partition=i % 7) for i in range(70)]
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("t", b"v", partition=7)
    producer.flush()
    assert [f.result().partition for f in keyed] == [(kafka_python_murmur2(k) & 0x7FFFFFFF) % 7 for k in keys]
    assert [f.result().partition for f in placed] == [i % 7 for i in range(70)]


def test_a_batch_never_outgrows_batch_size(node):
    # batch.size at max.message.bytes' 1 MiB, uncompressed: as in Kafka's accumulator, a record that would not
    # fit starts the next batch, so none is refused as too large; a record larger than batch.size goes alone.
    node.store.create_topic("t", 1)
    producer = embedded.Producer(node, {"batch.size": 1 << 20, "linger.ms": 60_000})
    futures = [producer.send("t", b"%099d" % i) for i in range(25_000)]
    producer.flush()
    assert [f.result().offset for f in futures] == list(range(25_000))
    sizes = [header.size_in_bytes for header, _ in node.store.log("t").iter_batches()]
    assert len(sizes) == 3 and max(sizes) <= 1 << 20
    small = embedded.Producer(node, {"batch.size": 1000, "linger.ms": 60_000})
    assert small.send("t", b"x" * 5000).result(10).offset == 25_000  # written at once: no linger for it


def test_records_sent_from_many_threads_each_land_once_in_their_order(node):
    node.store.create_topic("t", 3)
    producer = embedded.Producer(node, {"batch.size": 2000, "linger.ms": 1})
    sent = 3000

    def send_all(n: int) -> list[embedded.RecordFuture]:
        return [producer.send("t", b"%d-%05d" % (n, i), key=b"%d" % n) for i in range(sent)]

    with ThreadPoolExecutor(4) as pool:
        by_thread = list(pool.map(send_all, range(4)))
    producer.flush()
    stored = {(p, offset): value for p, offset, value in _values(node, "t")}
    assert len(stored) == 4 * sent
    for n, futures in enumerate(by_thread):
        landed = [f.result() for f in futures]
        assert [stored[m.partition, m.offset] for m in landed] == [b"%d-%05d" % (n, i) for i in range(sent)]
        assert [m.offset for m in landed] == sorted(m.offset for m in landed)
    sequence = {p: 0 for p in range(3)}
    for p in range(3):
        for header, _ in node.store.log("t", p).iter_batches():
            assert header.base_sequence == sequence[p]
            sequence[p] += header.last_offset_delta + 1


def test_a_lingering_batch_is_written_without_a_flush(node):
    node.store.create_topic("t", 1)
    producer = embedded.Producer(node, {"linger.ms": 20})
    future = producer.send("t", b"alone")
    assert future.result(10).offset == 0  # the node's upkeep wrote it when linger.ms passed
    assert _values(node, "t") == [(0, 0, b"alone")]


def test_acks_all_answers_only_once_the_record_is_on_disk(node):
    node.store.create_topic("t", 1)
    producer = embedded.Producer(node)
    done = []
    futures = [producer.send("t", b"v%d" % i) for i in range(10)]
    futures[-1].add_done_callback(lambda f: done.append(node.store.log("t").recovery_point))
    producer.flush()
    assert futures[-1].result().offset == 9
    assert done and done[0] >= 10


def test_unknown_topics_are_created_or_refused_as_the_broker_settings_say(tmp_path):
    with embedded.open(str(tmp_path / "a"), {"num.partitions": 3}) as node:
        embedded.Producer(node).send("fresh", b"v").result(10)
        assert node.store.partitions("fresh") == 3
    with embedded.open(str(tmp_path / "b"), {"auto.create.topics.enable": False}) as node:
        with pytest.raises(UnknownTopicOrPartitionError):
            embedded.Producer(node).send("fresh", b"v")
        node.store.create_topic("two", 2)
        with pytest.raises(UnknownTopicOrPartitionError):
            embedded.Producer(node).send("two", b"v", partition=2)


def test_settings_are_kafkas_and_typos_are_refused(node):
    with pytest.raises(InvalidConfigError, match="linger.msec"):
        embedded.Producer(node, {"linger.msec": 5})
    with pytest.raises(InvalidConfigError, match="acks"):
        embedded.Producer(node, {"acks": "2"})
    with pytest.raises(embedded.IllegalStateError):
        embedded.Producer(node, {"transactional.id": "x", "enable.idempotence": False})


def test_committed_and_aborted_transactions(node):
    node.store.create_topic("t", 2)
    producer = embedded.Producer(node, {"transactional.id": "tx"})
    producer.init_transactions()
    producer.begin_transaction()
    kept = [producer.send("t", b"kept-%d" % i, key=b"%d" % i) for i in range(6)]
    producer.commit_transaction()
    assert all(f.done() for f in kept)
    producer.begin_transaction()
    gone = [producer.send("t", b"gone-%d" % i, key=b"%d" % i) for i in range(6)]
    producer.flush()  # written, then aborted: in the log, never read committed
    producer.abort_transaction()
    producer.begin_transaction()
    dropped = producer.send("t", b"never-written")
    producer.abort_transaction()
    with pytest.raises(embedded.TransactionAbortedError):
        dropped.result(1)
    committed = sorted(v for _, _, v in _values(node, "t", "read_committed"))
    assert committed == sorted(b"kept-%d" % i for i in range(6))
    everything = sorted(v for _, _, v in _values(node, "t"))
    assert everything == sorted([b"kept-%d" % i for i in range(6)] + [b"gone-%d" % i for i in range(6)])
    assert all(f.result().offset >= 0 for f in gone)


def _written_in_open_transaction(node, value: bytes) -> embedded.Producer:
    """A transactional producer with `value` written to t-0 in a transaction left open."""
    node.store.create_topic("t", 1)
    producer = embedded.Producer(node, {"transactional.id": "tx"})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", value)
    producer.flush()
    return producer


def test_a_new_instance_fences_the_old_one_and_aborts_its_open_transaction(node):
    old = _written_in_open_transaction(node, b"zombie")
    new = embedded.Producer(node, {"transactional.id": "tx"})
    new.init_transactions()
    assert new.producer_id == old.producer_id and new.producer_epoch > old.producer_epoch
    with pytest.raises(ProducerFencedError):
        old.send("t", b"late")
        old.commit_transaction()
    with pytest.raises(ProducerFencedError):
        old.send("t", b"later")
    new.begin_transaction()
    new.send("t", b"fresh")
    new.commit_transaction()
    assert [v for _, _, v in _values(node, "t", "read_committed")] == [b"fresh"]


def test_state_errors_are_kafkas(node):
    node.store.create_topic("t", 1)
    producer = embedded.Producer(node, {"transactional.id": "tx"})
    with pytest.raises(embedded.IllegalStateError):
        producer.begin_transaction()  # before init_transactions
    producer.init_transactions()
    with pytest.raises(embedded.IllegalStateError):
        producer.send("t", b"outside")
    with pytest.raises(embedded.IllegalStateError):
        producer.commit_transaction()
    producer.begin_transaction()
    with pytest.raises(embedded.IllegalStateError):
        producer.begin_transaction()
    with pytest.raises(embedded.IllegalStateError):
        embedded.Producer(node).init_transactions()


def test_close_aborts_an_open_transaction(node):
    producer = _written_in_open_transaction(node, b"unfinished")
    producer.close()
    assert node.store.log("t").last_stable_offset == node.store.log("t").log_end_offset
    assert _values(node, "t", "read_committed") == []
