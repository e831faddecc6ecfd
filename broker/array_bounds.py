"""Array counts checked against the frame before kio reads a request.

kio's native reader (kio 0.6.5, pinned) reserves room for an array's declared
element count before it reads an element, and a reservation that fails aborts
the process: a 60-byte Metadata request announcing 2**32 topics killed the
broker. Every element costs at least one byte on the wire, so a count larger
than the bytes left in the frame cannot be honest; this walk, over the same
kio schema classes the reader uses, refuses such a count with
`ArrayCountError` before kio sees the frame. It checks counts only: anything
else malformed stops the walk and is left for kio to report.

The same walk finds tagged fields whose tag the schema does not know. Kafka
skips those (a newer client may send them); kio's reader raises instead, so
`check_and_strip` returns the frame without them for kio to read.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import Field, fields
from functools import cache
from typing import TYPE_CHECKING, Any, TypeAlias

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

if TYPE_CHECKING:
    from kio.static.protocol import Entity

__all__ = ["ArrayCountError", "check_and_strip"]

_FIXED = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
          "float64": 8, "bool": 1, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8,
          "uuid": 16}
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


# Skips one value: (frame, position, end of frame) -> the position after it.
_Skipper: TypeAlias = Callable[[bytes, int, int], int]


class ArrayCountError(ValueError):
    """An array or tagged-field count larger than the bytes left in the frame, or a null array count where
    the schema allows none."""


# Tag sections to rewrite, found by the walk in progress: (start, end, known entries).
# Only top-level sections are rewritten; one nested in a tagged field would change
# that field's size, so such a frame is left for kio to refuse.
_unknown_tags: list[tuple[int, int, list[tuple[int, int]]]] = []
_tag_depth = 0


class _Stop(Exception):
    """The walk cannot go on (malformed in some other way): kio will say how."""


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 35:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise _Stop


def _int(fmt: struct.Struct, buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + fmt.size > end:
        raise _Stop
    value: int = fmt.unpack_from(buf, pos)[0]
    return value, pos + fmt.size


def _count(buf: bytes, pos: int, end: int, flexible: bool, what: str) -> tuple[int, int]:
    """An array's element count (-1 for null), checked against the bytes after it."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        n -= 1
    else:
        n, pos = _int(_I32, buf, pos, end)
    if n > end - pos:
        raise ArrayCountError(f"{what}: {n} elements announced, {end - pos} bytes left")
    return max(n, -1), pos


def _primitive(kafka_type: str, flexible: bool, legacy_string: bool) -> _Skipper:
    """A skipper for one primitive value: (buf, pos, end) -> pos."""
    size = _FIXED.get(kafka_type)
    if size is not None:
        def skip(buf: bytes, pos: int, end: int) -> int:
            if pos + size > end:
                raise _Stop
            return pos + size
    elif kafka_type in ("string", "bytes", "records"):
        if flexible and not legacy_string:
            def skip(buf: bytes, pos: int, end: int) -> int:
                n, pos = _uvarint(buf, pos, end)
                return pos + max(n - 1, 0)
        else:
            length = _I16 if kafka_type == "string" else _I32

            def skip(buf: bytes, pos: int, end: int) -> int:
                n, pos = _int(length, buf, pos, end)
                return pos + max(n, 0)
    else:
        def skip(buf: bytes, pos: int, end: int) -> int:
            raise _Stop
    return skip


def _field(field: Field[Any], flexible: bool, legacy_string: bool, is_tag: bool) -> _Skipper:
    """A skipper for one field of an entity."""
    kind = classify_field(field)
    where = field.name
    if isinstance(kind, PrimitiveField):
        return _primitive(get_schema_field_type(field), flexible, legacy_string)
    if isinstance(kind, EntityField):
        inner = _entity(kind.type_)
        if is_tag or not is_optional(field):
            return inner

        def skip_nullable(buf: bytes, pos: int, end: int) -> int:  # KIP-893: an int8 marker, -1 for null
            marker, pos = (buf[pos], pos + 1) if pos < end else (None, pos)
            if marker is None:
                raise _Stop
            return pos if marker == 0xFF else inner(buf, pos, end)
        return skip_nullable
    element = (_primitive(get_schema_field_type(field), flexible, False) if isinstance(kind, PrimitiveTupleField)
               else _entity(kind.type_))
    assert isinstance(kind, (PrimitiveTupleField, EntityTupleField))
    nullable = is_optional(field)

    def skip_array(buf: bytes, pos: int, end: int) -> int:
        n, pos = _count(buf, pos, end, flexible, where)
        # kio reads a null count of a non-nullable array as None, which no handler expects; Kafka's
        # generated readers refuse it.
        if n < 0 and not nullable:
            raise ArrayCountError(f"{where}: null for a non-nullable array")
        for _ in range(n):
            pos = element(buf, pos, end)
        return pos
    return skip_array


@cache
def _entity(cls: type[Entity]) -> _Skipper:
    """A skipper for a whole entity of kio class `cls`, tagged fields included."""
    flexible = cls.__flexible__
    is_header = cls.__name__ == "RequestHeader"
    plain: list[_Skipper | int] = []  # skippers, and byte counts for runs of fixed-size fields
    tagged: dict[int, _Skipper] = {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            tagged[tag] = _field(f, flexible, False, True)
        elif isinstance(classify_field(f), PrimitiveField) and get_schema_field_type(f) in _FIXED:
            size = _FIXED[get_schema_field_type(f)]
            if plain and isinstance(plain[-1], int):
                plain[-1] += size
            else:
                plain.append(size)
        else:
            # RequestHeader.client_id keeps the classic string even in header v2, as Kafka does.
            plain.append(_field(f, flexible, is_header and f.name == "client_id", False))

    def skip(buf: bytes, pos: int, end: int) -> int:
        for skipper in plain:
            if isinstance(skipper, int):
                pos += skipper
                if pos > end:
                    raise _Stop
            else:
                pos = skipper(buf, pos, end)
        if flexible:
            start = pos
            n, pos = _uvarint(buf, pos, end)
            if n > end - pos:
                raise ArrayCountError(f"{cls.__name__}: {n} tagged fields announced, {end - pos} bytes left")
            known: list[tuple[int, int]] = []
            unknown = False
            for _ in range(n):
                entry = pos
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                if pos + size > end:
                    raise _Stop
                if tag in tagged:
                    _walk_tag(tagged[tag], buf, pos, pos + size)
                    known.append((entry, pos + size))
                else:
                    unknown = True
                pos += size
            if unknown and _tag_depth == 0:
                _unknown_tags.append((start, pos, known))
        return pos
    return skip


def _walk_tag(skipper: _Skipper, buf: bytes, pos: int, end: int) -> None:
    global _tag_depth
    _tag_depth += 1
    try:
        skipper(buf, pos, end)
    finally:
        _tag_depth -= 1


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def check_and_strip(cls: type[Entity], frame: bytes, offset: int) -> bytes:
    """`frame` with the entity at `offset` checked (ArrayCountError) and its unknown tagged fields removed."""
    global _tag_depth
    _unknown_tags.clear()
    _tag_depth = 0
    try:
        _entity(cls)(frame, offset, len(frame))
    except _Stop:
        pass
    if not _unknown_tags:
        return frame
    pieces: list[bytes] = []
    done = 0
    for start, end, known in _unknown_tags:
        pieces.append(frame[done:start])
        pieces.append(_uvarint_bytes(len(known)))
        pieces.extend(frame[a:b] for a, b in known)
        done = end
    pieces.append(frame[done:])
    _unknown_tags.clear()
    return b"".join(pieces)
