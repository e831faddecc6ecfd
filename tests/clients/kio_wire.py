"""kio requests as raw frames, for tests that pipeline them on one socket without waiting for replies."""
from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from raw_wire import framed, recv_frame


def request_frame(body, correlation_id: int, client_id: str = "pipeline") -> bytes:
    """The whole frame (size prefix included) of a kio request entity."""
    api_key, version = body.__api_key__, body.__version__
    header_cls = load_request_schema(api_key, version).__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(body))(out, body)
    return framed(out.getvalue())


def decode_response(frame: bytes, api_key: int, version: int):
    """(correlation id, kio response) of a response frame (the bytes after the size prefix)."""
    response_cls = load_response_schema(api_key, version)
    header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    return header.correlation_id, entity_reader(response_cls)(frame, offset)[0]


def read_response(s: socket.socket, api_key: int, version: int):
    """(correlation id, kio response) of the next reply on `s`."""
    return decode_response(recv_frame(s), api_key, version)


def correlation_id(frame: bytes) -> int:
    """The correlation id of a response frame, whatever its API."""
    return struct.unpack_from(">i", frame, 0)[0]
