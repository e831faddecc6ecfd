"""Kafka requests by hand on raw sockets: framing, headers, ApiVersions v0, and waiting for a close."""
from __future__ import annotations

import io
import socket
import struct

import pytest

TIMEOUT = 10.0  # s: a bound on any single wait
API_VERSIONS, METADATA = 18, 3
UNSUPPORTED_VERSION = 35


def header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes = b"hostile") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def header_v2(api_key: int, version: int, correlation_id: int, client_id: bytes = b"hostile") -> bytes:
    return header_v1(api_key, version, correlation_id, client_id) + b"\x00"  # no tagged fields


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def connect(broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, f"connection closed after {len(data)} of {n} bytes"
        data += chunk
    return data


def recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(s, 4))
    assert 0 <= size < 1 << 20, size
    return recv_exactly(s, size)


def assert_closed(s: socket.socket) -> None:
    """The broker closed this connection (EOF or reset) without answering, and promptly."""
    s.settimeout(TIMEOUT)
    try:
        data = s.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"the connection is still open after {TIMEOUT} s")
    assert data == b"", f"the broker answered instead of closing: {data[:64]!r}"


def decode_api_versions_v0(frame: bytes, correlation_id: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error code, {api key: (min, max)}) of an ApiVersions v0 response frame (header v0)."""
    corr, error, count = struct.unpack_from(">ihi", frame, 0)
    assert corr == correlation_id
    assert len(frame) == 10 + 6 * count, "the v0 body is not exactly error + array of (key, min, max)"
    keys = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", frame, 10 + 6 * i)
        keys[key] = (lo, hi)
    return error, keys


def api_versions_v0(s: socket.socket, correlation_id: int) -> dict[int, tuple[int, int]]:
    s.sendall(framed(header_v1(API_VERSIONS, 0, correlation_id)))
    error, keys = decode_api_versions_v0(recv_frame(s), correlation_id)
    assert error == 0
    return keys




def kio_round_trip(broker, api_key: int, version: int, body, correlation_id: int):
    """Send one kio request entity on its own connection; kio's decoding of the response body."""
    from kio.index import load_request_schema, load_response_schema
    from kio.serial import entity_reader, entity_writer
    header_cls = load_request_schema(api_key, version).__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id="raw"))
    entity_writer(type(body))(out, body)
    with connect(broker) as s:
        s.sendall(framed(out.getvalue()))
        frame = recv_frame(s)
    response_cls = load_response_schema(api_key, version)
    header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    assert header.correlation_id == correlation_id
    return entity_reader(response_cls)(frame, offset)[0]
