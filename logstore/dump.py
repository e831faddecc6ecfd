"""`logstore dump`: print the batches of `.log` segment files, like Kafka's kafka-dump-log.sh.

Text output follows `kafka.tools.DumpLogSegments --print-data-log` line for
line: "Dumping FILE", "Log starting offset: N", then one line per entry
(v2 batch or legacy magic 0/1 message) and, with `deep`, one "| offset: ..."
line per record. Keys, values and payloads that are not printable UTF-8 are
shown as `0x`-prefixed hex. Entry framing follows on-disk-format.md §1: a bad
CRC or an entry the codec refuses is reported and skipped when its size field
is sound; a size below 14 or an unknown magic byte ends the file; an entry
running past the end of the file is reported as a partial tail (Kafka's
recovery truncates it), which alone is not an error.

JSON output (`as_json`) is one JSON document per file, each on its own line.
Field names and the byte encoding are those of `spec/vectors/*.json`::

    {"file": str, "logStartOffset": int | null,   # null if the name is not <offset>.log
     "sizeInBytes": int,                          # file size
     "batches": [BATCH, ...],                     # in file order
     "partialTail": {"position": int, "bytes": int} | null,
     "error": {"position": int, "entryPosition": int, "message": str} | null,
                                                  # why reading stopped early: the fault's byte
                                                  # and the start of the unreadable entry
     "corrupt": bool}                             # any bad CRC, refused entry or error

    BATCH, magic 2: position, sizeInBytes, magic, baseOffset, lastOffset,
      lastOffsetDelta, batchLength, partitionLeaderEpoch, crc, crcValid,
      attributes, compression ("none".."zstd"), timestampType ("CREATE_TIME" |
      "LOG_APPEND_TIME"), baseTimestamp, maxTimestamp, deleteHorizonMs (int |
      null), isTransactional, isControl, hasDeleteHorizon, producerId,
      producerEpoch, baseSequence, lastSequence, recordCount, errors, records?
    BATCH, magic 0/1: position, sizeInBytes, magic, offset (the entry's offset
      field), baseOffset, lastOffset, crc, crcValid, attributes, compression,
      timestampType (null for magic 0), timestamp (null for magic 0), errors,
      records?
    BATCH the codec refused (framing sound, content not): position,
      sizeInBytes, magic, baseOffset (magic 2) or offset (magic 0/1),
      crcValid: null, errors (non-empty)
    errors: [{"position": int, "message": str}, ...]   # absolute byte positions
    records (only when deep): [{"offset", "timestamp" (null for magic 0),
      "sequence" (magic 2 only), "keySize", "valueSize", "key": BYTES | null,
      "value": BYTES | null, "headers": [[str, BYTES | null], ...],
      "controlKey": {"version", "type", "typeName"} (control batches),
      "endTxnMarker": {"coordinatorEpoch"} (ABORT/COMMIT)}, ...]
    BYTES: {"hex": str, "utf8": str}; "utf8" is present only when the bytes are
      valid, printable UTF-8.

Exit status (`run`): 0 all files intact (a partial tail is fine), 1 corrupt
data found, 2 a path that does not exist, cannot be read, or is a directory
without .log files.
"""
from __future__ import annotations

import json
import mmap
import sys
from pathlib import Path
from typing import Iterator, Sequence, TextIO

from logstore.errors import CorruptRecordError
from logstore.formats import kafka as K

OK, CORRUPT, BAD_PATH = 0, 1, 2
PROG = "logstore dump"

# The entry prefix common to every format (§1); read here only to skip or
# describe an entry the codec refuses, and to tell a torn tail from garbage.
_PREFIX = 17
_MIN_ENTRY_SIZE = 14
# Where the codecs report a CRC mismatch, relative to the entry: the CRC field itself.
_V2_CRC_AT, _LEGACY_CRC_AT = 17, 12

_TS_JSON = {0: "CREATE_TIME", 1: "LOG_APPEND_TIME", None: None}
_TS_TEXT = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime", None: "NoTimestampType"}


class DumpPathError(Exception):
    """A command-line path that names nothing dumpable."""


def base_offset_of(path: Path) -> int | None:
    """The base offset in a segment file name (digits before the first dot), or None."""
    digits = path.name.split(".", 1)[0]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def segment_files(path: Path) -> list[Path]:
    """The files to dump for one argument: the file itself, or a directory's *.log by base offset."""
    if path.is_dir():
        logs = [p for p in path.glob("*.log") if p.is_file()]
        if not logs:
            raise DumpPathError(f"{path}: no .log segment files in this directory")
        return sorted(logs, key=lambda p: (base_offset_of(p) is None, base_offset_of(p) or 0, p.name))
    if not path.exists():
        raise DumpPathError(f"{path}: no such file or directory")
    return [path]


def text_of(data: bytes) -> str | None:
    """`data` as text if it is valid, printable UTF-8, else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def bytes_json(data: bytes | None) -> dict | None:
    """The JSON encoding of a key, value or header value: {"hex", "utf8"?} or None."""
    if data is None:
        return None
    text = text_of(data)
    return {"hex": data.hex()} if text is None else {"hex": data.hex(), "utf8": text}


def _problem(exc: Exception, fallback_position: int) -> dict:
    if isinstance(exc, CorruptRecordError):
        position = exc.position if exc.position >= 0 else fallback_position
        return {"position": position, "message": exc.reason}
    # Decoders must only raise CorruptRecordError; say so rather than hide it.
    return {"position": fallback_position,
            "message": f"unexpected {type(exc).__name__} from the decoder (a logstore bug): {exc}"}


def _is_crc_mismatch(exc: Exception, crc_position: int) -> bool:
    return isinstance(exc, CorruptRecordError) and exc.position == crc_position


class SegmentScan:
    """One pass over the bytes of a segment: iterate for batch dicts, then read the outcome.

    Holds the caller's buffer only while iterating. After iteration:
    `partial_tail` and `error` are dicts or None (schema in the module
    docstring) and `corrupt` says whether anything was wrong.
    """

    def __init__(self, buf, *, deep: bool = False):
        self._buf = buf
        self._deep = deep
        self.partial_tail: dict | None = None
        self.error: dict | None = None
        self.corrupt = False

    def __iter__(self) -> Iterator[dict]:
        view = memoryview(self._buf)
        try:
            pos = 0
            while pos is not None:
                pos = yield from self._walk(view, pos)
        finally:
            view.release()

    def _walk(self, view, pos: int):
        """Yield entries from `pos`; return where to resume after a refused entry, or None at the end."""
        entries = K.iter_entries(view, pos, verify_crc=False)
        try:
            while True:
                try:
                    entry = next(entries)
                except StopIteration:
                    self._tail(view, pos)
                    return None
                except CorruptRecordError as exc:  # every decode failure becomes a report
                    refused = self._refused(view, pos, exc)
                    if refused is None:
                        return None
                    yield refused
                    return pos + refused["sizeInBytes"]
                yield self._describe(view, entry)
                pos = K.entry_end(entry)
        finally:
            entries.close()

    def _describe(self, view, entry) -> dict:
        if isinstance(entry, K.LegacyEntry):
            batch = self._legacy(view, entry)
        else:
            batch = self._v2(view, entry)
        if batch["errors"] or batch["crcValid"] is False:
            self.corrupt = True
        return batch

    def _v2(self, view, h) -> dict:
        errors = []
        try:
            K.validate_batch(view, h.position)
            crc_valid = True
        except CorruptRecordError as exc:
            crc_valid = not _is_crc_mismatch(exc, h.position + _V2_CRC_AT)
            errors.append(_problem(exc, h.position))
        batch = {
            "position": h.position, "sizeInBytes": h.size_in_bytes, "magic": h.magic,
            "baseOffset": h.base_offset, "lastOffset": h.last_offset,
            "lastOffsetDelta": h.last_offset_delta, "batchLength": h.batch_length,
            "partitionLeaderEpoch": h.partition_leader_epoch, "crc": h.crc, "crcValid": crc_valid,
            "attributes": h.attributes, "compression": K.CODEC_NAMES[h.compression],
            "timestampType": _TS_JSON[h.timestamp_type], "baseTimestamp": h.base_timestamp,
            "maxTimestamp": h.max_timestamp,
            "deleteHorizonMs": h.base_timestamp if h.has_delete_horizon else None,
            "isTransactional": h.is_transactional, "isControl": h.is_control,
            "hasDeleteHorizon": h.has_delete_horizon, "producerId": h.producer_id,
            "producerEpoch": h.producer_epoch, "baseSequence": h.base_sequence,
            "lastSequence": h.last_sequence, "recordCount": h.record_count, "errors": errors,
        }
        if self._deep:
            batch["records"] = self._v2_records(view, h, errors)
        return batch

    def _v2_records(self, view, h, errors: list) -> list:
        try:
            records = K.decode_records(view, h.position, verify_crc=False)
        except CorruptRecordError as exc:
            errors.append(_problem(exc, h.position))
            return []
        out = []
        for record in records:
            item = _record_json(record, magic=2)
            item["sequence"] = (-1 if h.base_sequence < 0 else
                                K.increment_sequence(h.base_sequence, record.offset - h.base_offset))
            if h.is_control:
                try:
                    control = K.read_control_record(record)
                except CorruptRecordError as exc:
                    errors.append(_problem(exc, h.position))
                else:
                    item["controlKey"] = {"version": control.version, "type": control.type,
                                          "typeName": control.type_name}
                    if control.coordinator_epoch is not None:
                        item["endTxnMarker"] = {"coordinatorEpoch": control.coordinator_epoch}
            out.append(item)
        return out

    def _legacy(self, view, entry) -> dict:
        errors = []
        try:
            K.decode_legacy(view, entry.position)
            crc_valid = True
        except CorruptRecordError as exc:
            crc_valid = not _is_crc_mismatch(exc, entry.position + _LEGACY_CRC_AT)
            errors.append(_problem(exc, entry.position))
        v0 = entry.magic == 0
        batch = {
            "position": entry.position, "sizeInBytes": entry.size_in_bytes, "magic": entry.magic,
            "offset": entry.offset, "baseOffset": entry.base_offset, "lastOffset": entry.last_offset,
            "crc": entry.crc, "crcValid": crc_valid, "attributes": entry.attributes,
            "compression": K.CODEC_NAMES[entry.compression],
            "timestampType": _TS_JSON[entry.timestamp_type],
            "timestamp": None if v0 else entry.timestamp, "errors": errors,
        }
        if self._deep:
            batch["records"] = [_record_json(r, magic=entry.magic) for r in entry.records]
        return batch

    def _refused(self, view, pos: int, exc: Exception) -> dict | None:
        """Describe the entry at `pos` that the codec refused; None if reading must stop."""
        self.corrupt = True
        problem = _problem(exc, pos)
        remaining = len(view) - pos
        if remaining >= _PREFIX:
            offset = int.from_bytes(view[pos:pos + 8], "big", signed=True)
            size = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
            magic = view[pos + 16]
            if size >= _MIN_ENTRY_SIZE and 12 + size <= remaining and magic in (0, 1, 2):
                return {"position": pos, "sizeInBytes": 12 + size, "magic": magic,
                        ("baseOffset" if magic == 2 else "offset"): offset,
                        "crcValid": None, "errors": [problem]}
        self.error = dict(problem, entryPosition=pos)
        return None

    def _tail(self, view, pos: int) -> None:
        remaining = len(view) - pos
        if remaining == 0:
            return
        # A torn write still starts with a real magic byte; anything else is garbage, not a tail.
        if remaining >= _PREFIX and view[pos + 16] not in (0, 1, 2):
            self.corrupt = True
            self.error = {"position": pos + 16, "entryPosition": pos,
                          "message": f"unknown magic byte {view[pos + 16]} in an entry that runs past "
                                     f"the end of the file"}
            return
        self.partial_tail = {"position": pos, "bytes": remaining}


def _record_json(record, *, magic: int) -> dict:
    key, value = record.key, record.value
    return {
        "offset": record.offset, "timestamp": None if magic == 0 else record.timestamp,
        "keySize": -1 if key is None else len(key), "valueSize": -1 if value is None else len(value),
        "key": bytes_json(key), "value": bytes_json(value),
        "headers": [[k, bytes_json(v)] for k, v in record.headers],
    }


# ---------------------------------------------------------------------------
# Text rendering (Kafka's DumpLogSegments layout)


def _shown(data: dict) -> str:
    return data["utf8"] if "utf8" in data else "0x" + data["hex"]


def _flag(value: bool) -> str:
    return "true" if value else "false"


def batch_line(b: dict) -> str:
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


def record_line(b: dict, r: dict) -> str:
    """The DumpLogSegments "| offset: ..." line of one record of batch `b`."""
    timestamp = -1 if r["timestamp"] is None else r["timestamp"]
    parts = [f"| offset: {r['offset']} {_TS_TEXT[b['timestampType']]}: {timestamp} "
             f"keySize: {r['keySize']} valueSize: {r['valueSize']}"]
    if b["magic"] == 2:
        parts.append(f"sequence: {r['sequence']} headerKeys: [{','.join(k for k, _ in r['headers'])}]")
    elif b["compression"] == "none":  # the record is the message itself
        parts.append(f"isValid: {_flag(b['crcValid'])} crc: {b['crc']}")
    control = r.get("controlKey")
    if control is not None:
        marker = r.get("endTxnMarker")
        if marker is not None:
            parts.append(f"endTxnMarker: {control['typeName']} "
                         f"coordinatorEpoch: {marker['coordinatorEpoch']}")
        else:
            parts.append(f"controlType: {control['typeName']}({control['type']})")
    elif not (b["magic"] == 2 and b["isControl"]):
        if r["key"] is not None:
            parts.append(f"key: {_shown(r['key'])}")
        if r["value"] is not None:
            parts.append(f"payload: {_shown(r['value'])}")
    return " ".join(parts)


# ---------------------------------------------------------------------------
# Files


def _open(path: Path):
    """(buffer, closer) for a file's bytes, memory-mapped when non-empty."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return b"", lambda: None
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def close():
        try:
            mapped.close()
        except BufferError:  # a view still alive; the map goes with it
            pass
    return mapped, close


def dump_file(path: Path, *, deep: bool = False, as_json: bool = False,
              out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump one segment file to `out` (stdout), problems to `err` (stderr); return its exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        buf, close = _open(path)
    except OSError as exc:
        print(f"{PROG}: {path}: cannot read: {exc.strerror or exc}", file=err)
        return BAD_PATH
    try:
        scan = SegmentScan(buf, deep=deep)
        start = base_offset_of(path)
        if as_json:
            _write_json(path, start, len(buf), scan, out, err)
        else:
            _write_text(path, start, scan, out, err)
    finally:
        close()
    if scan.error is not None:
        print(f"{PROG}: {path}: cannot read past position {scan.error['entryPosition']}: "
              f"{scan.error['message']} (at byte {scan.error['position']})", file=err)
    return CORRUPT if scan.corrupt else OK


def _report(path: Path, batch: dict, err: TextIO) -> None:
    for problem in batch["errors"]:
        print(f"{PROG}: {path}: batch at position {batch['position']}: {problem['message']} "
              f"(at byte {problem['position']})", file=err)


def _write_text(path: Path, start: int | None, scan: SegmentScan, out: TextIO, err: TextIO) -> None:
    print(f"Dumping {path}", file=out)
    shown = "unknown (file name is not <offset>.log)" if start is None else start
    print(f"Log starting offset: {shown}", file=out)
    for batch in scan:
        print(batch_line(batch), file=out)
        for record in batch.get("records", ()):
            print(record_line(batch, record), file=out)
        _report(path, batch, err)
    if scan.partial_tail is not None:
        tail = scan.partial_tail
        print(f"Found {tail['bytes']} bytes of a partial entry at position {tail['position']} "
              f"(Kafka recovery would truncate the segment there)", file=out)


def _write_json(path: Path, start: int | None, size: int, scan: SegmentScan,
                out: TextIO, err: TextIO) -> None:
    # Streamed batch by batch so a large segment never sits in memory as one document.
    out.write(f'{{"file": {json.dumps(str(path))}, "logStartOffset": {json.dumps(start)}, '
              f'"sizeInBytes": {size}, "batches": [')
    for i, batch in enumerate(scan):
        out.write((", " if i else "") + json.dumps(batch))
        _report(path, batch, err)
    out.write(f'], "partialTail": {json.dumps(scan.partial_tail)}, "error": {json.dumps(scan.error)}, '
              f'"corrupt": {json.dumps(scan.corrupt)}}}\n')


def run(paths: Sequence[str], *, deep: bool = False, as_json: bool = False,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump every path (segment file or partition directory); return the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    status = OK
    for arg in paths:
        try:
            files = segment_files(Path(arg))
        except DumpPathError as exc:
            print(f"{PROG}: {exc}", file=err)
            status = max(status, BAD_PATH)
            continue
        for path in files:
            status = max(status, dump_file(path, deep=deep, as_json=as_json, out=out, err=err))
    return status
