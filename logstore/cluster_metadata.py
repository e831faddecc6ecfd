"""Reading KRaft's `__cluster_metadata-0`: what Kafka knew about its topics, read-only.

A KRaft broker or controller keeps the cluster's metadata as a log of v2 record
batches (`<base offset>.log` segments) plus snapshots
`<end offset, 20 digits>-<epoch, 10 digits>.checkpoint` in the same batch format,
each opened by a SnapshotHeader and closed by a SnapshotFooter control record.
A metadata record has a null key; its value is Kafka's ApiMessageAndVersion frame::

    frame version  uvarint   always 1
    api key        uvarint   the record type (TopicRecord = 2, ...; ≤ 32767)
    version        uvarint   the record's version (≤ 32767)
    message        the fields of that version (`logstore.metadata_schemas`), nothing after

Control batches carry the KRaft control records (LeaderChange, SnapshotHeader,
SnapshotFooter, KRaftVersion, Voters): key int16 version + int16 type, value the
message at version 0.

Reading a directory (`read_cluster_metadata`), like Kafka's MetadataLoader:

1. Take the newest snapshot whose batches are all whole with good CRCs, header first
   and footer last; a damaged one is passed over for the next older.
2. Replay its records, then those of the log segments from the snapshot's end offset
   on (from 0 without a snapshot), in offset order. The log ends at its first partial
   or bad batch, or where offsets go back, as Kafka's recovery would cut it there. A
   log that starts after that offset is not replayed (Kafka refuses to start on it,
   "Inconsistent snapshot state"): the records in between are gone, so the state
   read whole is used and a warning says what is missing.
3. Replay: TopicRecord/RemoveTopicRecord keep topic ids and names, PartitionRecord
   adds partitions, ConfigRecord sets (null value: deletes) a topic's config
   (resource type 2) or a cluster default (type 4, resource name ""), and removing a
   topic drops its configs; the last ProducerIdsRecord gives the next producer id;
   FeatureLevelRecord sets a feature (level 0 removes one, metadata.version stays);
   UserScramCredentialRecord sets a user's credential for one mechanism and
   RemoveUserScramCredentialRecord drops it; AccessControlEntryRecord adds an ACL under
   its id and RemoveAccessControlEntryRecord drops the ACL of that id.
   Records between a BeginTransactionRecord and its EndTransactionRecord count only
   once the end is read; an AbortTransactionRecord or the end of the log drops them.

Nothing in the directory is written, truncated or deleted. The replay decodes only
the leading fields it uses of each record (the table's own readers), so a log of
tens of thousands of topics reads in a fraction of a second; `decode_metadata_record`
is the full, strict decode.
"""
from __future__ import annotations

import logging
import mmap
import os
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from logstore.errors import CorruptRecordError
from logstore.formats import kafka as K
from logstore.metadata_schemas import (
    CONTROL_SCHEMAS,
    METADATA_BY_TYPE_NAME,
    METADATA_SCHEMAS,
    decode_message,
    encode_message,
    leading_fields,
    put_uvarint,
    uvarint,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from logstore.metadata_schemas import LeadingReader

    _Method = Callable[[Sequence[Any]], None]
    _Use = tuple[LeadingReader, _Method]

log = logging.getLogger(__name__)

FRAME_VERSION = 1
TOPIC, PARTITION, CONFIG, REMOVE_TOPIC, FEATURE_LEVEL, PRODUCER_IDS = 2, 3, 4, 9, 12, 15
SCRAM, ACL, REMOVE_ACL, REMOVE_SCRAM = 11, 18, 19, 22
BEGIN_TXN, END_TXN, ABORT_TXN = 23, 24, 25
CONFIG_TOPIC, CONFIG_BROKER = 2, 4
"""ConfigRecord resource types (Kafka's ConfigResource.Type)."""
METADATA_VERSION = "metadata.version"
SEGMENT_FILE = re.compile(r"(\d{20})\.log")
SNAPSHOT_FILE = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4


@dataclass(frozen=True)
class MetadataRecord:
    """One decoded metadata record: its type, version and fields under Kafka's JSON names.

    Uuids are given as Kafka prints them (base64url, no padding), byte strings as
    bytes; a tagged field appears only when it differs from its default. A type or
    version this reader does not know has empty `data` and says so in `note`.
    """

    api_key: int
    type_name: str
    version: int
    data: dict[str, Any]
    note: str | None = None


@dataclass
class MetadataTopic:
    """A topic as the metadata log leaves it: its id (16 bytes), partition count and config overrides."""

    name: str
    topic_id: bytes
    partitions: int
    configs: dict[str, str]


@dataclass(frozen=True)
class MetadataAcl:
    """An ACL as an AccessControlEntryRecord holds it: Kafka's codes of the resource type, pattern type,
    operation and permission type, and its resource name, principal (`User:alice`) and host."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


ScramRecord = tuple[bytes, bytes, bytes, int]
"""A UserScramCredentialRecord's salt, stored key, server key and iterations."""


@dataclass
class ClusterMetadata:
    """What replaying a `__cluster_metadata-0` directory found.

    `broker_configs` are the cluster-wide defaults (broker resource ""), `end_offset`
    is the offset after the last record read (the snapshot's end offset when no log
    record follows it), `snapshot` the file name of the snapshot the replay started
    from (None: the log from offset 0). `scram_credentials` are keyed by (user,
    Kafka's mechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512), `acls` by their ACL id
    (16 bytes). A plain value, owned by the caller.
    """

    topics: dict[str, MetadataTopic]
    broker_configs: dict[str, str]
    next_producer_id: int | None
    features: dict[str, int]
    end_offset: int
    snapshot: str | None
    scram_credentials: dict[tuple[str, int], ScramRecord] = field(default_factory=dict)
    acls: dict[bytes, MetadataAcl] = field(default_factory=dict)


def _frame(buf: bytes) -> tuple[int, int, int]:
    """(api key, version, position of the message) of an ApiMessageAndVersion frame."""
    frame, pos = uvarint(buf, 0)
    if frame != FRAME_VERSION:
        raise CorruptRecordError(f"metadata record frame version {frame}, Kafka writes only {FRAME_VERSION}", 0)
    api_key, after = uvarint(buf, pos)
    version, end = uvarint(buf, after)
    if api_key > 0x7FFF or version > 0x7FFF:
        raise CorruptRecordError(f"metadata record type {api_key} or version {version} is above 32767", pos)
    return api_key, version, end


def decode_metadata_record(value: bytes | None) -> MetadataRecord:
    """The metadata record in a record value; CorruptRecordError if it is not one Kafka could have written."""
    if value is None:
        raise CorruptRecordError("a metadata record without a value")
    buf = bytes(value)
    try:
        api_key, version, pos = _frame(buf)
        schema = METADATA_SCHEMAS.get(api_key)
        if schema is None:
            return MetadataRecord(api_key, "UNKNOWN", version, {},
                                  f"metadata record type {api_key} is not known here (a newer Kafka?)")
        if not schema.first <= version <= schema.last:
            return MetadataRecord(api_key, schema.type_name, version, {},
                                  f"{schema.name} version {version} is not known here (up to {schema.last})")
        data, pos = decode_message(schema, version, buf, pos)
    except (struct.error, IndexError):
        raise CorruptRecordError("metadata record is truncated", len(buf)) from None
    if pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - pos} bytes left after the {schema.name}", pos)
    return MetadataRecord(api_key, schema.type_name, version, data)


def decode_control_record(control_type: int, value: bytes | None) -> dict[str, Any]:
    """A KRaft control record's value (types 2-6) under Kafka's JSON names; {} for another type."""
    schema = CONTROL_SCHEMAS.get(control_type)
    if schema is None:
        return {}
    if value is None:
        raise CorruptRecordError(f"{schema.name} without a value")
    buf = bytes(value)
    try:
        # Kafka reads every control record at version 0 (ControlRecordUtils).
        data, pos = decode_message(schema, 0, buf)
    except (struct.error, IndexError):
        raise CorruptRecordError(f"{schema.name} is truncated", len(buf)) from None
    if pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - pos} bytes left after the {schema.name}", pos)
    return data


def encode_metadata_record(type_name: str, version: int, data: dict[str, Any]) -> bytes:
    """The record value Kafka writes for this record (type as TOPIC_RECORD or TopicRecord).

    Fields left out take Kafka's defaults; ValueError for an unknown type, version or field.
    """
    schema = METADATA_BY_TYPE_NAME.get(type_name)
    if schema is None or not schema.first <= version <= schema.last:
        raise ValueError(f"no metadata record {type_name} version {version} here")
    out = bytearray()
    for n in (FRAME_VERSION, schema.id, version):
        put_uvarint(out, n)
    encode_message(schema, version, data, out)
    return bytes(out)


def encode_control_record(control_type: int, data: dict[str, Any]) -> bytes:
    """The value of a KRaft control record (types 2-6) at version 0, for tests and benches."""
    schema = CONTROL_SCHEMAS[control_type]
    out = bytearray()
    encode_message(schema, 0, data, out)
    return bytes(out)


# -- replay --------------------------------------------------------------------------------------

class _Image:
    """The state a replay builds up: one method per record type it honours, given the record's leading fields."""

    def __init__(self) -> None:
        self.names: dict[bytes, str] = {}             # topic id -> name
        self.partitions: dict[bytes, set[int]] = {}   # topic id -> partition ids
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, str] = {}
        self.features: dict[str, int] = {}
        self.next_producer_id: int | None = None
        self.scram_credentials: dict[tuple[str, int], ScramRecord] = {}
        self.acls: dict[bytes, MetadataAcl] = {}
        # (handler, fields) of an open metadata transaction
        self.pending: list[tuple[_Method, Sequence[Any]]] | None = None
        # api key -> (method, how many leading fields it reads)
        self.uses: dict[int, tuple[_Method, int]] = {
            TOPIC: (self.topic, 2), PARTITION: (self.partition, 2), CONFIG: (self.config, 4),
            REMOVE_TOPIC: (self.remove_topic, 1), FEATURE_LEVEL: (self.feature_level, 2),
            PRODUCER_IDS: (self.producer_ids, 3), SCRAM: (self.scram, 6), REMOVE_SCRAM: (self.remove_scram, 2),
            ACL: (self.acl, 8), REMOVE_ACL: (self.remove_acl, 1)}
        # api key << 16 | version -> (reader of the leading fields, method), or None for a record not used
        self.dispatch: dict[int, _Use | None] = {}

    def apply(self, records: Iterable[K.Record]) -> None:
        """Replay decoded Records (a batch's) in order."""
        dispatch, pending = self.dispatch, self.pending
        for record in records:
            value = record.value
            if value is None:
                raise CorruptRecordError(f"metadata record at offset {record.offset} has no value")
            if len(value) > 3 and value[0] == FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
                api_key, version, pos = value[1], value[2], 3   # the frame as Kafka writes it today
            else:
                api_key, version, pos = _frame(value)
            if BEGIN_TXN <= api_key <= ABORT_TXN:
                pending = self.transaction(api_key)
                continue
            use: _Use | None | Literal[False] = dispatch.get(api_key << 16 | version, False)
            if use is False:
                use = self.dispatch[api_key << 16 | version] = self.lookup(api_key, version)
            if use is not None:
                read, method = use
                if pending is None:
                    method(read(value, pos))
                else:
                    pending.append((method, read(value, pos)))

    def lookup(self, api_key: int, version: int) -> _Use | None:
        if api_key not in self.uses:
            return None
        method, count = self.uses[api_key]
        return leading_fields(METADATA_SCHEMAS[api_key], version, count), method

    def transaction(self, api_key: int) -> list[tuple[_Method, Sequence[Any]]] | None:
        pending = self.pending
        if api_key == BEGIN_TXN:
            self.pending = [] if pending is None else pending   # Kafka refuses a nested begin
        elif api_key == END_TXN and pending is not None:
            self.pending = None
            for method, fields in pending:
                method(fields)
        else:
            self.pending = None
        return self.pending

    def topic(self, fields: Sequence[Any]) -> None:
        name, topic_id = fields
        self.names[topic_id] = name
        self.partitions[topic_id] = set()

    def partition(self, fields: Sequence[Any]) -> None:
        number, topic_id = fields
        partitions = self.partitions.get(topic_id)
        if partitions is not None:  # Kafka's controller never writes one for a topic it does not have
            partitions.add(number)

    def config(self, fields: Sequence[Any]) -> None:
        resource_type, resource, name, setting = fields
        if resource_type == CONFIG_TOPIC:
            configs = self.topic_configs.setdefault(resource, {})
        elif resource_type == CONFIG_BROKER and resource == "":
            configs = self.broker_configs
        else:
            return
        if setting is None:
            configs.pop(name, None)
        else:
            configs[name] = setting

    def remove_topic(self, fields: Sequence[Any]) -> None:
        name = self.names.pop(fields[0], None)
        self.partitions.pop(fields[0], None)
        if name is not None:
            self.topic_configs.pop(name, None)

    def feature_level(self, fields: Sequence[Any]) -> None:
        name, level = fields
        if level == 0 and name != METADATA_VERSION:
            self.features.pop(name, None)
        else:
            self.features[name] = level

    def producer_ids(self, fields: Sequence[Any]) -> None:
        self.next_producer_id = fields[2]

    def scram(self, fields: Sequence[Any]) -> None:
        user, mechanism, salt, stored_key, server_key, iterations = fields
        self.scram_credentials[user, mechanism] = (salt, stored_key, server_key, iterations)

    def remove_scram(self, fields: Sequence[Any]) -> None:
        self.scram_credentials.pop((fields[0], fields[1]), None)

    def acl(self, fields: Sequence[Any]) -> None:
        self.acls[fields[0]] = MetadataAcl(*fields[1:])

    def remove_acl(self, fields: Sequence[Any]) -> None:
        self.acls.pop(fields[0], None)

    def result(self, end_offset: int, snapshot: str | None) -> ClusterMetadata:
        topics = {}
        for topic_id, name in self.names.items():
            topics[name] = MetadataTopic(name, topic_id, len(self.partitions[topic_id]),
                                         dict(self.topic_configs.get(name, ())))
        return ClusterMetadata(topics, dict(self.broker_configs), self.next_producer_id, dict(self.features),
                               end_offset, snapshot, dict(self.scram_credentials), dict(self.acls))


# -- the directory ---------------------------------------------------------------------------------

def _whole_batches(view: Buffer) -> tuple[list[K.BatchHeader], bool]:
    """The batches of a file's bytes up to the first partial or bad one, and whether all were whole."""
    scanned = K.scan_entries(view)
    if scanned is not None:
        return scanned, True
    headers: list[K.BatchHeader] = []
    entries = K.iter_entries(view, 0, verify_crc=True)
    try:
        for entry in entries:
            if isinstance(entry, K.LegacyEntry):  # KRaft writes only v2 batches
                return headers, False
            headers.append(entry)
    except CorruptRecordError:
        return headers, False
    finally:
        entries.close()
    return headers, False


def _is_snapshot(view: Buffer, headers: list[K.BatchHeader]) -> bool:
    """Whether a snapshot's batches open with a SnapshotHeader and close with a SnapshotFooter."""
    def control_type(header: K.BatchHeader, last: bool) -> int | None:
        if not header.is_control:
            return None
        records = K.decode_records(view, header.position, verify_crc=False)
        return K.read_control_record(records[-1 if last else 0]).type if records else None
    try:
        return bool(headers) and (control_type(headers[0], False) == SNAPSHOT_HEADER
                                  and control_type(headers[-1], True) == SNAPSHOT_FOOTER)
    except CorruptRecordError:
        return False


class _MappedFile:
    """A file's bytes mapped read-only (an empty file maps to b"")."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self.map = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else None
        self.view = memoryview(self.map) if self.map is not None else b""

    def close(self) -> None:
        if self.map is not None:
            if isinstance(self.view, memoryview):  # always, with a map: not b""
                self.view.release()
            self.map.close()


def _replay_snapshot(image: _Image, path: str, view: Buffer, headers: list[K.BatchHeader]) -> None:
    for header in headers:
        if not header.is_control:
            _apply_batch(image, path, header, K.decode_records(view, header.position, verify_crc=False))


def _apply_batch(image: _Image, path: str, header: K.BatchHeader, records: Iterable[K.Record]) -> None:
    try:
        image.apply(records)
    except (struct.error, IndexError):
        raise CorruptRecordError(f"{path}: a metadata record of the batch at offset {header.base_offset} "
                                 f"is truncated", header.position) from None
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{path}: batch at offset {header.base_offset}: {exc.reason}",
                                 header.position) from None


class _LogReplay:
    """The replay of the log segments after the snapshot: from `next_offset` on, offsets increasing."""

    def __init__(self, image: _Image, next_offset: int, directory: str | os.PathLike[str]) -> None:
        self.image = image
        self.next_offset = next_offset
        self.directory = directory
        self.started = False

    def segment(self, path: str, view: Buffer, headers: list[K.BatchHeader]) -> bool:
        """Replay a segment's batches; False if one of them ends the log (offsets not increasing)."""
        image, next_offset = self.image, self.next_offset
        for header in headers:
            if not self.started:
                if header.last_offset < next_offset:
                    continue  # in the snapshot already
                if header.base_offset > next_offset:
                    # Kafka refuses to start here; a store only takes advice from this log, so it keeps
                    # the state it could read whole (the snapshot) and says what is missing.
                    log.warning("%s: the metadata log goes on from offset %d, nothing holds the records from "
                                "%d: using the metadata up to %d", self.directory, header.base_offset,
                                next_offset, next_offset)
                    return False
                self.started = True
            elif header.base_offset < next_offset:
                return False  # Kafka's recovery cuts a log whose offsets go back
            if not header.is_control:
                records = K.decode_records(view, header.position, verify_crc=False)
                if header.base_offset < next_offset:
                    records = [r for r in records if r.offset >= next_offset]
                _apply_batch(image, path, header, records)
            next_offset = self.next_offset = header.last_offset + 1
        return True


def read_cluster_metadata(partition_dir: str | os.PathLike[str]) -> ClusterMetadata | None:
    """Replay a `__cluster_metadata-0` directory (see the module docstring); None if it holds no metadata.

    Raises CorruptRecordError for a record Kafka could not have written inside a batch
    whose CRC holds. A log that starts after the end of the newest valid snapshot (or
    after 0 without one) is not replayed: the records between are gone. Holds no
    state between calls and no file once it returns: any thread may call it, on a
    directory Kafka is not writing at the time.
    """
    try:
        names = os.listdir(partition_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    image, snapshot, end = _Image(), None, 0
    for name in sorted((n for n in names if SNAPSHOT_FILE.fullmatch(n)), reverse=True):
        path = os.path.join(partition_dir, name)
        mapped = _MappedFile(path)
        try:
            headers, whole = _whole_batches(mapped.view)
            if whole and _is_snapshot(mapped.view, headers):
                _replay_snapshot(image, path, mapped.view, headers)
                snapshot, end = name, int(name[:20])
                break
        finally:
            mapped.close()
    replay = _LogReplay(image, end, partition_dir)
    for name in sorted(n for n in names if SEGMENT_FILE.fullmatch(n)):
        path = os.path.join(partition_dir, name)
        mapped = _MappedFile(path)
        try:
            headers, whole = _whole_batches(mapped.view)
            if not (replay.segment(path, mapped.view, headers) and whole):
                break
        finally:
            mapped.close()
    if snapshot is None and not replay.started:
        return None
    return image.result(replay.next_offset, snapshot)
