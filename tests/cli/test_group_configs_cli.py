"""`logstore configs --entity-type groups` as kafka-configs.sh is used for group configs, checked through
confluent-kafka's view of the same broker."""
from __future__ import annotations

import datetime
import json
import uuid

from confluent_kafka.admin import ConfigResource
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

import admin_cli_broker
from admin_cli_broker import cli, cli_at, one_line_error
from logstore.broker.admin_client import AdminClient as WireClient
from test_configs_cli import confluent_configs

admin_broker = admin_cli_broker.admin_broker   # the fixture


def group_configs(broker, group: str) -> dict[str, tuple[str | None, str]]:
    """{name: (value, source name)} as confluent-kafka's AdminClient describes the group."""
    return confluent_configs(broker, ConfigResource.Type.GROUP, group)


def test_alter_and_describe_a_groups_configs_in_kafkas_lines(admin_broker):
    done = cli(admin_broker, "configs", "--alter", "--entity-type", "groups", "--entity-name", "gcc-one",
               "--add-config", "share.delivery.count.limit=7,share.auto.offset.reset=earliest")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Completed updating config for group gcc-one.\n", "")
    assert group_configs(admin_broker, "gcc-one")["share.delivery.count.limit"] == ("7", "GROUP_CONFIG")
    done = cli(admin_broker, "configs", "--describe", "--entity-type", "groups", "--entity-name", "gcc-one")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "Dynamic configs for group gcc-one are:",
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset="
        "earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}",
        "  share.delivery.count.limit=7 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.delivery.count.limit=7, "
        "DEFAULT_CONFIG:group.share.delivery.count.limit=5}"]
    every = cli(admin_broker, "configs", "--describe", "--entity-type", "groups", "--entity-name", "gcc-one",
                "--all", "--json")
    (entity,) = json.loads(every.stdout)["entities"]
    assert (entity["entityType"], entity["entityName"]) == ("groups", "gcc-one")
    assert {c["name"]: (c["value"], c["source"]) for c in entity["configs"]} == {
        name: (value, "DYNAMIC_GROUP_CONFIG" if source == "GROUP_CONFIG" else source)
        for name, (value, source) in group_configs(admin_broker, "gcc-one").items()}

    done = cli_at("configs", "alter", "--entity-type", "groups", "--entity-name", "gcc-one", "--delete-config",
                  "share.delivery.count.limit", "--bootstrap-server", admin_broker.bootstrap)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert group_configs(admin_broker, "gcc-one")["share.delivery.count.limit"] == ("5", "DEFAULT_CONFIG")


def test_refusals_are_one_line(admin_broker):
    # Deleting a config the group does not have is refused before anything is sent, as in Kafka.
    one_line_error(cli(admin_broker, "configs", "--alter", "--entity-type", "groups", "--entity-name", "gcc-two",
                       "--delete-config", "share.isolation.level"), 1, "Invalid config(s): share.isolation.level")
    one_line_error(cli(admin_broker, "configs", "--alter", "--entity-type", "groups", "--entity-name", "gcc-two",
                       "--add-config", "share.record.lock.duration.ms=61000"), 1, "INVALID_CONFIG",
                   "share.record.lock.duration.ms must be less than or equal to "
                   "group.share.max.record.lock.duration.ms")
    one_line_error(cli(admin_broker, "configs", "--alter", "--entity-type", "groups", "--entity-name", "gcc-two",
                       "--add-config", "consumer.sesion.timeout.ms=50000"), 1, "INVALID_CONFIG",
                   "Unknown group config name: consumer.sesion.timeout.ms")
    assert all(source != "GROUP_CONFIG" for _, source in group_configs(admin_broker, "gcc-two").values())
    for args, fragment in [
            (("--describe", "--entity-type", "groups", "--entity-default"), "--entity-default does not go with"),
            (("--describe", "--entity-type", "groups", "--entity-name", ""), "An empty group name is not allowed")]:
        one_line_error(cli(admin_broker, "configs", *args), 2, "logstore configs", fragment)


def test_describe_without_a_name_describes_every_group(admin_broker):
    group = f"gcc-listed-{uuid.uuid4()}"
    with WireClient(admin_broker.bootstrap) as wire:   # a KIP-848 member makes the group exist
        joined = wire.request(ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=str(uuid.uuid4()), member_epoch=0,
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), subscribed_topic_names=("gcc-t",),
            topic_partitions=()))
    assert joined.error_code == ErrorCode.none
    assert cli(admin_broker, "configs", "--alter", "--entity-type", "groups", "--entity-name", group,
               "--add-config", "consumer.session.timeout.ms=50000").returncode == 0
    done = cli(admin_broker, "configs", "--describe", "--entity-type", "groups")
    assert done.returncode == 0, done.stderr
    assert (f"Dynamic configs for group {group} are:\n  consumer.session.timeout.ms=50000 sensitive=false "
            f"synonyms={{DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000, "
            f"DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}}\n") in done.stdout
