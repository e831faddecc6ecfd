"""The transaction coordinator's crash points as fault-file-system rules (see fault_fs.py).

The coordinator used to call `crash_point(name)` at each step of ending a
transaction, and a test switch SIGKILLed the process there. Each step is
now recognised by what an fsync makes durable, decoded with logstore's own
codecs, and the power goes there: what was never synced is lost too.

- `txn-prepared`: right after the fsync that makes a PrepareCommit or
  PrepareAbort record of `__transaction_state` durable (the decision is on
  disk, no marker is).
- `txn-marker`: at the fsync that would make a COMMIT or ABORT marker
  durable, in any partition (`__consumer_offsets` too, as before); that fsync
  does not happen.
- `txn-markers-written`: right after the fsync that makes the last marker of
  a transaction durable, before its Complete record is written. The
  transaction's partitions are those of its Prepare record, which this
  process saw made durable (so a transaction a restart finishes, decided by
  an earlier process, never counts; nor one whose partition was deleted and
  got no marker). A Prepare without partitions needs no marker: its own
  fsync is the point. The partition's other files (an abort's `.txnindex`
  entry) are not synced yet; recovery rebuilds them from the log above the
  recovery point, which has not moved.
- `txn-completed`: at the first boundary of any kind after a CompleteCommit
  or CompleteAbort record reached the page cache. Complete is written with
  durable=False, so that boundary is exactly "the record is written and
  nothing was synced since"; the boundary itself does not happen. EndTxn may
  have been answered by then, as it may before a real power cut.

N (`name:N`) counts what the old switch counted: the N-th Prepare record,
marker, transaction or Complete record, however group commit bundles them
into fsyncs (so the MIN_HITS of the soaks keep their meaning).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from logstore.broker.coordinator.internal_topics import TXN_STATE_TOPIC
from logstore.broker.coordinator.txn_log import TxnLogValue, TxnState, decode_key, decode_value
from logstore.filenames import LOG_SUFFIX, parse_partition_dir
from logstore.formats import DEFAULT_FORMAT

if TYPE_CHECKING:
    from fault_fs import Boundary, FaultFileSystem

__all__ = ["TXN_POINTS", "markers", "txn_records"]

Where = Callable[["Boundary"], bool]
# (op, pattern, after, where) of the rule that `FaultFileSystem.crash_at_named` arms to fire once.
Rule = tuple[str | None, str | None, bool, Where]

LOGS = f"*{LOG_SUFFIX}"
TXN_STATE_LOGS = f"*{os.sep}{TXN_STATE_TOPIC}-*{os.sep}*{LOG_SUFFIX}"
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETED = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def _read(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def txn_records(path: str, start: int, end: int) -> Iterator[tuple[int, str, TxnLogValue]]:
    """(offset, transactional id, value) of each `__transaction_state` record in [start, end) of a
    segment (tombstones left out)."""
    buf = _read(path, start, end)
    for entry in DEFAULT_FORMAT.iter_entries(buf, verify_crc=False):
        for record in DEFAULT_FORMAT.decode_entry(buf, entry, verify_crc=False):
            if record.key is not None and record.value is not None:
                yield record.offset, decode_key(record.key), decode_value(record.value)


def markers(path: str, start: int, end: int) -> Iterator[int]:
    """The producer id of each COMMIT or ABORT marker in [start, end) of a segment."""
    buf = _read(path, start, end)
    for entry in DEFAULT_FORMAT.iter_entries(buf, verify_crc=False):
        if entry.is_control and DEFAULT_FORMAT.read_marker(buf, entry.position).type_name in ("COMMIT", "ABORT"):
            yield entry.producer_id


def _is_txn_state(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)).startswith(f"{TXN_STATE_TOPIC}-")


class _Count:
    """True once the N-th of what a predicate counts has been seen."""

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.seen = 0

    def add(self, found: int) -> bool:
        self.seen += found
        return found > 0 and self.seen >= self.nth


def _prepared(nth: int, fs: FaultFileSystem) -> Rule:
    count = _Count(nth)

    def where(b: Boundary) -> bool:
        return count.add(sum(1 for _, _, value in txn_records(b.path, b.synced_from, b.synced_to)
                             if value.state in PREPARED))
    return "fsync", TXN_STATE_LOGS, True, where


def _marker(nth: int, fs: FaultFileSystem) -> Rule:
    count = _Count(nth)

    def where(b: Boundary) -> bool:
        return count.add(sum(1 for _ in markers(b.path, b.synced_from, b.synced_to)))
    return "fsync", LOGS, False, where


def _markers_written(nth: int, fs: FaultFileSystem) -> Rule:
    count = _Count(nth)
    waiting: dict[int, set[tuple[str, int]]] = {}   # producer id -> partitions whose marker is not durable yet

    def where(b: Boundary) -> bool:
        done = 0
        if _is_txn_state(b.path):
            for _, _, value in txn_records(b.path, b.synced_from, b.synced_to):
                if value.state in PREPARED:
                    if value.partitions:
                        waiting[value.producer_id] = set(value.partitions)
                    else:
                        done += 1
            return count.add(done)
        try:
            partition = parse_partition_dir(os.path.basename(os.path.dirname(b.path)))
        except ValueError:   # not a partition's segment (a deleted topic's directory, say)
            return False
        for producer_id in markers(b.path, b.synced_from, b.synced_to):
            left = waiting.get(producer_id)
            if left is not None and partition in left:
                left.discard(partition)
                if not left:
                    del waiting[producer_id]
                    done += 1
        return count.add(done)
    return "fsync", LOGS, True, where


def _completed(nth: int, fs: FaultFileSystem) -> Rule:
    count = _Count(nth)
    seen: set[tuple[str, int]] = set()   # (segment, offset) of the Complete records counted

    def where(b: Boundary) -> bool:
        found = 0
        for path, synced, size in fs.unsynced(TXN_STATE_LOGS):
            for offset, _, value in txn_records(path, synced, size):
                if value.state in COMPLETED and (path, offset) not in seen:
                    seen.add((path, offset))
                    found += 1
        return count.add(found)
    return None, None, False, where


# name -> (N, the file system) -> the rule, for `FaultFileSystem.crash_at_named`.
TXN_POINTS: dict[str, Callable[[int, FaultFileSystem], Rule]] = {
    "txn-prepared": _prepared,
    "txn-marker": _marker,
    "txn-markers-written": _markers_written,
    "txn-completed": _completed,
}
