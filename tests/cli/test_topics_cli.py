"""`logstore topics` as kafka-topics.sh is used, against a real broker, checked through confluent-kafka.

Each test creates its own topics (names start with the test's prefix), so
the module's one broker is shared. Both forms are run: Kafka's flags
(`--create --topic t`) and the subcommand (`create --topic t`).
"""
from __future__ import annotations

import base64
import json
import struct

from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ConfigResource

import admin_cli_broker
from admin_cli_broker import TIMEOUT, cli, cli_at, free_port, one_line_error

admin_broker = admin_cli_broker.admin_broker   # the fixture

ELR = "\tElr: \tLastKnownElr: "  # a Kafka 4 broker's lists, empty on one node


def confluent(broker) -> ConfluentAdmin:
    return ConfluentAdmin({"bootstrap.servers": broker.bootstrap})


def partition_counts(broker, *topics: str) -> dict[str, int]:
    """The topics confluent-kafka's metadata shows (those of `topics` that exist), with their partition counts."""
    found = confluent(broker).list_topics(timeout=TIMEOUT).topics
    return {t: len(found[t].partitions) for t in topics if t in found and found[t].error is None}


def topic_id(broker, topic: str) -> str:
    """The topic's id, from confluent-kafka, as Kafka's Uuid.toString prints it: URL-safe base64, unpadded
    (librdkafka's own string uses the standard alphabet)."""
    admin = confluent(broker)   # held: its futures fail once it is gone
    (future,) = admin.describe_topics(TopicCollection([topic])).values()
    uuid = future.result(TIMEOUT).topic_id
    raw = struct.pack(">qq", uuid.get_most_significant_bits(), uuid.get_least_significant_bits())
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_create_with_partitions_and_configs_then_describe_in_kafkas_lines(admin_broker):
    done = cli(admin_broker, "topics", "--create", "--topic", "tc-orders", "--partitions", "3",
               "--replication-factor", "1", "--config", "cleanup.policy=compact", "--config", "retention.ms = 86400000")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Created topic tc-orders.\n", "")
    assert partition_counts(admin_broker, "tc-orders") == {"tc-orders": 3}
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tc-orders")
    admin = confluent(admin_broker)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value) == ("compact", "86400000")

    done = cli(admin_broker, "topics", "--describe", "--topic", "tc-orders")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"Topic: tc-orders\tTopicId: {topic_id(admin_broker, 'tc-orders')}\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,retention.ms=86400000",
        *(f"\tTopic: tc-orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1{ELR}" for p in range(3))]


def test_the_subcommand_form_creates_with_the_brokers_defaults(admin_broker):
    done = cli_at("topics", "create", "--topic", "tc-plain", "--bootstrap-server", admin_broker.bootstrap)
    assert (done.returncode, done.stdout) == (0, "Created topic tc-plain.\n"), done.stderr
    assert partition_counts(admin_broker, "tc-plain") == {"tc-plain": 1}   # num.partitions
    done = cli(admin_broker, "topics", "describe", "--topic", "tc-plain")
    assert done.stdout.splitlines()[0].endswith("\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ")


def test_creating_an_existing_topic_fails_unless_if_not_exists(admin_broker):
    assert cli(admin_broker, "topics", "--create", "--topic", "tc-twice").returncode == 0
    one_line_error(cli(admin_broker, "topics", "--create", "--topic", "tc-twice", "--partitions", "2"), 1,
                   "TOPIC_ALREADY_EXISTS", "tc-twice")
    done = cli(admin_broker, "topics", "--create", "--topic", "tc-twice", "--partitions", "2", "--if-not-exists")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert partition_counts(admin_broker, "tc-twice") == {"tc-twice": 1}


def test_a_refused_config_is_the_brokers_error(admin_broker):
    one_line_error(cli(admin_broker, "topics", "--create", "--topic", "tc-bad", "--config", "cleanup.policy=sometimes"),
                   1, "INVALID_CONFIG")
    one_line_error(cli(admin_broker, "topics", "--create", "--topic", "tc bad"), 1, "INVALID_TOPIC_EXCEPTION")
    assert partition_counts(admin_broker, "tc-bad") == {}


def test_list_is_sorted_names_and_exclude_internal_leaves_out_consumer_offsets(admin_broker):
    for name in ("tl-b", "tl-a", "tl-c"):
        assert cli(admin_broker, "topics", "--create", "--topic", name).returncode == 0
    # A group's commit makes __consumer_offsets.
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": "tl-group"})
    consumer.commit(offsets=[TopicPartition("tl-a", 0, 0)], asynchronous=False)
    consumer.close()
    names = cli(admin_broker, "topics", "--list").stdout.splitlines()
    assert names == sorted(names) and {"tl-a", "tl-b", "tl-c", "__consumer_offsets"} <= set(names)
    assert "__consumer_offsets" not in cli(admin_broker, "topics", "list", "--exclude-internal").stdout.splitlines()
    assert cli(admin_broker, "topics", "--list", "--topic", "tl-[ab]").stdout == "tl-a\ntl-b\n"
    assert cli(admin_broker, "topics", "--list", "--topic", "tl-a,tl-c").stdout == "tl-a\ntl-c\n"
    assert json.loads(cli(admin_broker, "topics", "--list", "--topic", "tl-.*", "--json").stdout) == {
        "topics": ["tl-a", "tl-b", "tl-c"]}
    describe = cli(admin_broker, "topics", "--describe", "--exclude-internal").stdout
    assert "Topic: tl-a\t" in describe and "__consumer_offsets" not in describe


def test_delete_takes_a_regex_and_if_exists(admin_broker):
    for name in ("td-x1", "td-x2", "td-y"):
        assert cli(admin_broker, "topics", "--create", "--topic", name).returncode == 0
    done = cli(admin_broker, "topics", "--delete", "--topic", "td-x.*")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert partition_counts(admin_broker, "td-x1", "td-x2", "td-y") == {"td-y": 1}
    one_line_error(cli(admin_broker, "topics", "--delete", "--topic", "td-x.*"), 1,
                   "Topic 'td-x.*' does not exist as expected")
    done = cli(admin_broker, "topics", "delete", "--topic", "td-x1", "--if-exists")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert cli(admin_broker, "topics", "delete", "--topic", "td-y").returncode == 0
    assert partition_counts(admin_broker, "td-y") == {}


def test_describe_of_a_missing_topic_fails_unless_if_exists(admin_broker):
    one_line_error(cli(admin_broker, "topics", "--describe", "--topic", "tm-none"), 1,
                   "Topic 'tm-none' does not exist as expected")
    done = cli(admin_broker, "topics", "--describe", "--topic", "tm-none", "--if-exists")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    one_line_error(cli(admin_broker, "topics", "--describe", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAA"), 1,
                   "TopicId 'AAAAAAAAAAAAAAAAAAAAAA' does not exist as expected")


def test_describe_by_topic_id(admin_broker):
    assert cli(admin_broker, "topics", "--create", "--topic", "ti-one").returncode == 0
    assert cli(admin_broker, "topics", "--create", "--topic", "ti-two").returncode == 0
    wanted = topic_id(admin_broker, "ti-two")
    done = cli(admin_broker, "topics", "--describe", "--topic-id", wanted)
    assert done.stdout.splitlines()[0].startswith(f"Topic: ti-two\tTopicId: {wanted}\tPartitionCount: 1"), done.stderr


def test_alter_grows_a_topic_and_the_new_partitions_take_records(admin_broker):
    assert cli(admin_broker, "topics", "--create", "--topic", "ta-grow", "--partitions", "1").returncode == 0
    done = cli(admin_broker, "topics", "--alter", "--topic", "ta-grow", "--partitions", "3")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert partition_counts(admin_broker, "ta-grow") == {"ta-grow": 3}
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap})
    producer.produce("ta-grow", b"into the new partition", partition=2)
    assert producer.flush(TIMEOUT) == 0
    assert cli(admin_broker, "get-offsets", "--topic", "ta-grow").stdout == "ta-grow:0:0\nta-grow:1:0\nta-grow:2:1\n"
    one_line_error(cli(admin_broker, "topics", "alter", "--topic", "ta-grow", "--partitions", "2"), 1,
                   "INVALID_PARTITIONS", "ta-grow")
    one_line_error(cli(admin_broker, "topics", "--alter", "--topic", "ta-none", "--partitions", "2"), 1,
                   "does not exist as expected")
    assert cli(admin_broker, "topics", "--alter", "--topic", "ta-none", "--partitions", "2",
               "--if-exists").returncode == 0


def test_describe_json_has_every_partition(admin_broker):
    assert cli(admin_broker, "topics", "--create", "--topic", "tj-one", "--partitions", "2",
               "--config", "segment.bytes=1048576").returncode == 0
    document = json.loads(cli(admin_broker, "topics", "--describe", "--topic", "tj-one", "--json").stdout)
    assert document == {"topics": [{
        "name": "tj-one", "topicId": topic_id(admin_broker, "tj-one"), "internal": False, "partitionCount": 2,
        "replicationFactor": 1, "configs": {"segment.bytes": "1048576"},
        "partitions": [{"partition": p, "leader": 1, "replicas": [1], "isr": [1]} for p in range(2)]}]}


def test_report_flags_show_only_the_partitions_they_name(admin_broker):
    assert cli(admin_broker, "topics", "--create", "--topic", "tr-strict", "--partitions", "2",
               "--config", "min.insync.replicas=2").returncode == 0
    assert cli(admin_broker, "topics", "--create", "--topic", "tr-loose").returncode == 0
    assert cli(admin_broker, "topics", "--describe", "--topic", "tr-.*", "--under-replicated-partitions").stdout == ""
    assert cli(admin_broker, "topics", "--describe", "--topic", "tr-.*", "--unavailable-partitions").stdout == ""
    under_min = cli(admin_broker, "topics", "--describe", "--topic", "tr-.*", "--under-min-isr-partitions")
    assert under_min.stdout == "".join(
        f"\tTopic: tr-strict\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1{ELR}\n" for p in range(2))
    assert cli(admin_broker, "topics", "--describe", "--topic", "tr-.*", "--at-min-isr-partitions").stdout == (
        f"\tTopic: tr-loose\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1{ELR}\n")
    overrides = cli(admin_broker, "topics", "--describe", "--topic", "tr-.*", "--topics-with-overrides").stdout
    assert overrides.splitlines() == [
        f"Topic: tr-strict\tTopicId: {topic_id(admin_broker, 'tr-strict')}\tPartitionCount: 2\tReplicationFactor: 1\t"
        "Configs: min.insync.replicas=2"]


def test_bad_arguments_are_one_line_and_exit_2(admin_broker):
    b = admin_broker.bootstrap
    for args, fragment in [
            ((), "exactly one action"),
            (("--list", "--describe"), "exactly one action"),
            (("list", "--describe"), "exactly one action"),
            (("--create",), "--create needs --topic"),
            (("--alter", "--topic", "t"), "--alter needs --partitions"),
            (("--alter", "--topic", "t", "--partitions", "2", "--replication-factor", "1"),
             "--replication-factor goes with --create"),
            (("--create", "--topic", "t", "--config", "novalue"), "key=val"),
            (("--create", "--topic", "t", "--partitions", "0"), "The partitions must be greater than 0"),
            (("--list", "--topic", "("), "is an invalid regex"),
            (("--list", "--if-not-exists"), "--if-not-exists goes with --create"),
            (("--list", "--partitions", "x"), "invalid int value"),
            (("--bootstrap-server", "no-port", "--list"), "'no-port' is not host:port"),
            (("--list", "--bogus"), "unrecognized arguments: --bogus")]:
        one_line_error(cli(b, "topics", *args), 2, "logstore topics", fragment)
    one_line_error(cli(f"127.0.0.1:{free_port()}", "topics", "--list"), 2, "no broker at")
