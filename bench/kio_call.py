"""Request frames made with kio and responses read back with it, for the benches that talk raw wire."""
from __future__ import annotations

import importlib
import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

__all__ = ["KioCall"]


class KioCall:
    """One (api key, version): frames a request with kio and reads the response back."""

    def __init__(self, api_key: int, version: int):
        self.request: Any = load_request_schema(api_key, version)
        response = load_response_schema(api_key, version)
        self.types = importlib.import_module(self.request.__module__)
        self._write_header = entity_writer(self.request.__header_schema__)
        self._write_body = entity_writer(self.request)
        self._read_header = entity_reader(response.__header_schema__)
        self._read_body = entity_reader(response)

    def frame(self, correlation_id: int, body: Any) -> bytes:
        """The whole request frame: size, header (client_id "bench"), body."""
        out = io.BytesIO()
        out.write(b"\0\0\0\0")
        header = self.request.__header_schema__(
            request_api_key=i16(self.request.__api_key__), request_api_version=i16(self.request.__version__),
            correlation_id=i32(correlation_id), client_id="bench")
        self._write_header(out, header)
        self._write_body(out, body)
        buf = out.getbuffer()
        struct.pack_into(">i", buf, 0, len(buf) - 4)
        return bytes(buf)

    def read(self, frame: bytes, correlation_id: int | None = None) -> Any:
        """The response body of a frame (size prefix removed), checking its correlation id when given."""
        header, size = self._read_header(frame, 0)
        assert correlation_id is None or header.correlation_id == correlation_id, \
            (header.correlation_id, correlation_id)
        return self._read_body(frame, size)[0]
