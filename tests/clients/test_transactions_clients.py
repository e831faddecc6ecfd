"""Transactions through confluent-kafka, kafka-python and aiokafka against a real broker.

Each scenario runs once per client: commit and abort over three partitions, an open transaction holding
read_committed consumers at the last stable offset, zombie fencing, a producer that vanishes inside a
transaction and is aborted by the coordinator after its timeout, and a transactional id taken over by a
new producer after a clean commit. A scenario does not only trust the client under test: end offsets are
also asked with confluent's ListOffsets, and the segment files are read with kafka-python's decoder to
check that every transaction ends with exactly one marker of the right kind in each partition it touched.
Consumers use assign() without a group (there is no group coordinator yet).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from txn_helpers import (
    CLIENTS,
    Record,
    by_partition,
    create_topic,
    list_offsets,
    read_line,
    reader,
    transactions_on_disk,
    txn_producer,
)

pytestmark = pytest.mark.parametrize("client", CLIENTS)

HELPERS = Path(__file__).with_name("txn_helpers.py")
QUIET = 0.5  # s: how long a consumer held at the last stable offset must stay without records


@pytest.fixture
def closing():
    """`closing(client) -> client`: closed at teardown, newest first."""
    opened = []
    yield lambda obj: opened.append(obj) or obj
    for obj in reversed(opened):
        obj.close()


def send_txn(producer, topic: str, partitions: int, label: bytes, count: int = 12) -> list[Record]:
    """Begin a transaction and write `count` records round-robin over the partitions; the delivered records
    (flushed, so on the broker: librdkafka would purge unsent ones on abort)."""
    producer.begin()
    for i in range(count):
        producer.send(topic, i % partitions, b"%s %d" % (label, i))
    return producer.flush()


def values_in(records, partition: int) -> tuple[bytes, ...]:
    return tuple(r.value for r in records if r.partition == partition)


def test_commit_abort_commit_across_three_partitions(broker, topic, client, closing):
    create_topic(broker.bootstrap, topic, 3)
    p = closing(txn_producer(client, broker.bootstrap, topic))
    p.init()
    first = send_txn(p, topic, 3, b"first")
    p.commit()
    aborted = send_txn(p, topic, 3, b"aborted")
    p.abort()
    second = send_txn(p, topic, 3, b"second")
    p.commit()
    assert {r.partition for r in first + aborted + second} == {0, 1, 2}

    high = list_offsets(broker.bootstrap, topic, 3, committed=False)
    assert list_offsets(broker.bootstrap, topic, 3, committed=True) == high  # nothing left open

    committed = closing(reader(client, broker.bootstrap, topic, 3, committed=True))
    assert committed.end_offsets() == high
    assert by_partition(committed.read_to_end()) == by_partition(first + second)

    uncommitted = closing(reader(client, broker.bootstrap, topic, 3, committed=False))
    assert uncommitted.end_offsets() == high
    assert by_partition(uncommitted.read_to_end()) == by_partition(first + aborted + second)

    for partition in range(3):
        txns = transactions_on_disk(broker.data_dir, topic, partition)
        assert [(t.values, t.outcome) for t in txns] == [(values_in(first, partition), "commit"),
                                                         (values_in(aborted, partition), "abort"),
                                                         (values_in(second, partition), "commit")]
        assert len({t.producer_id for t in txns}) == 1
        assert all(t.marker_epoch == t.data_epochs[0] and len(t.data_epochs) == 1 for t in txns)


def test_open_transaction_holds_read_committed_at_the_last_stable_offset(broker, topic, client, closing):
    create_topic(broker.bootstrap, topic, 2)
    p1 = closing(txn_producer(client, broker.bootstrap, topic + "-p1"))
    p2 = closing(txn_producer(client, broker.bootstrap, topic + "-p2"))
    p1.init()
    p2.init()
    before = send_txn(p1, topic, 2, b"before", 6)
    p1.commit()
    held = send_txn(p2, topic, 1, b"open", 4)  # partition 0 only, and left open
    after = send_txn(p1, topic, 2, b"after", 6)
    p1.commit()
    open_at = held[0].offset

    stable = list_offsets(broker.bootstrap, topic, 2, committed=True)
    high = list_offsets(broker.bootstrap, topic, 2, committed=False)
    assert stable[0] == open_at < high[0]  # P1's later commit is past the LSO
    assert stable[1] == high[1]            # P2 never touched partition 1

    r = closing(reader(client, broker.bootstrap, topic, 2, committed=True))
    assert r.end_offsets() == stable
    got = r.read_until(stable)
    assert by_partition(got) == by_partition(before + [x for x in after if x.partition == 1])
    assert r.position(0) == open_at
    assert r.fetched_high_watermark(0) == high[0]  # it fetched at the LSO and knows there is more
    # Nothing past the LSO may come while P2 is open, however long the consumer keeps fetching.
    deadline = time.monotonic() + QUIET
    while time.monotonic() < deadline:
        assert r.poll(0.05) == []
    assert r.position(0) == open_at

    p2.commit()
    final = list_offsets(broker.bootstrap, topic, 2, committed=True)
    assert final == list_offsets(broker.bootstrap, topic, 2, committed=False) and final[0] > high[0]
    assert by_partition(r.read_until(final)) == by_partition(held + [x for x in after if x.partition == 0])

    txns = transactions_on_disk(broker.data_dir, topic, 0)
    assert [(t.values, t.outcome) for t in txns] == [(values_in(before, 0), "commit"),
                                                     (values_in(after, 0), "commit"),
                                                     (values_in(held, 0), "commit")]
    assert txns[0].producer_id == txns[1].producer_id != txns[2].producer_id


@pytest.mark.parametrize("late_write", [False, True], ids=["commits", "writes-then-commits"])
def test_zombie_is_fenced_by_a_new_producer_with_its_transactional_id(broker, topic, client, closing, late_write):
    create_topic(broker.bootstrap, topic, 2)
    a = closing(txn_producer(client, broker.bootstrap, topic + "-x"))
    a.init()
    zombie = send_txn(a, topic, 1, b"zombie", 3)
    b = closing(txn_producer(client, broker.bootstrap, topic + "-x"))
    b.init()  # aborts A's open transaction with a bumped epoch

    if late_write:
        a.send(topic, 0, b"zombie late")
        with pytest.raises(Exception) as writing:
            a.flush()
        assert a.fenced(writing.value), repr(writing.value)
        a.settle()   # so that its background attempt to go on cannot land in B's transaction below
        # The client is failed already; how its commit says so is its own business (kafka-python: a
        # KafkaError naming ProducerFencedError), but it must not succeed.
        with pytest.raises(Exception):  # noqa: B017 (any failure will do; success is the bug)
            a.commit()
    else:
        with pytest.raises(Exception) as committing:
            a.commit()
        assert a.fenced(committing.value), repr(committing.value)

    fresh = send_txn(b, topic, 2, b"fresh", 6)
    b.commit()

    high = list_offsets(broker.bootstrap, topic, 2, committed=False)
    assert list_offsets(broker.bootstrap, topic, 2, committed=True) == high
    committed = closing(reader(client, broker.bootstrap, topic, 2, committed=True))
    assert by_partition(committed.read_to_end()) == by_partition(fresh)
    uncommitted = closing(reader(client, broker.bootstrap, topic, 2, committed=False))
    assert by_partition(uncommitted.read_to_end()) == by_partition(zombie + fresh)  # A's writes got there

    txns = transactions_on_disk(broker.data_dir, topic, 0)
    assert [(t.values, t.outcome) for t in txns] == [(values_in(zombie, 0), "abort"),
                                                     (values_in(fresh, 0), "commit")]
    (a_epoch,), (b_epoch,) = txns[0].data_epochs, txns[1].data_epochs
    assert txns[0].producer_id == txns[1].producer_id
    assert a_epoch < txns[0].marker_epoch < b_epoch == txns[1].marker_epoch  # the abort fenced A
    assert not any(b"zombie late" in t.values for p in range(2) for t in transactions_on_disk(
        broker.data_dir, topic, p))


def test_vanished_producer_is_aborted_after_its_timeout(start_broker, topic, client, closing, tmp_path):
    b = start_broker("transaction.state.log.num.partitions=5",
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms=100")
    create_topic(b.bootstrap, topic, 3)
    stderr = tmp_path / "vanished.stderr"
    with open(stderr, "wb") as err:
        # A transaction timeout of 1000 ms: librdkafka fits message.timeout.ms and socket.timeout.ms under it.
        args = ["vanish", client, b.bootstrap, topic + "-vanished", topic, "3", "9", "1000"]
        proc = subprocess.Popen([sys.executable, str(HELPERS), *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
    try:
        line = read_line(proc)
        assert line, f"the vanishing producer exited with {proc.wait()}:\n{stderr.read_text()}"
    finally:
        proc.kill()  # it never ends its transaction
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    vanished = [Record(partition, offset, value.encode()) for partition, offset, value in json.loads(line)]
    assert {r.partition for r in vanished} == {0, 1, 2}

    w = closing(txn_producer(client, b.bootstrap, topic + "-writer"))
    w.init()
    later = send_txn(w, topic, 3, b"later", 6)
    w.commit()
    written = list_offsets(b.bootstrap, topic, 3, committed=False)

    # The positions reach the writer's markers only once the vanished transaction no longer holds the LSO.
    r = closing(reader(client, b.bootstrap, topic, 3, committed=True))
    assert by_partition(r.read_until(written)) == by_partition(later)
    high = list_offsets(b.bootstrap, topic, 3, committed=False)
    assert list_offsets(b.bootstrap, topic, 3, committed=True) == high
    assert by_partition(r.read_until(high)) == {}

    uncommitted = closing(reader(client, b.bootstrap, topic, 3, committed=False))
    assert by_partition(uncommitted.read_to_end()) == by_partition(vanished + later)
    for partition in range(3):
        txns = transactions_on_disk(b.data_dir, topic, partition)
        assert sorted((t.values, t.outcome) for t in txns) == sorted(
            [(values_in(vanished, partition), "abort"), (values_in(later, partition), "commit")])
        (abort,) = [t for t in txns if t.outcome == "abort"]
        assert abort.marker_epoch > abort.data_epochs[0]  # the coordinator bumped the epoch: fenced


def test_new_producer_takes_over_the_transactional_id_after_a_clean_commit(broker, topic, client, closing):
    create_topic(broker.bootstrap, topic, 3)
    old = txn_producer(client, broker.bootstrap, topic + "-x")
    try:
        old.init()
        first = send_txn(old, topic, 3, b"first", 6)
        old.commit()
    finally:
        old.close()
    new = closing(txn_producer(client, broker.bootstrap, topic + "-x"))
    new.init()
    second = send_txn(new, topic, 3, b"second", 6)
    new.commit()
    third = send_txn(new, topic, 3, b"third", 6)
    new.commit()

    r = closing(reader(client, broker.bootstrap, topic, 3, committed=True))
    assert by_partition(r.read_to_end()) == by_partition(first + second + third)
    for partition in range(3):
        txns = transactions_on_disk(broker.data_dir, topic, partition)
        assert [(t.values, t.outcome) for t in txns] == [(values_in(first, partition), "commit"),
                                                         (values_in(second, partition), "commit"),
                                                         (values_in(third, partition), "commit")]
        assert len({t.producer_id for t in txns}) == 1  # the id keeps its producer id, with a new epoch
        (old_epoch,), (new_epoch,), (third_epoch,) = (t.data_epochs for t in txns)
        assert new_epoch == old_epoch + 1 == third_epoch
        assert [t.marker_epoch for t in txns] == [old_epoch, new_epoch, new_epoch]
        assert txns[1].first_sequence == 0  # a new epoch starts its sequences over
