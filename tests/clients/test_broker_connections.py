"""Connection lifetime: `connections.max.idle.ms` closes only connections that are truly idle.

Kafka closes a connection that has neither sent a request nor been owed a
response for that long; one that keeps talking, or that waits on a
long-polling Fetch, stays open.
"""
from __future__ import annotations

import io
import time
from datetime import timedelta

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.request_header.v2 import RequestHeader
from kio.serial import entity_writer

from raw_wire import API_VERSIONS, TIMEOUT, api_versions_v0, assert_closed, connect, framed, recv_frame

IDLE_MS = 600
FETCH = 1


def fetch_request(correlation_id: int, topic: str, max_wait_ms: int) -> bytes:
    """A Fetch v12 at the log end of partition 0, waiting up to `max_wait_ms` for one byte."""
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=FETCH, request_api_version=12,
                                                    correlation_id=correlation_id, client_id="idle-test"))
    entity_writer(FetchRequest)(out, FetchRequest(
        replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),)))
    return framed(out.getvalue())


def test_an_idle_connection_is_closed(start_broker):
    broker = start_broker(f"connections.max.idle.ms={IDLE_MS}")
    s = connect(broker)
    assert API_VERSIONS in api_versions_v0(s, 1)
    started = time.monotonic()
    assert_closed(s)
    assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9, "closed before it was idle that long"
    assert "connections.max.idle.ms" in broker.log_text()


def test_a_talking_connection_and_a_long_poll_stay_open(start_broker):
    broker = start_broker(f"connections.max.idle.ms={IDLE_MS}")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("idle-topic", 1)])["idle-topic"].result(TIMEOUT)
    talker = connect(broker)
    poller = connect(broker)
    api_versions_v0(poller, 1)
    # An empty partition: the Fetch is owed for its whole max_wait, three idle periods.
    poller.sendall(fetch_request(2, "idle-topic", max_wait_ms=3 * IDLE_MS))
    deadline = time.monotonic() + 3 * IDLE_MS / 1000
    n = 2
    while time.monotonic() < deadline:
        assert api_versions_v0(talker, n)[API_VERSIONS] == (0, 4)
        n += 1
        time.sleep(IDLE_MS / 1000 / 6)  # a client's pace between requests, well inside the idle limit
    frame = recv_frame(poller)
    assert int.from_bytes(frame[:4], "big") == 2, "the long-polling Fetch was not answered"
    assert api_versions_v0(poller, 3)[API_VERSIONS] == (0, 4)
    talker.close()
    poller.close()
