"""`logstore configs --entity-type topics|brokers` as kafka-configs.sh is used, checked through confluent-kafka.

The quota entities (users, clients) are tested in tests/security/test_quota_configs_cli.py.
"""
from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

import admin_cli_broker
from admin_cli_broker import TIMEOUT, cli, cli_at, one_line_error

admin_broker = admin_cli_broker.admin_broker   # the fixture


def create_topic(broker, name: str, **configs: str) -> None:
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(TIMEOUT)


def confluent_configs(broker, kind: ConfigResource.Type, name: str) -> dict[str, tuple[str | None, str]]:
    """{name: (value, source name)} as confluent-kafka's AdminClient describes the resource."""
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return {k: (e.value, ConfigSource(e.source).name) for k, e in entries.items()}


def test_describe_a_topics_own_configs_in_kafkas_lines(admin_broker):
    create_topic(admin_broker, "cf-one", **{"cleanup.policy": "compact", "retention.ms": "5000"})
    done = cli(admin_broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", "cf-one")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "Dynamic configs for topic cf-one are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000, "
        "DEFAULT_CONFIG:log.retention.hours=168}"]
    assert cli_at("configs", "describe", "--topic", "cf-one", "--bootstrap-server", admin_broker.bootstrap).stdout \
        == done.stdout


def test_describe_all_lists_every_config_with_its_source(admin_broker):
    create_topic(admin_broker, "cf-all", **{"segment.bytes": "1048576"})
    done = cli(admin_broker, "configs", "--describe", "--topic", "cf-all", "--all")
    lines = done.stdout.splitlines()
    assert lines[0] == "All configs for topic cf-all are:"
    shown = {line.split("=", 1)[0].strip(): line for line in lines[1:]}
    known = confluent_configs(admin_broker, ConfigResource.Type.TOPIC, "cf-all")
    assert sorted(shown) == list(shown) == sorted(known)
    assert shown["segment.bytes"].startswith("  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:")
    document = json.loads(cli(admin_broker, "configs", "--describe", "--topic", "cf-all", "--all", "--json").stdout)
    (entity,) = document["entities"]
    assert (entity["entityType"], entity["entityName"]) == ("topics", "cf-all")
    assert {c["name"]: (c["value"], c["source"]) for c in entity["configs"]} == known


def test_alter_sets_and_deletes_topic_configs(admin_broker):
    create_topic(admin_broker, "cf-alter")
    done = cli(admin_broker, "configs", "--alter", "--entity-type", "topics", "--entity-name", "cf-alter",
               "--add-config", "retention.ms=86400000,cleanup.policy=[compact,delete]")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Completed updating config for topic cf-alter.\n", "")
    known = confluent_configs(admin_broker, ConfigResource.Type.TOPIC, "cf-alter")
    assert known["retention.ms"] == ("86400000", "DYNAMIC_TOPIC_CONFIG")
    assert known["cleanup.policy"] == ("compact,delete", "DYNAMIC_TOPIC_CONFIG")
    done = cli_at("configs", "alter", "--topic", "cf-alter", "--delete-config", "retention.ms",
                  "--bootstrap-server", admin_broker.bootstrap)
    assert done.returncode == 0, done.stderr
    assert confluent_configs(admin_broker, ConfigResource.Type.TOPIC, "cf-alter")["retention.ms"][1] != \
        "DYNAMIC_TOPIC_CONFIG"
    # Deleting a config the topic does not have is refused before anything is sent, as in Kafka.
    one_line_error(cli(admin_broker, "configs", "--alter", "--topic", "cf-alter", "--delete-config",
                       "retention.ms,segment.ms"), 1, "Invalid config(s): retention.ms,segment.ms")
    one_line_error(cli(admin_broker, "configs", "--alter", "--topic", "cf-alter", "--add-config",
                       "cleanup.policy=sometimes"), 1, "INVALID_CONFIG")
    one_line_error(cli(admin_broker, "configs", "--alter", "--topic", "cf-none", "--add-config",
                       "retention.ms=1"), 1, "UNKNOWN_TOPIC_OR_PARTITION")


def test_describe_without_a_name_describes_every_topic(admin_broker):
    create_topic(admin_broker, "cf-every", **{"retention.ms": "7000"})
    done = cli(admin_broker, "configs", "--describe", "--entity-type", "topics")
    assert "Dynamic configs for topic cf-every are:\n  retention.ms=7000 " in done.stdout


def test_broker_configs_describe_and_alter(admin_broker):
    done = cli(admin_broker, "configs", "--describe", "--entity-type", "brokers")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "Dynamic configs for broker 1 are:"
    assert "Default configs for brokers in the cluster are:" in done.stdout.splitlines()
    every = cli(admin_broker, "configs", "--describe", "--broker", "1", "--all").stdout.splitlines()
    assert every[0] == "All configs for broker 1 are:"
    assert any(line.startswith("  log.retention.hours=168 sensitive=false synonyms={") for line in every)

    done = cli(admin_broker, "configs", "--alter", "--broker", "1", "--add-config", "log.retention.ms=3600000")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for broker 1.\n"), done.stderr
    assert confluent_configs(admin_broker, ConfigResource.Type.BROKER, "1")["log.retention.ms"] == (
        "3600000", "DYNAMIC_BROKER_CONFIG")
    assert "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000" \
        in cli(admin_broker, "configs", "--describe", "--broker", "1").stdout
    done = cli(admin_broker, "configs", "--alter", "--broker-defaults", "--add-config", "log.retention.ms=7200000")
    assert (done.returncode, done.stdout) == (0, "Completed updating default config for brokers in the cluster.\n"), \
        done.stderr
    defaults = cli(admin_broker, "configs", "--describe", "--entity-type", "brokers", "--entity-default").stdout
    assert defaults.splitlines()[0] == "Default configs for brokers in the cluster are:"
    assert "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" in defaults
    assert cli(admin_broker, "configs", "--alter", "--broker", "1", "--delete-config",
               "log.retention.ms").returncode == 0
    assert cli(admin_broker, "configs", "--alter", "--broker-defaults", "--delete-config",
               "log.retention.ms").returncode == 0
    assert "log.retention.ms" not in cli(admin_broker, "configs", "--describe", "--entity-type", "brokers").stdout


def test_bad_arguments_are_one_line_and_exit_2(admin_broker):
    for args, fragment in [
            (("--describe",), "an --entity-type"),
            (("--describe", "--alter", "--topic", "t"), "exactly one action"),
            (("--alter", "--entity-type", "topics", "--add-config", "a=b"), "--entity-name or --entity-default"),
            (("--alter", "--topic", "t"), "--alter needs --add-config or --delete-config"),
            (("--alter", "--topic", "t", "--add-config", "novalue"), "is not key=value"),
            (("--describe", "--entity-type", "topics", "--entity-default"), "--entity-default does not go with"),
            (("--describe", "--broker", "one"), "must be a valid integer broker id, found: one"),
            (("--describe", "--topic", "t", "--user", "u"), "one entity type at a time"),
            (("--describe", "--topic", "bad name"), "not a legal topic name"),
            (("--describe", "--user", "u", "--all"), "--all goes with --describe of topics or brokers"),
            (("--describe", "--entity-type", "group"), "invalid choice")]:
        one_line_error(cli(admin_broker, "configs", *args), 2, "logstore configs", fragment)
