"""Pluggable on-disk batch formats.

A format is a module exposing what `logstore.formats.kafka` does; its type is
`LogFormat` (`logstore.formats.protocol`), which lists every member with its
signature. The storage layer uses exactly these:

- `validate_append(buf, client, max_batch_size)` → `AppendInfo` and
  `assign_offsets(buf, info, base_offset, leader_epoch, log_append_time)`:
  the append path, with `require_keys(buf, info, partition)` for compacted
  topics;
- `peek_entry(buf, pos)` → `EntryBounds` (offsets, size, max timestamp from
  the first bytes only) and `iter_entries(buf)` (whole, CRC-checked entries):
  reads, index lookups and recovery;
- `scan_entries(buf)`: every entry at once when all are whole and valid
  (None sends recovery to `iter_entries`), and `entry_bounds(buf, entry)`:
  the `EntryBounds` of an entry either gave;
- `peek_producer_batch(buf, pos)` → `ProducerBatch` (producer id, epoch,
  sequences, transactional and control flags from the first bytes only) and
  `read_marker(buf, pos)` (a control batch's type and coordinator epoch):
  producer state and transactions;
- `decode_entry(buf, entry)`: records for reads and timestamp lookups;
- `column_builder(...)` and `add_columns(builder, buf, entry, start, end)`:
  records straight into Arrow-ready columns, for scans (`logstore.reader`),
  and `add_entries(builder, buf, pos, start, end, max_rows)`: a chunk's
  entries at once, for scans with nothing to filter by transaction;
- `encode_batch(...)`, `build_control_batch(...)`: batches logstore writes;
  `BatchBuilder(...)` and `increment_sequence(seq, n)`: batches an
  in-process producer fills record by record.

The log cleaner (`logstore.cleaner`) rewrites v2 batches with the native
`logstore.native.cleaner` and so compacts only logs in this format.

Segment, index and recovery code asks the format, never the bytes, which is
what lets the format change: only `logstore/formats/` and `native/` know where
a batch's fields sit (tests/format/test_batch_layout_owner.py holds everyone
else to it). The broker's Produce handler asks `peek_produced_batch(records)`.
Kafka's v2 (reading v0/v1 too) is the default.
"""
from logstore.formats import kafka
from logstore.formats.protocol import LogFormat

__all__ = ["FORMATS", "DEFAULT_FORMAT", "LogFormat", "get_format"]

FORMATS: dict[str, LogFormat] = {"kafka": kafka}
DEFAULT_FORMAT: LogFormat = kafka


def get_format(name: str = "kafka") -> LogFormat:
    """The format module registered under `name`."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown log format {name!r}; known: {sorted(FORMATS)}") from None
