"""A power cut (a `FaultFileSystem` armed at a named point, then SIGKILL) at each step of a cleaner swap,
then reopen: the log reads as before the clean or as after it, never a mix, and no temporary file is left."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compaction_workload import KEYS, Workload, all_records, latest_values
from logstore.cleaner import group_by_size
from logstore.manager import LogManager

HERE = Path(__file__).parent
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 1 << 20, "retention.ms": -1,
                "delete.retention.ms": 1_000, "index.interval.bytes": 64}
CHILD_SECONDS = 60
# Each step of Log.replace_segments and the one before it (fault_fs.NAMED_POINTS); `:N` is the N-th match.
CRASH_POINTS = ["cleaner-cleaned-written", "cleaner-swap-renamed", "cleaner-old-renamed:1",
                "cleaner-old-renamed:3", "cleaner-swapped"]


def _build(directory: Path, last_emptied: bool) -> int:
    """A compacted partition of small rolled segments (one cleaning group); the workload's clock.

    With `last_emptied`, segment.bytes splits the segments into groups of three, and later groups
    overwrite every key of an earlier group's last segment: the clean keeps nothing there, so each
    such group's output must end with the offset-holding empty batch.
    """
    store = LogManager(str(directory), start_scheduler=False)
    store.create_topic("compacted", 1, {**TOPIC_CONFIG, "segment.bytes": 2_600} if last_emptied else TOPIC_CONFIG)
    target = store.log("compacted", 0)
    work = Workload([target])
    for i in range(120):
        value = None if i % 17 == 5 else b"value-%d" % i
        work.apply(("plain", [(KEYS[i % 4], value)], 0))
        if i % 10 == 9:
            target.roll()
    work.apply(("txn", 20, [(KEYS[0], b"aborted")], 0))
    work.apply(("end", 20, False))
    work.apply(("plain", [(KEYS[1], b"last")], 0))
    target.roll()
    store.close()
    return work.now


def _read(directory: Path) -> tuple[dict, dict, list[str]]:
    store = LogManager(str(directory), start_scheduler=False)
    try:
        target = store.log("compacted", 0)
        leftovers = sorted(n for n in os.listdir(target.directory) if n.endswith((".cleaned", ".swap", ".deleted")))
        return all_records(target), latest_values(target), leftovers
    finally:
        store.close()


def _run_child(directory: Path, now: int, crash_at: str | None) -> subprocess.CompletedProcess:
    args = [sys.executable, str(HERE / "cleaner_crash_child.py"), str(directory), str(now)]
    return subprocess.run(args + ([crash_at] if crash_at else []), capture_output=True, text=True,
                          timeout=CHILD_SECONDS)


@pytest.fixture(scope="module", params=[False, True], ids=["last-kept", "last-emptied"])
def states(tmp_path_factory, request):
    """The store before any clean, its reading then, and its reading after an uninterrupted clean."""
    root = tmp_path_factory.mktemp("cleaner-crash")
    now = _build(root / "before", request.param)
    before = _read(root / "before")
    shutil.copytree(root / "before", root / "after")
    done = _run_child(root / "after", now, None)
    assert done.returncode == 0 and done.stdout.startswith("cleaned"), done.stderr
    after = _read(root / "after")
    assert len(after[0]) < len(before[0]) and after[1] == before[1]
    # A crash stops the round after the first group's swap: that group is new, the rest still old.
    first_end = _first_group_end(root / "before")
    assert (first_end is None) == (not request.param)
    partly = {o: r for o, r in after[0].items() if first_end is None or o < first_end}
    partly.update({o: r for o, r in before[0].items() if first_end is not None and o >= first_end})
    return root, now, before, (partly, after[1], after[2])


def _first_group_end(directory: Path) -> int | None:
    """Where the cleaner's first group of segments ends (None if all the cleanable ones are one group)."""
    store = LogManager(str(directory), start_scheduler=False)
    try:
        target = store.log("compacted", 0)
        config = target.config
        groups = group_by_size(target.segments[:-1], config.segment_bytes, config.segment_index_bytes,
                               target.segments[-1].base_offset)
        return groups[1][0].base_offset if len(groups) > 1 else None
    finally:
        store.close()


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_crash_mid_swap_leaves_the_old_or_the_new_segments(states, tmp_path, crash_at):
    root, now, before, after = states   # `after`: the first group cleaned
    shutil.copytree(root / "before", tmp_path / "store")
    killed = _run_child(tmp_path / "store", now, crash_at)
    assert killed.returncode == -9, f"{crash_at}: exit {killed.returncode}: {killed.stderr}"
    records, latest, leftovers = _read(tmp_path / "store")
    assert leftovers == []
    assert latest == before[1]
    assert records in (before[0], after[0]), f"{crash_at}: a mix of old and new segments"
    # Where the swap was already decided, recovery finishes it.
    expected = before[0] if crash_at in ("cleaner-cleaned-written",) else after[0]
    assert records == expected
