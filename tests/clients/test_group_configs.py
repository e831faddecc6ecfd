"""Group configs (config resource GROUP, 32) against a real broker: confluent-kafka's and kafka-python's admin
clients, raw Kafka requests where a client cannot say it, and KIP-848 members running with a group's own
session timeout and heartbeat interval.

Kafka's behaviour checked: IncrementalAlterConfigs SET/DELETE (APPEND/SUBTRACT refused: no group config is a
LIST), the legacy AlterConfigs replacing a group's configs, DescribeConfigs telling each config's value and
source (DYNAMIC_GROUP_CONFIG for an override, else the broker's `group.<name>` setting as STATIC_BROKER_CONFIG
or DEFAULT_CONFIG), INVALID_CONFIG with Kafka's messages, GROUP_AUTHORIZATION_FAILED, configs held before the
group exists, kept across a SIGKILL.
"""
from __future__ import annotations

import datetime
import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin import ResourceType as ConfigType
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import KafkaAdminClient
from kio.schema.alter_configs.v2.request import AlterableConfig as LegacyAlterableConfig
from kio.schema.alter_configs.v2.request import AlterConfigsRequest as LegacyAlterConfigsRequest
from kio.schema.alter_configs.v2.request import AlterConfigsResource as LegacyAlterConfigsResource
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import i8, i32Timedelta

from broker_process import BrokerProcess, finish_brokers, free_port
from logstore.broker.admin_client import AdminClient as WireClient

TIMEOUT = 30.0   # s: a bound on any one client call or wait; the tests finish far below it
GROUP = 32
AUTHORIZING_BROKER = Path(__file__).resolve().parents[1] / "broker" / "authorizing_broker.py"
# KIP-848 bounds lowered so a group may run with a 2 s session (the broker's own default stays Kafka's 45 s).
LOW_BOUNDS = ("group.consumer.min.session.timeout.ms=1000", "group.consumer.min.heartbeat.interval.ms=100")


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(broker, group: str, *ops: tuple[str, str | None, AlterConfigOpType], validate_only: bool = False) -> None:
    """IncrementalAlterConfigs on the GROUP resource through confluent-kafka; raises its KafkaException."""
    resource = ConfigResource(ConfigType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    client = admin(broker)   # held until the answer: a client collected before it fails its futures
    client.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(TIMEOUT)


def described(broker, group: str) -> dict[str, tuple[str | None, str]]:
    """{name: (value, source)} as confluent-kafka describes the group."""
    resource = ConfigResource(ConfigType.GROUP, group)
    client = admin(broker)
    entries = client.describe_configs([resource])[resource].result(TIMEOUT)
    return {name: (e.value, ConfigSource(e.source).name) for name, e in entries.items()}


def synonyms(broker, group: str) -> dict[str, list[tuple[str, str | None, int]]]:
    """{name: [(synonym, value, source)]} as DescribeConfigs answers them (confluent-kafka keeps one per name)."""
    with WireClient(broker.bootstrap) as wire:
        (result,) = wire.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
            resource_type=i8(GROUP), resource_name=group, configuration_keys=None),), include_synonyms=True,
            include_documentation=False)).results
    assert result.error_code == ErrorCode.none, result
    return {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in result.configs}


def refusal(broker, group: str, *ops, validate_only: bool = False) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        alter(broker, group, *ops, validate_only=validate_only)
    return refused.value.args[0]


SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND,
                                 AlterConfigOpType.SUBTRACT)


def test_a_group_holds_configs_before_it_exists_with_their_sources(start_broker):
    broker = start_broker("group.share.record.lock.duration.ms=20000")
    alter(broker, "gc-new", ("share.delivery.count.limit", "7", SET), ("share.auto.offset.reset", "by_duration:PT1H",
                                                                       SET))
    configs = described(broker, "gc-new")
    assert sorted(configs) == sorted([
        "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.auto.offset.reset",
        "share.delivery.count.limit", "share.heartbeat.interval.ms", "share.isolation.level",
        "share.partition.max.record.locks", "share.record.lock.duration.ms", "share.renew.acknowledge.enable",
        "share.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.initial.rebalance.delay.ms",
        "streams.num.standby.replicas", "streams.session.timeout.ms"])
    assert configs["share.delivery.count.limit"] == ("7", "GROUP_CONFIG")
    assert configs["share.auto.offset.reset"] == ("by_duration:PT1H", "GROUP_CONFIG")
    # Without an override: the broker's group.* setting, as it was started or Kafka's default.
    assert configs["share.record.lock.duration.ms"] == ("20000", "STATIC_BROKER_CONFIG")
    assert configs["consumer.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")
    assert configs["share.isolation.level"] == ("read_uncommitted", "DEFAULT_CONFIG")
    chains = synonyms(broker, "gc-new")
    assert chains["share.delivery.count.limit"] == [("share.delivery.count.limit", "7", 8),
                                                    ("group.share.delivery.count.limit", "5", 5)]
    assert chains["share.record.lock.duration.ms"] == [("group.share.record.lock.duration.ms", "20000", 4),
                                                       ("group.share.record.lock.duration.ms", "30000", 5)]
    # A name the broker has no setting of: Kafka's GroupConfig default under the group config's own name.
    assert chains["share.isolation.level"] == [("share.isolation.level", "read_uncommitted", 5)]
    alter(broker, "gc-new", ("share.delivery.count.limit", None, DELETE))
    configs = described(broker, "gc-new")
    assert configs["share.delivery.count.limit"] == ("5", "DEFAULT_CONFIG")
    assert configs["share.auto.offset.reset"] == ("by_duration:PT1H", "GROUP_CONFIG")
    # Another group is untouched.
    assert described(broker, "gc-other")["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG")


@pytest.mark.parametrize(("ops", "code", "message"), [
    ((("share.bogus", "1", SET),), KafkaError.INVALID_CONFIG, "Unknown group config name: share.bogus"),
    ((("consumer.session.timeout.ms", "soon", SET),), KafkaError.INVALID_CONFIG,
     "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ((("share.record.lock.duration.ms", "999", SET),), KafkaError.INVALID_CONFIG,
     "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ((("share.record.lock.duration.ms", "70000", SET),), KafkaError.INVALID_CONFIG,
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ((("share.delivery.count.limit", "11", SET),), KafkaError.INVALID_CONFIG,
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ((("consumer.session.timeout.ms", "30000", SET),), KafkaError.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ((("share.isolation.level", "serializable", SET),), KafkaError.INVALID_CONFIG,
     "Invalid value serializable for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ((("share.auto.offset.reset", "by_duration:-PT1H", SET),), KafkaError.INVALID_CONFIG,
     "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value `by_duration:-PT1H` "
     "for configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
     "'by_duration:<PnDTnHnMn.nS.>'."),
    ((("share.renew.acknowledge.enable", "yes", SET),), KafkaError.INVALID_CONFIG,
     "Invalid value yes for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
    ((("share.delivery.count.limit", "3", APPEND),), KafkaError.INVALID_CONFIG,
     "Can't APPEND to key share.delivery.count.limit because its type is not LIST."),
    ((("share.delivery.count.limit", "3", SUBTRACT),), KafkaError.INVALID_CONFIG,
     "Can't SUBTRACT to key share.delivery.count.limit because its type is not LIST."),
])
def test_bad_group_configs_are_refused_with_kafkas_messages_and_change_nothing(broker, ops, code, message):
    group = f"gc-bad-{uuid.uuid4()}"
    alter(broker, group, ("share.delivery.count.limit", "4", SET))
    error = refusal(broker, group, ("share.session.timeout.ms", "50000", SET), *ops)
    assert (error.code(), error.str()) == (code, message)
    configs = described(broker, group)
    assert configs["share.delivery.count.limit"] == ("4", "GROUP_CONFIG")
    assert configs["share.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")


def test_a_session_must_outlast_the_heartbeat_over_the_brokers_values(start_broker):
    broker = start_broker(*LOW_BOUNDS)
    error = refusal(broker, "gc-pair", ("consumer.session.timeout.ms", "2000", SET))
    assert (error.code(), error.str()) == (KafkaError.INVALID_CONFIG, "consumer.session.timeout.ms must be greater "
                                                                       "than consumer.heartbeat.interval.ms")
    alter(broker, "gc-pair", ("consumer.session.timeout.ms", "2000", SET),
          ("consumer.heartbeat.interval.ms", "500", SET))
    assert described(broker, "gc-pair")["consumer.session.timeout.ms"] == ("2000", "GROUP_CONFIG")


def test_validate_only_checks_and_keeps_nothing(broker):
    alter(broker, "gc-validate", ("share.isolation.level", "read_committed", SET), validate_only=True)
    assert described(broker, "gc-validate")["share.isolation.level"] == ("read_uncommitted", "DEFAULT_CONFIG")
    error = refusal(broker, "gc-validate", ("share.isolation.level", "dirty", SET), validate_only=True)
    assert error.code() == KafkaError.INVALID_CONFIG


def test_an_empty_group_name_is_an_invalid_request(broker):
    with WireClient(broker.bootstrap) as wire:
        altered = wire.request(IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=i8(GROUP), resource_name="", configs=(AlterableConfig(
                name="share.delivery.count.limit", config_operation=i8(0), value="3"),)),), validate_only=False))
        described_ = wire.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
            resource_type=i8(GROUP), resource_name="", configuration_keys=None),), include_synonyms=False,
            include_documentation=False))
    (answer,) = altered.responses
    assert (answer.error_code, answer.error_message) == (ErrorCode.invalid_request,
                                                         "Default group resources are not allowed.")
    (result,) = described_.results
    assert (result.error_code, result.error_message) == (ErrorCode.invalid_request, "Group name must not be empty")


def test_group_configs_are_durable_before_the_answer(start_broker):
    broker = start_broker()
    alter(broker, "gc-durable", ("share.record.lock.duration.ms", "45000", SET),
          ("share.isolation.level", "read_committed", SET))
    broker.kill()   # SIGKILL at once: the answer came after the file was synced
    kept = json.loads((broker.data_dir / "group-configs").read_text())
    assert kept["groups"] == {"gc-durable": {"share.record.lock.duration.ms": "45000",
                                             "share.isolation.level": "read_committed"}}
    broker.start()
    configs = described(broker, "gc-durable")
    assert configs["share.record.lock.duration.ms"] == ("45000", "GROUP_CONFIG")
    assert configs["share.isolation.level"] == ("read_committed", "GROUP_CONFIG")


def test_kafka_python_sets_describes_and_resets_group_configs(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    try:
        result = client.alter_configs([KafkaConfigResource("GROUP", "gc-kp", configs={
            "share.heartbeat.interval.ms": "6000", "share.delivery.count.limit": "3"})], raise_on_unknown=False,
            incremental=True)
        assert result == {"group": {"gc-kp": "OK"}}
        modified = client.describe_configs([KafkaConfigResource("GROUP", "gc-kp")])
        assert {name: (c["value"], c["config_source"]) for name, c in modified["group"]["gc-kp"].items()} == {
            "share.heartbeat.interval.ms": ("6000", "DYNAMIC_GROUP_CONFIG"),
            "share.delivery.count.limit": ("3", "DYNAMIC_GROUP_CONFIG")}
        client.reset_configs([KafkaConfigResource("GROUP", "gc-kp", configs=["share.delivery.count.limit"])],
                             raise_on_unknown=False, incremental=True)
        modified = client.describe_configs([KafkaConfigResource("GROUP", "gc-kp")])
        assert list(modified["group"]["gc-kp"]) == ["share.heartbeat.interval.ms"]
    finally:
        client.close()


def test_the_legacy_alter_configs_replaces_a_groups_configs(broker):
    alter(broker, "gc-legacy", ("share.heartbeat.interval.ms", "6000", SET), ("share.delivery.count.limit", "3", SET))

    def legacy(group: str, **configs: str):
        with WireClient(broker.bootstrap) as wire:
            (answer,) = wire.request(LegacyAlterConfigsRequest(resources=(LegacyAlterConfigsResource(
                resource_type=i8(GROUP), resource_name=group, configs=tuple(
                    LegacyAlterableConfig(name=n.replace("_", "."), value=v) for n, v in configs.items())),),
                validate_only=False)).responses
        return answer.error_code, answer.error_message

    assert legacy("gc-legacy", share_session_timeout_ms="50000") == (ErrorCode.none, None)
    configs = described(broker, "gc-legacy")
    assert {n for n, (_, source) in configs.items() if source == "GROUP_CONFIG"} == {"share.session.timeout.ms"}
    assert legacy("gc-legacy", share_delivery_count_limit="1") == (
        ErrorCode.invalid_config,
        "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2")
    assert legacy("", share_delivery_count_limit="3") == (ErrorCode.invalid_request,
                                                          "Default group resources are not allowed.")
    assert described(broker, "gc-legacy")["share.session.timeout.ms"] == ("50000", "GROUP_CONFIG")


@pytest.fixture
def denying(tmp_path):
    """A broker denying ALTER_CONFIGS on group gc-locked and DESCRIBE_CONFIGS on group gc-hidden."""
    data_dir = tmp_path / "denying"
    data_dir.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, launcher=(
        str(AUTHORIZING_BROKER), "ALTER_CONFIGS:GROUP:gc-locked", "DESCRIBE_CONFIGS:GROUP:gc-hidden", "--"))
    broker.start()
    yield broker
    finish_brokers([broker])


def test_group_configs_need_the_groups_acls(denying):
    error = refusal(denying, "gc-locked", ("share.delivery.count.limit", "3", SET))
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert described(denying, "gc-locked")["share.delivery.count.limit"] == ("5", "DEFAULT_CONFIG")
    resource = ConfigResource(ConfigType.GROUP, "gc-hidden")
    client = admin(denying)
    with pytest.raises(KafkaException) as refused:
        client.describe_configs([resource])[resource].result(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    alter(denying, "gc-hidden", ("share.delivery.count.limit", "3", SET))   # altering it is allowed


# -- applied: KIP-848 members run with their group's configs -------------------------------------------------

def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _join(wire: WireClient, group: str, topic: str):
    """A KIP-848 member joins `group` by one raw ConsumerGroupHeartbeat, and then stays silent."""
    return wire.request(ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout=i32Timedelta.parse(_ms(5_000)),
        subscribed_topic_names=(topic,), topic_partitions=()))


def _members(wire: WireClient, group: str) -> list[str]:
    (found,) = wire.request(ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
                            ).groups
    assert found.error_code == ErrorCode.none, found
    return [m.member_id for m in found.members]


def _wait_until_gone(wire: WireClient, group: str, member_id: str, within: float) -> float:
    """Poll ConsumerGroupDescribe until the member is no longer in the group; how long it took (s)."""
    started = time.monotonic()
    while member_id in _members(wire, group):
        assert time.monotonic() - started < within, f"member {member_id} still in {group} after {within} s"
        time.sleep(0.05)   # the poll's pace
    return time.monotonic() - started


def test_a_groups_heartbeat_interval_reaches_its_members(start_broker):
    broker = start_broker(*LOW_BOUNDS)
    alter(broker, "gc-beat", ("consumer.heartbeat.interval.ms", "700", SET))
    with WireClient(broker.bootstrap) as wire:
        joined = _join(wire, "gc-beat", "gc-beat-topic")
        other = _join(wire, "gc-beat-other", "gc-beat-topic")
        assert (joined.error_code, joined.heartbeat_interval) == (ErrorCode.none, _ms(700))
        assert other.heartbeat_interval == _ms(5_000)   # the broker's group.consumer.heartbeat.interval.ms
        # Changed while the member is in: its next heartbeat is told the new interval.
        alter(broker, "gc-beat", ("consumer.heartbeat.interval.ms", "900", SET))
        again = wire.request(ConsumerGroupHeartbeatRequest(
            group_id="gc-beat", member_id=joined.member_id, member_epoch=joined.member_epoch,
            rebalance_timeout=i32Timedelta.parse(_ms(-1)), subscribed_topic_names=None, topic_partitions=None))
        assert (again.error_code, again.heartbeat_interval) == (ErrorCode.none, _ms(900))


def test_a_groups_session_timeout_expires_a_silent_member_at_once(start_broker):
    broker = start_broker(*LOW_BOUNDS)   # the broker's own session timeout stays 45 s
    with WireClient(broker.bootstrap) as wire:
        joined = _join(wire, "gc-session", "gc-session-topic")
        assert joined.error_code == ErrorCode.none
        # Set after the member joined with the broker's 45 s: its session runs with 2 s from now.
        alter(broker, "gc-session", ("consumer.session.timeout.ms", "2000", SET),
              ("consumer.heartbeat.interval.ms", "500", SET))
        took = _wait_until_gone(wire, "gc-session", joined.member_id, within=TIMEOUT)
        assert took < 20.0, f"expired after {took:.1f} s: the broker's 45 s, not the group's 2 s"
        # A member joining now gets the group's session from its first heartbeat.
        second = _join(wire, "gc-session", "gc-session-topic")
        took = _wait_until_gone(wire, "gc-session", second.member_id, within=TIMEOUT)
        assert took < 20.0
