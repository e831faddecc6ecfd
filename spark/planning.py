"""From options and pushed filters to the offset ranges Spark tasks read.

Every selected partition is viewed once (read-only, see `logstore.reader`), its
start and end resolved, narrowed by the pushed filters, and cut along segment
boundaries, one task per piece; `minPartitions` cuts large pieces further.
read_committed scans stop at the last stable offset the view saw, so a scan of
a directory a broker is writing is one consistent snapshot.
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from logstore.errors import OffsetOutOfRangeError
from logstore.reader import PartitionScan, PartitionView, StoreView
from logstore.spark.options import EARLIEST, LATEST, Bound, OptionError, SourceOptions

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter


class DataLossError(OffsetOutOfRangeError):
    """Offsets the query asks for are gone (deleted, or never written); failOnDataLoss=false skips them."""


@dataclass(frozen=True)
class Pushdown:
    """What the pushed filters allow: topics, partitions, an offset range, a timestamp lower bound."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_range: tuple[int, int | None] = (0, None)
    offset_range: tuple[int, int | None] = (0, None)
    min_timestamp: int | None = None
    """ms: no row below it can pass the filters (Spark still applies them)."""

    def admits(self, topic: str, partition: int) -> bool:
        """Whether a partition can hold a row that passes."""
        lo, hi = self.partition_range
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions)
                and partition >= lo and (hi is None or partition < hi))


def push_filters(filters: Iterable[Filter], pushdown: Pushdown) -> tuple[Pushdown, list[Filter]]:
    """Narrow `pushdown` by each filter it can use; returns it and the filters Spark must still apply."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In
    remaining = []
    for f in filters:
        # Filter itself declares no fields: the column filters carry `attribute`, Not and the like do not.
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        column = attribute[0] if len(attribute) == 1 else None
        exact = False
        if column == "topic" and isinstance(f, (EqualTo, In)):
            values = {f.value} if isinstance(f, EqualTo) else set(f.value)
            if all(isinstance(v, str) for v in values):
                topics = values if pushdown.topics is None else pushdown.topics & values
                pushdown, exact = replace(pushdown, topics=frozenset(topics)), True
        elif column in ("partition", "offset"):
            pushdown, exact = _narrow_int(f, column, pushdown)
        elif column == "timestamp" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)):
            ms = _millis_floor(f.value)
            if ms is not None and (pushdown.min_timestamp is None or ms > pushdown.min_timestamp):
                pushdown = replace(pushdown, min_timestamp=ms)
        if not exact:
            remaining.append(f)
    return pushdown, remaining


def _narrow_int(f: Filter, column: str, pushdown: Pushdown) -> tuple[Pushdown, bool]:
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual
    if isinstance(f, In):
        values = set(f.value)
        if not values or not all(type(v) is int for v in values):
            return pushdown, False
        if column == "partition":
            chosen = values if pushdown.partitions is None else pushdown.partitions & values
            return replace(pushdown, partitions=frozenset(chosen)), True
        # Offsets: the span of the values bounds the scan; Spark picks the rows.
        return _bounded(pushdown, column, min(values), max(values) + 1), False
    value = getattr(f, "value", None)
    if type(value) is not int:
        return pushdown, False
    bounds: dict[type[Filter], tuple[int | None, int | None]] = {
        EqualTo: (value, value + 1), GreaterThan: (value + 1, None), GreaterThanOrEqual: (value, None),
        LessThan: (None, value), LessThanOrEqual: (None, value + 1),
    }
    lo, hi = bounds.get(type(f), (None, None))
    if lo is None and hi is None:
        return pushdown, False
    return _bounded(pushdown, column, lo, hi), True


def _bounded(pushdown: Pushdown, column: str, lo: int | None, hi: int | None) -> Pushdown:
    old_lo, old_hi = pushdown.partition_range if column == "partition" else pushdown.offset_range
    new_lo = old_lo if lo is None else max(old_lo, lo)
    new_hi = old_hi if hi is None else (hi if old_hi is None else min(old_hi, hi))
    if column == "partition":
        return replace(pushdown, partition_range=(new_lo, new_hi))
    return replace(pushdown, offset_range=(new_lo, new_hi))


def _millis_floor(value: object) -> int | None:
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        # Spark hands naive datetimes in the Python worker's local zone; .timestamp() reads them so.
        value = value.astimezone()
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds) // 1000


@dataclass(frozen=True)
class TaskRange:
    """One Spark task: a scan of one partition."""

    topic: str
    partition: int
    scan: PartitionScan

    @property
    def offsets(self) -> int:
        """How many offsets the range spans."""
        return self.scan.end - self.scan.start


def selected_partitions(store: StoreView, options: SourceOptions,
                        pushdown: Pushdown | None = None) -> list[tuple[str, int]]:
    """The (topic, partition) pairs the subscription and filters select, sorted."""
    found = [tp for tp in store.partitions() if options.selects(*tp)]
    if options.assign:
        missing = sorted(set(options.assign) - set(found))
        if missing:
            raise OptionError(f"assigned partitions have no directory under {list(options.paths)}: {missing}")
    if pushdown is not None:
        found = [tp for tp in found if pushdown.admits(*tp)]
    return found


def resolve_offset(view: PartitionView, bound: Bound, options: SourceOptions, *, starting: bool) -> int:
    """The offset a start or end bound means in one partition."""
    key = (view.topic, view.partition)
    end = view.end_offset(options.isolation)
    side = "starting" if starting else "ending"
    if bound.by_timestamp:
        timestamp = bound.default if bound.default is not None else bound.per_partition.get(key)
        if timestamp is None:
            raise OptionError(f"{side}OffsetsByTimestamp names no timestamp for {view.topic}-{view.partition}")
        found = view.offset_for_timestamp(timestamp)
        if found is not None:
            return min(found, end)
        if starting and not options.starting_strategy_latest:
            raise OptionError(f"{view.topic}-{view.partition} has no record at or after timestamp {timestamp} "
                              f"(startingOffsetsByTimestampStrategy=latest starts such partitions at their end)")
        return end
    value = bound.per_partition.get(key, bound.default)
    if value is None:
        raise OptionError(f"{side}Offsets names no offset for {view.topic}-{view.partition}: "
                          f"JSON offsets must cover every selected partition")
    if value == EARLIEST:
        return view.log_start_offset
    if value == LATEST:
        return end
    return value


def clamp(view: PartitionView, start: int, end: int, options: SourceOptions) -> tuple[int, int]:
    """[start, end) inside what the view holds; DataLossError for what is gone when failOnDataLoss."""
    name = f"{view.topic}-{view.partition}"
    available = view.end_offset(options.isolation)
    if start < view.log_start_offset:
        if options.fail_on_data_loss:
            raise DataLossError(f"{name}: offset {start} was deleted, the log starts at {view.log_start_offset} "
                                f"(failOnDataLoss=false reads from there)")
        start = view.log_start_offset
    if end > available:
        if options.fail_on_data_loss:
            raise DataLossError(f"{name}: offset {end} is past the end {available} at {options.isolation} "
                                f"(failOnDataLoss=false stops there)")
        end = available
    return start, max(start, end)


def plan_batch(options: SourceOptions, pushdown: Pushdown) -> list[TaskRange]:
    """The task ranges of a batch query."""
    store = StoreView(options.paths)
    ranges = []
    for topic, partition in selected_partitions(store, options, pushdown):
        with store.view(topic, partition) as view:
            start = resolve_offset(view, options.starting, options, starting=True)
            end = resolve_offset(view, options.ending, options, starting=False)
            if start > end:
                if options.fail_on_data_loss:
                    raise DataLossError(f"{topic}-{partition}: the starting offset {start} is after the ending "
                                        f"offset {end}")
                continue
            start, end = clamp(view, start, end, options)
            start, end = _narrow(view, start, end, pushdown)
            if start < end:
                ranges.extend(segment_ranges(view, view.scan(start, end, options.isolation)))
    return spread(ranges, options.min_partitions)


def _narrow(view: PartitionView, start: int, end: int, pushdown: Pushdown) -> tuple[int, int]:
    lo, hi = pushdown.offset_range
    start = max(start, lo)
    end = end if hi is None else min(end, hi)
    if pushdown.min_timestamp is not None and start < end:
        found = view.offset_for_timestamp(pushdown.min_timestamp)
        start = end if found is None else max(start, found)
    return start, end


def segment_ranges(view: PartitionView, scan: PartitionScan) -> list[TaskRange]:
    """The scan cut at segment boundaries (segments that hold none of its offsets drop out)."""
    pieces = [scan.narrow(s.base_offset, s.end_offset) for s in view.segments_between(scan.start, scan.end)]
    return [TaskRange(view.topic, view.partition, p) for p in pieces if p.end > p.start]


def spread(ranges: list[TaskRange], min_partitions: int | None) -> list[TaskRange]:
    """Cut ranges further, in proportion to their size, until there are at least `min_partitions`."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.offsets for r in ranges)
    if total == 0:
        return ranges
    spread_out: list[TaskRange] = []
    for r in ranges:
        pieces = max(1, round(r.offsets * min_partitions / total))
        spread_out.extend(TaskRange(r.topic, r.partition, s) for s in r.scan.split(pieces))
    return spread_out
