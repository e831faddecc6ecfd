"""Fetched file ranges are byte-exact and sent by sendfile on both event loops the broker runs.

uvloop (the default where it is installed) has no loop.sendfile: `broker/send_file.py` sendfiles on
the transport's socket itself and, when the socket is full, copies one small piece through the
transport to wait for room. asyncio's loop (LOGSTORE_EVENT_LOOP=asyncio) uses loop.sendfile. Each
test runs a broker of each loop, checks the bytes a real client received, and reads the broker's
own account, logged at DEBUG at its stop, of the bytes it sendfile'd and copied.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v2 import RequestHeader
from kio.serial import entity_reader, entity_writer

from broker_process import BrokerProcess, finish_brokers, free_port
from raw_wire import TIMEOUT, framed, recv_exactly

LOOPS = ("uvloop", "asyncio")
BLOCKED_LOOKS = 20   # 200 ms of a send queue that does not move: the broker waits for room
TOTALS = re.compile(r"file ranges sent: (\d+) bytes by sendfile, (\d+) copied")
FETCH = 1


@pytest.fixture
def loop_broker(tmp_path):
    """`loop_broker(loop, *overrides) -> BrokerProcess` on the event loop named; stopped and checked at teardown."""
    started: list[BrokerProcess] = []

    def start(loop: str, *overrides: str) -> BrokerProcess:
        data_dir = tmp_path / f"broker{len(started)}"
        data_dir.mkdir()
        # The sendfile totals are a DEBUG line of the startup's logger.
        env = {"LOGSTORE_EVENT_LOOP": loop, "KAFKA_LOG4J_LOGGERS": "logstore.broker.startup=DEBUG"}
        broker = BrokerProcess("127.0.0.1", free_port(), data_dir, overrides, env=env)
        started.append(broker)
        return broker.start()
    yield start
    finish_brokers(started)


def _stopped_totals(broker: BrokerProcess, loop: str) -> tuple[int, int]:
    """Stop the broker (cleanly, checked); the (sendfile'd, copied) bytes it logged, and that it ran `loop`."""
    broker.stop()
    log = broker.log_text()
    assert re.search(rf"event loop: {loop}\b", log), log[-2000:]
    (totals,) = TOTALS.findall(log)
    return int(totals[0]), int(totals[1])


def _value(i: int) -> bytes:
    """10 KiB that differ per record and within it (a misplaced or repeated piece shows)."""
    return b"".join(hashlib.sha256(b"%d/%d" % (i, k)).digest() for k in range(320))


def _produce(bootstrap: str, topic: str, partitions: int, count: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(TIMEOUT)
    # Batches of 64 KiB: a batch larger than a segment would be refused (RECORD_BATCH_TOO_LARGE).
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "compression.type": "none",
                  "batch.size": 65536})
    failed: list[object] = []
    for i in range(count):
        p.produce(topic, value=_value(i), key=b"%d" % i, partition=i % partitions,
                  on_delivery=lambda err, _: err is None or failed.append(err))
    assert p.flush(60) == 0 and not failed, failed[:3]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_consumer_reads_megabytes_over_many_segments_byte_exact(loop_broker, loop):
    broker = loop_broker(loop)
    count = 800   # 8 MiB in ~32 segments of 256 KiB
    _produce(broker.bootstrap, "many-segments", 1, count, {"segment.bytes": "262144"})
    assert len(list((broker.data_dir / "many-segments-0").glob("*.log"))) > 20
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
    c.assign([TopicPartition("many-segments", 0, 0)])
    seen: list[tuple[int, bytes, bytes]] = []
    try:
        while len(seen) < count:
            msg = c.poll(TIMEOUT)
            assert msg is not None, f"nothing within {TIMEOUT} s after {len(seen)} records"
            assert msg.error() is None, msg.error()
            seen.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    assert [offset for offset, _, _ in seen] == list(range(count))
    for i, (_, key, value) in enumerate(seen):
        assert key == b"%d" % i and value == _value(i), f"record {i} differs"
    by_sendfile, copied = _stopped_totals(broker, loop)
    # Ranges of 64 KiB or more go through send_file: nearly all of 8 MiB in 256 KiB segments.
    assert by_sendfile > count * len(_value(0)) // 2 and copied < by_sendfile
    if loop == "asyncio":
        assert copied == 0


def _write(cls, value) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, value)
    return out.getvalue()


def _fetch_request(topic: str, partitions: int, max_bytes: int) -> bytes:
    """The frame of a Fetch v12 of every partition of `topic` from offset 0."""
    request_cls = load_request_schema(FETCH, 12)
    module = __import__(request_cls.__module__, fromlist=["FetchTopic", "FetchPartition"])
    wanted = tuple(module.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=max_bytes,
                                         log_start_offset=-1, current_leader_epoch=-1, last_fetched_epoch=-1)
                   for p in range(partitions))
    body = request_cls(replica_id=-1, max_wait=timedelta(milliseconds=0), min_bytes=0,
                       max_bytes=partitions * max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(module.FetchTopic(topic=topic, partitions=wanted),), forgotten_topics_data=(),
                       rack_id="")
    header = RequestHeader(request_api_key=FETCH, request_api_version=12, correlation_id=7, client_id="slow")
    return framed(_write(RequestHeader, header) + _write(request_cls, body))


def _send_queue(local_port: int, remote_port: int) -> int | None:
    """What the socket local_port -> remote_port holds unsent or unacknowledged (/proc/net/tcp's tx_queue)."""
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            if (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)) == (local_port,
                                                                                                remote_port):
                return int(fields[4].split(":")[0], 16)
    return None


def _until_the_broker_is_blocked(s: socket.socket, broker_port: int) -> None:
    """Read nothing until the broker's socket to `s` is full: its send queue holds bytes and stops growing
    (its sendfile then met EAGAIN). There is no event to wait for: the queue is looked at every 10 ms."""
    client_port = s.getsockname()[1]
    deadline = time.monotonic() + TIMEOUT
    last, steady = None, 0
    while steady < BLOCKED_LOOKS:
        queued = _send_queue(broker_port, client_port)
        steady = steady + 1 if queued and queued == last else 0
        last = queued
        assert time.monotonic() < deadline, f"the broker's send queue never settled (last {last})"
        time.sleep(0.01)


def _fetch_all(s: socket.socket, topic: str, partitions: int, max_bytes: int, broker_port: int | None = None):
    """One Fetch v12 of every partition from offset 0, its answer read 4 KiB at a time (with `broker_port`:
    only once the broker's socket is full); kio's partitions."""
    s.sendall(_fetch_request(topic, partitions, max_bytes))
    if broker_port is not None:
        _until_the_broker_is_blocked(s, broker_port)
    size = int.from_bytes(recv_exactly(s, 4), "big")
    frame = bytearray()
    while len(frame) < size:
        chunk = s.recv(min(4096, size - len(frame)))
        assert chunk, f"connection closed after {len(frame)} of {size} bytes"
        frame += chunk
    response_cls = load_response_schema(FETCH, 12)
    head, offset = entity_reader(response_cls.__header_schema__)(bytes(frame), 0)
    assert head.correlation_id == 7
    response, length = entity_reader(response_cls)(bytes(frame), offset)
    assert offset + length == size
    (answer,) = response.responses
    return answer.partitions


@pytest.mark.parametrize("loop", LOOPS)
def test_a_slow_reader_gets_two_large_ranges_and_what_is_between_them_in_order(loop_broker, loop):
    # A receive buffer of a few KiB and reads of 4 KiB: the broker's socket fills again and again, so each
    # range goes out in many partial sendfiles, between the header, the next partition's fields and the end.
    broker = loop_broker(loop)
    _produce(broker.bootstrap, "slow-reader", 2, 600)   # 3 MiB a partition
    files = [(broker.data_dir / f"slow-reader-{p}" / f"{0:020d}.log").read_bytes() for p in range(2)]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(TIMEOUT)
        s.connect((broker.host, broker.port))
        # Without waiting for the broker to fill its socket, a reader that kept up sometimes never let it.
        parts = _fetch_all(s, "slow-reader", 2, 8 << 20, broker.port)
    assert [(p.partition_index, p.error_code, p.high_watermark) for p in parts] == [(0, 0, 300), (1, 0, 300)]
    assert [p.records for p in parts] == files
    by_sendfile, copied = _stopped_totals(broker, loop)
    assert by_sendfile + copied == sum(map(len, files))
    if loop == "uvloop":
        # The full socket was waited for by copying pieces through the transport, a small share.
        assert 0 < copied < by_sendfile // 4
    else:
        assert copied == 0


def test_an_unknown_event_loop_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}"],
                          env={**os.environ, "LOGSTORE_EVENT_LOOP": "trio"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.endswith("logstore broker: LOGSTORE_EVENT_LOOP=trio: the event loops are uvloop, asyncio\n")
