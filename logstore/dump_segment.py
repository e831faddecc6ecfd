"""`logstore dump` of `.log` segments and KRaft `.checkpoint` snapshots (Kafka's DumpLogSegments.dumpLog).

logstore.dump_records reads the entries; this module prints them.

Text output follows kafka-dump-log line for line: a heading ("Log starting
offset: N"; for a snapshot "Snapshot end offset: N, epoch: E" or "KRaft
bootstrap snapshot"), one line per entry (v2 batch or legacy magic 0/1
message) and, with deep iteration, one "| offset: ..." line per record. With
`print_data` the record line ends in "key: ... payload: ...": the bytes as
text when they are printable UTF-8, else `0x`-prefixed hex, or what the
record decoder made of them (compact JSON, "<DELETE>" for a tombstone,
Kafka's "Unknown record type N at offset O, skipping." and "Error at offset
O, skipping. WHY"). `skip_record_metadata` leaves only "| key: ... payload:
..." and drops control records. A KRaft control record (LeaderChange,
SnapshotHeader, SnapshotFooter, KRaftVersion, KRaftVoters) is printed as
Kafka prints it, its value as compact JSON. After the entries: a partial
tail ("Found N bytes of a partial entry at position P ..."), and with deep
iteration the record offsets that do not follow each other (a compacted
log, a gap), as Kafka lists them ("Non-consecutive offsets in FILE", then
"  A is followed by B"). `max_bytes` reads only the whole entries in the
first `max_bytes` bytes (Kafka's `--max-bytes`).

JSON output is one document per file, on one line, streamed entry by entry
(BATCH as logstore.dump_records gives it)::

    {"file": str,
     "kind": "log" | "kraftSnapshot",
     "logStartOffset": int | null,                # kind "log": null if the name is not <offset>.log
     "snapshotEndOffset": int | null, "snapshotEpoch": int | null,
     "bootstrap": bool,                           # kind "kraftSnapshot" only
     "sizeInBytes": int,                          # file size
     "maxBytes": int | null,                      # --max-bytes, if given
     "batches": [BATCH, ...],                     # in file order
     "partialTail": {"position": int, "bytes": int} | null,
     "error": {"position": int, "entryPosition": int, "message": str} | null,
                                                  # why reading stopped early: the fault's byte
                                                  # and the start of the unreadable entry
     "nonConsecutiveOffsets": [[int, int], ...],  # deep iteration only, else []
     "corrupt": bool}                             # any bad CRC, refused entry, undecodable record or error
"""
from __future__ import annotations

import json
import mmap
import re
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from logstore.dump_records import JsonDict, RecordDecoder, SegmentScan

_TS_TEXT = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime", None: "NoTimestampType"}
# The label Kafka prints before the JSON of a KRaft control record.
_KRAFT_CONTROL_LABELS = {2: "LeaderChange:", 3: "SnapshotHeader", 4: "SnapshotFooter", 5: "KRaftVersion",
                         6: "KRaftVoters"}
BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

Report = Callable[[str], None]
"""Where a dump sends one problem line (about the file being dumped); a problem makes the run corrupt."""


def base_offset_of(path: Path) -> int | None:
    """The base offset in a segment file name (digits before the first dot), or None."""
    digits = path.name.split(".", 1)[0]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def compact_json(value: object) -> str:
    """`value` as Kafka's tools print JSON: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------
# Text rendering (Kafka's DumpLogSegments layout)


def _shown(data: JsonDict) -> str:
    text: str = data["utf8"] if "utf8" in data else "0x" + data["hex"]
    return text


def _flag(value: bool) -> str:
    return "true" if value else "false"


def batch_line(b: JsonDict) -> str:
    """The DumpLogSegments line of one batch dict."""
    if b["crcValid"] is None:  # refused by the codec: only the framing is known
        label = "baseOffset" if b["magic"] == 2 else "offset"
        first = b.get("baseOffset", b.get("offset"))
        return (f"{label}: {first} position: {b['position']} size: {b['sizeInBytes']} "
                f"magic: {b['magic']} isvalid: false")
    if b["magic"] == 2:
        horizon = ("OptionalLong.empty" if b["deleteHorizonMs"] is None
                   else f"OptionalLong[{b['deleteHorizonMs']}]")
        head = (f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']} count: {b['recordCount']} "
                f"baseSequence: {b['baseSequence']} lastSequence: {b['lastSequence']} "
                f"producerId: {b['producerId']} producerEpoch: {b['producerEpoch']} "
                f"partitionLeaderEpoch: {b['partitionLeaderEpoch']} "
                f"isTransactional: {_flag(b['isTransactional'])} isControl: {_flag(b['isControl'])} "
                f"deleteHorizonMs: {horizon}")
        timestamp = b["maxTimestamp"]
    else:
        head = f"offset: {b['lastOffset']}"
        timestamp = -1 if b["timestamp"] is None else b["timestamp"]
    return (f"{head} position: {b['position']} {_TS_TEXT[b['timestampType']]}: {timestamp} "
            f"size: {b['sizeInBytes']} magic: {b['magic']} compresscodec: {b['compression']} "
            f"crc: {b['crc']} isvalid: {_flag(b['crcValid'])}")


def _control_text(r: JsonDict) -> str:
    control = r["controlKey"]
    marker = r.get("endTxnMarker")
    if marker is not None:
        return f"endTxnMarker: {control['typeName']} coordinatorEpoch: {marker['coordinatorEpoch']}"
    if "controlData" in r:
        return f"{_KRAFT_CONTROL_LABELS[control['type']]} {compact_json(r['controlData'])}"
    return f"controlType: {control['typeName']}({control['type']})"


def _data_text(r: JsonDict) -> list[str]:
    """The "key: ... payload: ..." parts of a data record, raw or decoded (Kafka's parser output)."""
    decoded = r.get("decoded")
    if decoded is None:
        key, payload = r["key"] and _shown(r["key"]), r["value"] and _shown(r["value"])
    elif "unknownRecordType" in decoded:
        key, payload = (f"Unknown record type {decoded['unknownRecordType']} at offset {r['offset']}, "
                        "skipping."), None
    elif "error" in decoded:
        key, payload = f"Error at offset {r['offset']}, skipping. {decoded['error']}", None
    else:
        key = None if decoded["key"] is None else _as_text(decoded["key"])
        payload = None if decoded["payload"] is None else _as_text(decoded["payload"])
    parts: list[str] = []
    if key is not None:
        parts.append(f"key: {key}")
    if payload is not None:
        parts.append(f"payload: {payload}")
    return parts


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else compact_json(value)


def record_line(b: JsonDict, r: JsonDict, *, print_data: bool = True, skip_metadata: bool = False) -> str | None:
    """The DumpLogSegments "| offset: ..." line of one record of batch `b`; None when nothing shows
    (a control record, or a record without key and payload, under `skip_metadata`)."""
    is_control = b["magic"] == 2 and b["isControl"]
    data = _data_text(r) if print_data and not is_control else []
    if skip_metadata:
        return "| " + " ".join(data) if data else None
    timestamp = -1 if r["timestamp"] is None else r["timestamp"]
    parts = [f"| offset: {r['offset']} {_TS_TEXT[b['timestampType']]}: {timestamp} "
             f"keySize: {r['keySize']} valueSize: {r['valueSize']}"]
    if b["magic"] == 2:
        parts.append(f"sequence: {r['sequence']} headerKeys: [{','.join(k for k, _ in r['headers'])}]")
    elif b["compression"] == "none":  # the record is the message itself
        parts.append(f"isValid: {_flag(b['crcValid'])} crc: {b['crc']}")
    if "controlKey" in r:
        parts.append(_control_text(r))
    return " ".join(parts + data)


# ---------------------------------------------------------------------------
# Files


def open_mapped(path: Path) -> tuple[bytes | mmap.mmap, Callable[[], None]]:
    """(buffer, closer) for a file's bytes, memory-mapped when non-empty; OSError if unreadable."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return b"", lambda: None
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def close() -> None:
        try:
            mapped.close()
        except BufferError:  # a view still alive; the map goes with it
            pass
    return mapped, close


def is_kraft_snapshot(path: Path) -> bool:
    """Whether `path` is named as a KRaft snapshot (`.checkpoint`) rather than a `.log` segment."""
    return path.name.endswith(".checkpoint")


def _heading(path: Path) -> tuple[JsonDict, str]:
    """The JSON fields and the text line that name what a segment-like file holds."""
    if not is_kraft_snapshot(path):
        start = base_offset_of(path)
        shown = "unknown (file name is not <offset>.log)" if start is None else start
        return {"kind": "log", "logStartOffset": start}, f"Log starting offset: {shown}"
    fields: JsonDict = {"kind": "kraftSnapshot", "snapshotEndOffset": None, "snapshotEpoch": None,
              "bootstrap": path.name == BOOTSTRAP_SNAPSHOT}
    if fields["bootstrap"]:
        return fields, "KRaft bootstrap snapshot"
    match = _SNAPSHOT_NAME.match(path.name)
    if match is None:
        return fields, "Snapshot end offset: unknown (file name is not <offset>-<epoch>.checkpoint)"
    fields["snapshotEndOffset"], fields["snapshotEpoch"] = int(match[1]), int(match[2])
    return fields, f"Snapshot end offset: {fields['snapshotEndOffset']}, epoch: {fields['snapshotEpoch']}"


def dump_segment(path: Path, *, out: TextIO, report: Report, as_json: bool = False, deep: bool = False,
                 print_data: bool = False, skip_metadata: bool = False, decoder: RecordDecoder | None = None,
                 max_bytes: int | None = None) -> None:
    """Dump one `.log` segment or `.checkpoint` snapshot to `out`, problems to `report`.

    The caller prints the "Dumping FILE" line. OSError if the file cannot be read.
    """
    buf, close = open_mapped(path)
    try:
        size = len(buf)
        view = buf if max_bytes is None or max_bytes >= size else memoryview(buf)[:max_bytes]
        scan = SegmentScan(view, deep=deep or print_data, print_data=print_data, decoder=decoder,
                           limited=view is not buf)
        fields, heading = _heading(path)
        if as_json:
            _write_json(path, dict(fields, sizeInBytes=size, maxBytes=max_bytes), scan, out, report)
        else:
            _write_text(path, heading, scan, out, report, print_data=print_data, skip_metadata=skip_metadata)
        if isinstance(view, memoryview):  # the --max-bytes slice (buf itself is never one)
            view.release()
    finally:
        close()
    if scan.error is not None:
        report(f"cannot read past position {scan.error['entryPosition']}: "
               f"{scan.error['message']} (at byte {scan.error['position']})")


def _report_batch(batch: JsonDict, report: Report) -> None:
    for problem in batch["errors"]:
        report(f"batch at position {batch['position']}: {problem['message']} (at byte {problem['position']})")


def _write_text(path: Path, heading: str, scan: SegmentScan, out: TextIO, report: Report, *,
                print_data: bool, skip_metadata: bool) -> None:
    print(heading, file=out)
    for batch in scan:
        print(batch_line(batch), file=out)
        for record in batch.get("records", ()):
            line = record_line(batch, record, print_data=print_data, skip_metadata=skip_metadata)
            if line is not None:
                print(line, file=out)
        _report_batch(batch, report)
    if scan.partial_tail is not None:
        tail = scan.partial_tail
        print(f"Found {tail['bytes']} bytes of a partial entry at position {tail['position']} "
              f"(Kafka recovery would truncate the segment there)", file=out)
    if scan.gaps:
        print(f"Non-consecutive offsets in {path}", file=out)
        for first, second in scan.gaps:
            print(f"  {first} is followed by {second}", file=out)


def _write_json(path: Path, fields: JsonDict, scan: SegmentScan, out: TextIO, report: Report) -> None:
    # Streamed batch by batch so a large segment never sits in memory as one document.
    head = json.dumps(dict({"file": str(path)}, **fields))
    out.write(head[:-1] + ', "batches": [')
    for i, batch in enumerate(scan):
        out.write((", " if i else "") + json.dumps(batch))
        _report_batch(batch, report)
    out.write(f'], "partialTail": {json.dumps(scan.partial_tail)}, "error": {json.dumps(scan.error)}, '
              f'"nonConsecutiveOffsets": {json.dumps(scan.gaps)}, "corrupt": {json.dumps(scan.corrupt)}}}\n')
