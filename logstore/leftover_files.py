"""What a crash can leave in a partition directory, and which files make up the log despite it.

Kafka's LogLoader starts by removing temporary files (`.deleted`,
`.cleaned`, index files without their `.log`) and finishing the cleaner's
`.swap` renames: a swap segment is whole cleaner output and replaces every
segment inside its offset range. `find_segment_files` works that out
without touching a file; `settle_leftovers` then makes it so on disk.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from logstore.filenames import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_offset,
)
from logstore.filesystem import FileSystem
from logstore.formats import LogFormat
from logstore.segment import LogSegment

__all__ = ["SegmentFiles", "find_segment_files", "settle_leftovers"]

_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass
class SegmentFiles:
    """The directory as the loader will see it: segment base offset → the state suffix its files
    carry ("" or `.swap`), the names a writing loader removes or renames (in that order), and every
    name the directory holds (as `settle_leftovers` leaves it, once it ran)."""

    segments: dict[int, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)


def _suffix_of(name: str) -> tuple[int | None, str, str]:
    """(offset, kind suffix, state suffix) of a Kafka file name; offset None for any other name."""
    offset = parse_offset(name)
    if offset is None:
        return None, "", ""
    rest = name[name.index("."):]
    for state in (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX):
        if rest.endswith(state):
            return offset, rest[:-len(state)], state
    return offset, rest, ""


def _swap_end(directory: str, base: int, fmt: LogFormat, fs: FileSystem) -> int:
    swap = LogSegment(directory, base, fmt=fmt, writable=False, suffix=SWAP_SUFFIX, fs=fs)
    try:
        return max((b.last_offset + 1 for b in swap.iter_bounds()), default=base)
    finally:
        swap.close()


def find_segment_files(directory: str, fmt: LogFormat, fs: FileSystem,
                       names: list[str] | None = None) -> SegmentFiles:
    """Which segments the directory holds once its leftovers are dealt with; reads, never writes.
    `names`: the directory's listing, if the caller just made one."""
    names = sorted(fs.listdir(directory) if names is None else names)
    found = SegmentFiles(names=set(names))
    live = []
    for name in names:
        offset, kind, state = _suffix_of(name)
        if state in (DELETED_SUFFIX, CLEANED_SUFFIX):
            found.removed.append(name)
        elif offset is not None:
            live.append((name, offset, kind, state))
    swaps = sorted(o for _, o, kind, state in live if kind == LOG_SUFFIX and state == SWAP_SUFFIX)
    replaced: set[str] = set()
    for base in swaps:
        # The cleaner ends every group's output at or past its last segment's base, so the swap's range reaches the
        # base of every segment it replaces. Only segment files go: a producer snapshot in the range stays.
        end = max(_swap_end(directory, base, fmt, fs), base + 1)
        for name, offset, kind, state in live:
            if state == "" and base <= offset < end and kind in SEGMENT_SUFFIXES:
                replaced.add(name)
        for name, offset, _kind, state in live:
            if offset == base and state == SWAP_SUFFIX:
                found.renamed.append((name, name[:-len(SWAP_SUFFIX)]))
    found.removed.extend(sorted(replaced))
    logs = {o: state for name, o, kind, state in live if kind == LOG_SUFFIX and name not in replaced}
    for base, state in logs.items():
        if state == "" or base in swaps:
            found.segments[base] = state
    for name, offset, kind, state in live:
        # The swap's `.log` lost its suffix first, so its index files still carrying it belong to that
        # new segment (flushed before the swap began): finish their renames too.
        if state == SWAP_SUFFIX and kind in _INDEX_SUFFIXES and offset not in swaps and offset in found.segments:
            found.renamed.append((name, name[:-len(SWAP_SUFFIX)]))
    for name, offset, kind, _state in live:
        # Index files without their `.log` are what a crash mid-delete or mid-swap leaves.
        if name not in replaced and offset not in found.segments and kind in _INDEX_SUFFIXES:
            found.removed.append(name)
    found.segments = dict(sorted(found.segments.items()))
    return found


def settle_leftovers(directory: str, found: SegmentFiles, fs: FileSystem) -> None:
    """Make the directory what `find_segment_files` saw: remove the leftovers, finish the swaps."""
    for name in found.removed:
        try:
            fs.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
        found.names.discard(name)
    for old, new in found.renamed:
        fs.rename(os.path.join(directory, old), os.path.join(directory, new))
        found.names.discard(old)
        found.names.add(new)
    found.segments = dict.fromkeys(found.segments, "")
