"""Requests of one connection take effect in the order they were sent (Kafka's muted connection).

A client may pipeline requests without waiting for their answers; the
answers come back in request order, so the client takes the last answer as
the last effect. librdkafka's test 0030 commits offsets back to back and
reads back the last one, after a restart too.
"""
from __future__ import annotations

import struct
import time
from datetime import timedelta

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecords
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from kio_wire import decode_response, fetch_request, read_response, request_frame
from logstore.broker.coordinator.group_log import decode_offset_value, encode_offset_key
from logstore.formats.kafka import encode_batch
from raw_wire import TIMEOUT, connect, recv_exactly
from segment_files import batches, segment_paths

OFFSET_COMMIT, OFFSET_FETCH, PRODUCE, FETCH = 8, 9, 0, 1
COMMITS = 300
PRODUCES = 300
TIMEOUT_MS = timedelta(seconds=TIMEOUT)


def _create(broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(TIMEOUT)


def _commit(group: str, topic: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=(
        OffsetCommitRequestTopic(name=topic, partitions=(OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_metadata=f"commit {offset}"),)),))


def _committed(broker, group: str, topic: str) -> tuple[int, str]:
    """(offset, metadata) committed for partition 0, asked on a fresh connection (again while the restarted
    broker still loads its groups: COORDINATOR_LOAD_IN_PROGRESS, which clients retry)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        with connect(broker) as s:
            s.sendall(request_frame(OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id=group, topics=(
                OffsetFetchRequestTopics(name=topic, partition_indexes=(0,)),)),)), 1))
            _, response = read_response(s, OFFSET_FETCH, 8)
        if response.groups[0].error_code != ErrorCode.coordinator_load_in_progress:
            break
        assert time.monotonic() < deadline, "the group never finished loading"
    assert response.groups[0].error_code == 0
    ((partition,),) = [t.partitions for t in response.groups[0].topics]
    assert partition.error_code == 0
    return partition.committed_offset, partition.metadata


def _offsets_in_log_order(broker, group: str, topic: str) -> list[int]:
    """The offsets committed for partition 0, in the order `__consumer_offsets` holds them (decoded by
    kafka-python's batches and the coordinator's record schemas)."""
    wanted = encode_offset_key(group, topic, 0)
    return [decode_offset_value(record.value).offset
            for path in segment_paths(broker.data_dir, "__consumer_offsets")
            for batch in batches(path) for record in batch if record.key == wanted]


def test_pipelined_offset_commits_leave_the_last_one_stored(start_broker):
    broker = start_broker()
    topic, group = "commits", "pipelined"
    _create(broker, topic)
    with connect(broker) as s:
        # Every commit is on the wire before the first answer is read: nothing orders them but the connection.
        s.sendall(b"".join(request_frame(_commit(group, topic, offset), offset) for offset in range(1, COMMITS + 1)))
        for offset in range(1, COMMITS + 1):
            correlation, response = read_response(s, OFFSET_COMMIT, 8)
            assert correlation == offset, "answers out of request order"
            assert response.topics[0].partitions[0].error_code == 0
    assert _committed(broker, group, topic) == (COMMITS, f"commit {COMMITS}")
    broker.stop()
    assert _offsets_in_log_order(broker, group, topic) == list(range(1, COMMITS + 1)), "stored out of request order"
    broker.start()
    assert _committed(broker, group, topic) == (COMMITS, f"commit {COMMITS}"), "another commit won after a restart"


def _produce(topic: str, value: bytes, acks: int) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout=TIMEOUT_MS, topic_data=(TopicProduceData(
        name=topic, partition_data=(PartitionProduceData(index=0, records=encode_batch([None], [value])),)),))


def _values(broker, topic: str, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values = []
    try:
        while len(values) < count:
            msg = c.poll(TIMEOUT)
            assert msg is not None, f"only {len(values)} of {count} records came back"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        c.close()
    return values


def test_pipelined_produces_are_appended_in_request_order(broker):
    topic = "produce-order"
    _create(broker, topic)
    sent = [f"{i:05d}".encode() for i in range(PRODUCES)]
    with connect(broker) as s:
        # acks=-1 and acks=1 alternating: those waiting for their fsync overlap the next request's append.
        s.sendall(b"".join(request_frame(_produce(topic, value, -1 if i % 2 else 1), i)
                           for i, value in enumerate(sent)))
        offsets = []
        for i in range(PRODUCES):
            correlation, response = read_response(s, PRODUCE, 9)
            assert correlation == i, "answers out of request order"
            partition = response.responses[0].partition_responses[0]
            assert partition.error_code == 0
            offsets.append(partition.base_offset)
    assert offsets == list(range(PRODUCES))
    assert _values(broker, topic, PRODUCES) == sent


def _record_values(data: bytes) -> list[bytes]:
    """The values of a records field, as kafka-python reads them."""
    records, values = MemoryRecords(data), []
    while records.has_next():
        values.extend(record.value for record in records.next_batch())
    return values


def test_a_ready_answer_waits_for_a_fetch_still_being_sent(broker):
    # A ready answer is written at once only when nothing is owed before it. Here a Fetch answer of 16 MiB
    # goes out as file ranges to a client that reads nothing yet, so its sending stalls on the full socket,
    # and the OffsetCommit behind it, answered meanwhile, must wait its turn.
    topic = "order-ranges"
    _create(broker, topic)
    values = [bytes([i]) * (1000 << 10) for i in range(16)]
    with connect(broker) as s:
        s.sendall(b"".join(request_frame(_produce(topic, value, 1), i) for i, value in enumerate(values)))
        for i in range(len(values)):
            correlation, produced = read_response(s, PRODUCE, 9)
            assert (correlation, produced.responses[0].partition_responses[0].error_code) == (i, 0)
        everything = fetch_request(topic, [0], max_bytes=64 << 20, partition_max_bytes=64 << 20)
        s.sendall(request_frame(everything, 100) + request_frame(_commit("order-g", topic, 7), 101))
        (size,) = struct.unpack(">i", recv_exactly(s, 4))   # past recv_frame's 1 MiB bound, on purpose
        correlation, fetched = decode_response(recv_exactly(s, size), FETCH, 12)
        assert correlation == 100
        assert _record_values(fetched.responses[0].partitions[0].records) == values
        correlation, committed = read_response(s, OFFSET_COMMIT, 8)
        assert (correlation, committed.topics[0].partitions[0].error_code) == (101, 0)
    assert _committed(broker, "order-g", topic) == (7, "commit 7")
