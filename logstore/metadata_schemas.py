"""The records of KRaft's `__cluster_metadata` log, one schema table (Kafka 3.x and 4.x).

Facts from Kafka's message schemas (`metadata/src/main/resources/common/metadata/*.json`
for the metadata records, `clients/.../common/message/*.json` for the KRaft control
records), written here as a small table, and the one generic reader and writer that
decode and encode every message of it (`logstore.cluster_metadata` holds the record
frame and the replay). Every one of these messages is "flexible" in every version:
strings, byte strings and arrays carry an unsigned-varint length plus one (0 = null),
integers are big-endian, a uuid is its 16 bytes, and every struct, nested ones
included, ends with a tagged-field section (a count, then tag, size and value for
each, in increasing tag order).

The table, one message per block::

    <api key or control type> <Kafka's message name> <first>-<last version>
        <FieldName> <type>[?] [<versions>] [tag=<n>] [=<default>]
            <nested field>  ...      (fields of a struct or of an array's elements)

- type: int8 int16 int32 int64 uint16 float64 bool uuid string bytes, `[]T` for an
  array of T, or a capitalised name for a struct (its fields indented below);
- `?`: the field may be null (in every version it exists in, true of all fields here);
- versions: `N+` or `N-M` (default: every version of the message);
- `tag=<n>`: a tagged field, written only when it differs from its default;
- `=<default>`: Kafka's default, when it is not 0, false, "", an empty array or null.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from logstore.checkpoints import topic_id_from_string, topic_id_to_string
from logstore.errors import CorruptRecordError
from logstore.formats import kafka as K

Reader = Callable[[bytes, int], tuple[Any, int]]
"""Reads one value at a position: (value, the position after it)."""
Presenter = Callable[[Any], Any]
"""A raw value in Kafka's JSON form (uuids as base64url text)."""
Writer = Callable[[bytearray, Any], None]
"""Appends one value."""
LeadingReader = Callable[[bytes, int], Sequence[Any]]
"""Reads the leading fields of a message: their raw values."""

PRIMITIVES = frozenset({"int8", "int16", "int32", "int64", "uint16", "float64", "bool", "uuid", "string",
                        "bytes"})

METADATA_TABLE = """
0 RegisterBrokerRecord 0-3
    BrokerId int32
    IsMigratingZkBroker bool 2+
    IncarnationId uuid
    BrokerEpoch int64
    EndPoints []BrokerEndpoint
        Name string
        Host string
        Port uint16
        SecurityProtocol int16
    Features []BrokerFeature
        Name string
        MinSupportedVersion int16
        MaxSupportedVersion int16
    Rack string?
    Fenced bool =true
    InControlledShutdown bool 1+
    LogDirs []uuid 3+ tag=0
1 UnregisterBrokerRecord 0-0
    BrokerId int32
    BrokerEpoch int64
2 TopicRecord 0-0
    Name string
    TopicId uuid
3 PartitionRecord 0-2
    PartitionId int32 =-1
    TopicId uuid
    Replicas []int32
    Isr []int32
    RemovingReplicas []int32
    AddingReplicas []int32
    Leader int32 =-1
    LeaderRecoveryState int8 tag=0
    LeaderEpoch int32 =-1
    PartitionEpoch int32 =-1
    Directories []uuid 1+
    EligibleLeaderReplicas []int32? 2+ tag=1
    LastKnownElr []int32? 2+ tag=2
4 ConfigRecord 0-0
    ResourceType int8
    ResourceName string
    Name string
    Value string?
5 PartitionChangeRecord 0-2
    PartitionId int32 =-1
    TopicId uuid
    Isr []int32? tag=0
    Leader int32 tag=1 =-2
    Replicas []int32? tag=2
    RemovingReplicas []int32? tag=3
    AddingReplicas []int32? tag=4
    LeaderRecoveryState int8 tag=5 =-1
    Directories []uuid? 1+ tag=8
    EligibleLeaderReplicas []int32? 2+ tag=6
    LastKnownElr []int32? 2+ tag=7
7 FenceBrokerRecord 0-0
    Id int32
    Epoch int64
8 UnfenceBrokerRecord 0-0
    Id int32
    Epoch int64
9 RemoveTopicRecord 0-0
    TopicId uuid
10 DelegationTokenRecord 0-0
    Owner string
    Requester string
    Renewers []string
    IssueTimestamp int64
    MaxTimestamp int64
    ExpirationTimestamp int64
    TokenId string
11 UserScramCredentialRecord 0-0
    Name string
    Mechanism int8
    Salt bytes
    StoredKey bytes
    ServerKey bytes
    Iterations int32
12 FeatureLevelRecord 0-0
    Name string
    FeatureLevel int16
14 ClientQuotaRecord 0-0
    Entity []EntityData
        EntityType string
        EntityName string?
    Key string
    Value float64
    Remove bool
15 ProducerIdsRecord 0-0
    BrokerId int32
    BrokerEpoch int64 =-1
    NextProducerId int64
17 BrokerRegistrationChangeRecord 0-2
    BrokerId int32
    BrokerEpoch int64
    Fenced int8 tag=0
    InControlledShutdown int8 1+ tag=1
    LogDirs []uuid 2+ tag=2
18 AccessControlEntryRecord 0-0
    Id uuid
    ResourceType int8
    ResourceName string
    PatternType int8
    Principal string
    Host string
    Operation int8
    PermissionType int8
19 RemoveAccessControlEntryRecord 0-0
    Id uuid
20 NoOpRecord 0-0
21 ZkMigrationStateRecord 0-0
    ZkMigrationState int8
22 RemoveUserScramCredentialRecord 0-0
    Name string
    Mechanism int8
23 BeginTransactionRecord 0-0
    Name string? tag=0
24 EndTransactionRecord 0-0
25 AbortTransactionRecord 0-0
    Reason string? tag=0
26 RemoveDelegationTokenRecord 0-0
    TokenId string
27 RegisterControllerRecord 0-0
    ControllerId int32
    IncarnationId uuid
    ZkMigrationReady bool
    EndPoints []ControllerEndpoint
        Name string
        Host string
        Port uint16
        SecurityProtocol int16
    Features []ControllerFeature
        Name string
        MinSupportedVersion int16
        MaxSupportedVersion int16
28 ClearElrRecord 0-0
    TopicName string
"""

# The records of control batches, by control type (the int16 after the key's version).
# Kafka reads each value at version 0 (ControlRecordUtils), whatever its own Version field says.
CONTROL_TABLE = """
2 LeaderChangeMessage 0-1
    Version int16
    LeaderId int32
    Voters []Voter
        VoterId int32
        VoterDirectoryId uuid 1+
    GrantingVoters []Voter
        VoterId int32
        VoterDirectoryId uuid 1+
3 SnapshotHeaderRecord 0-0
    Version int16
    LastContainedLogTimestamp int64
4 SnapshotFooterRecord 0-0
    Version int16
5 KRaftVersionRecord 0-0
    Version int16
    KRaftVersion int16
6 VotersRecord 0-0
    Version int16
    Voters []Voter
        VoterId int32
        VoterDirectoryId uuid
        Endpoints []Endpoint
            Name string
            Host string
            Port uint16
        KRaftVersionFeature KRaftVersionFeature
            MinSupportedVersion int16
            MaxSupportedVersion int16
"""


@dataclass(frozen=True, eq=False)
class FieldSpec:
    """One field of a message: Kafka's name, its type and in which versions it exists."""

    name: str
    type: str
    """A primitive, "[]" + element type, or a struct name (then `fields` holds its fields)."""
    nullable: bool
    first: int
    last: int
    tag: int | None
    default: object
    fields: tuple[FieldSpec, ...] = ()

    @property
    def json_name(self) -> str:
        """The name in Kafka's JSON form: the first letter lowered (LeaderId → leaderId)."""
        return self.name[0].lower() + self.name[1:]

    @property
    def element(self) -> str | None:
        """The element type of an array field, else None."""
        return self.type[2:] if self.type.startswith("[]") else None

    def in_version(self, version: int) -> bool:
        """Whether the field exists in `version` of its message."""
        return self.first <= version <= self.last


@dataclass(frozen=True, eq=False)
class MessageSchema:
    """One message of the table: its id (api key or control type), name and valid versions."""

    id: int
    name: str
    first: int
    last: int
    fields: tuple[FieldSpec, ...] = field(repr=False)

    @property
    def type_name(self) -> str:
        """Kafka's MetadataRecordType name: TopicRecord → TOPIC_RECORD."""
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", self.name).upper()


_Entry = tuple[FieldSpec, list["_Entry"]]
"""A parsed field line and the lines nested under it."""

_HEADER = re.compile(r"(\d+) (\w+) (\d+)-(\d+)$")
_VERSIONS = re.compile(r"(\d+)(\+|-(\d+))$")
_NO_LAST = 0x7FFF


def _default(type_: str, nullable: bool, text: str | None) -> object:
    if text is not None:
        return {"true": True, "false": False}.get(text) if text in ("true", "false") else int(text)
    if nullable:
        return None
    if type_.startswith("[]"):
        return []
    return {"string": "", "bytes": b"", "bool": False, "float64": 0.0,
            "uuid": bytes(16)}.get(type_, 0 if type_ in PRIMITIVES else None)


def _parse_field(line: str) -> FieldSpec:
    name, type_, *mods = line.split()
    nullable = type_.endswith("?")
    type_ = type_.rstrip("?")
    first, last, tag, default = 0, _NO_LAST, None, None
    for mod in mods:
        if mod.startswith("tag="):
            tag = int(mod[4:])
        elif mod.startswith("="):
            default = mod[1:]
        else:
            match = _VERSIONS.match(mod)
            if match is None:
                raise ValueError(f"schema table: cannot read {mod!r} in {line!r}")
            first = int(match.group(1))
            last = _NO_LAST if match.group(2) == "+" else int(match.group(3))
    return FieldSpec(name, type_, nullable, first, last, tag, _default(type_, nullable, default))


def _parse_table(text: str) -> dict[int, MessageSchema]:
    messages: dict[int, MessageSchema] = {}
    # Each entry: (indent, FieldSpec, its child list); the message's own list sits at indent -1.
    header: tuple[int, str, int, int] | None = None
    stack: list[tuple[int, list[_Entry]]] = []

    def close_message() -> None:
        if header is not None:
            key, name, first, last = header
            messages[key] = MessageSchema(key, name, first, last, _freeze(stack[0][1]))

    for raw in text.splitlines():
        if not raw.strip():
            continue
        if not raw.startswith(" "):
            close_message()
            match = _HEADER.match(raw)
            if match is None:
                raise ValueError(f"schema table: bad message line {raw!r}")
            header = (int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4)))
            stack = [(-1, [])]
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        children: list[_Entry] = []
        stack[-1][1].append((_parse_field(raw), children))
        stack.append((indent, children))
    close_message()
    return messages


def _freeze(entries: list[_Entry]) -> tuple[FieldSpec, ...]:
    out = []
    for spec, children in entries:
        if children:
            spec = FieldSpec(spec.name, spec.type, spec.nullable, spec.first, spec.last, spec.tag, spec.default,
                             _freeze(children))
        out.append(spec)
    return tuple(out)


METADATA_SCHEMAS: dict[int, MessageSchema] = _parse_table(METADATA_TABLE)
"""Metadata records by api key."""
CONTROL_SCHEMAS: dict[int, MessageSchema] = _parse_table(CONTROL_TABLE)
"""KRaft control records by control type."""
METADATA_BY_TYPE_NAME: dict[str, MessageSchema] = {s.type_name: s for s in METADATA_SCHEMAS.values()}
"""Metadata records by Kafka's type name (TOPIC_RECORD) and by message name (TopicRecord)."""
METADATA_BY_TYPE_NAME.update({s.name: s for s in METADATA_SCHEMAS.values()})


# -- the generic reader: each read(buf, pos) returns (value, next position) ----------------------
# A read past the end surfaces as struct.error or IndexError; the callers turn it into CorruptRecordError.

def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint) and the position after it."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, end = K.decode_unsigned_varint(buf, pos)
    if end - pos > 5:
        raise CorruptRecordError("unsigned varint is longer than 5 bytes", pos)
    return value, end


def _length(buf: bytes, pos: int, nullable: bool, what: str) -> tuple[int, int]:
    """A compact length (-1 for null) that fits in what is left of `buf`."""
    n, after = uvarint(buf, pos)
    n -= 1
    if n < 0 and not nullable:
        raise CorruptRecordError(f"null {what} where Kafka's schema has none", pos)
    if n > len(buf) - after:
        raise CorruptRecordError(f"{what} of {n} runs past the end of the record ({len(buf)} bytes)", pos)
    return n, after


_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d", "bool": "?",
          "uuid": "16s"}
"""The struct format of each fixed-size type."""


def _fixed(fmt: str) -> Reader:
    unpack, size = struct.Struct(">" + fmt).unpack_from, struct.calcsize(">" + fmt)
    return lambda buf, pos: (unpack(buf, pos)[0], pos + size)


def _text(nullable: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[str | None, int]:
        n = buf[pos]
        if 0 < n < 0x80:  # a short string: its length in one byte
            start, end = pos + 1, pos + n
            if end > len(buf):
                raise CorruptRecordError(f"string of {n - 1} runs past the end of the record ({len(buf)} bytes)",
                                         pos)
        else:
            n, start = _length(buf, pos, nullable, "string")
            if n < 0:
                return None, start
            end = start + n
        try:
            return buf[start:end].decode("utf-8"), end
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"string is not UTF-8 ({exc.reason})", start + exc.start) from None
    return read


def _blob(nullable: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[bytes | None, int]:
        n, pos = _length(buf, pos, nullable, "byte string")
        return (None, pos) if n < 0 else (buf[pos:pos + n], pos + n)
    return read


def _int32_array(nullable: bool) -> Reader:
    # Replica lists are most of a PartitionRecord: one unpack for the whole array.
    def read(buf: bytes, pos: int) -> tuple[list[int] | None, int]:
        n, pos = _length(buf, pos, nullable, "array")
        return (None, pos) if n < 0 else (list(struct.unpack_from(f">{n}i", buf, pos)), pos + 4 * n)
    return read


def _array(element: Reader, nullable: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[list[Any] | None, int]:
        n, pos = _length(buf, pos, nullable, "array")
        if n < 0:
            return None, pos
        out: list[Any] = []
        for _ in range(n):
            value, pos = element(buf, pos)
            out.append(value)
        return out, pos
    return read


_READ = {type_: _fixed(fmt) for type_, fmt in _FIXED.items()}


class _Layout:
    """One message at one version, ready to decode: (json name, reader, presenter) per field."""

    def __init__(self, fields: tuple[FieldSpec, ...], version: int) -> None:
        present = [f for f in fields if f.in_version(version)]
        self.regular = tuple((f.json_name, _reader(f, version), _presenter(f)) for f in present if f.tag is None)
        self.tagged: dict[int, tuple[str, Reader, Presenter | None, object]] = {
            f.tag: (f.json_name, _reader(f, version), _presenter(f), f.default)
            for f in present if f.tag is not None}
        self.specs = present


def _reader(spec: FieldSpec, version: int) -> Reader:
    element = spec.element
    if element is None:
        if spec.type in ("string", "bytes"):
            return (_text if spec.type == "string" else _blob)(spec.nullable)
        if spec.type in PRIMITIVES:
            return _READ[spec.type]
        layout = _Layout(spec.fields, version)
        return lambda buf, pos: _decode_struct(layout, buf, pos)
    if element == "int32":
        return _int32_array(spec.nullable)
    inner = FieldSpec(spec.name, element, False, spec.first, spec.last, None, None, spec.fields)
    return _array(_reader(inner, version), spec.nullable)


def _presenter(spec: FieldSpec) -> Presenter | None:
    """Raw value → Kafka's form, for uuids (base64url text); None when the raw value is the form."""
    if spec.type == "uuid":
        return topic_id_to_string
    if spec.type == "[]uuid":
        return lambda raw: None if raw is None else [topic_id_to_string(u) for u in raw]
    return None


def _decode_struct(layout: _Layout, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    for name, read, present in layout.regular:
        value, pos = read(buf, pos)
        out[name] = value if present is None else present(value)
    count, pos = uvarint(buf, pos)
    for _ in range(count):
        tag, pos = uvarint(buf, pos)
        size, pos = uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise CorruptRecordError(f"tagged field {tag} of {size} bytes runs past the end of the record", pos)
        known = layout.tagged.get(tag)
        if known is not None:  # unknown tags are skipped, as Kafka keeps them aside
            name, read, present, default = known
            value, after = read(buf, pos)
            if after != end:
                raise CorruptRecordError(f"tagged field {tag} holds {size} bytes, its value {after - pos}", pos)
            value = value if present is None else present(value)
            if value != default:
                out[name] = value
        pos = end
    return out, pos


_LAYOUTS: dict[tuple[MessageSchema, int], _Layout] = {}


def _layout(schema: MessageSchema, version: int) -> _Layout:
    found = _LAYOUTS.get((schema, version))
    if found is None:
        found = _LAYOUTS[schema, version] = _Layout(schema.fields, version)
    return found


def decode_message(schema: MessageSchema, version: int, buf: bytes, pos: int = 0) -> tuple[dict[str, Any], int]:
    """The fields of `schema` at `version` from `buf` at `pos` (Kafka's JSON names) and the position after.

    Raises CorruptRecordError, or struct.error/IndexError for bytes that end too soon.
    """
    return _decode_struct(_layout(schema, version), buf, pos)


# -- the generic writer ---------------------------------------------------------------------------

def put_uvarint(out: bytearray, n: int) -> None:
    """Append an unsigned varint."""
    out += K.encode_unsigned_varint(n)


def _put_length(out: bytearray, n: int | None, spec: FieldSpec) -> None:
    if n is None:
        if not spec.nullable:
            raise ValueError(f"{spec.name} may not be null")
        out.append(0)
    else:
        put_uvarint(out, n + 1)


def _pack(fmt: str) -> Writer:
    pack = struct.Struct(fmt).pack
    return lambda out, value: out.extend(pack(value))


def _put_uuid(out: bytearray, value: str | bytes) -> None:
    raw = topic_id_from_string(value) if isinstance(value, str) else bytes(value)
    if len(raw) != 16:
        raise ValueError(f"a uuid is 16 bytes, not {len(raw)}")
    out += raw


_WRITE: dict[str, Writer] = {**{type_: _pack(">" + fmt) for type_, fmt in _FIXED.items()}, "uuid": _put_uuid,
          "bool": lambda out, value: out.append(1 if value else 0)}
_WRITERS: dict[tuple[int, int], Writer] = {}


def _writer(spec: FieldSpec, version: int) -> Writer:
    found = _WRITERS.get((id(spec), version))
    if found is None:
        found = _WRITERS[id(spec), version] = _make_writer(spec, version)
    return found


def _make_writer(spec: FieldSpec, version: int) -> Writer:
    element = spec.element
    if element is not None:
        inner = _make_writer(FieldSpec(spec.name, element, False, spec.first, spec.last, None, None, spec.fields),
                             version)

        def put_array(out: bytearray, values: Sequence[Any] | None) -> None:
            _put_length(out, None if values is None else len(values), spec)
            for value in values or ():
                inner(out, value)
        return put_array
    if spec.type in ("string", "bytes"):
        def put_bytes(out: bytearray, value: str | bytes | None) -> None:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            _put_length(out, None if raw is None else len(raw), spec)
            out += raw or b""
        return put_bytes
    if spec.type in PRIMITIVES:
        return _WRITE[spec.type]
    fields = tuple(f for f in spec.fields if f.in_version(version))
    return lambda out, value: _encode_struct(fields, version, value or {}, out)


def _encode_struct(fields: tuple[FieldSpec, ...], version: int, data: dict[str, Any], out: bytearray) -> None:
    unknown = set(data) - {f.json_name for f in fields}
    if unknown:
        raise ValueError(f"fields not in this version: {sorted(unknown)}")
    tagged: list[tuple[int, FieldSpec]] = []
    for spec in fields:
        if spec.tag is None:
            _writer(spec, version)(out, data.get(spec.json_name, spec.default))
        elif spec.json_name in data and data[spec.json_name] != spec.default:
            tagged.append((spec.tag, spec))
    put_uvarint(out, len(tagged))
    for tag, spec in sorted(tagged, key=lambda t: t[0]):
        payload = bytearray()
        _writer(spec, version)(payload, data[spec.json_name])
        put_uvarint(out, tag)
        put_uvarint(out, len(payload))
        out += payload


def encode_message(schema: MessageSchema, version: int, data: dict[str, Any], out: bytearray) -> None:
    """Append the fields of `schema` at `version`; fields left out of `data` take Kafka's defaults.

    ValueError for a field the version does not have or a value its type cannot hold.
    """
    try:
        _encode_struct(tuple(f for f in schema.fields if f.in_version(version)), version, data, out)
    except (struct.error, TypeError, AttributeError) as exc:
        raise ValueError(f"{schema.name}: {exc}") from None


_LEADING: dict[tuple[MessageSchema, int, int], LeadingReader] = {}


def leading_fields(schema: MessageSchema, version: int, count: int) -> LeadingReader:
    """A reader of the first `count` regular fields of a message: (buf, pos) -> their raw values
    (uuids as 16 bytes), the rest of the message left unread.

    A version newer than the table's is read as the newest known one: Kafka adds fields
    to a record, it does not move the leading ones read here. Fields all of fixed size
    are read with one struct.
    """
    found = _LEADING.get((schema, version, count))
    if found is None:
        layout = _layout(schema, min(version, schema.last))
        specs = [f for f in layout.specs if f.tag is None][:count]
        if all(f.type in _FIXED for f in specs):
            found = struct.Struct(">" + "".join(_FIXED[f.type] for f in specs)).unpack_from
        else:
            readers = tuple(read for _, read, _ in layout.regular[:count])

            def read_leading(buf: bytes, pos: int) -> list[Any]:
                values: list[Any] = []
                for read in readers:
                    value, pos = read(buf, pos)
                    values.append(value)
                return values
            found = read_leading
        _LEADING[schema, version, count] = found
    return found
