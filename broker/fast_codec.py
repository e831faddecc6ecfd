"""Response encoders compiled once per kio class: kio's bytes, in few operations.

kio's `entity_writer` walks a response field by field at every call: a
writer function, a `struct.pack` and a `write()` per field, a BytesIO per
entity for its tag section. That walk is a fixed function of the schema, so
here it is unrolled once per (class) into Python source and `exec`ed:
runs of fixed-width fields become one `Struct.pack` (an empty tag section
after them one pad byte of the same pack), nested entities and arrays are
inlined as loops, compact lengths below 128 one `bytearray.append`. The
generated function appends the entity to a `bytearray`; a `bytes`/`records`
value of 64 KiB or more is kept as its own part, not copied (as
`protocol.ResponseFrame` does).

The layout is kio's (0.6.5, pinned), itself Kafka's generated serializers:
the same cases as `kio.serial._serialize.get_writer`, tagged fields sorted by
tag and left out when equal to their default (KIP-482), a nullable entity
behind an int8 marker (KIP-893). kio stays the oracle:
tests/broker/test_fast_codec.py checks every served API and version against
it. `source_of` shows the generated code.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import TYPE_CHECKING, Any, TypeAlias

from kio.serial._implicit_defaults import get_tagged_field_default
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

__all__ = ["Encoder", "entity_encoder", "encoder_of", "source_of", "BIG"]

# (entity, out, parts) -> None: the entity's bytes appended to `out`; a large value makes `out` so far
# and then itself parts of their own (`out` is emptied, not replaced).
Encoder: TypeAlias = Callable[[Any, bytearray, list[Any]], None]

# A bytes value at least this long is a part of its own rather than copied into the frame.
BIG = 65536

# Fixed-width kafka types: struct code, and how the field's value becomes what struct packs ("{}" is the
# value's expression; it may be evaluated twice, a plain attribute read).
_FIXED: dict[str, tuple[str, str]] = {
    "int8": ("b", "{}"), "int16": ("h", "{}"), "int32": ("i", "{}"), "int64": ("q", "{}"),
    "uint8": ("B", "{}"), "uint16": ("H", "{}"), "uint32": ("I", "{}"), "uint64": ("Q", "{}"),
    "float64": ("d", "{}"), "bool": ("?", "{}"), "error_code": ("h", "{}.value"),
    "timedelta_i32": ("i", "round({}.total_seconds() * 1000)"),
    "timedelta_i64": ("q", "round({}.total_seconds() * 1000)"),
    "datetime_i64": ("q", "round({}.timestamp() * 1000)"),
    "uuid": ("16s", "(_ZERO16 if {0} is None else {0}.bytes)"),
}
# Fixed-width types a None is written for (kio's write_uuid, write_nullable_datetime_i64).
_NULLABLE_FIXED = {"uuid": "(_ZERO16 if {0} is None else {0}.bytes)",
                   "datetime_i64": "(-1 if {0} is None else round({0}.timestamp() * 1000))"}


def _uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (kio's _write_varint, at once)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_GLOBALS: dict[str, Any] = {"_uv": _uvarint, "_ZERO16": bytes(16), "_BIG": BIG,
                            "_H": struct.Struct(">h").pack, "_I": struct.Struct(">i").pack}


class _Source:
    """Python source being generated: lines, fresh names, and the constants it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, value: Any, stem: str) -> str:
        name = self.name(stem)
        self.consts[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


class _Run:
    """Fixed-width fields waiting to be packed together: struct codes and the expressions packed."""

    def __init__(self) -> None:
        self.codes: list[str] = []
        self.values: list[str] = []

    def flush(self, src: _Source, indent: int, out: str, pad: bool = False) -> bool:
        """Emit one pack of the run (plus a zero byte if `pad`); False if there was nothing to pack."""
        if not self.codes:
            return False
        codes = "".join(self.codes) + ("x" if pad else "")
        pack = src.const(struct.Struct(">" + codes).pack, "_pack")
        src.emit(indent, f"{out} += {pack}({', '.join(self.values)})")
        self.codes, self.values = [], []
        return True


def _length(src: _Source, indent: int, out: str, count: str, compact: bool) -> None:
    """A length or count `count` (already +1 if compact) in its wire form."""
    if compact:
        src.emit(indent, f"if {count} < 128: {out}.append({count})")
        src.emit(indent, f"else: {out} += _uv({count})")
    else:
        src.emit(indent, f"{out} += _I({count})")


def _bytes_value(src: _Source, indent: int, out: str, value: str, big: bool) -> None:
    """A bytes value after its length: copied into `out`, or (if `big` may be) a part of its own when large."""
    if big:
        src.emit(indent, f"if len({value}) >= _BIG: parts.append(bytes({out})); {out}.clear(); parts.append({value})")
        src.emit(indent, f"else: {out} += {value}")
    else:
        src.emit(indent, f"{out} += {value}")


def _primitive(src: _Source, indent: int, out: str, kafka_type: str, value: str, flexible: bool,
               optional: bool, legacy_string: bool, big: bool) -> None:
    """One non-fixed primitive value (a string, bytes or records), as kio's writer for it."""
    if kafka_type not in ("string", "bytes", "records"):
        raise NotImplementedError(f"no writer for {kafka_type!r} {flexible=} {optional=}")
    v = src.name("s")
    src.emit(indent, f"{v} = {value}")
    body = indent
    if optional:
        compact = flexible and not legacy_string
        null = f"{out}.append(0)" if compact else f"{out} += {'_H' if kafka_type == 'string' else '_I'}(-1)"
        src.emit(indent, f"if {v} is None: {null}")
        src.emit(indent, "else:")
        body = indent + 1
    if flexible and not legacy_string:
        # kio's compact writer takes a str or bytes whatever the declared type.
        src.emit(body, f"if isinstance({v}, str): {v} = {v}.encode()")
        n = src.name("n")
        src.emit(body, f"{n} = len({v}) + 1")
        _length(src, body, out, n, True)
        _bytes_value(src, body, out, v, big and kafka_type != "string")
    elif kafka_type == "string":
        src.emit(body, f"{v} = {v}.encode()")
        src.emit(body, f"{out} += _H(len({v}))")
        src.emit(body, f"{out} += {v}")
    else:
        src.emit(body, f"{out} += _I(len({v}))")
        _bytes_value(src, body, out, v, big)


def _fixed_code(kafka_type: str, optional: bool) -> tuple[str, str] | None:
    """(struct code, value template) of a fixed-width field kio writes, None if not fixed-width."""
    if kafka_type not in _FIXED:
        return None
    code, template = _FIXED[kafka_type]
    if optional:
        if kafka_type not in _NULLABLE_FIXED:
            raise NotImplementedError(f"no writer for nullable {kafka_type!r}")
        template = _NULLABLE_FIXED[kafka_type]
    return code, template


def _field(src: _Source, indent: int, out: str, field: Field[Any], value: str, flexible: bool,
           is_header: bool, is_tag: bool, run: _Run, big: bool) -> None:
    """One field of an entity: added to `run` if fixed-width, else `run` flushed and the field emitted."""
    kind = classify_field(field)
    optional = False if is_tag else is_optional(field)
    if isinstance(kind, PrimitiveField):
        kafka_type = get_schema_field_type(field)
        fixed = _fixed_code(kafka_type, optional or kafka_type == "uuid")
        if fixed is not None:
            run.codes.append(fixed[0])
            run.values.append(fixed[1].format(value))
            return
        run.flush(src, indent, out)
        _primitive(src, indent, out, kafka_type, value, flexible, optional,
                   is_header and field.name == "client_id", big)
        return
    run.flush(src, indent, out)
    if isinstance(kind, EntityField):
        if not optional:
            _entity(src, indent, out, kind.type_, value, big)
            return
        v = src.name("e")
        src.emit(indent, f"{v} = {value}")
        src.emit(indent, f"if {v} is None: {out}.append(255)")
        src.emit(indent, "else:")
        src.emit(indent + 1, f"{out}.append(1)")
        _entity(src, indent + 1, out, kind.type_, v, big)
        return
    assert isinstance(kind, (PrimitiveTupleField, EntityTupleField))
    items, item = src.name("a"), src.name("x")
    src.emit(indent, f"{items} = {value}")
    src.emit(indent, f"if {items} is None: {out}" + (".append(0)" if flexible else " += _I(-1)"))
    src.emit(indent, "else:")
    n = src.name("n")
    src.emit(indent + 1, f"{n} = len({items}){' + 1' if flexible else ''}")
    _length(src, indent + 1, out, n, flexible)
    src.emit(indent + 1, f"for {item} in {items}:")
    if isinstance(kind, EntityTupleField):
        _entity(src, indent + 2, out, kind.type_, item, big)
        return
    kafka_type = get_schema_field_type(field)
    fixed = _fixed_code(kafka_type, kafka_type == "uuid")
    if fixed is None:
        _primitive(src, indent + 2, out, kafka_type, item, flexible, False, False, big)
    else:
        inner = _Run()
        inner.codes.append(fixed[0])
        inner.values.append(fixed[1].format(item))
        inner.flush(src, indent + 2, out)


def _entity(src: _Source, indent: int, out: str, cls: type[Entity], value: str, big: bool) -> None:
    """A whole entity of class `cls` whose expression is `value`, tag section included."""
    flexible = cls.__flexible__
    is_header = cls.__name__ == "RequestHeader"
    v = value if value.isidentifier() else src.name("v")
    if v != value:
        src.emit(indent, f"{v} = {value}")
    run = _Run()
    tagged: list[tuple[int, Field[Any]]] = []
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is not None:
            tagged.append((tag, f))
            continue
        _field(src, indent, out, f, f"{v}.{f.name}", flexible, is_header, False, run, big)
    if tagged and not flexible:
        raise ValueError("Found tagged fields on a non-flexible model")
    if not flexible:
        run.flush(src, indent, out)
        return
    if not tagged:
        if not run.flush(src, indent, out, pad=True):
            src.emit(indent, f"{out}.append(0)")
        return
    run.flush(src, indent, out)
    count, section = src.name("tn"), src.name("tb")
    src.emit(indent, f"{count} = 0")
    src.emit(indent, f"{section} = bytearray()")
    for number, f in sorted(tagged, key=lambda pair: pair[0]):
        # kio leaves a tagged field out when it equals its default (explicit, else the type's implicit one).
        default = f.default if f.default is not MISSING else get_tagged_field_default(f)
        t = src.name("t")
        src.emit(indent, f"{t} = {v}.{f.name}")
        src.emit(indent, f"if not ({t} == {src.const(default, '_d')}):")
        sub = src.name("sub")
        src.emit(indent + 1, f"{sub} = bytearray()")
        inner = _Run()
        _field(src, indent + 1, sub, f, t, flexible, is_header, True, inner, False)
        inner.flush(src, indent + 1, sub)
        src.emit(indent + 1, f"{section} += _uv({number}); {section} += _uv(len({sub})); {section} += {sub}")
        src.emit(indent + 1, f"{count} += 1")
    _length(src, indent, out, count, True)
    src.emit(indent, f"{out} += {section}")


@cache
def _compiled(cls: type[Entity]) -> tuple[Encoder, str]:
    src = _Source()
    src.emit(0, "def encode(v, out, parts):")
    start = len(src.lines)
    _entity(src, 1, "out", cls, "v", True)
    if len(src.lines) == start:
        src.emit(1, "pass")
    text = "\n".join(src.lines) + "\n"
    namespace = {**_GLOBALS, **src.consts}
    exec(compile(text, f"<fast_codec {cls.__module__}.{cls.__qualname__}>", "exec"), namespace)
    return namespace["encode"], text


def encoder_of(cls: type[Entity]) -> Encoder:
    """The compiled encoder of kio class `cls` (made once): appends an entity's bytes to a bytearray."""
    return _compiled(cls)[0]


def source_of(cls: type[Entity]) -> str:
    """The generated source of `cls`'s encoder, for reading and debugging."""
    return _compiled(cls)[1]


def entity_encoder(cls: type[Entity]) -> Callable[[Any], bytes]:
    """A function returning an entity's bytes, exactly kio's `entity_writer(cls)` output."""
    encode = encoder_of(cls)

    def encoded(entity: Any) -> bytes:
        out = bytearray()
        parts: list[Any] = []
        encode(entity, out, parts)
        if not parts:
            return bytes(out)
        parts.append(out)
        return b"".join(parts)
    return encoded
