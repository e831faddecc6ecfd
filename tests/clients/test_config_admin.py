"""Config administration as Kafka's admin clients do it, against a real broker process (issue 27).

Every topic config of Kafka 4.2 set through confluent-kafka's IncrementalAlterConfigs and kafka-python's
AlterConfigs (both APIs), each shown back by DescribeConfigs; the configs Kafka 4 removed taken and dropped.
Broker configs Kafka changes at run time set through IncrementalAlterConfigs on the BROKER resource, per
broker and as the cluster-wide default: shown with Kafka's sources and synonyms, in effect without a restart
(message.max.bytes on the next produce, log.segment.bytes on the next roll), kept across a SIGKILL and a
restart; Kafka's refusals of a static config and of an unknown one.
"""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

from logstore.config import TOPIC_CONFIGS
from raw_wire import kio_round_trip
from segment_files import segment_paths

TIMEOUT = 15.0  # s: a bound on any single wait
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 1, 3, 5   # Kafka's ConfigSource
# A value other than the default for every topic config of Kafka 4.2 (as DescribeConfigs writes it back).
TOPIC_VALUES = {
    "segment.bytes": "1048576", "segment.ms": "3600000", "segment.jitter.ms": "1000",
    "segment.index.bytes": "4096", "index.interval.bytes": "8192", "retention.ms": "3600000",
    "retention.bytes": "1048576", "flush.messages": "1000", "flush.ms": "5000", "max.message.bytes": "500000",
    "message.timestamp.type": "LogAppendTime", "file.delete.delay.ms": "1000", "cleanup.policy": "compact,delete",
    "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "100", "max.compaction.lag.ms": "3600000",
    "delete.retention.ms": "1000", "message.timestamp.before.max.ms": "3600000",
    "message.timestamp.after.max.ms": "60000", "compression.type": "gzip", "compression.gzip.level": "5",
    "compression.lz4.level": "10", "compression.zstd.level": "7", "min.insync.replicas": "2",
    "unclean.leader.election.enable": "true", "preallocate": "true", "leader.replication.throttled.replicas": "0:1",
    "follower.replication.throttled.replicas": "*", "remote.storage.enable": "false",
    "local.retention.ms": "1000", "local.retention.bytes": "1000", "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
}
# Kafka 4 removed these (KIP-724) but its controller still takes them from older tools, and drops them.
REMOVED = {"message.format.version": "2.8-IV1", "message.downconversion.enable": "false"}


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker, topic: str, config: dict[str, str] | None = None) -> None:
    client = admin(broker)
    futures = client.create_topics([NewTopic(topic, 1, 1, config=config or {})], operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None


def describe(broker, kind: ResourceType, name: str) -> dict:
    """{name: confluent ConfigEntry} of one resource."""
    client = admin(broker)
    (future,) = client.describe_configs([ConfigResource(kind, name)], request_timeout=TIMEOUT).values()
    return future.result(TIMEOUT)


def incremental(broker, kind: ResourceType, name: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> None:
    """One IncrementalAlterConfigs of confluent-kafka; raises the KafkaException of a refusal."""
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    client = admin(broker)
    (future,) = client.incremental_alter_configs([ConfigResource(kind, name, incremental_configs=entries)],
                                                 request_timeout=TIMEOUT).values()
    future.result(TIMEOUT)


def cluster_default(broker, **configs: str) -> list[tuple[str, str | None, int]]:
    """SET `configs` on the cluster-wide default (the BROKER resource ""), which neither confluent-kafka nor
    kafka-python can name, then describe it: (name, value, source) of each config it lists."""
    alter = incremental_v1.IncrementalAlterConfigsRequest(resources=(incremental_v1.AlterConfigsResource(
        resource_type=BROKER, resource_name="", configs=tuple(
            incremental_v1.AlterableConfig(name=n, config_operation=0, value=v) for n, v in configs.items())),),
        validate_only=False)
    if configs:
        (answer,) = kio_round_trip(broker, 44, 1, alter, 1).responses
        assert (answer.error_code, answer.error_message) == (0, None)
    return [(c.name, c.value, c.config_source) for c in raw_describe(broker, "")]


def raw_describe(broker, name: str, *keys: str, resource_type: int = BROKER) -> tuple:
    """The configs DescribeConfigs v4 lists of a resource (a BROKER by default), with synonyms (librdkafka keys
    them by name, which folds a chain of one name's layers into one) and documentation."""
    asked = describe_v4.DescribeConfigsRequest(resources=(describe_v4.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=keys or None),), include_synonyms=True,
        include_documentation=True)
    (result,) = kio_round_trip(broker, 32, 4, asked, 2).results
    return result.configs


def refusal(call, *args) -> tuple[int, str]:
    """(Kafka error code, message) of a call that must be refused."""
    with pytest.raises(KafkaException) as raised:
        call(*args)
    error = raised.value.args[0]
    return error.code(), error.str()


def produce(broker, topic: str, size: int, count: int = 1, acks: int = -1) -> list:
    """Produce `count` values of `size` bytes, one batch each; the delivery error of each (None: stored)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000,
                         "acks": acks})
    reports: list = []
    for _ in range(count):
        producer.produce(topic, value=b"x" * size, on_delivery=lambda err, msg: reports.append(err))
        assert producer.flush(TIMEOUT) == 0
    return [e.code() if e else None for e in reports]


def test_the_value_table_covers_every_topic_config():
    assert TOPIC_VALUES.keys() == TOPIC_CONFIGS.keys()


# -- every topic config ----------------------------------------------------------------------------

def test_confluent_sets_and_deletes_every_topic_config(broker, topic):
    create_topic(broker, topic)
    incremental(broker, ResourceType.TOPIC, topic, *((n, v, AlterConfigOpType.SET) for n, v in TOPIC_VALUES.items()),
                *((n, v, AlterConfigOpType.SET) for n, v in REMOVED.items()))
    shown = describe(broker, ResourceType.TOPIC, topic)
    assert {n: (e.value, ConfigSource(e.source)) for n, e in shown.items()} == \
        {n: (v, ConfigSource.DYNAMIC_TOPIC_CONFIG) for n, v in TOPIC_VALUES.items()}
    # The effect of one: a batch over the topic's max.message.bytes is refused at once (acks=1: with
    # min.insync.replicas=2 an acks=all produce would get NOT_ENOUGH_REPLICAS from this one node).
    assert produce(broker, topic, 600_000, acks=1) == [KafkaError.MSG_SIZE_TOO_LARGE]
    incremental(broker, ResourceType.TOPIC, topic, *((n, None, AlterConfigOpType.DELETE) for n in TOPIC_VALUES))
    shown = describe(broker, ResourceType.TOPIC, topic)
    assert {ConfigSource(e.source) for e in shown.values()} == {ConfigSource.DEFAULT_CONFIG}


def test_kafka_python_sets_every_topic_config_with_both_apis(broker, topic):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert client.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})["topics"][0][
            "error_code"] == 0
        half = dict(list(TOPIC_VALUES.items())[::2])
        # raise_on_unknown=False: kafka-python would refuse the removed configs itself, as a Kafka 4 broker
        # does not describe them either.
        resource = KafkaPythonConfigResource("TOPIC", topic, configs={**half, **REMOVED})
        assert client.alter_configs([resource], raise_on_unknown=False) == {"topic": {topic: "OK"}}   # incremental
        shown = client.describe_configs([KafkaPythonConfigResource("TOPIC", topic)])["topic"][topic]
        assert {n: c["value"] for n, c in shown.items()} == half
        # The legacy API replaces the whole set: what is not listed goes back to its default.
        legacy = KafkaPythonConfigResource("TOPIC", topic, configs={**TOPIC_VALUES, **REMOVED})
        assert client.alter_configs([legacy], incremental=False, raise_on_unknown=False) == {"topic": {topic: "OK"}}
        shown = client.describe_configs([KafkaPythonConfigResource("TOPIC", topic)])["topic"][topic]
        assert {n: (c["value"], c["config_source"]) for n, c in shown.items()} == \
            {n: (v, "DYNAMIC_TOPIC_CONFIG") for n, v in TOPIC_VALUES.items()}
    finally:
        client.close()


def test_an_unknown_topic_is_answered_before_its_configs(broker, topic):
    assert refusal(incremental, broker, ResourceType.TOPIC, topic + "-missing",
                   ("no.such.config", "1", AlterConfigOpType.SET)) == \
        (KafkaError.UNKNOWN_TOPIC_OR_PART, f"The topic '{topic}-missing' does not exist.")


# -- broker configs ------------------------------------------------------------------------------------

def test_broker_configs_change_at_run_time_and_survive_a_kill(start_broker):
    b = start_broker("message.max.bytes=500000")
    create_topic(b, "inherits")
    create_topic(b, "own", {"max.message.bytes": "20000"})
    assert produce(b, "inherits", 5000) == [None]

    cluster_default(b, **{"message.max.bytes": "400000", "log.segment.bytes": "12000"})
    incremental(b, ResourceType.BROKER, "1", ("message.max.bytes", "3000", AlterConfigOpType.SET))

    def check() -> None:
        entries = describe(b, ResourceType.BROKER, "1")
        entry = entries["message.max.bytes"]
        assert (entry.value, ConfigSource(entry.source), entry.is_read_only) == \
            ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
        (raw,) = raw_describe(b, "1", "message.max.bytes")
        assert [(s.name, s.value, s.source) for s in raw.synonyms] == [
            ("message.max.bytes", "3000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
            ("message.max.bytes", "400000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            ("message.max.bytes", "500000", ConfigSource.STATIC_BROKER_CONFIG.value),
            ("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG.value)]
        assert ConfigSource(entries["log.segment.bytes"].source) == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        # The cluster-wide default resource lists only what is set there.
        assert cluster_default(b) == [("log.segment.bytes", "12000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                                      ("message.max.bytes", "400000", DYNAMIC_DEFAULT_BROKER_CONFIG)]
        topic = describe(b, ResourceType.TOPIC, "inherits")["max.message.bytes"]
        assert (topic.value, ConfigSource(topic.source)) == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG)
        # In effect: the next produce over the new limit is refused, a topic's own override still wins.
        assert produce(b, "inherits", 5000) == [KafkaError.MSG_SIZE_TOO_LARGE]
        assert produce(b, "own", 5000) == [None]

    check()
    # log.segment.bytes: the next appends roll at the new size (the topic's own override is another config).
    assert len(segment_paths(b.data_dir, "own")) == 1
    assert produce(b, "own", 5000, count=6) == [None] * 6
    assert len(segment_paths(b.data_dir, "own")) >= 3
    b.kill()   # written in every log dir before the answer
    b.start()
    check()


def test_kafka_python_alters_broker_configs_incrementally(start_broker):
    b = start_broker()
    client = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        resource = KafkaPythonConfigResource("BROKER", "1", configs={"log.retention.ms": "3600000",
                                                                     "max.connections.per.ip": "100"})
        assert client.alter_configs([resource]) == {"broker": {"1": "OK"}}
        shown = client.describe_configs([KafkaPythonConfigResource("BROKER", "1")])["broker"]["1"]
        assert {n: (shown[n]["value"], shown[n]["config_source"]) for n in ("log.retention.ms",
                                                                             "max.connections.per.ip")} == {
            "log.retention.ms": ("3600000", "DYNAMIC_BROKER_CONFIG"),
            "max.connections.per.ip": ("100", "DYNAMIC_BROKER_CONFIG")}
        # kafka-python refuses a config the broker describes as read-only itself; sent anyway, the broker does.
        static = KafkaPythonConfigResource("BROKER", "1", configs={"num.partitions": "3"})
        with pytest.raises(ValueError, match="Unrecognized configs: {'num.partitions'}"):
            client.alter_configs([static])
        assert client.alter_configs([static], raise_on_unknown=False) == {"broker": {"1": (
            "[Error 42] InvalidRequestError: Cannot update these configs dynamically: Set(num.partitions)")}}
    finally:
        client.close()
    create_topic(b, "inherits")
    retention = describe(b, ResourceType.TOPIC, "inherits")["retention.ms"]
    assert (retention.value, ConfigSource(retention.source)) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG)


def test_static_and_unknown_broker_configs_are_refused_as_kafka_refuses_them(broker):
    assert refusal(incremental, broker, ResourceType.BROKER, "1",
                   ("log.dirs", "/elsewhere", AlterConfigOpType.SET),
                   ("log.retention.ms", "1000", AlterConfigOpType.SET)) == \
        (KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)")
    assert refusal(incremental, broker, ResourceType.BROKER, "1",
                   ("log.retention.msec", "1000", AlterConfigOpType.SET)) == \
        (KafkaError.INVALID_REQUEST, "Unknown broker config name: log.retention.msec; did you mean log.retention.ms?")
    assert refusal(incremental, broker, ResourceType.BROKER, "1",
                   ("message.max.bytes", "big", AlterConfigOpType.SET)) == \
        (KafkaError.INVALID_REQUEST, "Invalid value big for configuration message.max.bytes: Not a number of type INT")
    # Each says what it does here, and why one that Kafka changes at run time does nothing on one node.
    docs = {c.name: (c.read_only, c.config_type, c.documentation)
            for c in raw_describe(broker, "1", "num.io.threads", "max.connections", "log.retention.hours")}
    assert docs == {
        "num.io.threads": (False, 3, "Kafka's num.io.threads, kept and shown. No effect on this broker: requests are "
                                     "served by one asyncio event loop, and blocking work by pools of fixed size."),
        "max.connections": (False, 3, "Kafka's connection limit; a change applies to the next connections accepted."),
        "log.retention.hours": (True, 3, "Default of the topic config retention.ms in hours. Age (ms) after which a "
                                         "segment is deleted, with cleanup.policy delete; -1: no limit.")}
    # Nothing was changed by the refusals.
    shown = describe(broker, ResourceType.BROKER, "1")
    assert {ConfigSource(shown[n].source) for n in ("log.retention.ms", "message.max.bytes")} == \
        {ConfigSource.DEFAULT_CONFIG}


def test_a_topic_config_whose_broker_synonym_has_its_name_is_listed_once(broker, topic):
    create_topic(broker, topic, {"compression.type": "zstd", "retention.ms": "60000"})
    shown = raw_describe(broker, topic, "compression.type", "retention.ms", resource_type=TOPIC)
    assert {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in shown} == {
        "compression.type": [("compression.type", "zstd", DYNAMIC_TOPIC_CONFIG),
                             ("compression.type", "producer", DEFAULT_CONFIG)],
        "retention.ms": [("retention.ms", "60000", DYNAMIC_TOPIC_CONFIG),
                         ("log.retention.hours", "168", DEFAULT_CONFIG)]}
