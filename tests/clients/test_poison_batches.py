"""Poison batches on the wire: CRC-valid batches whose insides lie, refused as Kafka's LogValidator refuses them.

Each batch is a valid one with a few bytes changed and its CRC resealed, so
only the records lie (finding 5 of issue 25): a count or offset deltas that
make consumers hang or see two records at one offset, a record length that
runs into the next, bytes left over, the 90-byte batch that claimed 2^31
records. Each goes on its own partition of one raw Produce v9, beside a
good batch: every poison gets its code (INVALID_RECORD with the record's
index in `record_errors`, CORRUPT_MESSAGE, INVALID_TIMESTAMP), the good
partition is appended, and a poisoned partition's offsets do not move.
A Produce of decompression bombs (finding 8) is refused while another
connection keeps being answered.
"""
from __future__ import annotations

import socket
import struct
import time
from datetime import timedelta

import crc32c
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from kio_wire import read_response, request_frame
from logstore.formats.kafka import LZ4, ZSTD, encode_batch
from raw_wire import TIMEOUT, api_versions_v0, connect

PRODUCE = 0
NONE, CORRUPT_MESSAGE, INVALID_TIMESTAMP, INVALID_RECORD = 0, 2, 32, 87
BOMBS = 12                 # each expands past the broker's 128 MiB limit for one batch
HOUR_MS = 3_600_000


def _now() -> int:
    return int(time.time() * 1000)


def _create(broker, topic: str, partitions: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, config=config)])[topic].result(TIMEOUT)


def _sealed(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def _good(count: int = 3, **kw) -> bytearray:
    """An uncompressed batch of `count` records of key b"k" and value b"v": 9 bytes each, from byte 61."""
    return bytearray(encode_batch([b"k"] * count, [b"v"] * count, timestamps=_now(), **kw))


def _counted(buf: bytearray, count: int) -> bytes:
    struct.pack_into(">i", buf, 23, count - 1)      # lastOffsetDelta, as the client rules want it
    struct.pack_into(">i", buf, 57, count)          # recordCount
    return _sealed(buf)


def _grown(buf: bytearray, tail: bytes) -> bytes:
    """`buf` with `tail` inside the batch, after its last record (batchLength grown to hold it)."""
    buf += tail
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return _sealed(buf)


def _poisons() -> dict[str, tuple[bytes, int, list[int]]]:
    """name → (batch, the code Kafka answers, the indexes `record_errors` names)."""
    duplicate = _good()
    duplicate[61 + 9 + 3] = 0                       # record 1's offset delta: 0 again
    longer = _good()
    longer[61] += 2                                 # record 0's length varint (zigzag 8 → 9)
    damaged = _good()
    damaged[-1] ^= 0xFF                             # no reseal: the CRC catches it
    return {
        "two-at-one-offset": (_sealed(duplicate), INVALID_RECORD, [1]),
        "count-too-high": (_counted(_good(), 5), INVALID_RECORD, [3]),
        "count-too-low": (_counted(_good(), 2), INVALID_RECORD, []),
        "2-31-records": (_counted(bytearray(encode_batch([None], [b"v"], timestamps=_now(), compression=LZ4)),
                                  2**31 - 1), INVALID_RECORD, [1]),
        "length-runs-on": (_sealed(longer), INVALID_RECORD, [0]),
        "bytes-left-over": (_grown(_good(), b"\x00\x00"), INVALID_RECORD, []),
        "crc": (bytes(damaged), CORRUPT_MESSAGE, []),
        "far-future": (bytes(encode_batch([b"k"] * 2, [b"v"] * 2, timestamps=[_now(), _now() * 1_000_000])),
                       INVALID_TIMESTAMP, [1]),
    }


def _produce(topic: str, batches: list[bytes]) -> bytes:
    return request_frame(ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=TIMEOUT),
                                        topic_data=(TopicProduceData(name=topic, partition_data=tuple(
                                            PartitionProduceData(index=i, records=b)
                                            for i, b in enumerate(batches))),)), 7)


def _rows(s: socket.socket):
    _, response = read_response(s, PRODUCE, 9)
    (topic,) = response.responses
    return {row.index: row for row in topic.partition_responses}


def test_every_poison_is_refused_with_kafkas_code_and_moves_no_offset(broker, topic):
    poisons = _poisons()
    names = list(poisons)
    _create(broker, topic, len(names) + 1)
    good = len(names)
    with connect(broker) as s:
        s.sendall(_produce(topic, [poisons[n][0] for n in names] + [bytes(_good())]))
        rows = _rows(s)
        assert (rows[good].error_code, rows[good].base_offset) == (NONE, 0)   # one bad batch fails no other
        for i, name in enumerate(names):
            _, code, indexes = poisons[name]
            row = rows[i]
            assert (name, row.error_code, row.base_offset) == (name, code, -1)
            assert [e.batch_index for e in row.record_errors] == indexes, name
            assert row.error_message, name
        assert "premature EOF" in rows[names.index("2-31-records")].record_errors[0].batch_index_error_message
        assert rows[names.index("far-future")].error_message == (
            "One or more records have been rejected due to invalid timestamp")
        # Nothing of a poison was appended: the next good batch of each partition starts at offset 0.
        s.sendall(_produce(topic, [bytes(_good())] * (len(names) + 1)))
        rows = _rows(s)
        assert [rows[i].base_offset for i in range(len(names))] == [0] * len(names)
        assert rows[good].base_offset == 3


def test_a_record_without_a_key_in_a_compacted_topic_is_named(broker, topic):
    _create(broker, topic, 1, **{"cleanup.policy": "compact"})
    batch = encode_batch([b"k", None, b"k", None], [b"v"] * 4, timestamps=_now())
    with connect(broker) as s:
        s.sendall(_produce(topic, [batch]))
        row = _rows(s)[0]
    assert row.error_code == INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in row.record_errors] == [
        (i, f"Compacted topic cannot accept message without key in topic partition {topic}-0") for i in (1, 3)]


def _zstd_bomb() -> bytes:
    """A zstd frame of RLE blocks (RFC 8878 §3.1.1.2) expanding to 137 MiB, with no content size to warn."""
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")   # magic; no content size; a 128 KiB window
    blocks = 1100
    for i in range(blocks):
        frame += (int(i == blocks - 1) | 1 << 1 | (128 * 1024) << 3).to_bytes(3, "little") + b"\x00"
    return bytes(frame)


def _bomb_batch() -> bytes:
    buf = bytearray(encode_batch([None], [b"v"], timestamps=_now(), compression=ZSTD))
    del buf[61:]
    return _grown(buf, _zstd_bomb())


def _answered(s: socket.socket) -> bool:
    """Whether an answer waits on `s` (a non-blocking socket), without reading it."""
    try:
        data = s.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    assert data, "the broker closed the connection instead of answering"
    return True


def test_a_produce_of_decompression_bombs_does_not_stall_other_connections(broker, topic):
    # Compacted: before every batch was checked, only the key rule decompressed a batch, on the event loop.
    _create(broker, topic, BOMBS, **{"cleanup.policy": "compact"})
    with connect(broker) as heavy, connect(broker) as other:
        heavy.sendall(_produce(topic, [_bomb_batch()] * BOMBS))
        # Ping on another connection until the bombs are answered: each ping waits for its answer, so
        # the count is how many times the broker answered someone else while it worked on the bombs.
        answered, correlation = 0, 100
        heavy.setblocking(False)
        while not _answered(heavy):
            api_versions_v0(other, correlation)
            answered, correlation = answered + 1, correlation + 1
        heavy.settimeout(TIMEOUT * 4)
        rows = _rows(heavy)
    assert all(row.error_code == CORRUPT_MESSAGE for row in rows.values()) and len(rows) == BOMBS
    assert "decompresses to more than" in rows[0].error_message
    assert answered >= 50, f"only {answered} answers to another connection while {BOMBS} bombs were checked"
