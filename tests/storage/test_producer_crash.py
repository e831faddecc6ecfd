"""Producer state across a SIGKILL: the map, the open transactions and the `.txnindex` after recovery.

The kill tests run `producer_crash_child.py` in a real process: about twenty
idempotent and transactional producers append batches, commit and abort
interleaved transactions, bump epochs and retry. The test reads the child's
acknowledgements until a random count, SIGKILLs it, reopens the store and
checks, against a model written here in plain Python from Kafka's rules
(on-disk-format.md §7-8), not from logstore's producer code:

1. the log holds a prefix of the workload, batch for batch (the workload is
   rebuilt from its seed), and that prefix holds everything acknowledged;
2. producer state is what Kafka would load: the newest usable snapshot (the
   one at or below the first rescanned segment), whose entries keep only
   each producer's last batch, stamped with the producer's last timestamp,
   and then every batch after it replayed (so a producer caches the
   snapshot's batch plus the replayed ones, at most five); the aborted
   transactions of every `.txnindex` (with Kafka's last stable offset: the
   oldest other open transaction, else just past the marker), the open
   transactions and the last stable offset are those of the whole history;
3. retries: re-sending each producer's recent batches gives a duplicate with
   the first write's offsets when the batch is cached, and Kafka's error
   (out of order, or a fenced epoch) when it is not, and appends nothing;
4. a clean close right after recovery, and another after the workload went
   on from where the log ends, reopen from the close's snapshot, replaying
   nothing, with that snapshot's state.

A quarter of the rounds first empty the newest snapshot, as a kill between
its create and its write leaves it: the load must skip it as corrupt.

Some series kill the same directory again and again: the next child either
opens the directory the test recovered and closed, or recovers the crash
itself, goes on with the workload and is killed in turn.
"""
from __future__ import annotations

import itertools
import os
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

import logstore
import logstore.formats.kafka as K
import producer_crash_child as child
from killing import run_until_acks
from logstore.checkpoints import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT, OffsetCheckpoint
from logstore.config import LogConfig
from logstore.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from logstore.index import AbortedTxn
from logstore.log import Log
from producer_crash_child import MARKER, MAX_SEQ, Op, Workload

KEY = (child.TOPIC, 0)
NUM_BATCHES_TO_RETAIN = 5
RETRIED_PER_PRODUCER = 8


# ---------------------------------------------------------------------------
# The model: Kafka's ProducerStateManager, replayed from the ops


@dataclass
class ModelEntry:
    """One producer as Kafka's ProducerStateEntry holds it."""

    epoch: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int = -1
    last_timestamp: int = -1
    batches: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """(first_seq, last_seq, first_offset, last_offset, timestamp), oldest first."""

    def as_tuple(self) -> tuple:
        return (self.epoch, self.coordinator_epoch, self.txn_first_offset, self.last_timestamp,
                tuple(self.batches))


@dataclass
class ProducerModel:
    """Producer entries and aborted transactions of a partition, from the batches appended to it."""

    producers: dict[int, ModelEntry] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)

    @property
    def ongoing(self) -> dict[int, int]:
        return {pid: p.txn_first_offset for pid, p in self.producers.items() if p.txn_first_offset >= 0}

    def last_stable_offset(self, log_end_offset: int) -> int:
        return min(self.ongoing.values(), default=log_end_offset)

    def state(self) -> dict[int, tuple]:
        return {pid: p.as_tuple() for pid, p in self.producers.items()}

    def apply(self, op: Op) -> None:
        """An appended batch or marker (§8.2 step 4, §8.3)."""
        if op.producer_id < 0:
            return
        p = self.producers.setdefault(op.producer_id, ModelEntry())
        if p.epoch != op.epoch:
            p.epoch, p.batches = op.epoch, []
        p.last_timestamp = op.timestamp
        if op.kind == MARKER:
            first = p.txn_first_offset
            p.coordinator_epoch, p.txn_first_offset = op.coordinator_epoch, -1
            if first >= 0 and not op.commit:
                others = [q.txn_first_offset for pid, q in self.producers.items()
                          if pid != op.producer_id and q.txn_first_offset >= 0]
                lso = min(others) if others else op.first_offset + 1
                self.aborted.append(AbortedTxn(op.producer_id, first, op.first_offset, lso))
            return
        p.batches = (p.batches + [(op.base_sequence, op.last_sequence, op.first_offset, op.last_offset,
                                   op.timestamp)])[-NUM_BATCHES_TO_RETAIN:]
        if op.transactional and p.txn_first_offset < 0:
            p.txn_first_offset = op.first_offset

    def snapshot(self) -> ProducerModel:
        """The state a `.snapshot` of this one loads as (§7): each producer's last batch only,
        stamped with the producer's last timestamp."""
        return ProducerModel(
            {pid: ModelEntry(p.epoch, p.coordinator_epoch, p.txn_first_offset, p.last_timestamp,
                             [b[:4] + (p.last_timestamp,) for b in p.batches[-1:]])
             for pid, p in self.producers.items()},
            list(self.aborted))

    def expected_retry(self, op: Op):
        """What Kafka answers to `op` sent again (§8.2): (first offset, last offset, timestamp) of
        the cached batch it duplicates, an error class, or None if it would be appended."""
        p = self.producers.get(op.producer_id)
        if p is not None and p.epoch == op.epoch:
            for first_seq, last_seq, first_offset, last_offset, ts in p.batches:
                if (first_seq, last_seq) == (op.base_sequence, op.last_sequence):
                    return (first_offset, last_offset, ts)
        if p is not None and op.epoch < p.epoch:
            return InvalidProducerEpochError
        if p is None or op.epoch != p.epoch:
            if op.base_sequence != 0 and p is not None and p.epoch != -1:
                return OutOfOrderSequenceError
        else:
            last_seq = p.batches[-1][1] if p.batches else -1
            if not (op.base_sequence == last_seq + 1 or (op.base_sequence == 0 and last_seq == MAX_SEQ)):
                return OutOfOrderSequenceError
        if p is not None and p.txn_first_offset >= 0 and not op.transactional:
            return InvalidTxnStateError
        return None


def reloaded_model(ops: list[Op], snapshot_offset: int | None) -> ProducerModel:
    """The state of a log of `ops` loaded from the snapshot at `snapshot_offset` (None: from the
    log start, no snapshot) and the replay of every batch after it."""
    model = ProducerModel()
    if snapshot_offset is None:
        for op in ops:
            model.apply(op)
        return model
    for op in ops:
        if op.first_offset < snapshot_offset:
            model.apply(op)
    model = model.snapshot()
    for op in ops:
        if op.first_offset >= snapshot_offset:
            model.apply(op)
    return model


# ---------------------------------------------------------------------------
# Running and killing the child


@dataclass(frozen=True)
class Crash:
    """What one killed child said: the log end it opened with, the op it started at, its last
    acknowledgement."""

    opened_at: int
    first_op: int
    acked: int
    acks: int


def _kill_after(directory: Path, workload: Workload, acks: int, name: str) -> Crash:
    """Start the child on `directory`, read `acks` acknowledgements, SIGKILL it and reap it."""
    opened_at, first_op, acked = run_until_acks(
        [sys.executable, child.__file__, str(directory), str(workload.seed), str(workload.base_timestamp)],
        acks, directory.parent / f"{directory.name}-child-{name}.err")
    return Crash(opened_at, first_op, acked, acks)


# ---------------------------------------------------------------------------
# Checking a recovered log


def _snapshot_files(partition: Path) -> dict[int, bool]:
    """Offset → whether the `.snapshot` file there is whole (§7: 10 + 46 × count bytes).

    A kill between a snapshot's create and its write leaves it empty (a torn
    one would be short): the load must report it corrupt and use an older one.
    """
    found = {}
    for name in os.listdir(partition):
        if name.endswith(".snapshot"):
            data = (partition / name).read_bytes()
            found[int(name[:20])] = len(data) >= 10 and len(data) == 10 + 46 * int.from_bytes(data[6:10], "big")
    return found


def _check_prefix(log: Log, workload: Workload) -> list[Op]:
    """The log's batches are the workload's first appends, byte for byte; returns those ops."""
    ops = iter(op for op in workload if op.appends)
    found = []
    for segment in log.segments:
        data = segment.pread(segment.size, 0)
        for entry in K.iter_entries(data):
            op = next(ops)
            records = K.decode_entry(data, entry)
            assert (entry.base_offset, entry.last_offset, entry.max_timestamp, entry.producer_id,
                    entry.is_control) == \
                (op.first_offset, op.last_offset, op.timestamp, op.producer_id, op.kind == MARKER), (entry, op)
            assert all(r.timestamp == op.timestamp for r in records), op
            if op.kind == MARKER:
                marker = K.read_control_record(records[0])
                assert (entry.producer_epoch, entry.is_transactional, marker.type_name, marker.coordinator_epoch) \
                    == (op.epoch, True, "COMMIT" if op.commit else "ABORT", op.coordinator_epoch), (entry, op)
            else:
                assert (entry.producer_epoch, entry.base_sequence, entry.is_transactional) == \
                    (op.epoch, op.base_sequence, op.transactional), (entry, op)
                assert [(r.key, r.value) for r in records] == list(zip(op.keys(), op.values())), op
            found.append(op)
    end = found[-1].last_offset + 1 if found else 0
    assert log.log_end_offset == end
    return found


def _expected_snapshot(before: dict[int, bool], log: Log, recovery_point: int) -> tuple[int | None, list[int]]:
    """The snapshot the load should use, and the corrupt ones it should skip on the way.

    Of the snapshots on disk before the open that it keeps (at a segment
    base, or above every base), the newest whole one at or below the base of
    the segment holding the checkpointed recovery point, where recovery's
    rescan starts; every newer candidate is reported corrupt.
    """
    bases = [s.base_offset for s in log.segments]
    target = max([b for b in bases if b <= recovery_point], default=bases[0])
    candidates = sorted((o for o in before if o <= target and (o in bases or o > max(bases))), reverse=True)
    corrupt = []
    for offset in candidates:
        if before[offset]:
            return offset, corrupt
        corrupt.append(offset)
    return None, corrupt


def _state(log: Log) -> dict[int, tuple]:
    return {pid: (e.epoch, e.coordinator_epoch, e.txn_first_offset, e.last_timestamp,
                  tuple(tuple(b) for b in e.batches))
            for pid, e in log.producers.entries().items()}


def _check_state(log: Log, model: ProducerModel) -> None:
    """Producer map, open transactions, last stable offset and every `.txnindex` are the model's."""
    assert _state(log) == model.state()
    assert log.producers.ongoing_transactions == model.ongoing
    assert log.last_stable_offset == model.last_stable_offset(log.log_end_offset)
    segments = log.segments
    assert [t for s in segments for t in s.txn_index.entries] == model.aborted
    for i, segment in enumerate(segments):
        # Each entry sits in the index of the segment holding its marker.
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset + 1
        assert all(segment.base_offset <= t.last_offset < next_base for t in segment.txn_index.entries)


def _check_retries(log: Log, model: ProducerModel, ops: list[Op]) -> Counter:
    """Re-send each producer's last batches: duplicates where cached, Kafka's error where not,
    and nothing appended or changed either way. Returns how each answer went."""
    sent: dict[int, list[Op]] = {}
    for op in ops:
        if op.producer_id >= 0 and op.kind != MARKER:
            sent.setdefault(op.producer_id, []).append(op)
    before = _state(log)
    end, size = log.log_end_offset, log.size
    tally = Counter()
    for pid, batches in sent.items():
        for op in batches[-RETRIED_PER_PRODUCER:]:
            want = model.expected_retry(op)
            if op is batches[-1] and model.producers[pid].epoch == op.epoch:
                assert isinstance(want, tuple), f"the last batch {op} is not cached in the model"
            assert want is not None, f"a retry of {op} would be appended"
            retry = replace(op, durable=False, ack=False)
            if isinstance(want, tuple):
                result = child.apply(log, retry)
                assert result.duplicate, (op, want)
                assert (result.first_offset, result.last_offset, result.max_timestamp) == want, op
                tally["duplicate"] += 1
            else:
                with pytest.raises(want):
                    child.apply(log, retry)
                tally[want.__name__] += 1
            assert (log.log_end_offset, log.size) == (end, size), op
    assert _state(log) == before
    return tally


def _continue(log: Log, workload: Workload, model: ProducerModel, count: int) -> None:
    """Run `count` more ops of the workload from the log end, on the log and on the model."""
    start = workload.resume_index(log.log_end_offset)
    for op in itertools.islice(workload.ops_from(start), count):
        child.check_applied(op, child.apply(log, op))
        if op.appends:
            model.apply(op)


def _reopen_clean(directory: Path, end: int, model: ProducerModel) -> None:
    """A cleanly closed store loads the close's snapshot and replays nothing (§7, §8.7)."""
    with logstore.open(str(directory), child.CONFIG, start_scheduler=False) as store:
        log = store.log(*KEY)
        load = log.recovery_report.producer_state
        assert log.recovery_report.clean_shutdown
        assert (load.snapshot_offset, load.corrupt_snapshots, load.replayed_batches) == (end, [], 0), load
        assert log.log_end_offset == end
        _check_state(log, model)


def _recover_and_check(directory: Path, crash: Crash, workload: Workload, rng: random.Random) \
        -> tuple[int, int, Counter]:
    """Reopen a killed store and check its producer state and retries; close cleanly and reopen;
    go on with the workload; close cleanly and reopen.

    Returns the log end offset recovery found, the one after the test's
    appends, and how the retries were answered.
    """
    assert not (directory / CLEAN_SHUTDOWN_MARKER).exists()
    partition = directory / f"{child.TOPIC}-0"
    before = _snapshot_files(partition)
    if before and rng.random() < 0.25:
        # What a kill between the newest snapshot's create and its write leaves.
        os.truncate(partition / f"{max(before):020d}.snapshot", 0)
        before[max(before)] = False
    recovery_point = OffsetCheckpoint(directory / RECOVERY_POINT_CHECKPOINT).read().get(KEY, 0)
    with logstore.open(str(directory), child.CONFIG, start_scheduler=False) as store:
        log = store.log(*KEY)
        report = log.recovery_report
        assert not report.clean_shutdown
        end = log.log_end_offset
        assert crash.opened_at <= crash.acked <= end, (crash, report.summary())
        ops = _check_prefix(log, workload)

        load = report.producer_state
        snapshot_offset, corrupt = _expected_snapshot(before, log, recovery_point)
        assert (load.snapshot_offset, [o for o, _ in load.corrupt_snapshots]) == (snapshot_offset, corrupt), \
            (before, [s.base_offset for s in log.segments], recovery_point, report.summary())
        model = reloaded_model(ops, snapshot_offset)
        _check_state(log, model)
        tally = _check_retries(log, model, ops)
    assert (directory / CLEAN_SHUTDOWN_MARKER).exists()
    model = model.snapshot()
    _reopen_clean(directory, end, model)

    with logstore.open(str(directory), child.CONFIG, start_scheduler=False) as store:
        log = store.log(*KEY)
        _continue(log, workload, model, rng.randint(1, 40))
        _check_state(log, model)
        appended = log.log_end_offset
    _reopen_clean(directory, appended, model.snapshot())
    return end, appended, tally


def _crash_series(base: Path, seed: int, rounds: int) -> Counter:
    """`rounds` kills of writers on one directory, each followed by a checked recovery.

    After each kill the test recovers either the directory itself (so the next
    child opens a cleanly closed, once-recovered log) or a copy of it (so the
    next child recovers the crash itself, goes on, and is killed in turn).
    """
    rng = random.Random(seed)
    # "Now": a snapshot drops producers idle for 24 h when it is loaded.
    workload = Workload(seed, int(time.time() * 1000))
    directory = base / f"store-{seed}"
    expected = 0
    tally = Counter()
    for round_ in range(rounds):
        acks = rng.choice([0, rng.randint(1, 10), rng.randint(10, 120)])
        crash = _kill_after(directory, workload, acks, f"{seed}-{round_}")
        assert crash.opened_at == expected, "the child opened at a different end than the test recovered"
        assert crash.first_op == workload.resume_index(crash.opened_at)
        in_place = round_ == rounds - 1 or rng.random() < 0.5
        target = directory if in_place else base / f"copy-{seed}-{round_}"
        if not in_place:
            shutil.copytree(directory, target)
        recovered, appended, answers = _recover_and_check(target, crash, workload, rng)
        tally += answers
        # On a copy, the test's appends stay in the copy: the next child must recover to `recovered`.
        expected = appended if in_place else recovered
        if not in_place:
            shutil.rmtree(target)
    return tally


@pytest.mark.parametrize("seed", range(6))
def test_killed_producers_recover_kafkas_producer_state(tmp_path, seed):
    # 12 kills in all; seeds 2 and 5 kill the same directory three times.
    tally = _crash_series(tmp_path, seed, rounds=1 + seed % 3)
    # A child killed before it wrote anything leaves nothing to retry; the workload's retries
    # resend batches as they were, so none is ever refused for its transaction state.
    assert set(tally) <= {"duplicate", "OutOfOrderSequenceError", "InvalidProducerEpochError"}


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(100, 125))
def test_killed_producers_soak(tmp_path, seed):
    # 125 kills in all, five to a directory.
    _crash_series(tmp_path, seed, rounds=5)


# ---------------------------------------------------------------------------
# The model against a live log (no crash): what the kill tests' model rests on


def test_the_model_follows_a_live_log_and_a_clean_reopen(tmp_path):
    config = LogConfig.from_properties(child.CONFIG)
    path = str(tmp_path / f"{child.TOPIC}-0")
    workload = Workload(7, int(time.time() * 1000))
    model = ProducerModel()
    with Log.open(path, config, clean_shutdown=True) as log:
        for op in itertools.islice(workload, 3000):
            child.check_applied(op, child.apply(log, op))
            if op.appends:
                model.apply(op)
            if op.index % 250 == 0:
                _check_state(log, model)
        _check_state(log, model)
        assert len(log.segments) > 20 and model.aborted and model.ongoing
        ops = _check_prefix(log, workload)
        tally = _check_retries(log, model, ops)
        end = log.log_end_offset
    # The live log caches five batches, so some retries are duplicates of older batches,
    # and older ones still are out of order; fenced producers refuse their old epoch.
    assert tally["duplicate"] > len(model.producers) and tally["OutOfOrderSequenceError"] > 0
    assert tally["InvalidProducerEpochError"] > 0
    with Log.open(path, config, clean_shutdown=True) as log:
        load = log.recovery_report.producer_state
        assert (load.snapshot_offset, load.replayed_batches) == (end, 0)
        _check_state(log, model.snapshot())
        reloaded = model.snapshot()
        tally = _check_retries(log, reloaded, ops)
        # After the reload only the last batch of each producer is cached.
        assert tally["duplicate"] == sum(1 for p in reloaded.producers.values() if p.batches)


def test_a_snapshot_left_empty_by_a_kill_does_not_outlive_recovery(tmp_path):
    # A roll snapshots at the log end before it creates the new segment; a kill between the
    # snapshot's create and its write leaves `<log end>.snapshot` empty, above the segment
    # recovery rescans. Kafka's rebuild (truncateAndReload to each rescanned segment's base)
    # deletes every snapshot above it and snapshots the recovered end, so a clean close after
    # recovery reopens from a whole snapshot and replays nothing.
    config = LogConfig.from_properties({"segment.bytes": 300})
    path = tmp_path / f"{child.TOPIC}-0"
    ts = int(time.time() * 1000)
    log = Log.open(str(path), config)
    ops = [Op(seq, child.DATA, seq, 1, ts, 7, 0, seq) for seq in range(12)]
    for op in ops:
        child.check_applied(op, child.apply(log, op))
    log.flush()
    end, active = log.log_end_offset, log.active_segment.base_offset
    assert len(log.segments) > 1
    for segment in log.segments:
        segment.close()
    (path / f"{end:020d}.snapshot").write_bytes(b"")
    model = reloaded_model(ops, active)
    with Log.open(str(path), config, recovery_point=active) as log:
        assert log.recovery_report.producer_state.snapshot_offset == active
        _check_state(log, model)
    with Log.open(str(path), config, clean_shutdown=True) as log:
        load = log.recovery_report.producer_state
        assert (load.snapshot_offset, load.corrupt_snapshots, load.replayed_batches) == (end, [], 0), load
        _check_state(log, model.snapshot())
