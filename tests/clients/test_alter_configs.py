"""AlterConfigs and IncrementalAlterConfigs against a real broker: confluent-kafka's and kafka-python's admin
clients, then every version by hand for what the clients will not send (duplicates, nulls, odd resources).

A change shows in DescribeConfigs as DYNAMIC_TOPIC_CONFIG at once, applies to
the running topic, and outlives a clean stop and a SIGKILL; a refused change
(or a validate-only one) leaves the topic as it was.
"""
from __future__ import annotations

import dataclasses
import importlib

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
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from raw_wire import kio_round_trip

TIMEOUT = 15.0  # s: a bound on any single wait
ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 44
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
SHOWN = ("cleanup.policy", "retention.ms", "segment.bytes", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
         "max.compaction.lag.ms", "delete.retention.ms")


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker, topic: str, config: dict[str, str] | None = None) -> None:
    client = admin(broker)  # held until the answer: a destroyed handle fails its futures
    futures = client.create_topics([NewTopic(topic, 2, 1, config=config or {})], operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None


def described(broker, topic: str) -> dict[str, tuple[str, ConfigSource]]:
    """(value, source) of the configs in SHOWN, as confluent-kafka's DescribeConfigs reads them."""
    client = admin(broker)
    (future,) = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=TIMEOUT).values()
    entries = future.result(TIMEOUT)
    return {n: (entries[n].value, ConfigSource(entries[n].source)) for n in SHOWN}


def incremental(broker, kind: ResourceType, name: str, *ops: tuple[str, str | None, AlterConfigOpType],
                validate_only: bool = False) -> None:
    """One IncrementalAlterConfigs of confluent-kafka; raises the KafkaException of a refusal."""
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    client = admin(broker)
    (future,) = client.incremental_alter_configs([ConfigResource(kind, name, incremental_configs=entries)],
                                                 validate_only=validate_only, request_timeout=TIMEOUT).values()
    future.result(TIMEOUT)


def refusal(call, *args, **kwargs) -> tuple[int, str]:
    """(Kafka error code, message) of a call that must be refused."""
    with pytest.raises(KafkaException) as raised:
        call(*args, **kwargs)
    error = raised.value.args[0]
    return error.code(), error.str()


DEFAULTS = {
    "cleanup.policy": ("delete", ConfigSource.DEFAULT_CONFIG),
    "retention.ms": (str(7 * 24 * 3_600_000), ConfigSource.DEFAULT_CONFIG),
    "segment.bytes": (str(1 << 30), ConfigSource.DEFAULT_CONFIG),
    "min.cleanable.dirty.ratio": ("0.5", ConfigSource.DEFAULT_CONFIG),
    "min.compaction.lag.ms": ("0", ConfigSource.DEFAULT_CONFIG),
    "max.compaction.lag.ms": (str((1 << 63) - 1), ConfigSource.DEFAULT_CONFIG),
    "delete.retention.ms": ("86400000", ConfigSource.DEFAULT_CONFIG),
}


def dynamic(value: str) -> tuple[str, ConfigSource]:
    return value, ConfigSource.DYNAMIC_TOPIC_CONFIG


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------

def test_confluent_incremental_set_append_subtract_delete(broker, topic):
    create_topic(broker, topic)
    assert described(broker, topic) == DEFAULTS

    incremental(broker, ResourceType.TOPIC, topic, ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                ("min.cleanable.dirty.ratio", "0.25", AlterConfigOpType.SET),
                ("delete.retention.ms", "1000", AlterConfigOpType.SET),
                ("min.compaction.lag.ms", "10", AlterConfigOpType.SET))
    # APPEND starts from the topic config's default, `delete`, as Kafka's controller does.
    assert described(broker, topic) == {**DEFAULTS, "cleanup.policy": dynamic("delete,compact"),
                                         "min.cleanable.dirty.ratio": dynamic("0.25"),
                                         "delete.retention.ms": dynamic("1000"), "min.compaction.lag.ms": dynamic("10")}

    incremental(broker, ResourceType.TOPIC, topic, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                ("delete.retention.ms", None, AlterConfigOpType.DELETE),
                ("min.compaction.lag.ms", None, AlterConfigOpType.DELETE))
    assert described(broker, topic) == {**DEFAULTS, "cleanup.policy": dynamic("compact"),
                                        "min.cleanable.dirty.ratio": dynamic("0.25")}

    # The running partitions are compacted now: Kafka refuses a record without a key.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    reports = []
    for key in (None, b"k"):  # one batch each: Kafka refuses a whole batch
        producer.produce(topic, key=key, value=b"v", partition=1, on_delivery=lambda err, msg: reports.append(err))
        assert producer.flush(TIMEOUT) == 0
    assert [e.code() if e else None for e in reports] == [KafkaError.INVALID_RECORD, None]


def test_confluent_legacy_alter_configs_replaces_every_override(broker, topic):
    create_topic(broker, topic, {"segment.bytes": "100000", "retention.ms": "60000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "120000",
                                                                     "cleanup.policy": "compact,delete"})
    client = admin(broker)
    with pytest.warns(DeprecationWarning):  # librdkafka's wrapper steers users to the incremental API
        (future,) = client.alter_configs([resource], request_timeout=TIMEOUT).values()
    assert future.result(TIMEOUT) is None
    # segment.bytes was not listed: the legacy API deletes it.
    assert described(broker, topic) == {**DEFAULTS, "retention.ms": dynamic("120000"),
                                        "cleanup.policy": dynamic("compact,delete")}


def test_confluent_bad_changes_are_refused_and_change_nothing(broker, topic):
    create_topic(broker, topic, {"max.compaction.lag.ms": "100000"})
    before = described(broker, topic)
    cases = [
        (("min.cleanable.dirty.ratio", "1.5", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG,
         "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
        (("delete.retention.ms", "-5", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG,
         "Invalid value -5 for configuration delete.retention.ms: Value must be at least 0"),
        (("cleanup.policy", "shred", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG,
         "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete"),
        (("min.compaction.lag.ms", "200000", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG,
         "conflict topic config setting min.compaction.lag.ms (200000) > max.compaction.lag.ms (100000)"),
        (("no.such.config", "1", AlterConfigOpType.SET), KafkaError.INVALID_CONFIG,
         "Unknown topic config name: no.such.config"),
        (("retention.ms", "1000", AlterConfigOpType.APPEND), KafkaError.INVALID_CONFIG,
         "Can't APPEND to key retention.ms because its type is not LIST."),
    ]
    for op, code, message in cases:
        # A good change beside the bad one is not applied either.
        assert refusal(incremental, broker, ResourceType.TOPIC, topic, ("segment.ms", "1", AlterConfigOpType.SET),
                       op) == (code, message)
        assert described(broker, topic) == before
    assert refusal(incremental, broker, ResourceType.TOPIC, topic + "-missing",
                   ("retention.ms", "1000", AlterConfigOpType.SET)) == \
        (KafkaError.UNKNOWN_TOPIC_OR_PART, f"The topic '{topic}-missing' does not exist.")


def test_confluent_validate_only_changes_nothing(broker, topic):
    create_topic(broker, topic)
    incremental(broker, ResourceType.TOPIC, topic, ("cleanup.policy", "compact", AlterConfigOpType.SET),
                validate_only=True)
    assert described(broker, topic) == DEFAULTS
    code, _ = refusal(incremental, broker, ResourceType.TOPIC, topic,
                      ("min.cleanable.dirty.ratio", "-1", AlterConfigOpType.SET), validate_only=True)
    assert code == KafkaError.INVALID_CONFIG


def test_confluent_static_broker_configs_cannot_be_updated_dynamically(broker):
    # Kafka changes log.retention.ms at run time, but not its coarser synonym, nor num.partitions.
    assert refusal(incremental, broker, ResourceType.BROKER, "1",
                   ("log.retention.hours", "5", AlterConfigOpType.SET),
                   ("num.partitions", "3", AlterConfigOpType.SET)) == \
        (KafkaError.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(log.retention.hours, num.partitions)")
    # Deleting a dynamic value that was never set leaves nothing to refuse, as in Kafka.
    incremental(broker, ResourceType.BROKER, "1", ("log.retention.ms", None, AlterConfigOpType.DELETE))


# -- kafka-python ----------------------------------------------------------------------------------

def test_kafka_python_alter_configs_both_apis(broker, topic):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert client.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})["topics"][0][
            "error_code"] == 0
        resource = KafkaPythonConfigResource("TOPIC", topic, configs={"cleanup.policy": "compact",
                                                                      "delete.retention.ms": "5000"})
        assert client.alter_configs([resource]) == {"topic": {topic: "OK"}}  # incremental: the broker has it
        # The legacy API, which kafka-python fills with the other overrides so that none is lost.
        legacy = KafkaPythonConfigResource("TOPIC", topic, configs={"min.compaction.lag.ms": "1000"})
        assert client.alter_configs([legacy], incremental=False) == {"topic": {topic: "OK"}}
        shown = client.describe_configs([KafkaPythonConfigResource("TOPIC", topic)])["topic"][topic]
        assert {n: (c["value"], c["config_source"]) for n, c in shown.items()} == {
            "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG"),
            "delete.retention.ms": ("5000", "DYNAMIC_TOPIC_CONFIG"),
            "min.compaction.lag.ms": ("1000", "DYNAMIC_TOPIC_CONFIG")}
        bad = KafkaPythonConfigResource("TOPIC", topic, configs={"max.compaction.lag.ms": "0"})
        assert client.alter_configs([bad]) == {"topic": {topic: "[Error 40] InvalidConfigurationError: Invalid value 0 "
                                                                "for configuration max.compaction.lag.ms: Value must "
                                                                "be at least 1"}}
    finally:
        client.close()


# -- restart -------------------------------------------------------------------------------------------

def test_changes_survive_a_clean_stop_and_a_kill(start_broker):
    b = start_broker()
    create_topic(b, "kept", {"segment.bytes": "100000"})
    incremental(b, ResourceType.TOPIC, "kept", ("cleanup.policy", "compact", AlterConfigOpType.SET),
                ("min.cleanable.dirty.ratio", "0.125", AlterConfigOpType.SET),
                ("max.compaction.lag.ms", "3600000", AlterConfigOpType.SET),
                ("segment.bytes", None, AlterConfigOpType.DELETE))
    expected = {**DEFAULTS, "cleanup.policy": dynamic("compact"), "min.cleanable.dirty.ratio": dynamic("0.125"),
                "max.compaction.lag.ms": dynamic("3600000")}
    assert described(b, "kept") == expected
    b.stop()
    b.start()
    assert described(b, "kept") == expected
    incremental(b, ResourceType.TOPIC, "kept", ("retention.ms", "60000", AlterConfigOpType.SET))
    b.kill()  # the change was written before the answer
    b.start()
    assert described(b, "kept") == {**expected, "retention.ms": dynamic("60000")}


# -- every version by hand -----------------------------------------------------------------------------

def raw(broker, api_key: int, version: int, resources, validate_only: bool = False):
    """One (Incremental)AlterConfigs request on its own connection: kio's decoding of the response.

    `resources` is [(type, name, [(key, value) or (key, op, value), ...])].
    """
    request_cls = load_request_schema(api_key, version)
    module = importlib.import_module(request_cls.__module__)
    config_cls, resource_cls = module.AlterableConfig, module.AlterConfigsResource
    names = [f.name for f in dataclasses.fields(config_cls)]

    def config(entry):
        return config_cls(**dict(zip(["name", "config_operation", "value"] if len(entry) == 3 else names, entry)))

    body = request_cls(resources=tuple(resource_cls(resource_type=t, resource_name=n,
                                                    configs=tuple(config(c) for c in configs))
                                       for t, n, configs in resources), validate_only=validate_only)
    return [(r.resource_type, r.resource_name, r.error_code, r.error_message)
            for r in kio_round_trip(broker, api_key, version, body, 9).responses]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_each_version(broker, topic, version):
    create_topic(broker, topic)
    asked = [
        (TOPIC, topic, [("retention.ms", "90000"), ("cleanup.policy", "compact")]),
        (TOPIC, topic + "-twice", [("retention.ms", "1")]),
        (TOPIC, topic + "-twice", []),
        (TOPIC, topic + "-keys", [("retention.ms", "1"), ("retention.ms", "2")]),
        (TOPIC, topic + "-null", [("retention.ms", None), ("segment.ms", None)]),
        (TOPIC, "", [("retention.ms", "1")]),
        (TOPIC, "a/b", [("retention.ms", "1")]),
        (TOPIC, topic + "-missing", [("retention.ms", "1")]),
        (TOPIC, topic + "-bad", [("retention.ms", "soon")]),  # an unknown topic is answered first (issue 27)
        (BROKER, "1", [("num.partitions", "3")]),
        (BROKER, "", []),
        (BROKER, "7", [("num.partitions", "3")]),
        (BROKER, "one", []),
        (BROKER_LOGGER, "1", [("root", "DEBUG")]),
    ]
    assert raw(broker, ALTER_CONFIGS, version, asked) == [
        (TOPIC, topic, ErrorCode.none, None),
        (TOPIC, topic + "-twice", ErrorCode.invalid_request, "Each resource must appear at most once."),
        (TOPIC, topic + "-twice", ErrorCode.invalid_request, "Each resource must appear at most once."),
        (TOPIC, topic + "-keys", ErrorCode.invalid_request, "Error due to duplicate config keys"),
        (TOPIC, topic + "-null", ErrorCode.invalid_request, "Null value not supported for : retention.ms, segment.ms"),
        (TOPIC, "", ErrorCode.invalid_request, "Default topic resources are not allowed."),
        (TOPIC, "a/b", ErrorCode.invalid_topic_exception, "topic name 'a/b' has characters outside [a-zA-Z0-9._-]"),
        (TOPIC, topic + "-missing", ErrorCode.unknown_topic_or_partition,
         f"The topic '{topic}-missing' does not exist."),
        (TOPIC, topic + "-bad", ErrorCode.unknown_topic_or_partition, f"The topic '{topic}-bad' does not exist."),
        (BROKER, "1", ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(num.partitions)"),
        (BROKER, "", ErrorCode.none, None),
        (BROKER, "7", ErrorCode.invalid_request, "Unexpected broker id, expected 1, but received 7"),
        (BROKER, "one", ErrorCode.invalid_request, "Node id must be an integer, but it is: one"),
        (BROKER_LOGGER, "1", ErrorCode.invalid_request, "Unknown resource type 8"),
    ]
    assert described(broker, topic) == {**DEFAULTS, "retention.ms": dynamic("90000"),
                                        "cleanup.policy": dynamic("compact")}
    assert raw(broker, ALTER_CONFIGS, version, [(TOPIC, topic, [("retention.ms", "1")])], validate_only=True) == \
        [(TOPIC, topic, ErrorCode.none, None)]
    assert described(broker, topic)["retention.ms"] == dynamic("90000")


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_each_version(broker, topic, version):
    create_topic(broker, topic, {"cleanup.policy": "compact"})
    asked = [
        (TOPIC, topic, [("cleanup.policy", APPEND, "delete,compact"), ("retention.ms", SET, "90000"),
                        ("segment.ms", DELETE, None)]),
        (TOPIC, topic + "-null", [("retention.ms", SET, None), ("segment.ms", DELETE, None)]),
        (TOPIC, topic + "-op", [("retention.ms", 7, "1")]),
        (TOPIC, topic + "-list", [("segment.ms", SUBTRACT, "1")]),
        (TOPIC, topic + "-empty", [("cleanup.policy", SUBTRACT, "delete")]),  # Kafka would take the empty list
        (TOPIC, topic + "-missing", [("retention.ms", SET, "1")]),
        (BROKER, "+1", [("log.retention.hours", SET, "1"), ("num.partitions", SET, "3")]),
        (BROKER, "", [("log.retention.ms", DELETE, None)]),
        (BROKER, "01", [("num.partitions", APPEND, "3")]),  # Java's parseInt reads both names as 1
        (BROKER_LOGGER, "1", [("root", SET, "DEBUG")]),
        (16, "metrics", []),
    ]
    create_topic(broker, topic + "-empty")
    create_topic(broker, topic + "-list")  # an unknown topic would be answered before its operations
    assert raw(broker, INCREMENTAL_ALTER_CONFIGS, version, asked) == [
        (TOPIC, topic, ErrorCode.none, None),
        (TOPIC, topic + "-null", ErrorCode.invalid_request, "Null value not supported for : retention.ms"),
        (TOPIC, topic + "-op", ErrorCode.invalid_request, "Unknown operations type 7"),
        (TOPIC, topic + "-list", ErrorCode.invalid_config,
         "Can't SUBTRACT to key segment.ms because its type is not LIST."),
        (TOPIC, topic + "-empty", ErrorCode.invalid_config,
         "Invalid value  for configuration cleanup.policy: must name at least one of compact, delete"),
        (TOPIC, topic + "-missing", ErrorCode.unknown_topic_or_partition,
         f"The topic '{topic}-missing' does not exist."),
        (BROKER, "+1", ErrorCode.invalid_request,
         "Cannot update these configs dynamically: Set(log.retention.hours, num.partitions)"),
        (BROKER, "", ErrorCode.none, None),
        (BROKER, "01", ErrorCode.invalid_config, "Config value append is not allowed for config key: num.partitions"),
        (BROKER_LOGGER, "1", ErrorCode.invalid_request, "broker loggers are not exposed by this broker"),
        (16, "metrics", ErrorCode.invalid_request, "Unknown resource type 16"),
    ]
    # APPEND adds only what is missing, in order.
    assert described(broker, topic) == {**DEFAULTS, "cleanup.policy": dynamic("compact,delete"),
                                        "retention.ms": dynamic("90000")}
    assert described(broker, topic + "-empty") == DEFAULTS
