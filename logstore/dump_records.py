"""What the entries and records of a segment say, as dicts under Kafka's names: the reading half of
`logstore dump` for `.log` segments and KRaft `.checkpoint` snapshots (logstore.dump_segment prints them).

Entry framing follows on-disk-format.md §1: a bad CRC or an entry the codec
refuses is reported and skipped when its size field is sound; a size below
14 or an unknown magic byte ends the file; an entry running past the end of
the buffer is a partial tail (Kafka's recovery truncates it), which alone is
not an error, unless the buffer was cut short on purpose (`--max-bytes`).
Record offsets that do not follow each other are collected (Kafka's
"Non-consecutive offsets"); they are not an error either.

Record decoders (Kafka's --offsets-decoder and the like) are passed in as
`RecordDecoder`s: this layer holds no internal-topic schema but KRaft's
control records (`logstore.cluster_metadata`).

One dict per entry, field names and byte encoding those of `spec/vectors/*.json`::

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
    records (deep iteration only): [{"offset", "timestamp" (null for magic 0),
      "sequence" (magic 2 only), "keySize", "valueSize",
      "key": BYTES | null, "value": BYTES | null,       # print_data only
      "headers": [[str, BYTES | null], ...],           # values: print_data only, else null
      "controlKey": {"version", "type", "typeName"} (control batches),
      "endTxnMarker": {"coordinatorEpoch"} (ABORT/COMMIT),
      "controlData": {...} (KRaft control records: the record as JSON),
      "decoded": {"key": JSON, "payload": JSON} | {"unknownRecordType": int} | {"error": str}
                                                       # print_data with a decoder, data batches
      }, ...]
    BYTES: {"hex": str, "utf8": str}; "utf8" is present only when the bytes are
      valid, printable UTF-8.
"""
from __future__ import annotations

import base64
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logstore.cluster_metadata import decode_control_record
from logstore.errors import CorruptRecordError
from logstore.formats import kafka as K

if TYPE_CHECKING:
    from typing_extensions import Buffer

JsonDict = dict[str, Any]
"""A JSON object as the dump builds it (schema in the module docstring)."""

_TS_JSON = {0: "CREATE_TIME", 1: "LOG_APPEND_TIME", None: None}
KRAFT_CONTROL_TYPES = range(2, 7)
"""LeaderChange, SnapshotHeader, SnapshotFooter, KRaftVersion, KRaftVoters: values decoded as JSON."""


class UnknownRecordType(Exception):
    """Raised by a record decoder for a key whose record type it does not know: not corruption.

    Kafka prints "Unknown record type N at offset O, skipping." in place of the key.
    """

    def __init__(self, record_type: int):
        super().__init__(f"unknown record type {record_type}")
        self.record_type = record_type


@dataclass(frozen=True)
class RecordDecoder:
    """A `--*-decoder`: what the key and value of a data record say, as JSON values.

    `decode(key, value)` returns (key, payload): any JSON-able value, or None
    when there is nothing to print in that place (a metadata record has no
    key). It raises `UnknownRecordType` for a record type it does not know
    and `CorruptRecordError` for bytes that break their schema.
    """

    name: str   # as the user named it, for problem lines ("offsets decoder")
    decode: Callable[[bytes | None, bytes | None], tuple[object, object]]


def text_of(data: bytes) -> str | None:
    """`data` as text if it is valid, printable UTF-8, else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


def bytes_json(data: bytes | None) -> JsonDict | None:
    """The JSON encoding of a key, value or header value: {"hex", "utf8"?} or None."""
    if data is None:
        return None
    text = text_of(data)
    return {"hex": data.hex()} if text is None else {"hex": data.hex(), "utf8": text}


def _reason(exc: Exception) -> str:
    if isinstance(exc, CorruptRecordError):
        return exc.reason
    # Decoders must only raise CorruptRecordError; say so rather than hide it.
    return f"unexpected {type(exc).__name__} from the decoder (a logstore bug): {exc}"


def _problem(exc: Exception, fallback_position: int) -> JsonDict:
    known = isinstance(exc, CorruptRecordError) and exc.position >= 0
    position = exc.position if isinstance(exc, CorruptRecordError) and known else fallback_position
    return {"position": position, "message": _reason(exc)}


def _is_crc_mismatch(exc: Exception, crc_position: int) -> bool:
    return isinstance(exc, CorruptRecordError) and exc.position == crc_position


def json_value(value: object) -> Any:
    """A decoded message as JSON: byte strings base64 (as Kafka's JSON converters write them)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def _kraft_control_json(control_type: int, value: bytes | None) -> JsonDict:
    data: JsonDict = json_value(decode_control_record(control_type, value))
    return data


class SegmentScan:
    """One pass over the bytes of a segment: iterate for batch dicts, then read the outcome.

    `deep` lists each batch's records; `print_data` (default: `deep`) adds
    their keys, values and header values and, with a `decoder`, what it
    made of them; `limited` says the buffer was cut at `--max-bytes`, so an
    entry running past its end is not a partial tail. Holds the caller's
    buffer only while iterating. After iteration: `partial_tail` and `error`
    are dicts or None (schema in the module docstring), `gaps` the
    (offset, next offset) pairs of records that do not follow each other,
    and `corrupt` says whether anything was wrong.
    """

    def __init__(self, buf: Buffer, *, deep: bool = False, print_data: bool | None = None,
                 decoder: RecordDecoder | None = None, limited: bool = False):
        self._buf = buf
        self._deep = deep or bool(print_data)
        self._print_data = deep if print_data is None else print_data
        self._decoder = decoder
        self._limited = limited
        self._last_offset: int | None = None
        self.gaps: list[tuple[int, int]] = []
        self.partial_tail: JsonDict | None = None
        self.error: JsonDict | None = None
        self.corrupt = False

    def __iter__(self) -> Iterator[JsonDict]:
        view = memoryview(self._buf)
        try:
            pos: int | None = 0
            while pos is not None:
                pos = yield from self._walk(view, pos)
        finally:
            view.release()

    def _walk(self, view: memoryview, pos: int) -> Generator[JsonDict, None, int | None]:
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
                    skipped: int = refused["sizeInBytes"]
                    return pos + skipped
                yield self._describe(view, entry)
                pos = K.entry_end(entry)
        finally:
            entries.close()

    def _describe(self, view: memoryview, entry: K.Entry) -> JsonDict:
        if isinstance(entry, K.LegacyEntry):
            batch = self._legacy(view, entry)
        else:
            batch = self._v2(view, entry)
        if batch["errors"] or batch["crcValid"] is False:
            self.corrupt = True
        return batch

    def _v2(self, view: memoryview, h: K.BatchHeader) -> JsonDict:
        errors: list[JsonDict] = []
        try:
            K.validate_batch(view, h.position)
            crc_valid = True
        except CorruptRecordError as exc:
            crc_valid = not _is_crc_mismatch(exc, K.crc_position(h))
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

    def _v2_records(self, view: memoryview, h: K.BatchHeader, errors: list[JsonDict]) -> list[JsonDict]:
        try:
            records = K.decode_records(view, h.position, verify_crc=False)
        except CorruptRecordError as exc:
            errors.append(_problem(exc, h.position))
            return []
        out = []
        for record in records:
            item = self._record_json(record, magic=2)
            item["sequence"] = (-1 if h.base_sequence < 0 else
                                K.increment_sequence(h.base_sequence, record.offset - h.base_offset))
            if h.is_control:
                self._control(record, item, h.position, errors)
            elif self._print_data and self._decoder is not None:
                item["decoded"] = self._decode(record, h.position, errors)
            out.append(item)
        return out

    def _control(self, record: K.Record, item: JsonDict, position: int, errors: list[JsonDict]) -> None:
        try:
            control = K.read_control_record(record)
        except CorruptRecordError as exc:
            errors.append(_problem(exc, position))
            return
        item["controlKey"] = {"version": control.version, "type": control.type, "typeName": control.type_name}
        if control.coordinator_epoch is not None:
            item["endTxnMarker"] = {"coordinatorEpoch": control.coordinator_epoch}
        elif control.type in KRAFT_CONTROL_TYPES:
            try:
                item["controlData"] = _kraft_control_json(control.type, record.value)
            except Exception as exc:  # noqa: BLE001 - every failure is a report, none a traceback
                errors.append({"position": position, "message": f"record at offset {record.offset}: "
                                                                f"{control.type_name} record: {_reason(exc)}"})

    def _decode(self, record: K.Record, position: int, errors: list[JsonDict]) -> JsonDict:
        decoder = self._decoder
        assert decoder is not None  # callers decode only when a decoder was given
        try:
            key, payload = decoder.decode(record.key, record.value)
        except UnknownRecordType as exc:
            return {"unknownRecordType": exc.record_type}
        except Exception as exc:  # noqa: BLE001 - every failure is a report, none a traceback
            reason = _reason(exc)
            errors.append({"position": position, "message": f"record at offset {record.offset}: "
                                                            f"the {decoder.name} cannot read it: {reason}"})
            return {"error": reason}
        return {"key": key, "payload": payload}

    def _legacy(self, view: memoryview, entry: K.LegacyEntry) -> JsonDict:
        errors: list[JsonDict] = []
        try:
            K.decode_legacy(view, entry.position)
            crc_valid = True
        except CorruptRecordError as exc:
            crc_valid = not _is_crc_mismatch(exc, K.crc_position(entry))
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
            records = []
            for record in entry.records:
                item = self._record_json(record, magic=entry.magic)
                if self._print_data and self._decoder is not None:
                    item["decoded"] = self._decode(record, entry.position, errors)
                records.append(item)
            batch["records"] = records
        return batch

    def _record_json(self, record: K.Record, *, magic: int) -> JsonDict:
        if self._last_offset is not None and record.offset != self._last_offset + 1:
            self.gaps.append((self._last_offset, record.offset))
        self._last_offset = record.offset
        key, value = record.key, record.value
        item: JsonDict = {"offset": record.offset, "timestamp": None if magic == 0 else record.timestamp,
                "keySize": -1 if key is None else len(key), "valueSize": -1 if value is None else len(value)}
        if self._print_data:
            item["key"], item["value"] = bytes_json(key), bytes_json(value)
            item["headers"] = [[k, bytes_json(v)] for k, v in record.headers]
        else:
            item["headers"] = [[k, None] for k, _ in record.headers]
        return item

    def _refused(self, view: memoryview, pos: int, exc: Exception) -> JsonDict | None:
        """Describe the entry at `pos` that the codec refused; None if reading must stop."""
        self.corrupt = True
        problem = _problem(exc, pos)
        # The entry's prefix alone says how far to skip, when its size and magic are sound.
        prefix = K.entry_prefix(view, pos)
        if prefix is not None and prefix.is_framed and prefix.size <= len(view) - pos:
            return {"position": pos, "sizeInBytes": prefix.size, "magic": prefix.magic,
                    ("baseOffset" if prefix.magic == 2 else "offset"): prefix.offset,
                    "crcValid": None, "errors": [problem]}
        self.error = dict(problem, entryPosition=pos)
        return None

    def _tail(self, view: memoryview, pos: int) -> None:
        remaining = len(view) - pos
        if remaining == 0:
            return
        # A torn write still starts with a real magic byte; anything else is garbage, not a tail.
        prefix = K.entry_prefix(view, pos)
        if prefix is not None and prefix.magic not in K.KNOWN_MAGICS:
            self.corrupt = True
            self.error = {"position": prefix.magic_position, "entryPosition": pos,
                          "message": f"unknown magic byte {prefix.magic} in an entry that runs past "
                                     f"the end of the file"}
            return
        if not self._limited:  # cut at --max-bytes: the rest of the file was not read
            self.partial_tail = {"position": pos, "bytes": remaining}
