"""kio requests as raw frames, for tests that pipeline them on one socket without waiting for replies."""
from __future__ import annotations

import io
import socket
import struct
from datetime import timedelta

from kio.index import load_request_schema, load_response_schema
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
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


def fetch_request(topic: str, partitions: list[int], *, max_bytes: int = 1 << 20, max_wait_ms: int = 0,
                  partition_max_bytes: int = 1 << 20) -> FetchRequest:
    """A Fetch v12 from offset 0 of each of `partitions` (repeats allowed)."""
    return FetchRequest(
        replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(FetchTopic(topic=topic, partitions=tuple(FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=partition_max_bytes) for p in partitions)),))
