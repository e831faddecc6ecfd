"""Kafka's framing and headers, with `kio` for every schema.

A request frame is `int32 size` + request header (v1, or v2 for flexible
versions) + body; a response is `int32 size` + response header (v0, or v1
for flexible versions, except ApiVersions which is always v0) + body. kio
knows which header goes with which (api key, version) through each class's
`__header_schema__`; this module only adds the size prefix, the lookups
cached per version, the check of array counts (`array_bounds`) that kio's
reader needs in front of it, and the parts of the responses encoded natively
(`logstore.native.wire`: Produce in, Fetch out), file ranges among them.
Responses are written with kio's layout but not its writer: by encoders
compiled once per class from kio's schema (`fast_codec`), ten times faster.
"""
from __future__ import annotations

import os
import resource
import struct
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar, cast

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import DecodeError
from kio.static.primitive import i32, i32Timedelta

from logstore.broker.array_bounds import check_and_strip
from logstore.broker.fast_codec import Encoder, encoder_of
from logstore.native.wire import WireError, decode_offset_commit, decode_produce

if TYPE_CHECKING:
    from kio.serial.readers import Reader
    from kio.static.protocol import RequestHeader, RequestPayload, ResponseHeader, ResponsePayload

    from logstore.segment import FileSlice

__all__ = ["SENDFILE_MIN_BYTES", "hold",
           "ErrorCode", "ProtocolError", "UnsupportedRequest", "ZERO_MS", "decode_request", "encode_response",
           "peek_api", "HeldSlice", "PreEncoded", "ResponseFrame", "encode_body", "frame_of_body", "decode_kio",
           "encode_kio", "native_decoder", "native_encoder", "decode_native_produce", "decode_native_offset_commit",
           "PartitionRows", "EndTxnAnswer", "NATIVE_ANSWERS", "Part"]

B = TypeVar("B")
_API = struct.Struct(">hhi")
_HEAD = struct.Struct(">ii")   # a response frame's size and correlation id
ZERO_MS = i32Timedelta.parse(timedelta(0))


class ProtocolError(Exception):
    """A frame that cannot be read: the connection is closed, as Kafka does."""


class UnsupportedRequest(ProtocolError):
    """An API key or version with no schema here."""


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) from a frame's first 8 bytes."""
    if len(frame) < _API.size:
        raise ProtocolError(f"a request of {len(frame)} bytes has no header")
    return _API.unpack_from(frame, 0)


@cache
def _request_codec(api_key: int, version: int) -> tuple[
        type[RequestHeader], Reader[RequestHeader], type[RequestPayload], Reader[RequestPayload]]:
    try:
        cls = load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedRequest(f"no schema for api key {api_key} version {version}") from None
    return cls.__header_schema__, entity_reader(cls.__header_schema__), cls, entity_reader(cls)


@cache
def _response_codec(api_key: int, version: int) -> tuple[bytes, Encoder]:
    """(the frame's first bytes with size and correlation id zero, the body's compiled encoder)."""
    cls = load_response_schema(api_key, version)
    header_cls: type[ResponseHeader] = cls.__header_schema__
    head = bytearray(4)
    # A correlation id is the request's int32, echoed: kio's i32 in all but name.
    encoder_of(header_cls)(header_cls(correlation_id=cast(i32, 0)), head, [])
    # Response headers v0 and v1: the correlation id, then (v1) an empty tag section, packed in place below.
    if len(head) not in (8, 9):
        raise AssertionError(f"{header_cls.__module__}: an unexpected response header of {len(head) - 4} bytes")
    return bytes(head), encoder_of(cls)


def decode_request(frame: bytes) -> tuple[RequestHeader, RequestPayload]:
    """(header, body) of a whole request frame (the bytes after the size prefix)."""
    api_key, version, _ = peek_api(frame)
    header_cls, read_header, body_cls, read_body = _request_codec(api_key, version)
    try:
        # kio would reserve room for any count before reading an element (and abort the process
        # if that fails), so the counts are checked against the frame first; tagged fields kio
        # does not know are removed, as Kafka skips them.
        frame = check_and_strip(header_cls, frame, 0)
        header, header_size = read_header(frame, 0)
        frame = check_and_strip(body_cls, frame, header_size)
        body, _ = read_body(frame, header_size)
    # kio raises a bare KeyError for a tagged field it does not know (left only inside a tagged field).
    except (DecodeError, KeyError, ValueError) as exc:
        raise ProtocolError(f"api key {api_key} v{version}: {exc!r}") from None
    # Bytes after the body are ignored, as Kafka does: librdkafka's all-topics
    # Metadata request (v9+) keeps a 4-byte array-count placeholder of which only
    # the first byte (compact null) is the count, so it always ends 3 bytes long.
    return header, body


def decode_kio(frame: bytes) -> tuple[str | None, RequestPayload]:
    """(client id, body) of a request frame, through kio: every API's default decoder."""
    header, body = decode_request(frame)
    return header.client_id, body


def native_decoder(decode: Callable[[bytes], tuple[str | None, B]],
                   name: str) -> Callable[[bytes], tuple[str | None, B]]:
    """`decode`, a native decoder of whole frames, with what it cannot read as a ProtocolError naming `name`."""
    def decode_frame(frame: bytes) -> tuple[str | None, B]:
        try:
            return decode(frame)
        except (WireError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"{name} v{peek_api(frame)[1]}: {exc}") from None
    return decode_frame


def native_encoder(encode: Callable[..., list[bytes]]) -> Callable[[int, int, Any], PreEncoded]:
    """A native answer encoder as an API's: `encode(correlation id, version, *answer)`, the answer's fields in
    the encoder's order (`PartitionRows`: throttle_ms, topics; `EndTxnAnswer`: all four)."""
    def encode_frame(correlation_id: int, version: int, answer: Any) -> PreEncoded:
        return PreEncoded(encode(correlation_id, version, *answer))
    return encode_frame


# (client id, body) of a frame, natively with kio's field names; Produce's records stay views of the frame.
decode_native_produce = native_decoder(decode_produce, "Produce")
decode_native_offset_commit = native_decoder(decode_offset_commit, "OffsetCommit")


def read_header_only(frame: bytes, api_key: int, version: int) -> RequestHeader:
    """The request header of a frame whose body this broker cannot decode (ApiVersions from the future)."""
    from kio.schema.request_header.v1 import RequestHeader as V1
    from kio.schema.request_header.v2 import RequestHeader as V2
    header_cls: type[RequestHeader] = V2 if version >= 3 else V1
    try:
        header, _ = entity_reader(header_cls)(frame, 0)
    # As decode_request: a header that does not read closes the connection, with a line saying why.
    except (DecodeError, KeyError, ValueError) as exc:
        raise ProtocolError(f"api key {api_key} v{version}: {exc!r}") from None
    return header


# Below this a file range is copied into its reply; above, sendfile's pause of the
# connection's reads costs less than the copy through user space.
SENDFILE_MIN_BYTES = 64 * 1024


def _held_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(soft, 1 << 20) // 8)


class HeldSlice:
    """A file range a response will send, on the duplicate of the segment's fd its read made.

    The duplicate keeps the bytes readable however long the reply waits in
    the connection's queue: retention may close and unlink the segment
    meanwhile, and the number of a closed fd can be reused by another file.
    """

    __slots__ = ("fd", "position", "size")

    # Held descriptors of the whole process: every queued reply keeps its own until sent or dropped, so
    # past `limit` (an eighth of the open-files limit) ranges are copied instead (`hold`).
    held = 0
    limit = _held_limit()

    def __init__(self, file_slice: FileSlice):
        self.fd = file_slice.detach()
        self.position = file_slice.position
        self.size = file_slice.size
        if self.fd >= 0:
            HeldSlice.held += 1

    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        """The bytes of the range (or of `size` bytes from `offset` within it)."""
        size = self.size - offset if size is None else min(size, self.size - offset)
        return os.pread(self.fd, size, self.position + offset)

    def fileno(self) -> int:
        return self.fd

    def seek(self, offset: int, whence: int = 0) -> int:
        # asyncio's sendfile moves the "file position" when it ends; there is none to keep.
        return offset

    def close(self) -> None:
        """Release the duplicate fd (idempotent)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            HeldSlice.held -= 1
            os.close(fd)

    # A reply dropped unsent (its connection closed) still gives its fd back.
    __del__ = close


def hold(file_slice: FileSlice) -> HeldSlice | bytes:
    """A read's range as a reply part: kept on its descriptor to be sent from the file if large and the
    process holds few, else copied now and the descriptor closed."""
    if file_slice.size < SENDFILE_MIN_BYTES or HeldSlice.held >= HeldSlice.limit:
        try:
            return file_slice.read()
        finally:
            file_slice.close()
    return HeldSlice(file_slice)


# What a reply is sent as: bytes, and file ranges the sender reads or sendfiles itself.
Part: TypeAlias = "bytes | HeldSlice"


class PartitionRows(NamedTuple):
    """An answer a native encoder writes (OffsetCommit's, Produce's): its throttle time (ms) and its topics,
    each `(name, rows)` with one tuple a partition, `(index, error code, ...)` (the rest as the encoder says)."""

    throttle_ms: int
    topics: list[tuple[str, list[tuple[Any, ...]]]]

    def error_codes(self) -> list[int]:
        """Each partition's error code, in order (the metrics' errorCounts)."""
        return [row[1] for _, rows in self.topics for row in rows]


class EndTxnAnswer(NamedTuple):
    """EndTxn's answer, which its native encoder writes: the producer id and epoch to go on with from v5."""

    throttle_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int

    def error_codes(self) -> list[int]:
        """The answer's one error code (the metrics' errorCounts)."""
        return [self.error_code]


# The answers native encoders write: each has a `throttle_ms` and its `error_codes()`.
NATIVE_ANSWERS = (PartitionRows, EndTxnAnswer)


class PreEncoded:
    """A response a handler encoded itself (natively): the frame as parts, file ranges among them."""

    __slots__ = ("parts",)

    def __init__(self, parts: Sequence[Part]):
        self.parts = parts

    def close(self) -> None:
        """Release the file ranges of a reply that will not be sent."""
        for part in self.parts:
            if isinstance(part, HeldSlice):
                part.close()


class ResponseFrame:
    """An encoded response as its parts; also a sink for kio's writer, its many small writes gathered."""

    __slots__ = ("parts", "size", "_small")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self._small = bytearray()

    def write(self, data: bytes) -> int:
        """kio's sink: small pieces are gathered, large buffers kept by reference."""
        n = len(data)
        self.size += n
        if n >= 65536:
            if self._small:
                self.parts.append(bytes(self._small))
                self._small = bytearray()
            self.parts.append(data)
        else:
            self._small += data
        return n

    def finish(self) -> ResponseFrame:
        if self._small:
            self.parts.append(bytes(self._small))
            self._small = bytearray()
        return self


def encode_body(response: ResponsePayload) -> bytes:
    """A response body's bytes without header or size, for a reply that is sent again and again."""
    _, encode = _response_codec(response.__api_key__, response.__version__)
    out = bytearray()
    parts: list[Part] = []
    encode(response, out, parts)
    if not parts:
        return bytes(out)
    parts.append(bytes(out))
    return b"".join(cast(list[bytes], parts))


def frame_of_body(correlation_id: int, api_key: int, version: int, body: bytes) -> PreEncoded:
    """The reply carrying an encoded body: size prefix and header written here."""
    head = bytearray(_response_codec(api_key, version)[0])
    _HEAD.pack_into(head, 0, len(head) - 4 + len(body), correlation_id)
    return PreEncoded([bytes(head), body])


def encode_kio(correlation_id: int, version: int, response: ResponsePayload) -> PreEncoded:
    """A kio response as the parts of its frame: every API's default encoder."""
    return PreEncoded(_frame_parts(correlation_id, response))


def encode_response(correlation_id: int, response: ResponsePayload) -> ResponseFrame:
    """The frame of a response: size prefix, the header its schema names, the body."""
    frame = ResponseFrame()
    frame.parts = cast(list[bytes], _frame_parts(correlation_id, response))
    frame.size = sum(len(part) for part in frame.parts)
    return frame


def _frame_parts(correlation_id: int, response: ResponsePayload) -> list[Part]:
    # kio's bytes, through the encoder compiled from its schema (fast_codec).
    head, encode = _response_codec(response.__api_key__, response.__version__)
    out = bytearray(head)
    parts: list[Part] = []
    encode(response, out, parts)
    if not parts:
        _HEAD.pack_into(out, 0, len(out) - 4, correlation_id)
        return [bytes(out)]
    # A large value was kept as a part of its own: the size is known only now.
    parts.append(bytes(out))
    first = bytearray(cast(bytes, parts[0]))
    _HEAD.pack_into(first, 0, sum(len(part) for part in cast(list[bytes], parts)) - 4, correlation_id)
    parts[0] = bytes(first)
    return parts
