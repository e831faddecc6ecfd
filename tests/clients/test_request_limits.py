"""Per-request limits with Kafka's errors, against a real broker process: CreateTopics and Metadata's
auto-creation bounded by KRaft's 10,000 partitions per request, duplicate names, other clients served
while topics are being created, a Metadata request naming one topic over and over, and DeleteRecords
refused on the coordinators' internal topics."""
from __future__ import annotations

import importlib
import io
import os
import select
import struct
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from logstore.broker.admin_client import AdminClient as RawAdmin
from logstore.broker.api import build
from raw_wire import api_versions_v0, connect, framed, recv_exactly

TIMEOUT = 30.0   # s: a bound on any one client call or reply
METADATA, CREATE_TOPICS, DELETE_TOPICS = 3, 19, 20


def _frame(api_key: int, version: int, correlation_id: int, **fields) -> bytes:
    """A request frame (size prefix included) of kio's class for the API and version, from its fields."""
    cls = load_request_schema(api_key, version)
    sink = io.BytesIO()
    header = cls.__header_schema__
    entity_writer(header)(sink, header(request_api_key=api_key, request_api_version=version,
                                       correlation_id=correlation_id, client_id="limits"))
    entity_writer(cls)(sink, build(cls, **fields))
    return framed(sink.getvalue())


def _metadata_frame(names: list[str], correlation_id: int) -> bytes:
    module = importlib.import_module(load_request_schema(METADATA, 12).__module__)
    topics = tuple(module.MetadataRequestTopic(name=name, topic_id=None) for name in names)
    return _frame(METADATA, 12, correlation_id, topics=topics, allow_auto_topic_creation=True,
                  include_topic_authorized_operations=False)


def _metadata_reply(sock, correlation_id: int):
    """The Metadata v12 response read off `sock` (header v1), decoded by kio."""
    sock.settimeout(TIMEOUT)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    frame = recv_exactly(sock, size)
    (corr,) = struct.unpack_from(">i", frame, 0)
    assert corr == correlation_id
    response, _ = entity_reader(load_response_schema(METADATA, 12))(frame, 5)   # header: id + empty tags
    return response


def _topic_dirs(broker, prefix: str) -> list[str]:
    return [name for name in os.listdir(broker.data_dir) if name.startswith(prefix)]


def test_create_topics_past_10000_partitions_is_refused_whole(start_broker):
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for topics in ([NewTopic("huge", num_partitions=100_000, replication_factor=1)],
                   [NewTopic("half-a", num_partitions=6_000, replication_factor=1),
                    NewTopic("half-b", num_partitions=6_000, replication_factor=1)]):
        for name, future in admin.create_topics(topics, operation_timeout=TIMEOUT).items():
            with pytest.raises(KafkaException) as raised:
                future.result(TIMEOUT)
            error = raised.value.args[0]
            assert (error.code(), error.str()) == (KafkaError.POLICY_VIOLATION,
                                                   "Excessively large number of partitions per request."), name
    assert _topic_dirs(broker, "huge") == _topic_dirs(broker, "half-") == []
    assert not {"huge", "half-a", "half-b"} & set(admin.list_topics(timeout=TIMEOUT).topics)
    # Exactly the limit is allowed (checked only: validate_only creates nothing).
    exact = admin.create_topics([NewTopic("exact", num_partitions=10_000, replication_factor=1)],
                                validate_only=True, operation_timeout=TIMEOUT)
    assert exact["exact"].result(TIMEOUT) is None
    assert _topic_dirs(broker, "exact") == []


def test_create_topics_answers_a_name_given_twice_with_invalid_request(start_broker):
    broker = start_broker()
    request_cls = load_request_schema(CREATE_TOPICS, 5)
    module = importlib.import_module(request_cls.__module__)

    def topic(name: str, partitions: int):
        return module.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                                     configs=())
    with RawAdmin(broker.bootstrap, timeout_s=TIMEOUT) as admin:
        response = admin.request(build(request_cls, topics=(topic("twice", 1), topic("once", 2), topic("twice", 3)),
                                       timeout=timedelta(seconds=TIMEOUT), validate_only=False))
    assert [(t.name, t.error_code, t.error_message, t.num_partitions) for t in response.topics] == [
        ("twice", 42, "Duplicate topic name.", -1), ("once", 0, None, 2)]
    assert _topic_dirs(broker, "twice") == [] and sorted(_topic_dirs(broker, "once-")) == ["once-0", "once-1"]


def test_another_client_is_answered_while_a_metadata_request_creates_topics(start_broker):
    broker = start_broker()
    names = [f"stall-{i:04d}" for i in range(300)]
    creating = connect(broker)
    other = None
    try:
        creating.sendall(_metadata_frame(names, correlation_id=11))
        deadline = time.monotonic() + TIMEOUT
        # The event: the broker is creating this request's topics (the first directory exists).
        while not _topic_dirs(broker, "stall-"):
            assert time.monotonic() < deadline, "no topic was created"
            time.sleep(0.005)
        other = connect(broker)
        assert api_versions_v0(other, 12)[METADATA][1] == 12
        # Answered while the creation was still under way, not after it.
        assert len(_topic_dirs(broker, "stall-")) < len(names)
        assert select.select([creating], [], [], 0)[0] == [], "the creating request was answered first"
        response = _metadata_reply(creating, 11)
    finally:
        creating.close()
        if other is not None:
            other.close()
    assert [(t.name, t.error_code, len(t.partitions)) for t in response.topics] == [(n, 0, 1) for n in names]


def test_metadata_naming_one_topic_50000_times_answers_it_once(start_broker):
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("wide", num_partitions=1000, replication_factor=1)])["wide"].result(TIMEOUT)
    sock = connect(broker)
    try:
        frame = _metadata_frame(["wide"] * 50_000, correlation_id=5)
        assert len(frame) > 1_000_000
        sock.sendall(frame)
        response = _metadata_reply(sock, 5)
        assert api_versions_v0(sock, 6)[METADATA][1] == 12, "the connection goes on"
    finally:
        sock.close()
    assert [(t.name, t.error_code, len(t.partitions)) for t in response.topics] == [("wide", 0, 1000)]


def test_delete_records_on_the_internal_topics_is_refused_and_offsets_stay(start_broker, topic):
    broker = start_broker("offsets.topic.num.partitions=3")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(TIMEOUT)
    group = {"bootstrap.servers": broker.bootstrap, "group.id": "kept", "enable.auto.commit": False}
    consumer = Consumer(group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
    finally:
        consumer.close()
    internal = [TopicPartition("__consumer_offsets", p, -1) for p in range(3)]
    results = admin.delete_records(internal, operation_timeout=TIMEOUT)
    for partition, future in results.items():
        with pytest.raises(KafkaException) as raised:
            future.result(TIMEOUT)
        assert raised.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, partition
    broker.stop()
    broker.start()
    consumer = Consumer(group)
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
    finally:
        consumer.close()
    assert committed.offset == 42


def test_delete_topics_answers_a_name_given_twice_with_invalid_request(start_broker):
    broker = start_broker()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for name in ("kept", "gone"):
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(TIMEOUT)
    request_cls = load_request_schema(DELETE_TOPICS, 4)
    with RawAdmin(broker.bootstrap, timeout_s=TIMEOUT) as raw:
        response = raw.request(request_cls(topic_names=("kept", "gone", "kept"), timeout=timedelta(seconds=TIMEOUT)))
    assert [(t.name, t.error_code) for t in response.responses] == [("kept", 42), ("gone", 0)]
    assert _topic_dirs(broker, "kept-") == ["kept-0"] and _topic_dirs(broker, "gone-") == []
