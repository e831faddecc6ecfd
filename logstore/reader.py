"""Read-only, point-in-time views of a data directory, for readers beside the process that writes it.

A view is the loader's read-only load (`loader.load_log` in READ_ONLY
mode): the segments, offsets, producer state, last stable offset and
aborted transactions a broker's recovery would arrive at, without writing
a byte, so it may be opened on a directory a running broker is appending to
(Spark scans, tools). It is fixed when opened: the high watermark is the
end of the last whole batch then, a batch still being copied in failing its
CRC like a torn tail after a crash.

A `PartitionScan` is the picklable plan for one range of offsets: a worker
in another process reads it without a view, opening only the segments the
range touches, and gets Arrow record batches (pyarrow is imported then).
"""
from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpoint,
    read_clean_shutdown_marker,
)
from logstore.errors import CorruptRecordError, OffsetOutOfRangeError, SegmentDeletedError, StorageError
from logstore.filenames import is_delete_dir, parse_partition_dir
from logstore.filesystem import OS, FileSystem
from logstore.formats import DEFAULT_FORMAT, LogFormat
from logstore.formats.protocol import ENTRIES_END, ENTRIES_FULL, ENTRIES_NEED_BYTES, ENTRIES_OTHER
from logstore.index import AbortedTxn, IndexAccessError
from logstore.loader import LoadMode, RecoveryReport, load_log
from logstore.manager import partition_key
from logstore.read_committed import CommittedFilter, check_isolation
from logstore.segment import LogSegment

if TYPE_CHECKING:
    import pyarrow as pa

    from logstore.formats.kafka import ColumnarBuilder, Entry, Record

__all__ = ["PartitionScan", "PartitionView", "SegmentSpan", "StoreView"]

# Reads take a few MiB per pread: fewer syscalls, and the builder copies out of each chunk at once.
SCAN_CHUNK_BYTES = 4 << 20
DEFAULT_BATCH_ROWS = 1 << 16
# Opens of a partition a live broker changes under the view, before its error is the caller's.
OPEN_ATTEMPTS = 5


@dataclass(frozen=True)
class SegmentSpan:
    """One segment as the view saw it: offsets [base_offset, end_offset), bytes, largest timestamp
    (-1 when unknown: the newest segment's time index trails its appends)."""

    base_offset: int
    end_offset: int
    size: int
    max_timestamp: int


class PartitionView:
    """One `<topic>-<partition>` directory as it was when opened; never writes to it."""

    def __init__(self, directory: str, segments: list[LogSegment], *, log_start_offset: int,
                 high_watermark: int, last_stable_offset: int, aborted: list[AbortedTxn],
                 fmt: LogFormat = DEFAULT_FORMAT):
        self.directory = directory
        self.topic, self.partition = parse_partition_dir(os.path.basename(directory))
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.aborted = tuple(aborted)
        self.format = fmt
        self._segments = segments
        self.report: RecoveryReport | None = None
        """What the read-only load found (and a writer's recovery would do)."""
        ends = [s.base_offset for s in segments[1:]] + [high_watermark]
        self.segments = tuple(
            SegmentSpan(s.base_offset, end, s.size, s.max_timestamp if i + 1 < len(segments) else -1)
            for i, (s, end) in enumerate(zip(segments, ends)))

    @classmethod
    def open(cls, directory: str, *, log_start_offset: int = 0, fmt: LogFormat = DEFAULT_FORMAT,
             recovery_point: int = 0, clean_shutdown: bool = False, fs: FileSystem = OS) -> PartitionView:
        """View a partition directory as a broker opening it now would see it, without writing to it.

        `log_start_offset` and `recovery_point` come from the log dir's
        checkpoints and `clean_shutdown` from its marker, when known; the
        defaults check every batch.
        """
        directory = os.path.abspath(directory)
        for attempt in range(OPEN_ATTEMPTS):
            try:
                loaded = load_log(directory, mode=LoadMode.READ_ONLY, clean_shutdown=clean_shutdown,
                                  recovery_point=recovery_point, log_start_offset=log_start_offset, fmt=fmt, fs=fs)
                break
            except IndexAccessError:
                # A broker writing the partition cut an index file while it was mapped here (a roll trims
                # the old active segment's preallocated index): a new look sees the files as they are now.
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
        try:
            lso = loaded.last_stable_offset
        except BaseException:
            loaded.close()
            raise
        view = cls(directory, loaded.segments, log_start_offset=loaded.log_start_offset,
                   high_watermark=loaded.log_end_offset, last_stable_offset=lso, aborted=loaded.aborted, fmt=fmt)
        view.report = loaded.report
        return view

    def end_offset(self, isolation: str) -> int:
        """Where a scan at `isolation` ends: the last stable offset for read_committed, else the high
        watermark."""
        return self.last_stable_offset if check_isolation(isolation) else self.high_watermark

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record has a timestamp at or after `timestamp`; None if none has."""
        for segment, span in zip(self._segments, self.segments):
            if 0 <= span.max_timestamp < timestamp or span.end_offset <= self.log_start_offset:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found[0] if found[0] < self.high_watermark else None
        return None

    def scan(self, start: int, end: int, isolation: str) -> PartitionScan:
        """The plan for reading offsets [start, end) at `isolation`; OffsetOutOfRangeError outside
        [log start offset, end_offset(isolation)]."""
        committed = check_isolation(isolation)
        upper = self.end_offset(isolation)
        if not self.log_start_offset <= start <= end <= upper:
            raise OffsetOutOfRangeError(f"{self.topic}-{self.partition}: offsets [{start}, {end}) are outside "
                                        f"[{self.log_start_offset}, {upper}) at {isolation}")
        bases = tuple(s.base_offset for s in self.segments if s.base_offset < end and s.end_offset > start)
        aborted = tuple(t for t in self.aborted if t.last_offset >= start and t.first_offset < end) \
            if committed else ()
        return PartitionScan(self.directory, start, end, bases, committed, aborted)

    def segments_between(self, start: int, end: int) -> list[SegmentSpan]:
        """The segments holding offsets in [start, end)."""
        return [s for s in self.segments if s.base_offset < end and s.end_offset > start]

    def close(self) -> None:
        """Close the files the view holds."""
        for segment in self._segments:
            segment.close()
        self._segments = []

    def __enter__(self) -> PartitionView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PartitionView({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"lso={self.last_stable_offset}, hw={self.high_watermark}, segments={len(self.segments)})")


@dataclass(frozen=True)
class PartitionScan:
    """Offsets [start, end) of one partition, with what a worker needs to read them alone."""

    directory: str
    start: int
    end: int
    bases: tuple[int, ...]
    """The segments holding the range, by base offset."""
    committed: bool
    aborted: tuple[AbortedTxn, ...] = ()
    """read_committed: the aborted transactions overlapping the range."""

    @property
    def topic_partition(self) -> tuple[str, int]:
        """(topic, partition) from the directory name."""
        return parse_partition_dir(os.path.basename(self.directory))

    def split(self, pieces: int) -> list[PartitionScan]:
        """The range cut into `pieces` of about equal offset counts (never empty ones)."""
        count = self.end - self.start
        pieces = max(1, min(pieces, count))
        cuts = [self.start + count * i // pieces for i in range(pieces)] + [self.end]
        return [self.narrow(lo, hi) for lo, hi in zip(cuts, cuts[1:])]

    def narrow(self, start: int, end: int) -> PartitionScan:
        """The part of this scan inside [start, end)."""
        start, end = max(start, self.start), min(end, self.end)
        end = max(start, end)
        bases = self.bases
        keep = [b for i, b in enumerate(bases) if b < end and (i + 1 == len(bases) or bases[i + 1] > start)]
        aborted = tuple(t for t in self.aborted if t.last_offset >= start and t.first_offset < end)
        return PartitionScan(self.directory, start, end, tuple(keep), self.committed, aborted)

    def read_arrow(self, *, headers: bool = False, timestamp_types: bool = False,
                   timestamp_micros: bool = False, batch_rows: int = DEFAULT_BATCH_ROWS,
                   skip_deleted: bool = False, fmt: LogFormat = DEFAULT_FORMAT) -> Iterator[pa.RecordBatch]:
        """pyarrow RecordBatches (offset, timestamp in ms — timestamp[us, tz=UTC] with
        `timestamp_micros` —, key, value, then `timestampType` and `headers` when asked) of the records
        in range, aborted transactions and control records left out. A segment deleted since planning
        raises SegmentDeletedError, or is passed over with `skip_deleted`."""
        builder = fmt.column_builder(headers=headers, timestamp_types=timestamp_types,
                                     timestamp_micros=timestamp_micros)
        legacy = (headers, timestamp_types, timestamp_micros)
        if self.committed and self.aborted:
            batches = self._read_filtered(builder, fmt, batch_rows, skip_deleted, legacy)
        else:
            batches = self._read_chunks(builder, fmt, batch_rows, skip_deleted, legacy)
        yield from batches
        if builder.count:
            yield builder.finish().to_arrow()

    def _read_chunks(self, builder: ColumnarBuilder, fmt: LogFormat, batch_rows: int, skip_deleted: bool,
                     legacy: tuple[bool, bool, bool]) -> Iterator[pa.RecordBatch]:
        """Every data batch of the range, a chunk at a time in one native loop (nothing to filter by
        transaction: read_uncommitted, or no aborted transaction overlaps the range)."""
        # One chunk buffer for the whole scan: the builder copies what it keeps, and fresh 4 MiB reads
        # each cost their pages' faults again (a tenth of the decode's CPU).
        chunk = memoryview(bytearray(SCAN_CHUNK_BYTES))
        for segment, position in self._segments(fmt, skip_deleted):
            while position < segment.size:
                buf: bytes | memoryview = chunk[:segment.preadinto(
                    chunk[:min(SCAN_CHUNK_BYTES, segment.size - position)], position)]
                pos, why = yield from self._add_chunk(builder, fmt, buf, batch_rows, legacy)
                if why == ENTRIES_NEED_BYTES and pos == 0:
                    bounds = fmt.peek_entry(buf, 0)
                    if bounds is None or bounds.size <= len(buf) or position + bounds.size > segment.size:
                        break  # a partial tail: the writer is mid-append
                    buf = segment.pread(bounds.size, position)  # one batch larger than a chunk
                    pos, why = yield from self._add_chunk(builder, fmt, buf, batch_rows, legacy)
                if why == ENTRIES_END:
                    return
                position += pos

    def _add_chunk(self, builder: ColumnarBuilder, fmt: LogFormat, buf: bytes | memoryview, batch_rows: int,
                   legacy: tuple[bool, bool, bool]) -> Generator[pa.RecordBatch, None, tuple[int, int]]:
        """Add the entries of one chunk, yielding each batch that fills up; (position, why) where it stopped."""
        pos, why = fmt.add_entries(builder, buf, 0, self.start, self.end, batch_rows)
        while why in (ENTRIES_FULL, ENTRIES_OTHER):
            if why == ENTRIES_OTHER:  # a magic 0/1 entry, decoded whole
                entry = next(fmt.iter_entries(buf, pos))
                if builder.count:
                    yield builder.finish().to_arrow()
                yield _legacy_arrow(fmt.decode_entry(buf, entry), entry, self.start, self.end, *legacy)
                pos = fmt.entry_end(entry)
            else:
                yield builder.finish().to_arrow()
            pos, why = fmt.add_entries(builder, buf, pos, self.start, self.end, batch_rows)
        return pos, why

    def _read_filtered(self, builder: ColumnarBuilder, fmt: LogFormat, batch_rows: int, skip_deleted: bool,
                       legacy: tuple[bool, bool, bool]) -> Iterator[pa.RecordBatch]:
        """The range entry by entry, each batch judged by read_committed's filter."""
        keep = CommittedFilter(self.aborted).keep
        for entry, buf in self._entries(fmt, skip_deleted):
            if not keep(entry, lambda: fmt.read_marker(buf, entry.position).type_name == "ABORT"):
                continue
            if not fmt.add_columns(builder, buf, entry, self.start, self.end):
                if builder.count:
                    yield builder.finish().to_arrow()
                yield _legacy_arrow(fmt.decode_entry(buf, entry), entry, self.start, self.end, *legacy)
            elif builder.count >= batch_rows:
                yield builder.finish().to_arrow()

    def _segments(self, fmt: LogFormat, skip_deleted: bool) -> Iterator[tuple[LogSegment, int]]:
        """Each segment of the range, open while the caller reads it, with the position to read from."""
        for base in self.bases:
            try:
                segment = LogSegment(self.directory, base, fmt=fmt, writable=False)
            except FileNotFoundError:
                if skip_deleted:
                    continue
                raise SegmentDeletedError(
                    f"{self.directory}: segment {base} was deleted after the scan was planned "
                    f"(offsets [{max(base, self.start)}, ...) are gone)") from None
            try:
                found = segment.translate_offset(self.start) if self.start > base else None
                yield segment, found.position if found is not None else 0
            finally:
                segment.close()

    def _entries(self, fmt: LogFormat, skip_deleted: bool) -> Iterator[tuple[Entry, bytes]]:
        """(entry, the chunk it lies in) for every whole entry holding offsets of the range."""
        for segment, position in self._segments(fmt, skip_deleted):
            while position < segment.size:
                buf = segment.pread(min(SCAN_CHUNK_BYTES, segment.size - position), position)
                bounds = fmt.peek_entry(buf, 0)
                if bounds is None or bounds.base_offset >= self.end:
                    break
                if bounds.size > len(buf):  # one batch larger than a chunk
                    buf = segment.pread(bounds.size, position)
                entries, done = self._chunk_entries(fmt, buf)
                for entry in entries:
                    yield entry, buf
                if done:
                    return
                if not entries:
                    break  # a partial tail: the writer is mid-append
                position += entries[-1].position + entries[-1].size_in_bytes

    def _chunk_entries(self, fmt: LogFormat, buf: bytes) -> tuple[list[Entry], bool]:
        """The whole entries of `buf` below the range's end, and whether the end was reached."""
        found: list[Entry] = []
        try:
            for entry in fmt.iter_entries(buf):
                if entry.base_offset >= self.end:
                    return found, True
                found.append(entry)
        except CorruptRecordError:
            # Past the range a batch may still be being copied in; inside it, it is corrupt.
            bounds = fmt.peek_entry(buf, found[-1].position + found[-1].size_in_bytes if found else 0)
            if bounds is None or bounds.base_offset < self.end:
                raise
            return found, True
        return found, False


class StoreView:
    """The partition directories under one or more log dirs, each viewed on demand."""

    def __init__(self, log_dirs: str | Iterable[str], *, fmt: LogFormat = DEFAULT_FORMAT, fs: FileSystem = OS):
        self.log_dirs = [os.path.abspath(d) for d in ([log_dirs] if isinstance(log_dirs, str) else log_dirs)]
        self.format = fmt
        self.fs = fs
        self._paths: dict[tuple[str, int], str] = {}
        self._starts: dict[tuple[str, int], int] = {}
        self._recovery_points: dict[tuple[str, int], int] = {}
        self._clean: dict[str, bool] = {}
        for log_dir in self.log_dirs:
            if not fs.isdir(log_dir):
                raise StorageError(f"{log_dir} is not a directory")
            # What a broker opening the directory now would be told: a live one's recovery point lags, so the
            # view checks the batches above it as recovery would.
            self._starts.update(OffsetCheckpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT), fs).read())
            self._recovery_points.update(OffsetCheckpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT), fs).read())
            self._clean[log_dir] = read_clean_shutdown_marker(log_dir, fs)
            for name in fs.listdir(log_dir):
                path = os.path.join(log_dir, name)
                key = None if is_delete_dir(name) or not fs.isdir(path) else partition_key(name)
                if key is not None:
                    self._paths[key] = path

    def topics(self) -> dict[str, int]:
        """Topic → partition count (the highest partition directory found, plus one)."""
        found: dict[str, int] = {}
        for topic, partition in self._paths:
            found[topic] = max(found.get(topic, 0), partition + 1)
        return dict(sorted(found.items()))

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition) with a directory, sorted."""
        return sorted(self._paths)

    def directory(self, topic: str, partition: int) -> str:
        """The partition's directory."""
        try:
            return self._paths[(topic, partition)]
        except KeyError:
            raise OffsetOutOfRangeError(f"no directory for {topic}-{partition} under {self.log_dirs}") from None

    def view(self, topic: str, partition: int) -> PartitionView:
        """A fresh view of one partition (close it when done)."""
        key = (topic, partition)
        directory = self.directory(topic, partition)
        return PartitionView.open(directory, log_start_offset=self._starts.get(key, 0), fmt=self.format,
                                  recovery_point=self._recovery_points.get(key, 0),
                                  clean_shutdown=self._clean[os.path.dirname(directory)], fs=self.fs)


def _legacy_arrow(records: list[Record], entry: Entry, start: int, end: int, headers: bool,
                  timestamp_types: bool, timestamp_micros: bool) -> pa.RecordBatch:
    """A magic 0/1 entry's records as the same Arrow columns the builder gives."""
    import pyarrow as pa
    kept = [r for r in records if start <= r.offset < end]
    columns = {
        "offset": pa.array([r.offset for r in kept], pa.int64()),
        "timestamp": (pa.array([r.timestamp * 1000 for r in kept], pa.timestamp("us", tz="UTC"))
                      if timestamp_micros else pa.array([r.timestamp for r in kept], pa.int64())),
        "key": pa.array([r.key for r in kept], pa.binary()),
        "value": pa.array([r.value for r in kept], pa.binary()),
    }
    if timestamp_types:
        columns["timestampType"] = pa.array([1 if entry.timestamp_type == 1 else 0] * len(kept), pa.int32())
    if headers:
        header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        columns["headers"] = pa.array([[] for _ in kept], header_type)
    return pa.RecordBatch.from_pydict(columns)
