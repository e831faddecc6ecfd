"""The sweep behind the power-loss tests of stores that open over a `FaultFileSystem` and are then driven
by a workload (a node's coordinators, the share-state store): count the boundaries the workload crosses
after the store opened, then cut the power at each in turn (and once after the last) in both legal
outcomes of a cut, and check what a reopen finds.

The workload is one thread: the fsyncs the storage hands to its sync pool run in the caller
(`InlineExecutor`), a roll's flush runs before the next step (`DeferredFlusher`), so the boundaries come
in the same order every run (checked: two counting runs must agree). The file systems skip the disk's
own fsyncs (`real_syncs=False`): what a cut keeps is the fault file system's model either way.
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol, TypeVar

import logstore.durability
import logstore.log
from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.errors import LogStoreError
from power_loss import MODES, DeferredFlusher


class InlineExecutor:
    """Stands in for the storage's sync pool: a durable wait's fsync runs in the thread that waits."""

    def submit(self, fn: Callable[[], object]) -> Future:
        """Run `fn` now; its future."""
        done: Future = Future()
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits, as the pool would
            done.set_exception(exc)
        return done


class SweepJournal(Protocol):
    """What a sweep needs of a workload's journal."""

    flusher: DeferredFlusher
    boundaries: int   # crossed after the store opened


J = TypeVar("J", bound=SweepJournal)
S = TypeVar("S")


def cut_step(fs: FaultFileSystem, flusher: DeferredFlusher, fn: Callable[..., Any], *args: Any) -> Any:
    """One step of a workload; SimulatedPowerLoss if the power went during it (it is then not acknowledged,
    whatever it returned: a failed durable wait is reported as an error or left to a redo)."""
    flusher.run()   # the flushes the last step's rolls queued, as the background flusher would
    try:
        result = fn(*args)
    except LogStoreError:
        if fs.dead:
            raise SimulatedPowerLoss("the power went during the step") from None
        raise
    if fs.dead:
        raise SimulatedPowerLoss("the power went during the step")
    return result


def sweep_cuts(tmp_path: Path, monkeypatch, prepare: Callable[[Path], None], journal: Callable[[], J],
               open_store: Callable[[Path, FaultFileSystem], S], run: Callable[[S, FaultFileSystem, J], None],
               check: Callable[[Path, J, str], None], *, what: str = "", modes: list[bool] = MODES) -> int:
    """`prepare` the starting directory; then, from a copy of it each time, `open_store` and `run` the
    workload twice to count its boundaries, and once cut at each boundary (and after the last) in each
    of `modes`, then `check` the directory (the store is left as a power cut leaves a process: never
    closed). The count."""
    start = tmp_path / "start"
    prepare(start)
    monkeypatch.setattr(logstore.durability, "_pool", InlineExecutor)

    def attempt(directory: Path, cut: int | None, durable_metadata: bool) -> tuple[J, bool]:
        shutil.copytree(start, directory)
        written = journal()
        monkeypatch.setattr(logstore.log, "roll_flusher", written.flusher)
        fs = FaultFileSystem(real_syncs=False)
        store = open_store(directory, fs)
        opened = len(fs.boundaries)
        if cut is not None:
            fs.crash_at(cut)   # counted from here: opening a store is the storage sweeps' matter
        try:
            run(store, fs, written)
            finished = True
        except SimulatedPowerLoss:
            finished = False
        written.boundaries = len(fs.boundaries) - opened
        fs.crash(durable_metadata=durable_metadata)
        return written, finished

    counts = [attempt(tmp_path / f"count-{run}", None, False)[0].boundaries for run in range(2)]
    assert counts[0] == counts[1], f"{counts}: the boundaries differ between two runs (a thread crossed some)"
    total = counts[0]
    for k in range(1, total + 2):
        for durable_metadata in modes:
            directory = tmp_path / f"cut-{k}-{durable_metadata}"
            written, finished = attempt(directory, k, durable_metadata)
            where = f"{what}cut at boundary {k} of {total} ({'names kept' if durable_metadata else 'names dropped'})"
            assert finished == (k > total), f"{where}: finished={finished}"
            check(directory, written, where)
            shutil.rmtree(directory)
    return total
