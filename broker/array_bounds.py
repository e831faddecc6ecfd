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

The walk is written twice. `_entity` below is the reference, a tree of
closures interpreted at every call; it alone strips tags. The usual frame
(no tag section with anything in it, nothing truncated) goes through a
function generated once per class from the same schema (`_compiled`), the
closure walk unrolled into straight-line Python: the same reads, the same
counts refused with the same messages, in the same order. Whatever that
function does not settle itself (a non-empty tag section, a truncated
value) it hands to the reference walk, from the start.
"""
from __future__ import annotations

import struct
import threading
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


class _WalkState(threading.local):
    """The walk in progress on this thread (large frames are decoded in worker threads, small ones on the
    event loop, at the same time): the tag sections to rewrite, (start, end, known entries), and how deep in
    tagged fields it is. Only top-level sections are rewritten; one nested in a tagged field would change
    that field's size, so such a frame is left for kio to refuse."""

    def __init__(self) -> None:
        self.unknown_tags: list[tuple[int, int, list[tuple[int, int]]]] = []
        self.tag_depth = 0


_state = _WalkState()


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
            if unknown and _state.tag_depth == 0:
                _state.unknown_tags.append((start, pos, known))
        return pos
    return skip


def _walk_tag(skipper: _Skipper, buf: bytes, pos: int, end: int) -> None:
    _state.tag_depth += 1
    try:
        skipper(buf, pos, end)
    finally:
        _state.tag_depth -= 1


def _uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Fallback(Exception):
    """The compiled walk leaves this frame to the reference walk."""


def _slow_uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    try:
        return _uvarint(buf, pos, end)
    except _Stop:
        raise _Fallback from None


class _Gen:
    """Source of a compiled walk: lines and fresh names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def uvarint(self, indent: int, target: str) -> None:
        """`target` = an unsigned varint at `pos` (one byte inline; longer ones, or none, by the helper)."""
        self.emit(indent, f"if pos < end and buf[pos] < 128: {target} = buf[pos]; pos += 1")
        self.emit(indent, f"else: {target}, pos = _uv(buf, pos, end)")

    def advance(self, indent: int, size: int | str) -> None:
        self.emit(indent, f"pos += {size}")
        self.emit(indent, "if pos > end: raise _Fallback")


def _gen_primitive(gen: _Gen, indent: int, kafka_type: str, flexible: bool, legacy_string: bool) -> None:
    size = _FIXED.get(kafka_type)
    n = gen.name("n")
    if size is not None:
        gen.advance(indent, size)
    elif kafka_type in ("string", "bytes", "records"):
        if flexible and not legacy_string:
            gen.uvarint(indent, n)
            gen.emit(indent, f"if {n} > 1: pos += {n} - 1")
        else:
            fmt = "_I16" if kafka_type == "string" else "_I32"
            width = 2 if kafka_type == "string" else 4
            gen.emit(indent, f"if pos + {width} > end: raise _Fallback")
            gen.emit(indent, f"{n} = {fmt}.unpack_from(buf, pos)[0]; pos += {width}")
            gen.emit(indent, f"if {n} > 0: pos += {n}")
    else:
        gen.emit(indent, "raise _Fallback")


def _gen_field(gen: _Gen, indent: int, field: Field[Any], flexible: bool, legacy_string: bool) -> None:
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        _gen_primitive(gen, indent, get_schema_field_type(field), flexible, legacy_string)
        return
    if isinstance(kind, EntityField):
        if is_optional(field):  # KIP-893: an int8 marker, -1 for null
            gen.emit(indent, "if pos >= end: raise _Fallback")
            gen.emit(indent, "pos += 1")
            gen.emit(indent, "if buf[pos - 1] != 0xFF:")
            _gen_entity(gen, indent + 1, kind.type_)
        else:
            _gen_entity(gen, indent, kind.type_)
        return
    assert isinstance(kind, (PrimitiveTupleField, EntityTupleField))
    n = gen.name("n")
    if flexible:
        gen.uvarint(indent, n)
        gen.emit(indent, f"{n} -= 1")
    else:
        gen.emit(indent, "if pos + 4 > end: raise _Fallback")
        gen.emit(indent, f"{n} = _I32.unpack_from(buf, pos)[0]; pos += 4")
    gen.emit(indent, f"if {n} > end - pos: raise _too_many({field.name!r}, {n}, end - pos)")
    if not is_optional(field):
        gen.emit(indent, f"if {n} < 0: raise ArrayCountError({field.name + ': null for a non-nullable array'!r})")
    size = _FIXED.get(get_schema_field_type(field)) if isinstance(kind, PrimitiveTupleField) else None
    if size is not None:
        gen.emit(indent, f"if {n} > 0:")
        gen.advance(indent + 1, f"{size} * {n}")
        return
    gen.emit(indent, f"for _ in range({n}):")
    if isinstance(kind, PrimitiveTupleField):
        _gen_primitive(gen, indent + 1, get_schema_field_type(field), flexible, False)
    else:
        _gen_entity(gen, indent + 1, kind.type_)


def _gen_entity(gen: _Gen, indent: int, cls: type[Entity]) -> None:
    is_header = cls.__name__ == "RequestHeader"
    fixed = 0
    for f in fields(cls):
        if get_field_tag(f) is not None:
            continue
        if isinstance(classify_field(f), PrimitiveField) and get_schema_field_type(f) in _FIXED:
            fixed += _FIXED[get_schema_field_type(f)]
            continue
        if fixed:
            gen.advance(indent, fixed)
            fixed = 0
        _gen_field(gen, indent, f, cls.__flexible__, is_header and f.name == "client_id")
    if fixed:
        gen.advance(indent, fixed)
    if cls.__flexible__:
        # An empty tag section is the usual case; any other (known tags or not) is the reference walk's.
        gen.emit(indent, "if pos < end and buf[pos] == 0: pos += 1")
        gen.emit(indent, "else: raise _Fallback")


def _too_many(what: str, n: int, left: int) -> ArrayCountError:
    return ArrayCountError(f"{what}: {n} elements announced, {left} bytes left")


@cache
def _compiled(cls: type[Entity]) -> _Skipper:
    """The reference walk of `cls` unrolled into one function: (frame, position, end) -> position after."""
    gen = _Gen()
    gen.emit(0, "def walk(buf, pos, end):")
    _gen_entity(gen, 1, cls)
    gen.emit(1, "return pos")
    namespace: dict[str, Any] = {"_uv": _slow_uvarint, "_I16": _I16, "_I32": _I32, "_Fallback": _Fallback,
                                 "_too_many": _too_many, "ArrayCountError": ArrayCountError}
    exec(compile("\n".join(gen.lines) + "\n", f"<array_bounds {cls.__module__}.{cls.__qualname__}>", "exec"),
         namespace)
    walk: _Skipper = namespace["walk"]
    return walk


def check_and_strip(cls: type[Entity], frame: bytes, offset: int) -> bytes:
    """`frame` with the entity at `offset` checked (ArrayCountError) and its unknown tagged fields removed."""
    try:
        _compiled(cls)(frame, offset, len(frame))
        return frame
    except _Fallback:
        pass
    return _check_and_strip(cls, frame, offset)


def _check_and_strip(cls: type[Entity], frame: bytes, offset: int) -> bytes:
    """The reference walk, and the stripping of unknown tags it finds."""
    found = _state.unknown_tags
    found.clear()
    _state.tag_depth = 0
    try:
        _entity(cls)(frame, offset, len(frame))
    except _Stop:
        pass
    if not found:
        return frame
    pieces: list[bytes] = []
    done = 0
    for start, end, known in found:
        pieces.append(frame[done:start])
        pieces.append(_uvarint_bytes(len(known)))
        pieces.extend(frame[a:b] for a, b in known)
        done = end
    pieces.append(frame[done:])
    found.clear()
    return b"".join(pieces)
