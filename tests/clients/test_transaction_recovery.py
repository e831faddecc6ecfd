"""A broker killed in the middle of a transaction ends it, on restart, the way it was decided.

The broker runs on a file system that loses power at each step of EndTxn
(crashing_broker.py with a point of tests/storage/txn_points.py): right after
PrepareCommit/PrepareAbort is durable, before one of the markers is, right
after all markers are, and once Complete is written (at the next boundary:
Complete is not fsynced, so the successor's InitProducerId meets the cut).
What was never synced is lost, then the broker dies. A confluent-kafka
producer drives the transaction; its end call times out when the broker dies
and, called again after the restart, gets the decision (librdkafka's "retry
call to resume"). Then the records read back, the offsets, the partition
files, the producer snapshots and `__transaction_state` (decoded without
logstore's code) must all tell the same story, and a new producer with the
same transactional id must take over with a higher epoch. A broker killed
with a transaction merely open ends it aborted: by its timeout, or fenced by
the next InitProducerId, also when the broker dies again half-way through
that abort.
"""
from __future__ import annotations

from itertools import groupby
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from txn_checker import aborted_txns, latest_snapshot, partition_batches, read_until, stable_offsets, txn_state_records

TIMEOUT = 30.0       # s: a bound on any single wait
END_TIMEOUT = 0.5    # s: the EndTxn call that meets the crash (librdkafka goes on in the background)
PARTITIONS = 3
BROKER = ("transaction.state.log.num.partitions=5",)
CLIENT = {"reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 20}
CRASHING_BROKER = str(Path(__file__).with_name("crashing_broker.py"))


def create_topic(broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(TIMEOUT)


def txn_producer(broker, transactional_id: str, **config) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id, **CLIENT, **config})
    p.init_transactions(TIMEOUT)
    return p


def produce_txn(p: Producer, topic: str, tag: str) -> dict[int, list[bytes]]:
    """Begin a transaction and write 4 records to every partition, delivered (on disk) before returning."""
    p.begin_transaction()
    values = {part: [f"{tag}-{part}-{i}".encode() for i in range(4)] for part in range(PARTITIONS)}
    for part, vs in values.items():
        for v in vs:
            p.produce(topic, value=v, partition=part)
    assert p.flush(TIMEOUT) == 0
    return values


def commit_one_each(p: Producer, topic: str, tag: str) -> dict[int, bytes]:
    """A committed transaction of one record per partition; the values by partition."""
    p.begin_transaction()
    values = {part: f"{tag}-{part}".encode() for part in range(PARTITIONS)}
    for part, v in values.items():
        p.produce(topic, value=v, partition=part)
    p.commit_transaction(TIMEOUT)
    return values


def arm(broker, point: str) -> None:
    """The broker's next start runs on a file system that loses power at `point` (`name` or `name:N`)."""
    broker.launcher = (CRASHING_BROKER, point)


def restart(broker) -> None:
    """Start the broker again on its directory and port, on the real file system."""
    broker.launcher = ()
    broker.start()


def assert_stable(broker, topic: str) -> None:
    offsets = stable_offsets(broker.bootstrap, topic, range(PARTITIONS))
    assert all(lso == hw for lso, hw in offsets.values()), f"(LSO, high watermark) by partition: {offsets}"


def check_files(broker, topic: str, transactional_id: str, values: dict[int, list[bytes]], decided: str,
                after: dict[int, bytes]) -> tuple[int, int, int]:
    """Read the stopped broker's files; the transaction's producer id, its epoch and its successor's epoch.

    Per partition, the producer's batches must be: the transaction's data,
    one or more markers of the decided type (a redo after a crash writes it
    again, as Kafka does after a coordinator failover), then the successor's
    committed record and its COMMIT marker. The clean-shutdown producer
    snapshot must hold no open transaction, `.txnindex` exactly the aborted
    range, and `__transaction_state` the decision, its completion and the
    successor's commit.
    """
    data_dir = broker.data_dir
    ids = set()
    for part in range(PARTITIONS):
        batches = partition_batches(data_dir, topic, part)
        ours = [b for b in batches if b.producer_id == batches[0].producer_id]  # the transaction came first
        pid, epoch = ours[0].producer_id, ours[0].producer_epoch
        ids.add((pid, epoch))
        # Runs of data batches and of markers: the transaction, its markers, the successor's, its marker.
        runs = [list(run) for _, run in groupby(ours, key=lambda b: b.marker is None)]
        assert len(runs) == 4 and ours[0].marker is None, f"partition {part}: {ours}"
        txn, markers, successor, successor_markers = runs
        assert all(b.transactional and (b.producer_id, b.producer_epoch) == (pid, epoch) for b in txn)
        assert [v for b in txn for v in b.values] == values[part]
        assert {b.marker for b in markers} == {decided}, f"partition {part}: {markers}"
        assert all(b.producer_epoch >= epoch for b in markers), f"partition {part}: {markers}"
        assert [b.values for b in successor] == [(after[part],)] and successor[0].transactional
        assert successor[0].producer_epoch > max(b.producer_epoch for b in markers), f"partition {part}: {ours}"
        assert [(b.marker, b.producer_epoch) for b in successor_markers] == \
            [("COMMIT", successor[0].producer_epoch)], f"partition {part}: {successor_markers}"

        snapshot_offset, entries = latest_snapshot(data_dir / f"{topic}-{part}")
        assert snapshot_offset == batches[-1].last_offset + 1, "the clean-shutdown snapshot is not at the log end"
        entry = entries[pid]
        assert (entry.epoch, entry.last_offset, entry.current_txn_first_offset) == \
            (successor[0].producer_epoch, successor[0].last_offset, -1), entry
        ranges = [(p, first, last) for p, first, last in aborted_txns(data_dir / f"{topic}-{part}") if p == pid]
        assert ranges == ([(pid, txn[0].base_offset, markers[0].last_offset)] if decided == "ABORT" else []), ranges
    assert len(ids) == 1, f"the transaction's batches carry several producer ids/epochs: {ids}"
    ((pid, epoch),) = ids

    history = txn_state_records(data_dir, transactional_id)
    prepare = "PrepareCommit" if decided == "COMMIT" else "PrepareAbort"
    where = next(i for i, r in enumerate(history) if r.state == prepare and r.producer_id == pid)
    assert history[where].partitions == {(topic, part) for part in range(PARTITIONS)}, history[where]
    decision_epoch = history[where].producer_epoch
    assert decision_epoch >= epoch
    assert any(r.state == "Complete" + prepare[len("Prepare"):] and r.producer_epoch == decision_epoch
               for r in history[where + 1:]), history
    assert not any(r.state.startswith("Prepare") and r.state != prepare and r.producer_epoch == decision_epoch
                   for r in history), history
    final = history[-1]
    assert (final.state, final.producer_id, final.partitions) == ("CompleteCommit", pid, frozenset()), final
    return pid, epoch, final.producer_epoch


CRASHES = [
    pytest.param("txn-prepared", True, None, id="commit-after-prepare"),
    pytest.param("txn-marker:2", True, None, id="commit-after-2-of-3-markers"),
    pytest.param("txn-markers-written", True, None, id="commit-after-all-markers"),
    # EndTxn is answered; the successor's InitProducerId is the next boundary, and Complete is lost.
    pytest.param("txn-completed", True, None, id="commit-after-complete"),
    pytest.param("txn-prepared", False, None, id="abort-after-prepare"),
    pytest.param("txn-marker:2", False, None, id="abort-after-2-of-3-markers"),
    # After 1 of 3 markers; then the restart's redo dies too (after the ready line: the redo runs after it).
    pytest.param("txn-marker:1", True, "txn-marker:2", id="commit-crash-again-in-the-redo"),
]


@pytest.mark.parametrize("crash_at, commit, again", CRASHES)
def test_a_restart_ends_the_transaction_the_way_it_was_decided(start_broker, topic, crash_at, commit, again):
    broker = start_broker(*BROKER)
    broker.stop()
    arm(broker, crash_at)
    broker.start()
    create_topic(broker, topic)
    transactional_id = f"{topic}-id"
    p = txn_producer(broker, transactional_id)
    values = produce_txn(p, topic, "txn")
    end = p.commit_transaction if commit else p.abort_transaction
    successor = None
    if crash_at.startswith("txn-completed"):
        end(TIMEOUT)   # answered: Complete is in the page cache, and nothing crossed a boundary since
        successor = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                              **CLIENT})
        with pytest.raises(KafkaException) as failed:
            successor.init_transactions(END_TIMEOUT)
    else:
        with pytest.raises(KafkaException) as failed:
            end(END_TIMEOUT)
    assert failed.value.args[0].retriable(), failed.value
    broker.wait_killed(TIMEOUT)
    if again:
        arm(broker, again)
        broker.start()
        broker.wait_killed(TIMEOUT)

    restart(broker)
    if successor is None:
        end(TIMEOUT)  # the same call again: the coordinator answers with what it finished on restart
        assert_stable(broker, topic)
        successor = txn_producer(broker, transactional_id)
    else:
        successor.init_transactions(TIMEOUT)  # the same call again, once the restart has redone the markers
        assert_stable(broker, topic)
    after = commit_one_each(successor, topic, "successor")
    committed = read_until(broker.bootstrap, topic, after, "read_committed")
    uncommitted = read_until(broker.bootstrap, topic, after, "read_uncommitted")
    for part in range(PARTITIONS):
        assert committed[part] == (values[part] if commit else []) + [after[part]]
        assert uncommitted[part] == values[part] + [after[part]]
    assert_stable(broker, topic)
    successor.close(TIMEOUT)
    p.close(0)
    broker.stop()

    pid, epoch, successor_epoch = check_files(broker, topic, transactional_id, values,
                                              "COMMIT" if commit else "ABORT", after)
    assert successor_epoch > epoch


@pytest.mark.parametrize("ended_by, crash_at", [
    pytest.param("timeout", None, id="timeout"),
    pytest.param("next-init", None, id="next-init"),
    # The broker dies again half-way through the abort itself, so a second restart finishes it.
    pytest.param("timeout", "txn-marker:2", id="timeout-crash-in-abort"),
    pytest.param("next-init", "txn-marker:2", id="next-init-crash-in-fence"),
])
def test_an_open_transaction_left_by_a_crash_ends_aborted(start_broker, topic, ended_by, crash_at):
    timeout_ms = 3000  # long enough for the checks and the stop before the armed start
    broker = start_broker(*BROKER, "transaction.abort.timed.out.transaction.cleanup.interval.ms=100")
    create_topic(broker, topic)
    transactional_id = f"{topic}-id"
    config = {"transaction.timeout.ms": timeout_ms, "message.timeout.ms": timeout_ms} if ended_by == "timeout" else {}
    p = txn_producer(broker, transactional_id, **config)
    values = produce_txn(p, topic, "open")
    offsets = stable_offsets(broker.bootstrap, topic, range(PARTITIONS))
    assert all(lso == 0 < hw for lso, hw in offsets.values()), f"the transaction is not open: {offsets}"
    successor = None
    if crash_at is None:
        broker.kill()
    else:
        # Stopped within the timeout, the transaction is still open when the armed broker starts.
        broker.stop()
        arm(broker, crash_at)
        broker.start()
        if ended_by == "next-init":
            successor = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                                  **CLIENT})
            with pytest.raises(KafkaException) as failed:
                successor.init_transactions(END_TIMEOUT)
            assert failed.value.args[0].retriable(), failed.value
        broker.wait_killed(TIMEOUT)
    restart(broker)

    if ended_by == "timeout":
        # Behind the open transaction: read_committed gets it only once the coordinator has aborted it.
        later = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, **CLIENT})
        behind = {part: f"behind-{part}".encode() for part in range(PARTITIONS)}
        for part, v in behind.items():
            later.produce(topic, value=v, partition=part)
        assert later.flush(TIMEOUT) == 0
        later.close(TIMEOUT)
        committed = read_until(broker.bootstrap, topic, behind, "read_committed")
        assert committed == {part: [v] for part, v in behind.items()}
        assert_stable(broker, topic)
        successor = txn_producer(broker, transactional_id)
    elif successor is None:
        behind = {part: b"" for part in range(PARTITIONS)}
        # Recovered from the killed broker's files, the open transaction still holds the LSO.
        assert stable_offsets(broker.bootstrap, topic, range(PARTITIONS)) == offsets
        successor = txn_producer(broker, transactional_id)  # fences the open transaction: aborted first
    else:
        behind = {part: b"" for part in range(PARTITIONS)}
        successor.init_transactions(TIMEOUT)  # the same call again, once the restart has finished the abort

    with pytest.raises(KafkaException) as fenced:
        p.commit_transaction(TIMEOUT)
    assert fenced.value.args[0].fatal(), fenced.value
    del p  # a fenced client cannot close (its close would raise the fatal error again)
    after = commit_one_each(successor, topic, "successor")
    committed = read_until(broker.bootstrap, topic, after, "read_committed")
    uncommitted = read_until(broker.bootstrap, topic, after, "read_uncommitted")
    for part in range(PARTITIONS):
        assert [v for v in committed[part] if v != behind[part]] == [after[part]]
        assert [v for v in uncommitted[part] if v != behind[part]] == values[part] + [after[part]]
    assert_stable(broker, topic)
    successor.close(TIMEOUT)
    broker.stop()

    pid, epoch, successor_epoch = check_files(broker, topic, transactional_id, values, "ABORT", after)
    aborting = [r for r in txn_state_records(broker.data_dir, transactional_id) if r.state == "PrepareAbort"]
    assert [r.producer_epoch for r in aborting] == [epoch + 1], "the abort must fence the producer's epoch"
    assert successor_epoch > epoch + 1
