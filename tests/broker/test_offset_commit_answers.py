"""OffsetCommit's handler on a real in-process broker, through its own codecs (native, read and written as
kio does): its answer, built without the general kit path, must be the answer that path builds
(`group_calls.known_partitions`' checks, `partition_codes`' rows), at every version served, and the offsets
it commits those Kafka keeps: each partition once, its last entry winning."""
from __future__ import annotations

import asyncio
import importlib
from datetime import timedelta

import pytest
from kio.index import load_request_schema
from kio.serial import entity_reader

from logstore.broker.api import REGISTRY, Request, build, response_type
from logstore.broker.api.group_calls import partition_codes
from logstore.broker.config import BrokerConfig
from logstore.broker.protocol import ZERO_MS, ErrorCode, encode_kio
from logstore.broker.server import Broker
from test_wire_codecs import _write

OFFSET_COMMIT = 8
VERSIONS = range(2, 10)
TOPIC, OTHER = "t", "u"


@pytest.fixture
def broker(tmp_path):
    """A broker in this process (no listener started) with topics `t` (3 partitions) and `u` (1)."""
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0"]))
    broker.store.create_topic(TOPIC, 3)
    broker.store.create_topic(OTHER, 1)
    yield broker
    asyncio.run(broker.shutdown())


def _request(version: int, group: str, topics: list[tuple[str, list[tuple[int, int, str | None]]]],
             generation: int = -1):
    cls = load_request_schema(OFFSET_COMMIT, version)
    module = importlib.import_module(cls.__module__)
    return build(cls, group_id=group, generation_id_or_member_epoch=generation, member_id="", group_instance_id=None,
                 retention_time=timedelta(milliseconds=-1), topics=tuple(
                     build(module.OffsetCommitRequestTopic, name=name, partitions=tuple(
                         build(module.OffsetCommitRequestPartition, partition_index=index, committed_offset=offset,
                               committed_leader_epoch=-1, committed_metadata=metadata, commit_timestamp=-1)
                         for index, offset, metadata in partitions))
                     for name, partitions in topics))


def _frame(version: int, body) -> bytes:
    """The request frame a client sends for `body` (kio writes it)."""
    header_cls = type(body).__header_schema__
    header = header_cls(request_api_key=OFFSET_COMMIT, request_api_version=version, correlation_id=1,
                        client_id="test")
    return _write(header_cls, header) + _write(type(body), body)


def _commit(broker: Broker, version: int, body):
    """The handler's answer to `body` as the client reads it: the frame decoded and the answer encoded by the
    API's own codecs, the answer's bytes read back by kio."""
    api = REGISTRY[OFFSET_COMMIT]
    _, decoded = api.decode(_frame(version, body))
    answer = asyncio.run(api.handler(Request(broker, OFFSET_COMMIT, version, 1, "test"), decoded))
    frame = b"".join(api.encode(1, version, answer).parts)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    response_cls = response_type(OFFSET_COMMIT, version)
    header, header_size = entity_reader(response_cls.__header_schema__)(frame[4:], 0)
    assert header.correlation_id == 1
    response, body_size = entity_reader(response_cls)(frame[4:], header_size)
    assert header_size + body_size == len(frame) - 4
    return response


@pytest.mark.parametrize("version", VERSIONS)
def test_each_partition_is_answered_once_in_the_requests_order_with_kit_built_rows(broker, version):
    group = f"g{version}"
    body = _request(version, group, [
        (TOPIC, [(0, 5, "a"), (1, 6, None), (0, 9, "b")]),   # t-0 twice: the later entry wins
        ("missing", [(0, 1, "")]),
        (TOPIC, [(7, 1, ""), (2, 3, "x" * 5000)]),            # out of range; metadata over 4096 bytes
        (OTHER, [(0, 4, "")]),
    ])
    answer = _commit(broker, version, body)
    codes = {("missing", 0): ErrorCode.unknown_topic_or_partition, (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
             (TOPIC, 2): ErrorCode.offset_metadata_too_large}
    expected = build(response_type(OFFSET_COMMIT, version), throttle_time=ZERO_MS,
                     topics=partition_codes(OFFSET_COMMIT, version, "OffsetCommitResponse", body.topics, codes))
    assert answer == expected
    assert encode_kio(1, version, answer).parts == encode_kio(1, version, expected).parts
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics] == [
        (TOPIC, [0, 1, 7, 2]), ("missing", [0]), (OTHER, [0])]
    committed = broker.groups.fetch_offsets(group, [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2), (OTHER, 0)])
    assert {tp: (c.offset, c.metadata) if c else None for tp, c in committed.items()} == {
        (TOPIC, 0): (9, "b"), (TOPIC, 1): (6, ""), (TOPIC, 2): None, (OTHER, 0): (4, "")}


def test_a_group_level_refusal_is_repeated_on_every_partition_asked(broker):
    # A generation of a group that does not exist: ILLEGAL_GENERATION on each partition that exists.
    broker.store.create_topic("v", 2)
    version = 8
    body = _request(version, "lonely", [(TOPIC, [(0, 1, "")]), ("missing", [(0, 1, "")]), ("v", [(1, 2, "")])],
                    generation=3)
    answer = _commit(broker, version, body)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics] == [
        (TOPIC, [(0, ErrorCode.illegal_generation)]),
        ("missing", [(0, ErrorCode.unknown_topic_or_partition)]),
        ("v", [(1, ErrorCode.illegal_generation)])]


def test_metadata_is_measured_in_utf8_bytes_against_offset_metadata_max_bytes(broker):
    # 4096 bytes by default: 1,024 four-byte characters fit, 1,025 do not; 1,366 three-byte ones do not.
    version = 9
    body = _request(version, "sized", [(TOPIC, [(0, 1, "\U0001F600" * 1024), (1, 1, "\U0001F600" * 1025),
                                                (2, 1, "\u20ac" * 1366)])])
    answer = _commit(broker, version, body)
    assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [
        (0, ErrorCode.none), (1, ErrorCode.offset_metadata_too_large), (2, ErrorCode.offset_metadata_too_large)]
    assert broker.groups.fetch_offsets("sized", [(TOPIC, 0)])[(TOPIC, 0)].metadata == "\U0001F600" * 1024
