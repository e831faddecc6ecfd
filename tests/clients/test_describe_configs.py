"""DescribeConfigs against a real broker: the admin clients of confluent-kafka, kafka-python and aiokafka,
and every version (v1-v4) by hand for what the clients cannot send (other broker ids, loggers, key filters).

A topic created with overrides shows them as DYNAMIC_TOPIC_CONFIG and everything
else as the broker's default; a broker started with `--override` shows those
as STATIC_BROKER_CONFIG; the overrides outlive a clean stop and a SIGKILL.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from logstore.broker.dynamic_config import DYNAMIC_CONFIGS
from logstore.config import TOPIC_CONFIGS
from raw_wire import kio_round_trip
from segment_files import segment_paths

TIMEOUT = 15.0  # s: a bound on any single wait
DESCRIBE_CONFIGS = 32
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
INT, LONG, LIST = 3, 5, 7
OVERRIDES = {"retention.ms": "3600000", "cleanup.policy": "compact"}


def create_topic(broker, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None


def confluent_describe(broker, kind: ResourceType, name: str) -> dict:
    """{config name: ConfigEntry} of one resource, or the KafkaException the broker's error became."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = admin.describe_configs([ConfigResource(kind, name)], request_timeout=TIMEOUT).values()
    return future.result(TIMEOUT)


def value_and_source(entries: dict, *names: str) -> dict:
    """(value, ConfigSource) of each named entry (librdkafka hands the source over as a bare int)."""
    return {n: (entries[n].value, ConfigSource(entries[n].source)) for n in names}


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------

def test_confluent_topic_shows_its_overrides_and_the_defaults(broker, topic):
    create_topic(broker, topic, OVERRIDES)
    entries = confluent_describe(broker, ResourceType.TOPIC, topic)
    assert set(entries) == set(TOPIC_CONFIGS)
    assert value_and_source(entries, "retention.ms", "cleanup.policy", "segment.bytes", "segment.ms") == {
        "retention.ms": ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "segment.bytes": (str(1 << 30), ConfigSource.DEFAULT_CONFIG),
        "segment.ms": (str(7 * 24 * 3_600_000), ConfigSource.DEFAULT_CONFIG),
    }
    assert not any(e.is_read_only or e.is_sensitive for e in entries.values())
    assert [e.name for e in entries.values() if e.is_default] == \
        [n for n in entries if n not in OVERRIDES]
    assert entries["segment.bytes"].synonyms["log.segment.bytes"].value == str(1 << 30)

    with pytest.raises(KafkaException) as raised:
        confluent_describe(broker, ResourceType.TOPIC, topic + "-missing")
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_broker_lists_its_settings_read_only_but_the_dynamic_ones(broker):
    entries = confluent_describe(broker, ResourceType.BROKER, "1")
    assert value_and_source(entries, "node.id", "listeners", "num.partitions", "log.segment.bytes",
                            "log.retention.hours", "log.retention.ms") == {
        "node.id": ("1", ConfigSource.DEFAULT_CONFIG),
        "listeners": (f"PLAINTEXT://{broker.bootstrap}", ConfigSource.STATIC_BROKER_CONFIG),
        "num.partitions": ("1", ConfigSource.DEFAULT_CONFIG),
        "log.segment.bytes": (str(1 << 30), ConfigSource.DEFAULT_CONFIG),
        "log.retention.hours": ("168", ConfigSource.DEFAULT_CONFIG),
        "log.retention.ms": (None, ConfigSource.DEFAULT_CONFIG),  # Kafka's: the hours carry the default
    }
    # Kafka's dynamic broker configs can be altered (broker/dynamic_config.py); every other one is read-only.
    assert {n for n, e in entries.items() if not e.is_read_only} == DYNAMIC_CONFIGS
    assert entries["ssl.keystore.password"].is_sensitive and entries["ssl.keystore.password"].value is None


def test_static_defaults_and_topic_overrides_survive_stop_and_kill(start_broker):
    b = start_broker("log.retention.hours=5", "log.segment.bytes=100000")
    create_topic(b, "own", {"retention.ms": "60000", "segment.bytes": "2000"})
    create_topic(b, "inherits", {})

    def check():
        own = confluent_describe(b, ResourceType.TOPIC, "own")
        assert value_and_source(own, "retention.ms", "segment.bytes", "cleanup.policy") == {
            "retention.ms": ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            "segment.bytes": ("2000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            "cleanup.policy": ("delete", ConfigSource.DEFAULT_CONFIG),
        }
        inherits = confluent_describe(b, ResourceType.TOPIC, "inherits")
        assert value_and_source(inherits, "retention.ms", "segment.bytes", "cleanup.policy") == {
            "retention.ms": (str(5 * 3_600_000), ConfigSource.STATIC_BROKER_CONFIG),
            "segment.bytes": ("100000", ConfigSource.STATIC_BROKER_CONFIG),
            "cleanup.policy": ("delete", ConfigSource.DEFAULT_CONFIG),
        }
        node = confluent_describe(b, ResourceType.BROKER, "1")
        assert value_and_source(node, "log.retention.hours", "log.segment.bytes") == {
            "log.retention.hours": ("5", ConfigSource.STATIC_BROKER_CONFIG),
            "log.segment.bytes": ("100000", ConfigSource.STATIC_BROKER_CONFIG),
        }

    check()
    b.stop()
    b.start()
    check()
    b.kill()
    b.start()
    check()
    # The restarted log runs with the topic's own segment.bytes, not the broker's 100000.
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(12):
        p.produce("own", value=b"%0999d" % i, partition=0)
        assert p.flush(TIMEOUT) == 0
    assert len(segment_paths(b.data_dir, "own", 0)) >= 6


# -- kafka-python ----------------------------------------------------------------------------------

def test_kafka_python_filters_by_source(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1, "configs": OVERRIDES}})
        assert [t["error_code"] for t in result["topics"]] == [0]
        resource = KafkaPythonConfigResource("TOPIC", topic)
        modified = admin.describe_configs([resource])["topic"][topic]
        assert {n: (c["value"], c["config_source"]) for n, c in modified.items()} == {
            "retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"), "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG")}

        everything = admin.describe_configs([resource], include_synonyms=True, config_filter="all")["topic"][topic]
        assert set(everything) == set(TOPIC_CONFIGS)
        segment = everything["segment.bytes"]
        assert (segment["value"], segment["config_source"], segment["config_type"]) == \
            (str(1 << 30), "DEFAULT_CONFIG", "INT")
        assert everything["cleanup.policy"]["config_type"] == "LIST"
        assert everything["retention.ms"]["synonyms"] == [
            {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"},
            {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"}]

        static = admin.describe_configs([KafkaPythonConfigResource("BROKER", "1")], config_filter="static")
        static = static["broker"]["1"]
        assert static["listeners"]["value"] == f"PLAINTEXT://{broker.bootstrap}"
        assert static["log.dirs"]["value"] == str(broker.data_dir)
        assert "log.segment.bytes" not in static
        assert all(c["read_only"] for c in static.values())
    finally:
        admin.close()


# -- aiokafka ----------------------------------------------------------------------------------------

def test_aiokafka_describes_a_topic_and_reports_a_missing_one(broker, topic):
    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics([AioNewTopic(topic, 1, 1, topic_configs=OVERRIDES)])
            assert [t[1] for t in created.topic_errors] == [0]
            (response,) = await admin.describe_configs(
                [AioConfigResource(ConfigResourceType.TOPIC, topic),
                 AioConfigResource(ConfigResourceType.TOPIC, topic + "-missing")], include_synonyms=True)
            return response.to_object()["resources"]
        finally:
            await admin.close()

    found, missing = asyncio.run(run())
    assert (found["error_code"], found["resource_name"]) == (0, topic)
    entries = {e["config_names"]: e for e in found["config_entries"]}
    assert set(entries) == set(TOPIC_CONFIGS)
    assert {n: (entries[n]["config_value"], entries[n]["config_source"]) for n in ("retention.ms", "retention.bytes")} \
        == {"retention.ms": ("3600000", DYNAMIC_TOPIC_CONFIG), "retention.bytes": ("-1", DEFAULT_CONFIG)}
    assert [(s["config_name"], s["config_source"]) for s in entries["cleanup.policy"]["config_synonyms"]] == \
        [("cleanup.policy", DYNAMIC_TOPIC_CONFIG), ("log.cleanup.policy", DEFAULT_CONFIG)]
    assert (missing["error_code"], missing["config_entries"]) == (ErrorCode.unknown_topic_or_partition.value, [])
    assert topic + "-missing" in missing["error_message"]


# -- every version by hand -----------------------------------------------------------------------------

def raw_describe(broker, version: int, resources, **flags):
    """One DescribeConfigs request at `version` on its own connection; kio's decoding of the response."""
    request_cls = load_request_schema(DESCRIBE_CONFIGS, version)
    resource_cls = importlib.import_module(request_cls.__module__).DescribeConfigsResource
    known = {f.name for f in dataclasses.fields(request_cls)}
    body = request_cls(resources=tuple(resource_cls(resource_type=t, resource_name=n, configuration_keys=k)
                                       for t, n, k in resources),
                       **{k: v for k, v in flags.items() if k in known})
    return kio_round_trip(broker, DESCRIBE_CONFIGS, version, body, 7)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_each_version_answers_every_kind_of_resource(broker, topic, version):
    create_topic(broker, topic, OVERRIDES)
    asked = [
        (TOPIC, topic, ("retention.ms", "no.such.config")),   # an unknown key is left out
        (TOPIC, topic, None),                                  # null: all
        (TOPIC, topic, ()),                                    # empty: all too, as Kafka reads it
        (TOPIC, topic + "-missing", None),
        (TOPIC, "a/b", None),
        (BROKER, "", None),                                    # dynamic cluster defaults: none
        (BROKER, "1", ("log.retention.hours", "node.id")),
        (BROKER, "7", None),
        (BROKER, "one", None),
        (BROKER_LOGGER, "1", None),
        (16, "metrics", None),
    ]
    results = raw_describe(broker, version, asked, include_synonyms=True, include_documentation=True).results
    assert [(r.resource_type, r.resource_name) for r in results] == [(t, n) for t, n, _ in asked]
    assert [r.error_code for r in results] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_topic_exception, ErrorCode.none, ErrorCode.none, ErrorCode.invalid_request,
        ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.invalid_request]
    assert all(r.error_message for r in results if r.error_code != ErrorCode.none)
    assert "7" in results[7].error_message
    assert all(r.configs == () for r in results if r.error_code != ErrorCode.none)

    (retention,) = results[0].configs
    assert (retention.name, retention.value, retention.config_source, retention.read_only,
            retention.is_sensitive) == ("retention.ms", "3600000", DYNAMIC_TOPIC_CONFIG, False, False)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "3600000", DYNAMIC_TOPIC_CONFIG), ("log.retention.hours", "168", DEFAULT_CONFIG)]
    assert {c.name for c in results[1].configs} == {c.name for c in results[2].configs} == set(TOPIC_CONFIGS)
    assert results[5].configs == ()
    node = {c.name: c for c in results[6].configs}
    assert {n: (c.value, c.config_source, c.read_only) for n, c in node.items()} == {
        "log.retention.hours": ("168", DEFAULT_CONFIG, True), "node.id": ("1", DEFAULT_CONFIG, True)}
    if version >= 3:
        every = {c.name: c for c in results[1].configs}
        assert (every["retention.ms"].config_type, every["segment.bytes"].config_type,
                every["cleanup.policy"].config_type, node["log.retention.hours"].config_type) == (LONG, INT, LIST, INT)
        assert all(c.documentation for c in results[1].configs)

    plain = raw_describe(broker, version, [(TOPIC, topic, ("retention.ms",))]).results[0].configs
    assert [(c.name, c.synonyms) for c in plain] == [("retention.ms", ())]
    if version >= 3:
        assert plain[0].documentation is None
