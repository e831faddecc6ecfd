"""`spark.readStream.format("logstore")`: micro-batches over per-partition offsets.

An offset is Spark's Kafka source JSON, `{"orders": {"0": 120, "1": 97}}`: for
each partition the next offset to read. A batch ends where the partition was
stable when Spark asked (the last stable offset for read_committed), so an
open transaction holds the stream back and an aborted one never shows. Batches
are pure functions of their (start, end) offsets, which is what lets Spark
replay one from its checkpoint without loss or duplicates.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from logstore.reader import StoreView
from logstore.spark.options import EARLIEST, Bound, SourceOptions
from logstore.spark.planning import clamp, resolve_offset, segment_ranges, selected_partitions
from logstore.spark.source import RangePartition, read_partition

if TYPE_CHECKING:
    import pyarrow as pa

Offsets = dict[str, dict[str, int]]
Positions = dict[tuple[str, int], int]
"""An offset per (topic, partition)."""


def _flat(offsets: Offsets) -> Positions:
    return {(topic, int(p)): o for topic, parts in offsets.items() for p, o in parts.items()}


def _nested(flat: Positions) -> Offsets:
    nested: Offsets = {}
    for (topic, partition), offset in sorted(flat.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return nested


class LogstoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of committed records; maxOffsetsPerTrigger and Trigger.AvailableNow honoured."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: Positions | None = None

    def initialOffset(self) -> Offsets:
        """Where a new query starts: startingOffsets (default latest) in every selected partition."""
        return _nested(self._resolve(self.options.starting))

    def _resolve(self, bound: Bound) -> Positions:
        store = StoreView(self.options.paths)
        found = {}
        for topic, partition in selected_partitions(store, self.options):
            with store.view(topic, partition) as view:
                found[(topic, partition)] = resolve_offset(view, bound, self.options, starting=True)
        return found

    def _available(self) -> Positions:
        store = StoreView(self.options.paths)
        found = {}
        for topic, partition in selected_partitions(store, self.options):
            with store.view(topic, partition) as view:
                found[(topic, partition)] = view.end_offset(self.options.isolation)
        return found

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: what is available now is where the query ends."""
        self._target = self._available()

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger, if set."""
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The end of the next batch: what is stable now (or the AvailableNow target), cut to `limit`."""
        available = self._target if self._target is not None else self._available()
        begin = _flat(start)
        # Partitions that appeared since the query started are read from their beginning, as Spark's do.
        starts = self._resolve(Bound(EARLIEST)) if set(available) - set(begin) else {}
        begin = {tp: begin[tp] if tp in begin else starts.get(tp, 0) for tp in available}
        end = {tp: max(available[tp], begin[tp]) for tp in available}
        if isinstance(limit, ReadMaxRows):
            end = _rate_limited(begin, end, limit.max_rows)
        return _nested(end)

    def reportLatestOffset(self) -> Offsets:
        """What is stable now in every selected partition."""
        return _nested(self._available())

    def partitions(self, start: Offsets, end: Offsets) -> list[RangePartition]:
        """Segment-aligned ranges of every partition between the two offsets."""
        begin = _flat(start)
        store = StoreView(self.options.paths)
        tasks = []
        for (topic, partition), stop in sorted(_flat(end).items()):
            with store.view(topic, partition) as view:
                first = begin.get((topic, partition), view.log_start_offset)
                first, stop = clamp(view, first, stop, self.options)
                if first < stop:
                    tasks.extend(segment_ranges(view, view.scan(first, stop, self.options.isolation)))
        return [RangePartition(t, self.options.include_headers) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's rows as Arrow batches."""
        return read_partition(partition, self.options.fail_on_data_loss)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the files are Spark's to re-read until the checkpoint moves on."""


def _rate_limited(begin: Positions, end: Positions, limit: int) -> Positions:
    """Spark's Kafka rule: each partition gets a share of `limit` in proportion to its backlog, and at
    least one offset if it has any."""
    backlog = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(backlog.values())
    if total <= limit:
        return end
    limited = {}
    for tp, size in backlog.items():
        share = limit * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(end[tp], begin[tp] + step)
    return limited
