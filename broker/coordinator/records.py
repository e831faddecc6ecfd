"""Kafka's message-schema primitives for the records of internal topics (spec §0.3).

Keys and values in `__transaction_state` and `__consumer_offsets` are
"version-prefixed" structs: an int16 version, then fields in plain (int16
string lengths, int32 array counts) or flexible encoding (varint lengths,
a tagged-field section closing every struct). `Reader` bounds every read
and raises `CorruptRecordError`, so a damaged record is reported, not
half-decoded.
"""
from __future__ import annotations

import builtins
import struct
from collections.abc import Callable
from typing import Literal, TypeVar, overload

from logstore.errors import CorruptRecordError

T = TypeVar("T")
_INTS = {1: struct.Struct(">b"), 2: struct.Struct(">h"), 4: struct.Struct(">i"), 8: struct.Struct(">q")}


class Reader:
    """Reads primitives from a bytes-like value, front to back."""

    def __init__(self, data: bytes, what: str):
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{self.what}: {n} bytes wanted at {self.pos}, {len(self.data)} there",
                                     self.pos)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int(self, size: int) -> int:
        """A big-endian signed integer of `size` bytes."""
        value: builtins.int = _INTS[size].unpack(self._take(size))[0]
        return value

    # The methods `int` and `bytes` shadow the builtins in this class's annotations, hence `builtins.`.
    def uvarint(self) -> builtins.int:
        """An unsigned varint (at most 5 bytes)."""
        value = shift = 0
        for _ in range(5):
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise CorruptRecordError(f"{self.what}: varint longer than 5 bytes", self.pos)

    @overload
    def string(self, flexible: bool, nullable: Literal[False] = False) -> str: ...
    @overload
    def string(self, flexible: bool, nullable: bool) -> str | None: ...

    def string(self, flexible: bool, nullable: bool = False) -> str | None:
        """A (compact when flexible) string; None only when `nullable`."""
        n = self.uvarint() - 1 if flexible else self.int(2)
        if n < 0:
            if not nullable:
                raise CorruptRecordError(f"{self.what}: null where a string is required", self.pos)
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self.what}: string is not UTF-8 ({exc.reason})", self.pos) from None

    def bytes(self, flexible: bool) -> builtins.bytes | None:
        """A (compact when flexible) nullable byte string."""
        n = self.uvarint() - 1 if flexible else self.int(4)
        return None if n < 0 else self._take(n)

    @overload
    def array(self, flexible: bool, element: Callable[[], T], nullable: Literal[False] = False) -> list[T]: ...
    @overload
    def array(self, flexible: bool, element: Callable[[], T], nullable: bool) -> list[T] | None: ...

    def array(self, flexible: bool, element: Callable[[], T], nullable: bool = False) -> list[T] | None:
        """A (compact when flexible) array whose elements `element()` reads."""
        n = self.uvarint() - 1 if flexible else self.int(4)
        if n < 0:
            if not nullable:
                raise CorruptRecordError(f"{self.what}: null where an array is required", self.pos)
            return None
        if n > len(self.data) - self.pos:
            raise CorruptRecordError(f"{self.what}: array of {n} in {len(self.data) - self.pos} bytes", self.pos)
        return [element() for _ in range(n)]

    def tagged_fields(self) -> dict[builtins.int, builtins.bytes]:
        """A tagged-field section: tag → raw payload (unknown tags are the caller's to skip)."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self._take(self.uvarint())
        return fields

    def end(self) -> None:
        """Refuse trailing bytes."""
        if self.pos != len(self.data):
            raise CorruptRecordError(f"{self.what}: {len(self.data) - self.pos} bytes left over", self.pos)


class Writer:
    """Builds a struct from primitives, front to back."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int(self, size: int, value: int) -> Writer:
        """A big-endian signed integer of `size` bytes."""
        self.parts.append(_INTS[size].pack(value))
        return self

    # The method `int` shadows the builtin in this class's annotations, hence `builtins.int`.
    def uvarint(self, value: builtins.int) -> Writer:
        """An unsigned varint."""
        out = bytearray()
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
        self.parts.append(bytes(out))
        return self

    def string(self, flexible: bool, value: str | None) -> Writer:
        """A (compact when flexible) string; None writes null."""
        data = None if value is None else value.encode("utf-8")
        return self.bytes_(flexible, data, length_size=2)

    def bytes_(self, flexible: bool, value: bytes | None, length_size: builtins.int = 4) -> Writer:
        """A (compact when flexible) byte string; None writes null."""
        n = -1 if value is None else len(value)
        if flexible:
            self.uvarint(n + 1)
        else:
            self.int(length_size, n)
        if value is not None:
            self.parts.append(bytes(value))
        return self

    def array_header(self, flexible: bool, count: builtins.int | None) -> Writer:
        """The count of an array whose elements the caller writes next; None writes null."""
        n = -1 if count is None else count
        return self.uvarint(n + 1) if flexible else self.int(4, n)

    def tagged_fields(self, fields: dict[builtins.int, bytes] | None = None) -> Writer:
        """A tagged-field section, tags in increasing order."""
        fields = fields or {}
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag).uvarint(len(fields[tag]))
            self.parts.append(fields[tag])
        return self

    def getvalue(self) -> bytes:
        """The bytes written."""
        return b"".join(self.parts)
