"""`logstore cleaner DIR...`: the log cleaner's state per compacted partition, read from the files alone.

Safe beside a running broker: nothing is opened for writing and no lock is
taken. Per partition whose `cleanup.policy` (from the `topic-configs` file,
else Kafka's for its internal topics, else `--default-policy`) has `compact`:

- `first_dirty`: the cleaner checkpoint (where the next round starts);
- `clean_bytes` / `dirty_bytes` / `dirty_ratio`: bytes of the segments below the
  checkpoint and from it up to the active segment, and the dirty share, which
  the cleaner compares with min.cleanable.dirty.ratio (it also holds back
  what an open transaction or min.compaction.lag.ms keeps, which the files do
  not show);
- `last_clean`, `bytes_reclaimed` (last round), `bytes_reclaimed_total`,
  `rounds`: from the cleaner's `cleaner-state.json`, empty before a first round;
- `uncleanable`: whether the running store's cleaner gave up on the partition
  after a round failed (Kafka's uncleanable partitions): the JSON has when and
  the error, and the table is followed by one line per such partition. The
  mark lasts until the store is opened again or the partition's segments
  change.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, TextIO

from logstore.checkpoints import CorruptCheckpointError
from logstore.cleaner import covering
from logstore.config import INTERNAL_TOPIC_CONFIGS
from logstore.filenames import LOG_SUFFIX
from logstore.log_cleaner import read_cleaner_checkpoints, read_cleaner_state, read_uncleanable
from logstore.manager import partition_key
from logstore.topics import TOPIC_CONFIGS_FILE, read_topic_configs

PROG = "logstore cleaner"
COLUMNS = ("topic", "partition", "first_dirty", "clean_bytes", "dirty_bytes", "dirty_ratio", "last_clean",
           "bytes_reclaimed", "bytes_reclaimed_total", "rounds", "uncleanable")


class SegmentFile(NamedTuple):
    """A segment as its `.log` file shows it."""

    base_offset: int
    size: int


def _segments(directory: str) -> list[SegmentFile]:
    found = []
    for name in os.listdir(directory):
        digits = name[:-len(LOG_SUFFIX)]
        if name.endswith(LOG_SUFFIX) and len(digits) == 20 and digits.isdigit():
            found.append(SegmentFile(int(digits), os.path.getsize(os.path.join(directory, name))))
    return sorted(found)


def _mark(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """An uncleanable mark as the report shows it: since when (ISO time) and the error."""
    if found is None:
        return None
    return {"since": datetime.fromtimestamp(found.get("since_ms", 0) / 1000, UTC).isoformat(timespec="seconds"),
            "error": found.get("error")}


def partition_rows(log_dir: str, default_policy: str = "delete") -> list[dict[str, Any]]:
    """One row per compacted partition of a log dir, in topic and partition order."""
    try:
        _, overrides = read_topic_configs(os.path.join(log_dir, TOPIC_CONFIGS_FILE))
    except FileNotFoundError:
        overrides = {}
    checkpoints = read_cleaner_checkpoints(log_dir)
    state = read_cleaner_state(log_dir)
    uncleanable = read_uncleanable(log_dir)
    rows = []
    for name in os.listdir(log_dir):
        key = partition_key(name)
        directory = os.path.join(log_dir, name)
        if key is None or not os.path.isdir(directory):
            continue
        base = INTERNAL_TOPIC_CONFIGS.get(key[0], {}).get("cleanup.policy", default_policy)
        policy = overrides.get(key[0], {}).get("cleanup.policy", base)
        segments = _segments(directory)
        if "compact" not in policy.split(",") or not segments:
            continue
        first_dirty = checkpoints.get(key, segments[0].base_offset)
        clean = sum(s.size for s in covering(segments, 0, first_dirty))
        dirty = sum(s.size for s in covering(segments[:-1], first_dirty, segments[-1].base_offset))
        last = state.get(name, {})
        rows.append({
            "topic": key[0], "partition": key[1], "first_dirty": first_dirty, "clean_bytes": clean,
            "dirty_bytes": dirty, "dirty_ratio": round(dirty / (clean + dirty), 4) if clean + dirty else 0.0,
            "last_clean": (datetime.fromtimestamp(last["last_clean_ms"] / 1000, UTC).isoformat(timespec="seconds")
                           if "last_clean_ms" in last else None),
            "bytes_reclaimed": last.get("bytes_reclaimed"), "bytes_reclaimed_total": last.get("bytes_reclaimed_total"),
            "rounds": last.get("rounds", 0), "uncleanable": _mark(uncleanable.get(name))})
    return sorted(rows, key=lambda row: (row["topic"], row["partition"]))


def run(paths: Sequence[str], *, default_policy: str = "delete", as_json: bool = False,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Print the rows of every log dir; exit status 0, or 2 for a path that is not a readable log dir."""
    out, err = out or sys.stdout, err or sys.stderr
    rows, status = [], 0
    for path in paths:
        if not os.path.isdir(path):
            print(f"{PROG}: {path}: not a directory", file=err)
            status = 2
            continue
        try:
            rows.extend(partition_rows(path, default_policy))
        except (OSError, CorruptCheckpointError) as exc:
            print(f"{PROG}: {path}: {exc}", file=err)
            status = 2
    if as_json:
        print(json.dumps({"partitions": rows}), file=out)
        return status
    table = [COLUMNS] + [tuple(_cell(r, c) for c in COLUMNS) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip(), file=out)
    for r in rows:
        if r["uncleanable"] is not None:
            print(f"{r['topic']}-{r['partition']}: uncleanable since {r['uncleanable']['since']}: "
                  f"{r['uncleanable']['error']}", file=out)
    return status


def _cell(row: dict[str, Any], column: str) -> str:
    value = row[column]
    if value is None:
        return "-"
    return "yes" if column == "uncleanable" else str(value)
