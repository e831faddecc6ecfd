"""A segment's index files: `.index`, `.timeindex` (mapped) and `.txnindex`.

Byte layouts and rules are on-disk-format.md §5.3–5.5. The offset and time
indexes are preallocated to `segment.index.bytes` while their segment is
active (from its first append: a segment never appended to has no index
file) and trimmed to whole entries when it rolls or closes; a trimmed file
is trusted to hold exactly `length / entry size` entries on reopen, which
is why an unclean shutdown rebuilds the indexes of the segments it touched.
The searches are native (`logstore.native.index`). Every file operation goes
through the `FileSystem` given (`fs`, default the real one); writes through
the maps are durable only after `flush`.

The two mapped ones hold no descriptor and are mapped on first use
(`logstore.mapped_index`); a file cut under its map raises `IndexAccessError`.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from logstore.filesystem import OS, FileSystem
from logstore.mapped_index import DEFAULT_MAX_INDEX_SIZE, CorruptIndexError, MappedIndex
from logstore.native.index import IndexAccessError, IndexFullError, InvalidOffsetError, OffsetIndexCore, TimeIndexCore

__all__ = ["DEFAULT_MAX_INDEX_SIZE", "AbortedTxn", "CorruptIndexError", "IndexAccessError", "IndexFullError",
           "InvalidOffsetError", "OffsetIndex", "TimeIndex", "TxnIndex", "sync_file"]


class OffsetIndex(MappedIndex[OffsetIndexCore]):
    """`.index`: offset → position of the batch that holds it."""

    entry_size = 8
    core_type = OffsetIndexCore

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry at or below `offset`, or (base offset, 0)."""
        if self.idle_and_empty:
            return (self.base_offset, 0)
        return self.core.lookup(offset)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets must strictly increase."""
        self.core.append(offset, position)

    def last_entry(self) -> tuple[int, int]:
        """The newest entry, or (base offset, 0)."""
        if self.idle_and_empty:
            return (self.base_offset, 0)
        return self.core.last_entry()

    def entry(self, slot: int) -> tuple[int, int]:
        """(offset, position) in `slot`."""
        return self.core.entry(slot)

    def _is_unwritten(self, entry: tuple[int, int]) -> bool:
        return entry == (self.base_offset, 0)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError if the file cannot be this segment's index."""
        if not self.exists:
            return
        with self._borrowed() as core:
            self.check_length()
            if not core.entries:
                return
            offset, position = core.last_entry()
            if offset < self.base_offset:
                raise CorruptIndexError(f"{self.path}: last offset {offset} is below the base offset")
            if position >= log_size:
                raise CorruptIndexError(f"{self.path}: position {position} is past the log's {log_size} bytes")


class TimeIndex(MappedIndex[TimeIndexCore]):
    """`.timeindex`: max timestamp so far → offset of the batch that holds it."""

    entry_size = 12
    reserved_slots = 1   # for the closing entry (`maybe_append(final=True)`)
    core_type = TimeIndexCore

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry at or below `timestamp`, or (-1, base offset)."""
        if self.idle_and_empty:
            return (-1, self.base_offset)
        return self.core.lookup(timestamp)

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> bool:
        """Add an entry if `timestamp` beats the last one; `final` may use the reserved slot."""
        return self.core.maybe_append(timestamp, offset, final)

    def last_entry(self) -> tuple[int, int]:
        """The newest entry, or (-1, base offset)."""
        if self.idle_and_empty:
            return (-1, self.base_offset)
        return self.core.last_entry()

    def entry(self, slot: int) -> tuple[int, int]:
        """(timestamp, offset) in `slot`."""
        return self.core.entry(slot)

    def _is_unwritten(self, entry: tuple[int, int]) -> bool:
        return entry == (0, self.base_offset)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if the file cannot be this segment's time index."""
        if not self.exists:
            return
        with self._borrowed() as core:
            self.check_length()
            if not core.entries:
                return
            first_ts = core.entry(0)[0]
            last_ts, last_offset = core.last_entry()
            if last_ts < first_ts:
                raise CorruptIndexError(f"{self.path}: last timestamp {last_ts} is below the first {first_ts}")
            if last_offset < self.base_offset:
                raise CorruptIndexError(f"{self.path}: last offset {last_offset} is below the base offset")


@dataclass(frozen=True)
class AbortedTxn:
    """One `.txnindex` entry: an aborted transaction's range and the LSO when it ended."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


_ABORTED = struct.Struct(">hqqqq")


def sync_file(path: str, fs: FileSystem = OS) -> None:
    """fsync a file if it exists (a txnindex is created lazily; a snapshot may be deleted meanwhile)."""
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fs.fsync(fd)
    finally:
        fs.close(fd)


class TxnIndex:
    """`.txnindex`: aborted transactions, appended in marker order; created on first use."""

    entry_size = _ABORTED.size

    def __init__(self, path: str, base_offset: int, fs: FileSystem = OS, *, exists: bool | None = None):
        self.path = path
        self.base_offset = base_offset
        self.fs = fs
        # `exists` False: the caller's listing of the directory has no such file, so nothing to read.
        self._entries: list[AbortedTxn] | None = [] if exists is False else None
        self._fd = -1  # opened by the first append: most segments never have an aborted transaction

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry in the file; a partial trailing entry is ignored, as Kafka does."""
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.fs.read_file(self.path)
        except FileNotFoundError:
            return []
        found = []
        for pos in range(0, len(data) - self.entry_size + 1, self.entry_size):
            version, pid, first, last, lso = _ABORTED.unpack_from(data, pos)
            if version != 0:
                raise CorruptIndexError(f"{self.path}: unknown aborted-transaction version {version} at byte {pos}")
            found.append(AbortedTxn(pid, first, last, lso))
        return found

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; last offsets must increase."""
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise InvalidOffsetError(
                f"aborted transaction ending at {txn.last_offset} is not after {entries[-1].last_offset}")
        if self._fd < 0:
            self._fd = self.fs.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        # At the end of the whole entries: a partial one left by a crash is overwritten.
        self.fs.pwrite(self._fd, _ABORTED.pack(0, txn.producer_id, txn.first_offset, txn.last_offset,
                                          txn.last_stable_offset), len(entries) * self.entry_size)
        entries.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound); True once a later segment cannot add any."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or above `offset`."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries) and self.fs.exists(self.path):
            self._truncate_file(len(keep) * self.entry_size)
        self._entries = keep

    def _truncate_file(self, size: int) -> None:
        if self._fd >= 0:
            self.fs.truncate(self._fd, size)
            return
        fd = self.fs.open(self.path, os.O_RDWR)
        try:
            self.fs.truncate(fd, size)
        finally:
            self.fs.close(fd)

    def reset(self) -> None:
        """Drop every entry."""
        self.truncate_to(-1)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an entry ends below the segment."""
        for txn in self.entries:
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(f"{self.path}: aborted transaction ends at {txn.last_offset}, "
                                        f"below the base offset {self.base_offset}")

    def flush(self) -> None:
        """Make the file durable (appends are written through at once)."""
        if self._fd >= 0:
            self.fs.fsync(self._fd)
        else:
            sync_file(self.path, self.fs)

    def close(self) -> None:
        """Close the file if an append opened it."""
        if self._fd >= 0:
            self.fs.close(self._fd)
            self._fd = -1

    def rename(self, path: str) -> None:
        """Move the file if it exists."""
        if self.fs.exists(self.path):
            self.fs.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        """Remove the file if it exists."""
        self.close()
        try:
            self.fs.unlink(self.path)
        except FileNotFoundError:
            pass
