"""Metadata answers built from kept rows, in-process: byte for byte what kio encodes for every version,
each name answered once however often it is asked, internal topics auto-created as the coordinators
create them, and the limit on what one request may auto-create."""
from __future__ import annotations

import asyncio
import importlib
import uuid

import pytest
from kio.index import load_request_schema, load_response_schema

from logstore.broker.api import REGISTRY, Request, build
from logstore.broker.api.metadata import UNKNOWN_OPERATIONS
from logstore.broker.config import BrokerConfig
from logstore.broker.protocol import ZERO_MS, ErrorCode, encode_body
from logstore.broker.server import Broker

METADATA = 3


def _broker(tmp_path, *overrides: str) -> Broker:
    return Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0", *overrides]))


def _close(broker: Broker) -> None:
    asyncio.run(broker.shutdown())


def _request_body(version: int, names: list[str], *, allow: bool = True):
    cls = load_request_schema(METADATA, version)
    topic_cls = importlib.import_module(cls.__module__).MetadataRequestTopic
    topics = tuple(build(topic_cls, name=name, topic_id=None) for name in names)
    return build(cls, topics=topics, allow_auto_topic_creation=allow, include_topic_authorized_operations=False,
                 include_cluster_authorized_operations=False)


def _ask(broker: Broker, version: int, names: list[str], *, allow: bool = True) -> bytes:
    async def run() -> bytes:
        return await REGISTRY[METADATA].handler(Request(broker, METADATA, version, 7, "test"),
                                                _request_body(version, names, allow=allow))
    return asyncio.run(run())


def _decoded(version: int, body: bytes):
    from kio.serial import entity_reader
    response, _ = entity_reader(load_response_schema(METADATA, version))(body, 0)
    return response


def _expected(broker: Broker, version: int, topics: list[tuple[str, ErrorCode, int]]) -> bytes:
    """What kio encodes for this broker's answer about `topics` (name, error, partitions), built directly."""
    cls = load_response_schema(METADATA, version)
    module = importlib.import_module(cls.__module__)
    node = broker.node_id
    rows = []
    for name, error, partitions in topics:
        topic_id = uuid.UUID(bytes=broker.store.topic_id(name)) if error == ErrorCode.none else None
        rows.append(build(module.MetadataResponseTopic, error_code=error, name=name, topic_id=topic_id,
                          is_internal=name == "__consumer_offsets",
                          partitions=tuple(build(module.MetadataResponsePartition, error_code=ErrorCode.none,
                                                 partition_index=p, leader_id=node, leader_epoch=0,
                                                 replica_nodes=(node,), isr_nodes=(node,), offline_replicas=())
                                           for p in range(partitions)),
                          topic_authorized_operations=UNKNOWN_OPERATIONS))
    advertised = broker.config.advertised
    return encode_body(build(cls, throttle_time=ZERO_MS, brokers=(build(
        module.MetadataResponseBroker, node_id=node, host=advertised.host, port=advertised.port, rack=None),),
        cluster_id=broker.cluster_id, controller_id=node, topics=tuple(rows),
        cluster_authorized_operations=UNKNOWN_OPERATIONS))


@pytest.mark.parametrize("version", range(13))
def test_every_version_answers_exactly_what_kio_encodes(tmp_path, version):
    broker = _broker(tmp_path, "auto.create.topics.enable=false")
    try:
        broker.store.create_topic("orders", 3)
        broker.store.create_topic("__consumer_offsets", 2)
        asked = ["orders", "missing", "__consumer_offsets"]
        want = _expected(broker, version, [("orders", ErrorCode.none, 3),
                                           ("missing", ErrorCode.unknown_topic_or_partition, 0),
                                           ("__consumer_offsets", ErrorCode.none, 2)])
        assert _ask(broker, version, asked) == want
        assert _ask(broker, version, asked) == want, "the kept rows make the same answer"
        broker.store.create_topic("missing", 1)
        assert _ask(broker, version, asked) == _expected(broker, version, [
            ("orders", ErrorCode.none, 3), ("missing", ErrorCode.none, 1), ("__consumer_offsets", ErrorCode.none, 2)])
        if version:   # v0 asks for every topic with an empty list
            assert _ask(broker, version, []) == _expected(broker, version, [])
    finally:
        _close(broker)


def test_a_name_asked_many_times_is_answered_once(tmp_path):
    broker = _broker(tmp_path)
    try:
        broker.store.create_topic("wide", 1000)
        body = _ask(broker, 12, ["wide", "new", "wide"] * 200 + ["new"])
        response = _decoded(12, body)
        assert [(t.name, t.error_code, len(t.partitions)) for t in response.topics] == [
            ("wide", ErrorCode.none, 1000), ("new", ErrorCode.none, 1)]
        assert broker.store.topics()["new"] == 1
    finally:
        _close(broker)


def test_an_internal_topic_is_auto_created_as_its_coordinator_creates_it(tmp_path):
    broker = _broker(tmp_path, "offsets.topic.num.partitions=4", "num.partitions=2")
    try:
        response = _decoded(12, _ask(broker, 12, ["__consumer_offsets", "plain"]))
        assert [(t.name, t.error_code, len(t.partitions), t.is_internal) for t in response.topics] == [
            ("__consumer_offsets", ErrorCode.none, 4, True), ("plain", ErrorCode.none, 2, False)]
        assert broker.store.config_for("__consumer_offsets").compacts
    finally:
        _close(broker)


def test_auto_creation_past_the_partition_limit_creates_nothing(tmp_path):
    broker = _broker(tmp_path, "num.partitions=5001")
    try:
        response = _decoded(12, _ask(broker, 12, ["first", "bad name", "second"]))
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("first", ErrorCode.unknown_topic_or_partition), ("bad name", ErrorCode.invalid_topic_exception),
            ("second", ErrorCode.unknown_topic_or_partition)]
        assert broker.store.topics() == {}
        assert not [p for p in tmp_path.iterdir() if p.is_dir()]
    finally:
        _close(broker)
