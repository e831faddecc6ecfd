"""Power cuts at every boundary of a partition log's work: acks=all appends across rolls, idempotent and
transactional producers, producer snapshots and a cleaner's swap.

Each case runs its workload once on a `FaultFileSystem` to count the boundaries, then, from the same
starting directory, cuts the power at each in turn (and once after the last) in both legal outcomes of a
cut, reopens the directory through the real file system and checks it against the model
(`power_loss.py`): what was acknowledged is there exactly once with its offsets, what was not is whole
or absent, and the producer and transaction state agree with the batches that survived.
"""
from __future__ import annotations

import os
import random
import shutil

import pytest

from compaction_workload import KEYS, Workload, all_records, latest_values
from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.cleaner import Cleaner, log_to_clean
from logstore.config import LogConfig
from logstore.filenames import SNAPSHOT_SUFFIX
from logstore.log import Log
from power_loss import (
    PARTITION,
    Batch,
    Journal,
    append,
    committed_view,
    found_batches,
    log_config,
    plan,
    read_committed,
    run_plan,
    sweep,
)

PRODUCE = [
    ("plain", [b"a0", b"a1"]),
    ("idem", 7, [b"i0"]),
    ("plain", [b"x" * 200]),
    ("idem", 7, [b"i1", b"i2"]),
    ("future", [b"f0"]),
    ("idem", 8, [b"j0" * 100]),
    ("plain", [b"y" * 300]),
    ("idem", 7, [b"i3"]),
    ("plain", [b"b0"]),
]

TRANSACTIONS = [
    ("txn", 20, [b"t20-0", b"t20-1"]),
    ("plain", [b"p0"]),
    ("txn", 21, [b"t21-0"]),
    ("txn", 20, [b"t20-2" * 60]),
    ("end", 20, True),
    ("txn", 22, [b"t22-0"]),
    ("end", 21, False),
    ("plain", [b"p1" * 120]),
    ("txn", 20, [b"t20-3"]),
    ("end", 22, True),
    ("txn", 23, [b"t23-0"]),   # never decided
    ("plain", [b"p2"]),
]

SNAPSHOTS = [
    ("idem", 7, [b"s0"]),
    ("idem", 8, [b"s1"]),
    ("roll",),
    ("idem", 7, [b"s2", b"s3"]),
    ("txn", 20, [b"s4"]),
    ("roll",),
    ("idem", 8, [b"s5"]),
    ("end", 20, True),
]


def _open(directory, config: LogConfig, fs=None, **kwargs) -> Log:
    if fs is not None:
        kwargs["fs"] = fs
    return Log.open(str(directory / PARTITION), config, **kwargs)


def _partition_dir(directory) -> None:
    # As the log manager leaves it before the first append: created, and its name durable.
    (directory / PARTITION).mkdir()


def _workload(steps: list[tuple], config: LogConfig):
    planned = plan(steps)

    def run(fs, directory, journal):
        # Not closed: the cut (or, after the last boundary, `crash()`) ends this log as a power cut would.
        run_plan(_open(directory, config, fs), fs, planned, journal)

    return planned, run


def _check_log(directory, journal, finished: bool, where: str, config: LogConfig) -> None:
    """The reopened log is a prefix of the attempted batches holding every acknowledged one, indexes and
    producer and transaction state included."""
    # A recovery-point checkpoint may hold anything the log reported: the scan starts there at the earliest.
    with _open(directory, config, recovery_point=journal.recovery_point) as target:
        found = found_batches(target)
        attempted = journal.attempted
        assert journal.acked <= len(found) <= len(attempted), f"{where}: {len(found)} batches"
        assert found == attempted[:len(found)], f"{where}: not a prefix of what was appended"
        if finished:
            assert len(found) == len(attempted), f"{where}: the finished workload lost batches"
        end = found[-1].last_offset + 1 if found else 0
        assert target.log_end_offset == end, where
        # The indexes (trusted below the recovery point, rebuilt above it) find every batch.
        for batch in found:
            data = target.read(batch.first_offset, 1).read()
            assert target.format.peek_entry(data, 0).base_offset == batch.first_offset, where
        _check_transactions(target, found, where)
        _check_producers(target, found, attempted[len(found):len(found) + 1], where)


def _check_transactions(target: Log, found: list[Batch], where: str) -> None:
    open_at: dict[int, int] = {}
    for b in found:
        if b.kind == "txn":
            open_at.setdefault(b.producer_id, b.first_offset)
        elif b.is_marker:
            # Never a marker without its data: the transaction it ends is in the log before it.
            assert b.producer_id in open_at, f"{where}: a marker without its transaction"
            del open_at[b.producer_id]
    lso = min(open_at.values(), default=target.log_end_offset)
    assert target.last_stable_offset == lso, f"{where}: last stable offset"
    assert read_committed(target) == committed_view(found, lso), f"{where}: read_committed"
    # The `.txnindex` files hold every abort whose marker survived, and nothing else.
    aborted = [t for s in target.segments for t in s.txn_index.entries]
    expected = []
    for i, b in enumerate(found):
        if b.kind == "abort":
            first = min(x.first_offset for x in found[:i] if x.kind == "txn" and x.producer_id == b.producer_id
                        and not any(m.is_marker and m.producer_id == b.producer_id
                                    and x.first_offset < m.first_offset < b.first_offset for m in found))
            expected.append((b.producer_id, first))
    assert sorted((t.producer_id, t.first_offset) for t in aborted) == sorted(expected), \
        f"{where}: aborted transactions"


def _check_producers(target: Log, found: list[Batch], lost: list[Batch], where: str) -> None:
    """A retry of each producer's last surviving batch is a duplicate; a retry of the one the cut took is not."""
    last: dict[int, Batch] = {}
    for b in found:
        if b.kind == "idem":
            last[b.producer_id] = b
    for b in last.values():
        retry = append(target, b)
        assert retry.duplicate and retry.first_offset == b.first_offset, f"{where}: retry of {b} was written again"
    for b in lost:
        if b.kind == "idem":
            retry = append(target, b)
            assert not retry.duplicate and retry.first_offset == target.log_end_offset - len(b.values), where


def test_acks_all_appends_survive_a_cut_exactly_once(tmp_path, monkeypatch):
    config = log_config()
    planned, run = _workload(PRODUCE, config)
    total = sweep(tmp_path, monkeypatch, _partition_dir, run,
                  lambda d, journal, finished, where: _check_log(d, journal, finished, where, config))
    assert total > len(planned)   # at least one fsync per acknowledged append


def test_transactions_and_their_markers_survive_a_cut(tmp_path, monkeypatch):
    config = log_config()
    _, run = _workload(TRANSACTIONS, config)
    sweep(tmp_path, monkeypatch, _partition_dir, run,
          lambda d, journal, finished, where: _check_log(d, journal, finished, where, config))


def test_producer_state_survives_a_cut_with_or_without_its_snapshot(tmp_path, monkeypatch):
    config = log_config(**{"segment.bytes": 1 << 20})
    _, run = _workload(SNAPSHOTS, config)
    outcomes = set()

    def check(d, journal, finished, where):
        partition = d / PARTITION
        outcomes.add(any(n.endswith(SNAPSHOT_SUFFIX) for n in os.listdir(partition)))
        # The same state rebuilt from the log alone, for comparison.
        bare = d.parent / (d.name + "-bare")
        shutil.copytree(d, bare)
        for name in os.listdir(bare / PARTITION):
            if name.endswith(SNAPSHOT_SUFFIX):
                os.unlink(bare / PARTITION / name)
        with _open(d, config) as target, _open(bare, config) as rebuilt:
            assert _producers(target) == _producers(rebuilt), f"{where}: producer state"
        _check_log(d, journal, finished, where, config)

    sweep(tmp_path, monkeypatch, _partition_dir, run, check)
    assert outcomes == {False, True}   # some cuts left a snapshot, some none


def _producers(target: Log) -> list[tuple]:
    return [(e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset, e.last_timestamp, list(e.batches))
            for e in target.producer_entries()]


COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 2_500, "retention.ms": -1,
             "delete.retention.ms": 1_000, "index.interval.bytes": 64, "min.cleanable.dirty.ratio": 0.01}


def _compacted_log(directory) -> int:
    """A compacted partition of small rolled segments, closed cleanly; the workload's clock."""
    target = _open(directory, LogConfig.from_properties(COMPACTED))
    work = Workload([target])
    for i in range(36):
        work.apply(("plain", [(KEYS[i % 4], None if i % 13 == 5 else b"value-%d" % i)], 0))
    work.apply(("idem", 7, [(KEYS[4], b"idem")], 0))
    work.apply(("txn", 20, [(KEYS[0], b"aborted")], 0))
    work.apply(("end", 20, False))
    work.apply(("plain", [(KEYS[1], b"last")], 0))
    target.roll()
    target.close()
    return work.now


def test_a_compaction_swap_leaves_the_old_or_the_new_segments_after_a_cut(tmp_path, monkeypatch):
    config = LogConfig.from_properties(COMPACTED)
    reference = tmp_path / "reference"
    now = _compacted_log(reference)
    with _open(reference, config) as target:
        before = all_records(target), latest_values(target)
    cleaned = tmp_path / "cleaned"
    shutil.copytree(reference, cleaned)
    with _open(cleaned, config) as target:
        assert Cleaner(1 << 20, clock=lambda: now).clean(log_to_clean(target, None, now)).end_offset
    with _open(cleaned, config) as target:
        after = all_records(target), latest_values(target)
    assert len(after[0]) < len(before[0]) and after[1] == before[1]

    def run(fs, directory, journal):
        target = Log.open(str(directory / PARTITION), config, clean_shutdown=True, fs=fs)
        Cleaner(1 << 20, clock=lambda: now, fs=fs).clean(log_to_clean(target, None, now))
        target.delete_expired_files(all_now=True)

    def check(d, journal, finished, where):
        with _open(d, config) as target:
            records, latest = all_records(target), latest_values(target)   # offsets strictly increase
            leftovers = [n for n in os.listdir(target.directory) if n.endswith((".cleaned", ".swap", ".deleted"))]
            bases = [s.base_offset for s in target.segments]
        assert leftovers == [], f"{where}: {leftovers}"
        assert bases == sorted(set(bases)), where
        assert latest == before[1], f"{where}: a key's latest value"
        # Each group's swap is whole: a record is kept where the finished round keeps it, and where it
        # drops one only a group not yet swapped may still hold it, at its own offset.
        assert after[0].items() <= records.items() <= before[0].items(), f"{where}: records lost or moved"
        if finished:
            assert records == after[0], f"{where}: the finished swap was lost"

    sweep(tmp_path, monkeypatch, lambda d: shutil.copytree(reference / PARTITION, d / PARTITION), run, check)


def _random_steps(rng: random.Random, count: int) -> list[tuple]:
    steps: list[tuple] = []
    open_txns: set[int] = set()
    for _ in range(count):
        kind = rng.choice(["plain", "plain", "idem", "idem", "txn", "end", "roll", "future"])
        values = [bytes([97 + rng.randrange(26)]) * rng.randint(1, 200) for _ in range(rng.randint(1, 3))]
        if kind in ("plain", "future"):
            steps.append((kind, values))
        elif kind == "idem":
            steps.append(("idem", rng.choice([7, 8, 9]), values))
        elif kind == "txn":
            pid = rng.choice([20, 21, 22])
            open_txns.add(pid)
            steps.append(("txn", pid, values))
        elif kind == "end" and open_txns:
            pid = rng.choice(sorted(open_txns))
            open_txns.discard(pid)
            steps.append(("end", pid, rng.random() < 0.5))
        elif kind == "roll":
            steps.append(("roll",))
    return steps


@pytest.mark.soak
@pytest.mark.parametrize("round_", range(6))
def test_random_workloads_survive_a_cut_at_every_boundary(tmp_path, monkeypatch, round_):
    seed = int(os.environ.get("LOGSTORE_SOAK_SEED", "24")) * 100 + round_
    rng = random.Random(seed)
    config = log_config(**{"segment.bytes": rng.choice([900, 1500, 4000])})
    _, run = _workload(_random_steps(rng, rng.randint(20, 50)), config)
    sweep(tmp_path, monkeypatch, _partition_dir, run,
          lambda d, journal, finished, where: _check_log(d, journal, finished, f"seed {seed}: {where}", config))


def test_a_cut_stops_the_workload_where_it_says(tmp_path, monkeypatch):
    """The sweep's own premise: a cut at the first boundary acknowledges nothing, and raises."""
    config = log_config()
    _, run = _workload(PRODUCE[:2], config)
    fs = FaultFileSystem()
    fs.crash_at(1)
    _partition_dir(tmp_path)
    journal = Journal()
    with pytest.raises(SimulatedPowerLoss):
        run(fs, tmp_path, journal)
    assert journal.acked == 0
