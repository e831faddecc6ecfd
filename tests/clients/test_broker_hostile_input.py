"""Hostile bytes on raw sockets against one broker: lying sizes, truncated headers, unknown keys and
versions, garbage bodies, a slow-loris client.

Kafka's rule, which the broker follows: bad framing closes that connection;
an ApiVersions version from the future gets a v0 answer with
UNSUPPORTED_VERSION (KIP-511). Each case runs on its own connection while
another, opened before it, must still be answered after it; then a fresh
real client must still produce and read back. The module's broker must still
stop cleanly at the end without having logged a traceback (conftest).
"""
from __future__ import annotations

import contextlib
import importlib
import random
import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v4.request import MetadataRequest, MetadataRequestTopic

from kio_wire import read_response, request_frame
from raw_wire import (
    API_VERSIONS,
    METADATA,
    TIMEOUT,
    UNSUPPORTED_VERSION,
    api_versions_v0,
    assert_closed,
    connect,
    decode_api_versions_v0,
    framed,
    header_v1,
    header_v2,
    recv_frame,
)

# -- the broker keeps serving --------------------------------------------------------------------

@pytest.fixture
def bystander(broker):
    """A connection opened before the hostile one, which must be answered after it."""
    s = connect(broker)
    assert API_VERSIONS in api_versions_v0(s, 1)
    yield s
    assert api_versions_v0(s, 2)[API_VERSIONS] == (0, 4), "a connection opened earlier stopped being served"
    s.close()


@pytest.fixture
def still_serving(broker, topic):
    """After the test, a fresh real client produces and reads back through the same broker."""
    yield
    assert broker.running, f"the broker died: status {broker.proc.returncode}\n{broker.log_text()}"
    delivered = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all"})
    p.produce(topic, value=b"after", partition=0,
              on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert p.flush(TIMEOUT) == 0
    assert delivered == [(None, 0)]
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 10})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        msg = c.poll(TIMEOUT)
        assert msg is not None and msg.error() is None and msg.value() == b"after"
        eof = c.poll(TIMEOUT)
        assert eof is not None and eof.error().code() == KafkaError._PARTITION_EOF
    finally:
        c.close()


pytestmark = pytest.mark.usefixtures("still_serving", "bystander")


# -- the cases -----------------------------------------------------------------------------------

def test_frame_of_2_31_minus_1_bytes_is_refused_without_allocating(broker):
    peak_before = broker.memory_kib("VmPeak")
    s = connect(broker)
    s.sendall(struct.pack(">i", 2**31 - 1) + header_v1(METADATA, 12, 1) + b"\x00" * 1000)
    assert_closed(s)
    s.close()
    # A buffer of the announced size, even untouched, would raise the peak of the address space by 2 GiB.
    grown = broker.memory_kib("VmPeak") - peak_before
    assert grown < 512 * 1024, f"the broker's address space grew by {grown} KiB"


@pytest.mark.parametrize("size", [-1, -(2**31), 0])
def test_negative_or_empty_size_closes_the_connection(broker, size):
    s = connect(broker)
    s.sendall(struct.pack(">i", size) + header_v1(API_VERSIONS, 0, 1))
    assert_closed(s)
    s.close()


def test_truncated_header_closes_the_connection(broker):
    s = connect(broker)
    s.sendall(struct.pack(">i", 4) + struct.pack(">hh", API_VERSIONS, 0))  # no correlation id
    assert_closed(s)
    s.close()


def test_api_versions_from_the_future_with_a_header_cut_short_closes_the_connection(broker):
    # Its body is never read (KIP-511), but its header must be: here the client id announces 16 bytes and
    # none follow. The broker closes the connection as for any header it cannot read (and logs no traceback,
    # which the fixture checks).
    s = connect(broker)
    s.sendall(framed(struct.pack(">hhih", API_VERSIONS, 9, 5, 16)))
    assert_closed(s)
    s.close()


@pytest.mark.parametrize("api_key,version", [(999, 0), (-1, 0), (METADATA, 99), (0, 1)],
                         ids=["key-999", "key-minus-1", "metadata-v99", "produce-v1-advertised-not-served"])
def test_unknown_api_key_or_version_closes_the_connection(broker, api_key, version):
    s = connect(broker)
    s.sendall(framed(header_v1(api_key, version, 7) + b"\x00" * 16))
    assert_closed(s)
    s.close()


def test_answers_before_a_bad_frame_reach_a_client_that_is_still_sending(broker):
    # A 250 KB answer owed, then a bad frame, then more bytes the broker will never read; the client reads
    # only once the broker has decided to close. Closing a socket with unread bytes resets the connection
    # and drops what the kernel had not delivered yet: the broker must hand over the answer first.
    names = [f"absent-{i:04d}-" + "x" * 230 for i in range(1000)]
    request = MetadataRequest(topics=tuple(MetadataRequestTopic(name=n) for n in names),
                              allow_auto_topic_creation=False)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # the answer cannot be taken ahead of reading
    s.connect((broker.host, broker.port))
    s.settimeout(TIMEOUT)
    s.sendall(request_frame(request, 7) + framed(header_v1(-1, 0, 8) + b"\x00" * 16))
    s.setblocking(False)
    unread = 0
    with contextlib.suppress(BlockingIOError):
        while unread < 16 << 20:
            unread += s.send(b"\x00" * 65536)
    s.settimeout(TIMEOUT)
    closing = f"closing connection from {s.getsockname()}"
    deadline = time.monotonic() + TIMEOUT
    while closing not in broker.log_text():
        assert time.monotonic() < deadline, "the broker did not refuse the bad frame"
        time.sleep(0.01)   # the broker's log is the only sign it has read the bad frame
    corr, response = read_response(s, METADATA, 4)
    assert corr == 7
    assert [t.name for t in response.topics] == names
    assert {t.error_code for t in response.topics} == {ErrorCode.unknown_topic_or_partition}
    assert s.recv(1) == b"", "the connection did not end after the answer"
    s.close()


def test_api_versions_from_the_future_gets_a_v0_answer_with_our_range(broker):
    s = connect(broker)
    # A v9 body nobody can parse yet: compact strings then bytes of a future field.
    body = b"\x06future\x041.0" + bytes(range(40)) + b"\x00"
    s.sendall(framed(header_v2(API_VERSIONS, 9, 42) + body))
    error, keys = decode_api_versions_v0(recv_frame(s), 42)
    assert error == UNSUPPORTED_VERSION
    assert keys[API_VERSIONS] == (0, 4)
    other = connect(broker)
    assert keys == api_versions_v0(other, 1), "the error answer lists other ranges than a v0 request gets"
    other.close()

    # As a client does next: retry on the same connection at the highest version we listed.
    s.sendall(framed(header_v2(API_VERSIONS, 4, 43) + b"\x05test\x041.0\x00"))
    frame = recv_frame(s)
    corr, error = struct.unpack_from(">ih", frame, 0)  # header v0 even for a flexible body
    assert (corr, error) == (43, 0)
    s.close()


def _garbage() -> dict[str, tuple[int, int, bytes]]:
    """name -> (api key, version, body): bodies no schema reads, several announcing huge arrays."""
    rng = random.Random(20240605)
    noise = bytes(rng.randrange(256) for _ in range(300))
    return {
        "metadata-v12-empty": (METADATA, 12, b""),
        "metadata-v12-one-byte": (METADATA, 12, b"\x02"),
        "metadata-v12-random": (METADATA, 12, noise),
        # 2**32 - 2 topics in an 87-byte frame: kio would reserve 32 GiB for them and abort the process.
        "metadata-v12-huge-array-count": (METADATA, 12, b"\xff\xff\xff\xff\x0f" + noise[:64]),
        "metadata-v12-topic-name-longer-than-frame": (METADATA, 12, b"\x02" + b"\x00" * 16 + b"\xff\xff\x03abc"),
        "metadata-v12-bad-utf8-topic-name": (METADATA, 12,
                                             b"\x02" + b"\x00" * 16 + b"\x05\xff\xfe\xfd\xfc\x00\x01\x00\x00"),
        "metadata-v12-tag-longer-than-frame": (METADATA, 12, b"\x01\x01\x00\x01\x05\x99\xff\xff\x0f"),
        "metadata-v12-huge-tag-count": (METADATA, 12, b"\x01\x00\x00\xff\xff\xff\xff\x0f"),
        "metadata-v4-huge-array-count": (METADATA, 4, b"\x7f\xff\xff\xff" + noise[:64]),
        "produce-v9-huge-partition-count": (0, 9, b"\x00\xff\xff\x00\x00\x75\x30\x02\x02t\xff\xff\xff\xff\x0f"),
        # Null counts of arrays that may not be null: kio reads them as None, which no handler iterates.
        "offset-for-leader-epoch-v3-null-topics": (23, 3, struct.pack(">ii", -1, -1)),
        "list-groups-v5-null-types-filter": (16, 5, b"\x01\x00\x00"),
        "list-groups-v4-null-states-filter": (16, 4, b"\x00\x00"),
    }


@pytest.mark.parametrize("name", sorted(_garbage()))
def test_garbage_body_closes_the_connection(broker, name):
    api_key, version, body = _garbage()[name]
    peak_before = broker.memory_kib("VmPeak")
    s = connect(broker)
    header = header_v2 if version >= {METADATA: 9, 0: 9, 23: 4, 16: 3}[api_key] else header_v1
    s.sendall(framed(header(api_key, version, 5) + body))
    assert_closed(s)
    s.close()
    grown = broker.memory_kib("VmPeak") - peak_before
    assert grown < 512 * 1024, f"the broker's address space grew by {grown} KiB reading {len(body)} bytes"


def test_slow_loris_half_a_frame_does_not_hold_up_other_connections(broker):
    request = framed(header_v1(API_VERSIONS, 0, 77))
    slow = connect(broker)
    slow.sendall(request[: len(request) // 2])
    try:
        # While that frame is half there, other connections get answers, one after another.
        started = time.monotonic()
        for i in range(20):
            other = connect(broker)
            assert API_VERSIONS in api_versions_v0(other, 100 + i)
            other.close()
        assert time.monotonic() - started < TIMEOUT

        # The slow client was only waited for, not dropped: the rest of its frame is answered.
        slow.sendall(request[len(request) // 2:])
        error, keys = decode_api_versions_v0(recv_frame(slow), 77)
        assert error == 0 and API_VERSIONS in keys
    finally:
        slow.close()


@pytest.mark.parametrize("version", [10, 11])
@pytest.mark.parametrize("by", ["id", "null name"])
def test_metadata_v10_and_v11_by_id_or_null_name_is_an_invalid_request(broker, version, by):
    # Those versions carry topic ids but answer by name only (a name that cannot be null), so Kafka refuses
    # the request: each topic answered INVALID_REQUEST, the connection kept.
    module = importlib.import_module(load_request_schema(METADATA, version).__module__)
    topic = (module.MetadataRequestTopic(name="orders", topic_id=uuid.uuid4()) if by == "id"
             else module.MetadataRequestTopic(name=None, topic_id=uuid.UUID(int=0)))
    cluster_operations = {"include_cluster_authorized_operations": False} if version < 11 else {}
    request = module.MetadataRequest(topics=(topic,), allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False, **cluster_operations)
    s = connect(broker)
    s.sendall(request_frame(request, 7))
    corr, response = read_response(s, METADATA, version)
    assert corr == 7
    assert [(t.error_code, t.name) for t in response.topics] == [(ErrorCode.invalid_request, topic.name or "")]
    assert api_versions_v0(s, 8)   # still served
    s.close()
