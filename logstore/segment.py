"""One segment of a partition: a `.log` file and its three indexes.

The `.log` is written with pwrite at its end (new files written
through an mmap measured 3-4x slower here) and read with pread, so any
number of readers can share the descriptor with the one writer. The
descriptor is a `SegmentFile` of the process's `OPEN_FILES`: opened on
demand and pinned while used, so a store holds no more descriptors than
the set's capacity however many segments it has. Batch bytes
are only ever looked at through the format (`peek_entry`, `iter_entries`).

The segment's `size` is its logical end, not the file's length: it bounds
every read and places the next append. A write that fails part-way (a full
disk takes what fits, then refuses) leaves stray bytes past it, which the
failed append cuts back before it raises (`StorageIOError`, `intact` if the
cut worked); `cut_stray_bytes` trims whatever is left before a clean close,
as Kafka's FileRecords trims on close, since a reopen after a clean shutdown
trusts the file's length.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, overload

from logstore.errors import CorruptRecordError, StorageError, StorageIOError
from logstore.filenames import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, offset_path
from logstore.filesystem import OS, FileSystem
from logstore.formats import DEFAULT_FORMAT, LogFormat
from logstore.index import (
    DEFAULT_MAX_INDEX_SIZE,
    CorruptIndexError,
    IndexAccessError,
    OffsetIndex,
    TimeIndex,
    TxnIndex,
)
from logstore.open_files import OPEN_FILES, SegmentFile

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from logstore.formats.kafka import Entry, EntryBounds, ProducerBatch

__all__ = ["FileSlice", "LogSegment", "OffsetPosition"]

log = logging.getLogger(__name__)

# Reads walk batch headers a chunk at a time rather than one pread per header.
SCAN_CHUNK = 8 * 1024
# Where an in-memory index's anonymous file is reached (a descriptor's name, not a path on disk).
_MEMORY_INDEX = "/proc/self/fd/"


class HasBaseOffset(Protocol):
    """What `segments_between` reads of a segment: a `LogSegment`, or a tool's view of its file."""

    @property
    def base_offset(self) -> int: ...


_Segment = TypeVar("_Segment", bound=HasBaseOffset)
_Index = TypeVar("_Index", OffsetIndex, TimeIndex)
# What a `peek` given to `LogSegment.iter_bounds` reads an entry's head into.
_Bounds = TypeVar("_Bounds", bound="EntryBounds | ProducerBatch")


@dataclass(frozen=True)
class OffsetPosition:
    """Where a batch is: its first and last offsets, its byte position and size."""

    base_offset: int
    last_offset: int
    position: int
    size: int


class FileSlice:
    """A byte range of a segment file, for pread or sendfile without copying through Python.

    It reads through its own duplicate of the segment's descriptor (none for an empty range), which
    it closes when dropped or `detach`es to a new owner: the segment's own may be closed meanwhile by
    the open-files set, by retention or by a close, and its number reused by another file.
    """

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int):
        self.fd = fd
        self.position = position
        self.size = size

    def __repr__(self) -> str:
        return f"FileSlice(position={self.position}, size={self.size})"

    def read(self) -> bytes:
        """The bytes of the range."""
        return os.pread(self.fd, self.size, self.position) if self.size else b""

    def detach(self) -> int:
        """Hand the descriptor to the caller, who closes it (-1 for an empty range)."""
        fd, self.fd = self.fd, -1
        return fd

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    __del__ = close

    def readinto(self, buf: Buffer) -> int:
        """Fill `buf` (at least `size` bytes) with the range; returns the bytes read."""
        view = memoryview(buf)[:self.size]
        done = 0
        while done < self.size:
            n = os.preadv(self.fd, [view[done:]], self.position + done)
            if n == 0:
                break
            done += n
        return done

    def sendfile(self, out_fd: int) -> int:
        """Send the range to a socket or file; returns the bytes sent."""
        sent = 0
        while sent < self.size:
            n = os.sendfile(out_fd, self.fd, self.position + sent, self.size - sent)
            if n == 0:
                break
            sent += n
        return sent


def segments_between(segments: Sequence[_Segment], start: int, end: int) -> Iterator[tuple[_Segment, bool]]:
    """The segments that may hold offsets in [start, end), oldest first, each with whether it is the newest."""
    for i, segment in enumerate(segments):
        newest = i + 1 == len(segments)
        if not newest and segments[i + 1].base_offset <= start:
            continue
        if segment.base_offset >= end:
            return
        yield segment, newest


class LogSegment:
    """A `.log` file with its `.index`, `.timeindex` and `.txnindex`.

    The index files are made by the first append (or a rebuild that finds
    batches), not with the segment: an empty one has none.

    A read-only segment (`writable=False`) never writes a byte of its files:
    an index file it lacks, or one `use_memory_indexes` sets aside, is built
    in memory instead, and `recover` ends the segment where a writer would
    cut it without cutting the file.
    """

    offset_index: OffsetIndex
    time_index: TimeIndex

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE, fmt: LogFormat = DEFAULT_FORMAT,
                 writable: bool = True, suffix: str = "", names: Container[str] | None = None,
                 fs: FileSystem = OS):
        """`names`: the directory's file names when the caller has just listed it (which index files
        exist is read from it rather than asked of the file system); None to ask."""
        self.directory = directory
        self.fs = fs
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.format = fmt
        self.writable = writable
        self.log_path = offset_path(directory, base_offset, LOG_SUFFIX + suffix)
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        self.file: SegmentFile = OPEN_FILES.open(self.log_path, flags, fs)
        try:
            self.size = self.file.call(fs.size)
        except BaseException:
            self.file.close()
            raise
        self.created = time.time()
        # Whether the indexes take entries: a writable segment's, or a read-only one's built in memory.
        self.indexes_writable = writable
        # None only while they open: a failure below closes the offset index if it got that far.
        self.offset_index = self.time_index = None  # type: ignore[assignment]
        try:
            self.offset_index = self._open_index(OffsetIndex, INDEX_SUFFIX + suffix, names)
            self.time_index = self._open_index(TimeIndex, TIME_INDEX_SUFFIX + suffix, names)
        except BaseException:
            if self.offset_index is not None:
                self.offset_index.close(trim=False)
            self.file.close()
            raise
        txn_path = offset_path(directory, base_offset, TXN_INDEX_SUFFIX + suffix)
        self.txn_index = TxnIndex(txn_path, base_offset, fs, exists=_listed(txn_path, names))
        if writable:
            # Read now, under the opener: the fsync thread counts the entries (`_sync_txn_index`), and a
            # first, lazy read there would race with an append loading them too. A corrupt file is
            # left to the loader's index check, as before.
            try:
                self.txn_index.entries  # noqa: B018 (the read is the point)
            except CorruptIndexError:
                pass
        self.bytes_since_last_index_entry = 0
        self._txn_synced: int | None = None   # aborted transactions the last fsync covered; None: none yet
        self._max_ts: tuple[int, int] | None = None
        self._rolling_ts: int | None = None

    def _open_index(self, index_type: type[_Index], suffix: str, names: Container[str] | None) -> _Index:
        path = offset_path(self.directory, self.base_offset, suffix)
        exists = _listed(path, names)
        if exists is None and not self.writable:
            exists = self.fs.exists(path)
        # A read-only segment with nothing to index needs no index, in memory or on disk.
        if self.writable or exists or not self.size:
            return index_type(path, self.base_offset, self.max_index_size, writable=self.writable,
                              exists=exists, fs=self.fs)
        self.indexes_writable = True
        return _memory_index(index_type, self.base_offset, self.max_index_size)

    @property
    def closed(self) -> bool:
        """Whether `close` or `delete` has run."""
        return self.file.closed

    def use_memory_indexes(self) -> None:
        """Set the offset and time index files aside for empty in-memory ones, which `recover` fills.

        What the read-only loader does for a missing or corrupt index; and what a writable segment does
        when a full disk cannot take its index files (a page of the sparse preallocated file cannot be
        had): it removes them, so no stale index outlives this run and the next open rebuilds them.
        """
        for name in ("offset_index", "time_index"):
            old = getattr(self, name)
            setattr(self, name, _memory_index(type(old), self.base_offset, self.max_index_size))
            old.close(trim=False)
            if self.writable and not _in_memory(old):
                try:
                    self.fs.unlink(old.path)
                except FileNotFoundError:
                    pass
        self.indexes_writable = True
        self._max_ts = None

    # -- state derived from the files --------------------------------------------------

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the batch holding it) so far; the time index's last entry on reopen."""
        if self._max_ts is None:
            self._max_ts = self.time_index.last_entry()
        return self._max_ts

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp appended, -1 if none."""
        return self.max_timestamp_and_offset[0]

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares: the max timestamp, or the file's mtime when there is none."""
        ts = self.max_timestamp
        return ts if ts >= 0 else int(self.fs.mtime(self.log_path) * 1000)

    @property
    def rolling_timestamp(self) -> int | None:
        """The first batch's max timestamp, which segment.ms counts from; None if empty or untimed."""
        if self._rolling_ts is None and self.size:
            first = self.format.peek_entry(self.pread(64, 0), 0)
            if first is not None and first.max_timestamp >= 0:
                self._rolling_ts = first.max_timestamp
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, timestamp: int) -> int:
        """Kafka's segment.ms clock: batch time since the first batch, else wall time since creation."""
        first = self.rolling_timestamp
        if first is not None and timestamp >= 0:
            return timestamp - first
        return now_ms - int(self.created * 1000)

    def read_next_offset(self) -> int:
        """The offset after the last batch: scan from the last index entry."""
        offset, position = self.offset_index.last_entry()
        next_offset = self.base_offset
        for bounds in self.iter_bounds(position):
            next_offset = bounds.last_offset + 1
        return max(next_offset, self.base_offset)

    # -- appends ---------------------------------------------------------------------------

    def append(self, data: Buffer, batches: Sequence[tuple[int, int, int]]) -> int:
        """Write whole batches at the end and index them; returns the position.

        `batches` holds `(size, last_offset, max_timestamp)` of each batch in
        `data`, in order. As in current Kafka, every batch boundary may take
        an index entry (once `index.interval.bytes` have passed since the
        last), not just the start of each append.

        A write or index entry that fails raises `StorageIOError`: the bytes
        it put past the end are cut back first, and its `intact` says whether
        that worked (the segment is then exactly as before the call).
        """
        position = self.size
        view = memoryview(data)
        written = 0
        index_state = (self._max_ts, self.bytes_since_last_index_entry)
        try:
            # An active segment's indexes are made and grown by its first append (Kafka's LazyIndex),
            # here, where a full disk that refuses them fails this append cleanly.
            self.offset_index.load()
            self.time_index.load()
            # pwrite at our own idea of the end: the descriptor's file offset is never trusted.
            fd = self.file.acquire()
            try:
                # Almost always one write: no slice is made for it.
                written = self.fs.pwrite(fd, view, position)
                while written < len(view):
                    written += self.fs.pwrite(fd, view[written:], position + written)
            finally:
                self.file.release()
            # Indexed only once the bytes are written: an entry never points past the end.
            batch_position = position
            for size, last_offset, max_timestamp in batches:
                self._merge_max_timestamp(max_timestamp, last_offset)
                if self.bytes_since_last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(last_offset, batch_position)
                    # Not None: `_merge_max_timestamp` above read it through `max_timestamp_and_offset`.
                    self.time_index.maybe_append(*self._max_ts)  # type: ignore[misc]
                    self.bytes_since_last_index_entry = 0
                batch_position += size
                self.bytes_since_last_index_entry += size
        except (OSError, StorageError) as exc:
            intact = self._undo_append(position, batches[0][1] if batches else None, index_state)
            space = isinstance(exc, StorageError) and self.is_full_disk_fault(exc)
            if isinstance(exc, StorageError) and not space:
                raise   # an index cut under its map: typed already, and not the disk being full
            raise _append_error(self.log_path, exc, intact, space) from exc
        self.size += written
        return position

    def _undo_append(self, position: int, first_last_offset: int | None,
                     index_state: tuple[tuple[int, int] | None, int]) -> bool:
        """After a failed append: drop its index entries and cut its bytes; whether the segment is as before."""
        self._max_ts, self.bytes_since_last_index_entry = index_state
        try:
            if first_last_offset is not None:
                # The append's entries are the only ones at or above its first batch's last offset; an
                # index it could not map took none (mapping it now would retry what just failed).
                for index in (self.offset_index, self.time_index):
                    if index.mapped:
                        index.truncate_to(first_last_offset)
            self._truncate_file(position)
        except (OSError, StorageError) as exc:
            log.error("%s: cannot cut a failed append back to byte %d: %s", self.log_path, position, exc)
            return False
        return True

    def is_full_disk_fault(self, exc: BaseException) -> bool:
        """Whether `exc` is a full disk: an ENOSPC, or an index map fault on files as long as their maps (the
        file system could not allocate a page of the sparse preallocated file), not on a file cut under
        its map."""
        if isinstance(exc, OSError):
            return exc.errno == errno.ENOSPC
        if not isinstance(exc, IndexAccessError):
            return False
        for index in (self.offset_index, self.time_index):
            if _in_memory(index):
                return False
            try:
                fd = self.fs.open(index.path, os.O_RDONLY)
            except OSError:
                return False
            try:
                if self.fs.size(fd) < index.length:
                    return False
            finally:
                self.fs.close(fd)
        return True

    def cut_stray_bytes(self) -> None:
        """Cut anything past the segment's logical end (what a failed append could not cut back), as Kafka's
        FileRecords trims on close: a reopen trusts the file's length."""
        if self.writable and self.file.call(self.fs.size) > self.size:
            self._truncate_file(self.size)

    def _merge_max_timestamp(self, timestamp: int, offset: int) -> tuple[int, int]:
        current = self.max_timestamp_and_offset
        if timestamp > current[0]:
            self._max_ts = current = (timestamp, offset)
        return current

    def is_full_for(self, size: int, segment_bytes: int, last_offset: int) -> bool:
        """Whether appending `size` bytes ending at `last_offset` needs a new segment first."""
        return (self.size > segment_bytes - size
                or self.offset_index.is_full or self.time_index.is_full
                or last_offset - self.base_offset > 0x7FFFFFFF)

    # -- reads -----------------------------------------------------------------------------

    @overload
    def iter_bounds(self, position: int = 0, stop: int | None = None, peek: None = None) -> Iterator[EntryBounds]: ...

    @overload
    def iter_bounds(self, position: int = 0, stop: int | None = None, *,
                    peek: Callable[[bytes, int], _Bounds | None]) -> Iterator[_Bounds]: ...

    def iter_bounds(self, position: int = 0, stop: int | None = None,
                    peek: Callable[[bytes, int], EntryBounds | ProducerBatch | None] | None = None
                    ) -> Iterator[EntryBounds | ProducerBatch]:
        """Framing of each whole entry from `position` up to `stop` (default: the end).

        `peek` (default: the format's `peek_entry`) reads an entry's head into
        a named tuple with `position` and `size`; `peek_producer_batch` gives
        producer fields too.
        """
        stop = self.size if stop is None else stop
        peek = peek or self.format.peek_entry
        while position < stop:
            chunk = self.pread(min(SCAN_CHUNK, stop - position), position)
            pos = 0
            while True:
                bounds = peek(chunk, pos)
                if bounds is None:
                    break
                if position + pos + bounds.size > stop:
                    return
                yield bounds._replace(position=position + pos)
                pos += bounds.size
                if pos >= len(chunk):
                    break
            if pos == 0:
                return
            position += pos

    def translate_offset(self, offset: int, start_position: int = 0) -> OffsetPosition | None:
        """The first batch whose last offset is at least `offset`, or None if the segment ends first."""
        _, position = self.offset_index.lookup(offset)
        for bounds in self.iter_bounds(max(position, start_position)):
            if bounds.last_offset >= offset:
                return OffsetPosition(bounds.base_offset, bounds.last_offset, bounds.position, bounds.size)
        return None

    def read(self, offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> tuple[OffsetPosition, FileSlice] | None:
        """Bytes from the batch holding `offset`, at most `max_size` (but one whole batch if
        `min_one_message`), not past `max_position`. None when the segment has nothing there.
        """
        found = self.translate_offset(offset)
        if found is None:
            return None
        limit = self.size if max_position is None else min(max_position, self.size)
        if found.position >= limit:
            return found, FileSlice(-1, found.position, 0)
        size = max(max_size, found.size) if min_one_message else max_size
        return found, FileSlice(self.file.dup(), found.position, min(limit - found.position, size))

    def pread(self, size: int, position: int) -> bytes:
        """Up to `size` bytes of the `.log` at `position` (the caller keeps within `size`, the logical end)."""
        fd = self.file.acquire()
        try:
            return self.fs.pread(fd, size, position)
        finally:
            self.file.release()

    def preadinto(self, buf: memoryview, position: int) -> int:
        """Fill `buf` from the `.log` at `position` (the caller keeps within the logical end); bytes read."""
        fd = self.file.acquire()
        try:
            return self.fs.preadinto(fd, buf, position)
        finally:
            self.file.release()

    def read_entry(self, bounds: EntryBounds) -> bytes:
        """The whole bytes of one entry."""
        return self.pread(bounds.size, bounds.position)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp` and `start_offset`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for bounds in self.iter_bounds(position):
            if bounds.max_timestamp < timestamp:
                continue
            data = self.read_entry(bounds)
            for entry in self.format.iter_entries(data):
                for record in self.format.decode_entry(data, entry):
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return record.offset, record.timestamp
        return None

    # -- recovery and truncation -----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batches from the one holding `offset` onwards; returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.make_active()
        self.time_index.make_active()
        removed = self.size - found.position
        self.truncate_bytes(found.position)
        self._max_ts = self.time_index.last_entry()
        self._rescan_max_timestamp()
        self.bytes_since_last_index_entry = 0 if self.offset_index.entries else self.size
        if self.size == 0:
            self._rolling_ts = None
            self.created = time.time()
        return removed

    def _rescan_max_timestamp(self) -> None:
        # The time index stops at the last indexed chunk; batches after it still count.
        for bounds in self.iter_bounds(self.offset_index.last_entry()[1]):
            self._merge_max_timestamp(bounds.max_timestamp, bounds.last_offset)

    def truncate_bytes(self, size: int) -> None:
        """Cut the `.log` to `size` bytes."""
        self._truncate_file(size)
        self.size = size

    def _truncate_file(self, size: int) -> None:
        fd = self.file.acquire()
        try:
            self.fs.truncate(fd, size)
        finally:
            self.file.release()

    def reset_indexes(self) -> None:
        """Empty the offset and time indexes before they are rebuilt from the log."""
        self.offset_index.reset()
        self.time_index.reset()
        self._max_ts = (-1, self.base_offset)
        self.bytes_since_last_index_entry = 0

    def recover(self, on_batch: Callable[[Entry], None] | None = None) -> tuple[int, CorruptRecordError | None]:
        """Rebuild the offset and time indexes from the log, cutting it at the first broken or partial entry.

        Every entry's CRC is checked and offsets must increase. `on_batch(entry)`
        sees each valid entry (producer state replays through it). Returns the
        bytes cut off and the error that stopped the scan, if any. A read-only
        segment only checks: it rebuilds in-memory indexes, keeps index files
        (their entries past the cut are ignored) and ends at the cut without
        truncating the file.

        A writable segment whose index files a full disk cannot take (a page
        of the sparse file cannot be had) goes on with in-memory indexes
        (`use_memory_indexes`: its files are removed, the next open rebuilds
        them), so a start on a full disk is not stopped by it; `on_batch`
        still sees each entry once.
        """
        try:
            return self._recover(on_batch, 0)
        except _IndexWriteFailed as failed:
            if not (self.writable and self.is_full_disk_fault(failed.cause)):
                raise failed.cause from None
            log.warning("%s: no space for the rebuilt indexes (%s); they are kept in memory until the next open",
                        self.log_path, failed.cause)
            self.use_memory_indexes()
            return self._recover(on_batch, failed.replayed_to)

    def _recover(self, on_batch: Callable[[Entry], None] | None,
                 replayed_to: int) -> tuple[int, CorruptRecordError | None]:
        """`recover`, where `on_batch` already saw the entries before byte `replayed_to`."""
        rebuild = self.indexes_writable
        if rebuild:
            self.reset_indexes()
        else:
            self._max_ts = (-1, self.base_offset)
        valid = last_index_position = 0
        base = self.base_offset
        previous_last = base - 1
        interval = self.index_interval_bytes
        max_ts: tuple[int, int] = self._max_ts  # type: ignore[assignment]  # set by either branch above
        indexed_ts = max_ts[0]
        if self.size:
            # Bound once for the loop below; an empty segment's indexes stay unmapped (and uncreated).
            # Binding maps them, making a file that may be missing: what a full disk may refuse.
            try:
                append_offset, append_time = self.offset_index.core.append, self.time_index.core.maybe_append
            except (OSError, StorageError) as exc:
                raise _IndexWriteFailed(replayed_to, exc) from exc
        fmt = self.format
        error = None
        # The map outlives the pin: a map holds its file, not the descriptor.
        view = self.file.call(lambda fd: self.fs.mmap(fd, self.size, writable=False)) if self.size else None
        # One native pass checks a segment of whole, valid batches; anything else
        # (a torn tail, a bad CRC, legacy entries) takes the careful walk that says where.
        bulk = fmt.scan_entries(view) if view is not None else []
        # Without `bulk` there is a view (scan_entries refused it), and the walk is a generator
        # (closed below); mypy follows neither.
        entries = (iter(bulk) if bulk is not None
                   else fmt.iter_entries(view, 0, verify_crc=True))  # type: ignore[arg-type]
        try:
            while True:
                try:
                    entry = next(entries, None)
                except CorruptRecordError as exc:
                    # The traceback holds the walker's frame and its view of the map.
                    error = exc.with_traceback(None)
                    break
                if entry is None:
                    break
                last = entry.last_offset
                if last <= previous_last or last - base > 0x7FFFFFFF:
                    error = CorruptRecordError(
                        f"entry offset {last} does not follow {previous_last} "
                        f"in segment {base}", entry.position)
                    break
                if on_batch is not None and entry.position >= replayed_to:
                    on_batch(entry)
                # The index rule of recovery (Kafka's LogSegment.recover), inline: this loop runs per batch.
                # With `bulk` every entry is a v2 batch header, which has the max timestamp itself.
                timestamp = (entry.max_timestamp if bulk is not None  # type: ignore[union-attr]
                             else fmt.entry_bounds(view, entry).max_timestamp)  # type: ignore[arg-type]
                if timestamp > max_ts[0]:
                    max_ts = (timestamp, last)
                if rebuild and valid - last_index_position > interval:
                    try:
                        append_offset(last, valid)
                        if max_ts[0] > indexed_ts:
                            append_time(max_ts[0], max_ts[1], False)
                            indexed_ts = max_ts[0]
                    except (OSError, StorageError) as exc:
                        raise _IndexWriteFailed(entry.position + entry.size_in_bytes, exc) from exc
                    last_index_position = valid
                previous_last = last
                valid = entry.position + entry.size_in_bytes
        finally:
            if bulk is None:
                entries.close()  # type: ignore[attr-defined]
            del bulk, entries
            if view is not None:
                view.close()
        self._max_ts = max_ts
        truncated = self.size - valid
        if not self.writable:
            self.size = valid
            if not rebuild:
                self.offset_index.truncate_to(previous_last + 1)
                self.time_index.truncate_to(previous_last + 1)
        elif truncated:
            self.truncate_bytes(valid)
        if self.writable:
            # Aborted transactions are kept for the batches that stay: rebuilding
            # them needs the producer state replayed through `on_batch`.
            self.txn_index.truncate_to(previous_last + 1)
        if rebuild and max_ts[0] >= 0:   # without a timestamp there is nothing to add
            try:
                self.time_index.maybe_append(*self.max_timestamp_and_offset, final=True)
            except (OSError, StorageError) as exc:
                raise _IndexWriteFailed(valid, exc) from exc
        self.bytes_since_last_index_entry = valid - last_index_position
        return truncated, error

    # -- lifecycle -------------------------------------------------------------------------

    def on_becoming_inactive(self) -> None:
        """On roll: the closing time-index entry, then trim both indexes to their entries."""
        # _max_ts None: nothing appended or recovered since the open, so the time index's last entry is
        # the max already; reading it would map a file nothing else reads.
        if self.size and self.writable and self._max_ts is not None:
            self.time_index.maybe_append(*self.max_timestamp_and_offset, final=True)
        # A segment with batches keeps both files, as Kafka's do (its loader would call a missing
        # `.index` an error); an empty one, never appended to, may have none.
        self.offset_index.trim(create=self.size > 0)
        self.time_index.trim(create=self.size > 0)

    def make_active(self) -> None:
        """Let the indexes grow back to full size so this segment can take appends (at their next use)."""
        self.offset_index.make_active()
        self.time_index.make_active()
        self.bytes_since_last_index_entry = self.size - self.offset_index.last_entry()[1] \
            if self.offset_index.entries else self.size

    def flush(self) -> bool:
        """fsync the log and its indexes; True if the txnindex may be a new name its directory must sync."""
        self.file.call(self.fs.fsync)
        self.offset_index.flush()
        self.time_index.flush()
        return self._sync_txn_index(always=True)

    def flush_log(self) -> bool:
        """fdatasync the log: what an acknowledged append needs, with the txnindex if an abort reached it
        since (recovery trusts the txnindex of a segment below the recovery point); True as `flush`."""
        self.file.call(self.fs.fdatasync)
        return self._sync_txn_index(always=False)

    def _sync_txn_index(self, *, always: bool) -> bool:
        count = len(self.txn_index.entries)
        if count == self._txn_synced or not (count or always):
            return False
        self.txn_index.flush()
        first = not self._txn_synced
        self._txn_synced = count
        return first and count > 0

    def close(self) -> None:
        """Close the files; a writable segment first gets its closing time entry and trimmed indexes.

        The files are closed even when that fails; the error (a `StorageIOError` for an `OSError`) is then
        raised, and says the segment was not closed cleanly.
        """
        if self.closed:
            return
        failure: BaseException | None = None
        steps: list[Callable[[], object]] = [
            self.on_becoming_inactive if self.writable else (lambda: None),
            lambda: self.offset_index.close(trim=self.writable),
            lambda: self.time_index.close(trim=self.writable),
            self.txn_index.close,
        ]
        for step in steps:
            try:
                step()
            except (OSError, StorageError) as exc:
                failure = failure or exc
        self.file.close()
        if failure is not None:
            if isinstance(failure, OSError) and not isinstance(failure, StorageError):
                raise StorageIOError(f"closing {self.log_path} failed: {failure}", failure) from failure
            raise failure

    def rename_with_suffix(self, suffix: str) -> None:
        """Give every file of the segment the suffix `suffix` in place of its current one (`.deleted`
        before an async delete; `.cleaned`, then `.swap`, then none as cleaner output is swapped in)."""
        new = offset_path(self.directory, self.base_offset, LOG_SUFFIX + suffix)
        self.file.rename(new)
        self.log_path = new
        for index, kind in ((self.offset_index, INDEX_SUFFIX), (self.time_index, TIME_INDEX_SUFFIX)):
            if not _in_memory(index):   # an index a full disk kept in memory has no file to rename
                index.rename(offset_path(self.directory, self.base_offset, kind + suffix))
        self.txn_index.rename(offset_path(self.directory, self.base_offset, TXN_INDEX_SUFFIX + suffix))

    def delete(self) -> None:
        """Close and remove every file of the segment."""
        if not self.closed:
            self.offset_index.close(trim=False)
            self.time_index.close(trim=False)
            self.file.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                self.fs.unlink(path)
            except FileNotFoundError:
                pass
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


class _IndexWriteFailed(Exception):
    """An index entry of a rebuild could not be written; `on_batch` saw the entries before `replayed_to`."""

    def __init__(self, replayed_to: int, cause: OSError | StorageError):
        super().__init__(str(cause))
        self.replayed_to = replayed_to
        self.cause = cause


def _append_error(path: str, exc: BaseException, intact: bool, index_space: bool) -> StorageIOError:
    """What a failed append raises: an index map fault on a full disk reads as the ENOSPC it is."""
    cause = (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) if index_space
             else exc if isinstance(exc, OSError) else None)
    what = f"append to {path} failed: {exc}"
    return StorageIOError(what if intact else f"{what}; its bytes could not be cut back", cause, intact=intact)


def _listed(path: str, names: Container[str] | None) -> bool | None:
    """Whether `names`, a listing of the directory of `path`, holds it; None without a listing."""
    return None if names is None else os.path.basename(path) in names


def _in_memory(index: OffsetIndex | TimeIndex) -> bool:
    """Whether `index` is one of `_memory_index`'s, in an anonymous file."""
    return index.path.startswith(_MEMORY_INDEX)


def _memory_index(index_type: type[_Index], base_offset: int, max_index_size: int) -> _Index:
    """An empty index of `index_type` in an anonymous file: built and searched like the real one,
    never on disk."""
    fd = os.memfd_create(f"logstore-{base_offset}{index_type.__name__}", os.MFD_CLOEXEC)
    try:
        # The index opens its own descriptor of the same anonymous file.
        index = index_type(f"{_MEMORY_INDEX}{fd}", base_offset, max_index_size, writable=True)
    finally:
        os.close(fd)
    index.reset()
    return index

