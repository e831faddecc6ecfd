"""Exactly-once consume-transform-produce in an embedding process killed again and again, with no broker.

The child (eos_child.py) copies `in` to `out` in transactions that carry its
consumer offsets. It is SIGKILLed in the middle of a transaction (after some
of its records are written) or between two, or its disk loses power at a step
of the coordinator (tests/storage/txn_points.py), losing what was never
synced: right after a commit was decided, before one of its markers is durable. Each restart reopens the directory.
At the end, read_committed `out` holds every input record exactly once and
the group's offsets are at the end of `in`.
"""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import logstore
from logstore.broker import embedded

CHILD = Path(__file__).with_name("eos_child.py")
PARTITIONS = 3
MAX_POLL_RECORDS = 60
WATCHDOG_SECONDS = 90


def _fill(data_dir: Path, per_partition: int) -> dict[tuple[str, int], int]:
    with logstore.open(str(data_dir)) as store:
        store.create_topic("in", PARTITIONS)
        store.create_topic("out", PARTITIONS)
        for p in range(PARTITIONS):
            log_ = store.log("in", p)
            for start in range(0, per_partition, 100):
                log_.append_records([b"v%d" % i for i in range(start, start + 100)],
                                    keys=[b"k%d-%d" % (p, i) for i in range(start, start + 100)])
        return {("in", p): store.log("in", p).log_end_offset for p in range(PARTITIONS)}


def _run(data_dir: Path, err: Path, *, kill_at: tuple[str, int] | None = None, crash_at: str | None = None) -> str:
    """Run the child once: 'done', 'killed' (SIGKILL at the N-th line of a kind) or 'crashed' (the power
    went at `crash_at`)."""
    args = [str(data_dir), str(MAX_POLL_RECORDS), *([crash_at] if crash_at is not None else [])]
    with open(err, "ab") as stderr:
        proc = subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=stderr, text=True)
    watchdog = threading.Timer(WATCHDOG_SECONDS, proc.kill)
    watchdog.start()
    try:
        first = proc.stdout.readline().strip()
        # A crash point may be reached while the child starts: its init fences and aborts what a kill left open.
        assert first == "started" or (first == "" and crash_at is not None), (first, err.read_text())
        seen = Counter()
        for line in proc.stdout:
            kind = line.split()[0]
            seen[kind] += 1
            if kill_at is not None and kind == kill_at[0] and seen[kind] >= kill_at[1]:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return "killed"
            if kind == "done":
                assert proc.wait() == 0, err.read_text()
                return "done"
        assert proc.wait() == -signal.SIGKILL, f"the child exited with {proc.returncode}: {err.read_text()}"
        return "crashed"
    finally:
        watchdog.cancel()
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _check(data_dir: Path, ends: dict[tuple[str, int], int], per_partition: int) -> tuple[int, int]:
    """Exactly once in read_committed `out`; the group at the end. Returns (committed, uncommitted) counts."""
    node = embedded.open(str(data_dir))
    try:
        store = node.store
        committed, uncommitted = Counter(), 0
        for p in range(PARTITIONS):
            log_ = store.log("out", p)
            committed.update(r.value.decode() for r in log_.iter_records(isolation="read_committed"))
            uncommitted += sum(1 for _ in log_.iter_records())
        expected = Counter(f"{p}:{o}" for p in range(PARTITIONS) for o in range(per_partition))
        missing, doubled = expected - committed, committed - expected
        assert not missing and not doubled, (f"{sum(missing.values())} missing, e.g. {list(missing)[:5]}; "
                                             f"{sum(doubled.values())} extra, e.g. {list(doubled)[:5]}")
        offsets = node.groups.fetch_offsets("copier", list(ends))
        assert {tp: c.offset for tp, c in offsets.items()} == ends
        return sum(committed.values()), uncommitted
    finally:
        node.close()


def _exactly_once_through(tmp_path: Path, plan: list[tuple[str, object]], per_partition: int) -> None:
    data_dir = tmp_path / "data"
    err = tmp_path / "child.err"
    ends = _fill(data_dir, per_partition)
    outcomes = []
    for kind, arg in plan:
        if kind == "crash":
            outcomes.append(_run(data_dir, err, crash_at=arg))
        else:
            outcomes.append(_run(data_dir, err, kill_at=(kind, arg)))
    outcomes.append(_run(data_dir, err))
    assert outcomes[-1] == "done", outcomes
    assert outcomes[:-1] == ["crashed" if k == "crash" else "killed" for k, _ in plan], outcomes
    committed, uncommitted = _check(data_dir, ends, per_partition)
    # The kills must have landed inside transactions, or this proved nothing: aborted copies are in `out`.
    assert uncommitted > committed, (committed, uncommitted)


def test_consume_transform_produce_is_exactly_once_across_sigkills_and_power_cuts(tmp_path):
    rng = random.Random(7)
    plan = [("midway", rng.randint(1, 4)), ("crash", "txn-prepared:3"), ("committed", rng.randint(2, 6)),
            ("crash", "txn-marker:2"), ("midway", rng.randint(1, 3))]
    _exactly_once_through(tmp_path, plan, 1_000)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(4))
def test_seeded_kill_loop(tmp_path, seed):
    rng = random.Random(seed)
    plan = [(rng.choice(["midway", "committed"]), rng.randint(1, 8)) if rng.random() < 0.7 else
            ("crash", rng.choice(["txn-prepared", "txn-marker", "txn-markers-written", "txn-completed"])
             + f":{rng.randint(1, 5)}") for _ in range(12)]
    _exactly_once_through(tmp_path, plan, 5_000)
