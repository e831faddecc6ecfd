"""Fetch responses carry the segment's bytes exactly, whichever way they are sent.

Records below 64 KiB are read and written; larger ones go out by sendfile
from a duplicate of the segment's fd. Either way the records field of the
response (decoded by kio, at the oldest and newest Fetch versions served)
must be the `.log` file's bytes from the fetch offset's batch on.
"""
from __future__ import annotations

import io
import socket
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1 import RequestHeader as HeaderV1
from kio.schema.request_header.v2 import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from raw_wire import TIMEOUT, connect, framed, recv_frame

FETCH = 1
TOPIC = "fetch-bytes"


def _write(cls, value) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, value)
    return out.getvalue()


def fetch(s: socket.socket, version: int, offset: int, max_bytes: int):
    """One Fetch of partition 0 at `version`; kio's decoded partition."""
    request_cls = load_request_schema(FETCH, version)
    module = __import__(request_cls.__module__, fromlist=["FetchTopic", "FetchPartition"])
    partition = dict(partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)
    if version >= 5:
        partition["log_start_offset"] = -1
    if version >= 9:
        partition["current_leader_epoch"] = -1
    if version >= 12:
        partition["last_fetched_epoch"] = -1
    body = dict(replica_id=-1, max_wait=timedelta(milliseconds=0), min_bytes=0, max_bytes=max_bytes,
                isolation_level=0,
                topics=(module.FetchTopic(topic=TOPIC, partitions=(module.FetchPartition(**partition),)),))
    if version >= 7:
        body.update(session_id=0, session_epoch=-1, forgotten_topics_data=())
    if version >= 11:
        body["rack_id"] = ""
    header_cls = HeaderV2 if request_cls.__header_schema__ is HeaderV2 else HeaderV1
    s.sendall(framed(_write(header_cls, header_cls(request_api_key=FETCH, request_api_version=version,
                                                   correlation_id=version, client_id="bytes"))
                     + _write(request_cls, request_cls(**body))))
    frame = recv_frame(s)
    response_cls = load_response_schema(FETCH, version)
    header, size = entity_reader(response_cls.__header_schema__)(frame, 0)
    assert header.correlation_id == version
    response, body_size = entity_reader(response_cls)(frame, size)
    assert size + body_size == len(frame)
    (topic,) = response.responses
    (part,) = topic.partitions
    return part


@pytest.fixture(scope="module")
def written(broker):
    """2,000 uncompressed 1 KiB messages in 20 batches; the segment file's bytes once they are acknowledged."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 50,
                  "batch.num.messages": 100, "compression.type": "none"})
    for i in range(2000):
        p.produce(TOPIC, value=i.to_bytes(4, "big") * 256, partition=0)
    assert p.flush(TIMEOUT) == 0
    log_file = broker.data_dir / f"{TOPIC}-0" / f"{0:020d}.log"
    return log_file.read_bytes()


@pytest.mark.parametrize("version", [4, 12])
@pytest.mark.parametrize("max_bytes", [256 * 1024, 16 * 1024])
def test_records_are_the_segment_bytes(broker, written, version, max_bytes):
    with connect(broker) as s:
        part = fetch(s, version, 0, max_bytes)
    assert part.error_code == 0 and part.high_watermark == 2000
    # Like Kafka's, the range is cut at max_bytes, possibly inside a batch, but holds
    # at least the first whole batch (KIP-74).
    first_batch = 12 + int.from_bytes(written[8:12], "big")
    assert len(written) > 2 * max_bytes and part.records == written[:max(max_bytes, first_batch)]


def test_a_fetch_from_the_middle_starts_at_the_batch_holding_the_offset(broker, written):
    with connect(broker) as s:
        later = fetch(s, 12, 1050, 256 * 1024).records
    assert 64 * 1024 < len(later) and written.find(later) > 0
    base_offset = int.from_bytes(later[:8], "big")
    last_delta = int.from_bytes(later[23:27], "big")
    assert base_offset <= 1050 <= base_offset + last_delta
