"""The sweep behind test_power_loss_log.py: run a log workload on a `FaultFileSystem`, then cut the power at
each of its boundaries in turn and check what a reopen through the real file system finds.

A workload is a list of steps, each one append (or a roll, or a cleaner round) made durable before the
next; `Journal` records which were attempted and which returned, and lives on after the cut. A roll's
flush, which `Log` hands to a background thread, runs here right after the step that rolled
(`DeferredFlusher`), so a workload crosses the same boundaries in the same order every run.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import logstore.log
from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.config import LogConfig
from logstore.errors import StorageError
from logstore.formats import DEFAULT_FORMAT
from logstore.log import Log
from logstore.read_committed import READ_COMMITTED

MODES = [False, True]   # durable_metadata: names dropped since the last directory fsync, or kept
# Now: a snapshot leaves out producers idle past producer.id.expiration.ms, as Kafka's load does.
TIMESTAMP = int(time.time() * 1000)
PARTITION = "orders-0"


class DeferredFlusher:
    """Stands in for `logstore.log.roll_flusher`: a roll's flush waits until the workload runs it."""

    def __init__(self):
        self.queue: list[tuple[Callable[[int], None], int]] = []

    def submit(self, flush: Callable[[int], None], offset: int, name: str) -> None:
        """Queue `flush(offset)`."""
        self.queue.append((flush, offset))

    def run(self) -> None:
        """Run the queued flushes in this thread, oldest first."""
        while self.queue:
            flush, offset = self.queue.pop(0)
            flush(offset)


@dataclass(frozen=True)
class Batch:
    """One batch a workload appends, with the offsets the model gives it."""

    kind: str            # "plain", "idem", "txn", "commit" or "abort"
    first_offset: int
    values: tuple = ()
    producer_id: int = -1
    base_sequence: int = -1
    through_future: bool = field(default=False, compare=False)   # made durable by awaiting `Log.durable`

    @property
    def last_offset(self) -> int:
        """The batch's last offset (a marker holds one)."""
        return self.first_offset + max(len(self.values), 1) - 1

    @property
    def is_marker(self) -> bool:
        """A COMMIT or ABORT control batch."""
        return self.kind in ("commit", "abort")


@dataclass
class Journal:
    """What one run of a workload attempted and what returned before the cut."""

    flusher: DeferredFlusher = field(default_factory=DeferredFlusher)
    attempted: list[Batch] = field(default_factory=list)
    acked: int = 0
    steps_done: int = 0
    recovery_point: int = 0   # the highest the log reported: what a recovery-point checkpoint could hold


def plan(steps: list[tuple]) -> list[Batch | tuple]:
    """The batches (with model offsets and sequences) of `steps`; ("roll",) steps pass through.

    Steps: ("plain", values), ("idem", pid, values), ("txn", pid, values), ("end", pid, commit),
    ("future", values) (a plain batch made durable through `Log.durable`), ("roll",).
    """
    out: list[Batch | tuple] = []
    offset = 0
    sequences: dict[int, int] = {}
    for step in steps:
        kind = step[0]
        if kind == "roll":
            out.append(step)
            continue
        if kind in ("plain", "future"):
            batch = Batch("plain", offset, tuple(step[1]), through_future=kind == "future")
        elif kind in ("idem", "txn"):
            pid, values = step[1], tuple(step[2])
            batch = Batch(kind, offset, values, pid, sequences.get(pid, 0))
            sequences[pid] = batch.base_sequence + len(values)
        elif kind == "end":
            batch = Batch("commit" if step[2] else "abort", offset, (), step[1])
        else:
            raise ValueError(f"unknown step {step!r}")
        out.append(batch)
        offset = batch.last_offset + 1
    return out


def append(target: Log, batch: Batch, *, durable: bool = True):
    """Append `batch` as planned; the AppendResult."""
    if batch.is_marker:
        return target.write_txn_marker(batch.producer_id, 0, 0, commit=batch.kind == "commit",
                                       timestamp=TIMESTAMP, durable=durable)
    producer = {}
    if batch.producer_id >= 0:
        producer = dict(producer_id=batch.producer_id, producer_epoch=0, base_sequence=batch.base_sequence,
                        transactional=batch.kind == "txn")
    return target.append_records(list(batch.values), keys=[b"k%d" % (batch.first_offset + i)
                                                          for i in range(len(batch.values))],
                                 timestamps=TIMESTAMP, durable=durable, **producer)


def run_plan(target: Log, fs: FaultFileSystem, planned: list, journal: Journal) -> None:
    """Apply `planned` step by step, each durable before the next (acks=all), recording in `journal`."""
    for step in planned:
        if isinstance(step, tuple):
            target.roll()
        else:
            journal.attempted.append(step)
            if step.through_future:
                result = append(target, step, durable=False)
                try:
                    target.durable(result.last_offset + 1).result(30)
                except StorageError:
                    if fs.dead:   # the sync thread met the cut and reports it as a failed fsync
                        raise SimulatedPowerLoss("the power went during the durable wait") from None
                    raise
            else:
                result = append(target, step)
            assert (result.first_offset, result.last_offset) == (step.first_offset, step.last_offset), step
            assert not result.duplicate, step
            journal.acked += 1
        journal.flusher.run()
        journal.recovery_point = target.recovery_point
        journal.steps_done += 1


def found_batches(target: Log) -> list[Batch]:
    """The batches of a reopened log, as the model writes them."""
    fmt = DEFAULT_FORMAT
    found = []
    for entry, records in target.iter_batches(0):
        if entry.is_control:
            data = target.read(entry.base_offset, 1).read()
            marker = fmt.read_marker(data, 0).type_name
            found.append(Batch(marker.lower(), entry.base_offset, (), entry.producer_id))
            continue
        kind = "plain" if entry.producer_id < 0 else ("txn" if entry.is_transactional else "idem")
        found.append(Batch(kind, entry.base_offset, tuple(r.value for r in records), entry.producer_id,
                           entry.base_sequence if entry.producer_id >= 0 else -1))
    return found


def committed_view(batches: list[Batch], lso: int) -> list[tuple[int, bytes]]:
    """(offset, value) a read_committed consumer reads of `batches` below `lso`."""
    outcome = {}
    for b in batches:
        if b.is_marker:
            outcome.setdefault(b.producer_id, []).append((b.first_offset, b.kind))
    seen: list[tuple[int, bytes]] = []
    for b in batches:
        if b.is_marker or b.first_offset >= lso:
            continue
        if b.kind == "txn":
            end = next((kind for at, kind in outcome.get(b.producer_id, []) if at > b.first_offset), None)
            if end != "commit":
                continue
        seen.extend((b.first_offset + i, v) for i, v in enumerate(b.values))
    return seen


def read_committed(target: Log) -> list[tuple[int, bytes]]:
    """(offset, value) of what a read_committed consumer reads of the whole log."""
    return [(r.offset, r.value) for r in target.iter_records(isolation=READ_COMMITTED)]


def sweep(tmp_path: Path, monkeypatch, prepare: Callable[[Path], None],
          run: Callable[[FaultFileSystem, Path, Journal], None],
          check: Callable[[Path, Journal, bool, str], None], *, modes: list[bool] = MODES,
          cuts: list[int] | None = None) -> int:
    """Run `run` once to count its boundaries, then cut the power at each (or at `cuts`) and once after
    the last, in each mode, and `check` the directory (finished: whether `run` returned). The count."""
    start = tmp_path / "start"
    start.mkdir()
    prepare(start)

    def attempt(directory: Path, fs: FaultFileSystem) -> tuple[Journal, bool]:
        shutil.copytree(start, directory)
        journal = Journal()
        monkeypatch.setattr(logstore.log, "roll_flusher", journal.flusher)
        try:
            run(fs, directory, journal)
        except SimulatedPowerLoss:
            return journal, False
        return journal, True

    counting = FaultFileSystem()
    _, finished = attempt(tmp_path / "count", counting)
    assert finished
    total = len(counting.boundaries)
    counting.crash()
    for k in (cuts if cuts is not None else range(1, total + 2)):
        for durable_metadata in modes:
            fs = FaultFileSystem()
            fs.crash_at(k)
            journal, finished = attempt(tmp_path / f"cut-{k}-{durable_metadata}", fs)
            assert finished == (k > total), f"boundary {k} of {total}: finished={finished}"
            fs.crash(durable_metadata=durable_metadata)
            where = (f"cut at boundary {k} of {total} ({'names kept' if durable_metadata else 'names dropped'}, "
                     f"{journal.acked} acked)")
            check(tmp_path / f"cut-{k}-{durable_metadata}", journal, finished, where)
    return total


def log_config(**overrides) -> LogConfig:
    """A small-segment config for sweeps (Kafka names)."""
    return LogConfig.from_properties({"segment.bytes": 600, "index.interval.bytes": 64, **overrides})
