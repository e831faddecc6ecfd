"""`logstore dump` of a segment's indexes: `.index`, `.timeindex`, `.txnindex` (Kafka's dumpIndex,
dumpTimeIndex, dumpTxnIndex).

The files are read with the storage engine's own readers (`logstore.index`,
read-only: a live writer's preallocated zero tail is not entries), and
checked against the `.log` of the same base offset beside them, as Kafka's
tool does. Each problem is one line for the caller's `report`:

  .index      "Index offset: O, log offset: L (batch at position P)": the batch at
              the entry's position ends at another offset than the entry says;
              "Index position P is not the start of a batch in F.log";
              "Index position P is past the end of F.log (S bytes)".
  .timeindex  "Indexed offset: O, found log offset: L": no batch ends at the
              entry's offset (L is the last offset of the first batch ending
              after it, -1 if none); "Index timestamp: T, log timestamp: L":
              the largest record timestamp of that batch differs;
              "Index timestamp: T, Previously indexed timestamp: P": not
              increasing.
  .txnindex   an entry of an unknown version, an aborted transaction ending
              below the segment's base offset (the loader's sanity check).

Text output: "offset: O position: P" per offset-index entry ("F is empty."
for none), "timestamp: T offset: O" per time-index entry, "version: 0
producerId: ... firstOffset: ... lastOffset: ... lastStableOffset: ..." per
aborted transaction. As in Kafka, reading an index stops at the first slot
past slot 0 that holds the base offset (a zero-filled, preallocated tail).
`verify_only` prints no entries, only the problems; `sanity_only` runs the
check the loader runs before trusting an index ("F passed sanity check.").

JSON output, one document per file::

    {"file": str, "kind": "offsetIndex" | "timeIndex" | "txnIndex",
     "baseOffset": int, "sizeInBytes": int,
     "logFile": str | null,              # offset/time index: the .log checked against; null if absent
     "entries": [ENTRY, ...] | null,     # null under verify_only / sanity_only
     "sanityCheck": {"passed": bool, "message": str | null} | null,   # sanity_only
     "partialTail": {"position": int, "bytes": int} | null,           # txnIndex: a torn last entry
     "problems": [str, ...],             # as reported on stderr
     "corrupt": bool}

    ENTRY  offsetIndex: {"offset", "position"}
           timeIndex:   {"timestamp", "offset"}
           txnIndex:    {"version", "producerId", "firstOffset", "lastOffset", "lastStableOffset"}
"""
from __future__ import annotations

import bisect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from logstore.dump_segment import Report, open_mapped
from logstore.errors import CorruptRecordError
from logstore.formats import kafka as K
from logstore.index import CorruptIndexError, OffsetIndex, TimeIndex, TxnIndex


class LogBatches:
    """The framing of a `.log`'s entries, walked once: what the index checks look up.

    Holds the file mapped until `close()`. Positions and sizes in bytes.
    """

    def __init__(self, path: Path):
        """Walk `path`'s entries (no CRC checks: an index only points at framing); OSError if unreadable."""
        self._buf, self._close = open_mapped(path)
        self.size = len(self._buf)
        self.positions: dict[int, int] = {}   # entry position -> its last offset
        self.starts: list[int] = []           # entry positions, in file order
        self.last_offsets: list[int] = []     # their last offsets
        self.readable_to = 0                  # the bytes walked; past them nothing is known
        self.problem: str | None = None
        entries = K.iter_entries(self._buf, verify_crc=False)
        try:
            for entry in entries:
                self.positions[entry.position] = entry.last_offset
                self.starts.append(entry.position)
                self.last_offsets.append(entry.last_offset)
                self.readable_to = K.entry_end(entry)
        except CorruptRecordError as exc:
            self.problem = (f"{path.name} cannot be read past position {self.readable_to}: {exc.reason}; "
                            "index entries pointing past it are not checked")
        finally:
            entries.close()

    def batch_ending_at_or_after(self, offset: int) -> int | None:
        """The position of the first entry whose last offset is >= `offset`, or None."""
        i = bisect.bisect_left(self.last_offsets, offset)
        return self.starts[i] if i < len(self.starts) else None

    def max_record_timestamp(self, position: int) -> int:
        """The largest record timestamp of the entry at `position` (-1 if it has none), as Kafka computes
        it: from the records (a log-append-time batch gives each record its max timestamp)."""
        view = memoryview(self._buf)[position:]
        entry = next(K.iter_entries(view, verify_crc=False))
        return max((r.timestamp for r in K.decode_entry(view, entry, verify_crc=False)), default=-1)

    def close(self) -> None:
        """Unmap the file."""
        self._close()


def _open_log(log_path: Path | None, report: Report) -> LogBatches | None:
    if log_path is None:
        return None
    log = LogBatches(log_path)
    if log.problem is not None:
        report(log.problem)
    return log


def _document(path: Path, kind: str, base_offset: int, log_path: Path | None, problems: list[str],
              **fields: Any) -> str:
    doc = {"file": str(path), "kind": kind, "baseOffset": base_offset, "sizeInBytes": path.stat().st_size,
           "logFile": None if log_path is None else str(log_path), "entries": None, "sanityCheck": None,
           "partialTail": None}
    doc.update(fields)
    doc.update(problems=problems, corrupt=bool(problems))
    return json.dumps(doc)


def _collecting(report: Report, problems: list[str]) -> Report:
    def collect(message: str) -> None:
        problems.append(message)
        report(message)
    return collect


def dump_offset_index(path: Path, base_offset: int, log_path: Path | None, *, out: TextIO, report: Report,
                      as_json: bool = False, verify_only: bool = False, sanity_only: bool = False) -> None:
    """Dump an `.index` and check each entry against the batch at its position in `log_path` (None: no log)."""
    problems: list[str] = []
    report = _collecting(report, problems)
    index = OffsetIndex(str(path), base_offset, writable=False)
    log = None
    try:
        log = _open_log(log_path, report)
        fields: dict[str, Any] = {}
        if index.entries == 0:
            fields["entries"] = []
            if not as_json:
                print(f"{path} is empty.", file=out)
        elif sanity_only:
            fields["sanityCheck"] = _sanity(path, lambda: index.sanity_check(sys.maxsize if log is None
                                                                               else log.size), out, report, as_json)
        else:
            entries = []
            for slot in range(index.entries):
                offset, position = index.entry(slot)
                if slot and offset == base_offset:  # preallocated zeros: no more entries
                    break
                if log is not None and log_path is not None:
                    _check_offset_entry(log, log_path, offset, position, report)
                entries.append({"offset": offset, "position": position})
                if not verify_only and not as_json:
                    print(f"offset: {offset} position: {position}", file=out)
            fields["entries"] = None if verify_only else entries
        if as_json:
            print(_document(path, "offsetIndex", base_offset, log_path, problems, **fields), file=out)
    finally:
        index.close()
        if log is not None:
            log.close()


def _check_offset_entry(log: LogBatches, log_path: Path, offset: int, position: int, report: Report) -> None:
    if position >= log.size:
        report(f"Index position {position} is past the end of {log_path.name} ({log.size} bytes)")
    elif position >= log.readable_to:
        return  # in the part of the log that could not be read: reported once already
    elif position not in log.positions:
        report(f"Index position {position} is not the start of a batch in {log_path.name}")
    elif log.positions[position] != offset:
        report(f"Index offset: {offset}, log offset: {log.positions[position]} (batch at position {position})")


def _sanity(path: Path, check: Callable[[], object], out: TextIO, report: Report,
            as_json: bool) -> dict[str, Any]:
    try:
        check()
    except CorruptIndexError as exc:
        message = str(exc).removeprefix(f"{path}: ")
        report(f"failed sanity check: {message}")
        return {"passed": False, "message": message}
    if not as_json:
        print(f"{path} passed sanity check.", file=out)
    return {"passed": True, "message": None}


def dump_time_index(path: Path, base_offset: int, log_path: Path | None, *, out: TextIO, report: Report,
                    as_json: bool = False, verify_only: bool = False, sanity_only: bool = False) -> None:
    """Dump a `.timeindex` and check each entry against the batch ending at its offset in `log_path`."""
    problems: list[str] = []
    report = _collecting(report, problems)
    index = TimeIndex(str(path), base_offset, writable=False)
    log = None
    try:
        log = _open_log(log_path, report)
        fields: dict[str, Any] = {}
        if sanity_only:
            fields["sanityCheck"] = _sanity(path, index.sanity_check, out, report, as_json)
        else:
            entries, previous = [], -1
            for slot in range(index.entries):
                timestamp, offset = index.entry(slot)
                if slot and offset == base_offset:  # preallocated zeros: no more entries
                    break
                if log is not None:
                    _check_time_entry(log, timestamp, offset, previous, report)
                entries.append({"timestamp": timestamp, "offset": offset})
                if not verify_only and not as_json:
                    print(f"timestamp: {timestamp} offset: {offset}", file=out)
                previous = timestamp
            fields["entries"] = None if verify_only else entries
        if as_json:
            print(_document(path, "timeIndex", base_offset, log_path, problems, **fields), file=out)
    finally:
        index.close()
        if log is not None:
            log.close()


def _check_time_entry(log: LogBatches, timestamp: int, offset: int, previous: int, report: Report) -> None:
    position = log.batch_ending_at_or_after(offset)
    if position is None:
        if log.problem is None:  # else the batch may lie in the part that could not be read
            report(f"Indexed offset: {offset}, found log offset: -1")
        return
    found = log.positions[position]
    if found != offset:
        report(f"Indexed offset: {offset}, found log offset: {found}")
        return
    try:
        largest = log.max_record_timestamp(position)
    except CorruptRecordError as exc:
        report(f"the batch at position {position} holding indexed offset {offset} cannot be decoded: {exc.reason}")
        return
    if largest != timestamp:
        report(f"Index timestamp: {timestamp}, log timestamp: {largest}")
    if previous >= timestamp:
        report(f"Index timestamp: {timestamp}, Previously indexed timestamp: {previous}")


def dump_txn_index(path: Path, base_offset: int, *, out: TextIO, report: Report, as_json: bool = False) -> None:
    """Dump a `.txnindex`: every aborted transaction, then the loader's sanity check."""
    problems: list[str] = []
    report = _collecting(report, problems)
    data = path.read_bytes()
    index = TxnIndex(str(path), base_offset)
    try:
        aborted = index.entries
    except CorruptIndexError as exc:
        report(str(exc).removeprefix(f"{path}: "))
        aborted = []
    else:
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            report(f"failed sanity check: {str(exc).removeprefix(f'{path}: ')}")
    entries = []
    # The reader refuses any version but 0, as Kafka does (AbortedTxn.CURRENT_VERSION).
    version = 0
    for txn in aborted:
        entries.append({"version": version, "producerId": txn.producer_id, "firstOffset": txn.first_offset,
                        "lastOffset": txn.last_offset, "lastStableOffset": txn.last_stable_offset})
        if not as_json:
            print(f"version: {version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                  f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}", file=out)
    torn = len(data) % TxnIndex.entry_size
    tail = {"position": len(data) - torn, "bytes": torn} if torn else None
    if as_json:
        print(_document(path, "txnIndex", base_offset, None, problems, entries=entries, partialTail=tail),
              file=out)
    elif tail is not None:
        print(f"Found {torn} bytes of a partial entry at position {len(data) - torn} (the reader ignores them)",
              file=out)
