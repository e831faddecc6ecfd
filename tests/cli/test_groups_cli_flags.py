"""`logstore groups` with kafka-consumer-groups' own flags, and the reset targets of times and shifts.

The subcommand forms are tested at length in tests/clients/test_groups_admin.py;
here each Kafka-flag form is run and, where both exist, checked to print what
the subcommand prints. The scene, on the module's broker: topic `gf-t` (2
partitions) whose records carry known CreateTime timestamps (partition 0: three
records 3, 2 and 1 hours old; partition 1: two records of September 2001); a
live group `gf-live` (one confluent-kafka consumer, Stable); groups without
members made as admin tools make them (an OffsetCommit with generation -1).
Committed offsets are read back with confluent-kafka's AdminClient.
"""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

import admin_cli_broker
from admin_cli_broker import TIMEOUT, cli, cli_at, one_line_error, table

admin_broker = admin_cli_broker.admin_broker   # the fixture

TOPIC = "gf-t"
HOUR_MS = 3_600_000
SEPT_2001 = 1_000_000_000_000  # 2001-09-09T01:46:40.000Z: partition 1's first record, the second a minute later


@pytest.fixture(scope="module")
def scene(admin_broker):
    admin = ConfluentAdmin({"bootstrap.servers": admin_broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT)
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0})
    for partition, stamp in [(0, now - 3 * HOUR_MS), (0, now - 2 * HOUR_MS), (0, now - HOUR_MS),
                             (1, SEPT_2001), (1, SEPT_2001 + 60_000)]:
        producer.produce(TOPIC, b"v", partition=partition, timestamp=stamp)
        assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": "gf-live",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + TIMEOUT
    while len(consumer.assignment()) != 2:
        assert time.monotonic() < deadline
        consumer.poll(0.05)
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=False)
    yield admin_broker
    consumer.close()


def commit_as_admin(broker, group: str, offsets: dict[int, int]) -> None:
    """Offsets of TOPIC's partitions committed from outside the group (a consumer that never joins commits
    with generation -1): a group without members."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for tp in consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                                  asynchronous=False):
            assert tp.error is None, tp
    finally:
        consumer.close()


def committed(broker, group: str) -> dict[int, int]:
    """The group's committed offsets of TOPIC, through confluent-kafka's AdminClient."""
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    result = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def new_offsets(done) -> dict[int, int]:
    """{partition: NEW-OFFSET} of a reset's table."""
    assert done.returncode == 0, done.stderr
    header, rows = table(done.stdout)
    assert header == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    return {int(row[2]): int(row[3]) for row in rows}


def test_list_prints_names_and_with_state_a_state_column(scene):
    commit_as_admin(scene, "gf-idle", {0: 1, 1: 1})
    names = cli(scene, "groups", "--list").stdout.splitlines()
    assert {"gf-idle", "gf-live"} <= set(names) and names == sorted(names)
    header, rows = table(cli(scene, "groups", "--list", "--state").stdout)
    assert header == ["GROUP", "STATE"]
    assert {"gf-idle": "Empty", "gf-live": "Stable"}.items() <= {g: s for g, s in rows}.items()
    assert table(cli(scene, "groups", "--list", "--state", "stable").stdout)[1] == [["gf-live", "Stable"]]
    # The subcommand keeps its table.
    assert table(cli(scene, "groups", "list", "--state", "Stable").stdout) == (
        ["GROUP", "PROTOCOL-TYPE", "STATE"], [["gf-live", "consumer", "Stable"]])


@pytest.mark.parametrize("view", [(), ("--members",), ("--state",)])
def test_describe_with_flags_prints_what_the_subcommand_prints(scene, view):
    flags = cli(scene, "groups", "--describe", "--group", "gf-live", *view)
    subcommand = cli(scene, "groups", "describe", "gf-live", *view)
    assert (flags.returncode, flags.stderr) == (0, "")
    assert flags.stdout == subcommand.stdout and flags.stdout.startswith("GROUP")
    if view == ("--state",):
        assert table(flags.stdout)[1][0][3:] == ["Stable", "1"]
    offsets = cli(scene, "groups", "--describe", "--group", "gf-live", "--offsets")
    assert offsets.stdout == cli(scene, "groups", "describe", "gf-live").stdout


def test_describe_all_groups(scene):
    commit_as_admin(scene, "gf-idle", {0: 1, 1: 1})
    done = cli(scene, "groups", "--describe", "--all-groups", "--json")
    described = {g["groupId"]: g for g in json.loads(done.stdout)["groups"]}
    assert {"gf-idle", "gf-live"} <= described.keys()
    assert [(o["partition"], o["currentOffset"], o["lag"]) for o in described["gf-idle"]["offsets"]] == [
        (0, 1, 2), (1, 1, 1)]
    text = cli(scene, "groups", "--describe", "--all-groups")
    assert "Consumer group 'gf-idle' has no active members." in text.stderr
    headers = [line for line in text.stdout.splitlines() if line.startswith("GROUP")]
    assert len(headers) == len(described) and "\n\n" in text.stdout


def test_reset_to_datetime_is_a_dry_run_by_default(scene):
    commit_as_admin(scene, "gf-dt", {0: 1, 1: 1})
    done = cli(scene, "groups", "--reset-offsets", "--group", "gf-dt", "--topic", TOPIC,
               "--to-datetime", "2001-09-09T01:47:00.000")
    # Partition 0's records are all later; partition 1's first at or after 01:47 is its second.
    assert new_offsets(done) == {0: 0, 1: 1}
    assert committed(scene, "gf-dt") == {0: 1, 1: 1}
    with_zone = cli(scene, "groups", "--reset-offsets", "--group", "gf-dt", "--topic", TOPIC,
                    "--to-datetime", "2001-09-09T03:46:40.001+02:00", "--dry-run")
    assert new_offsets(with_zone) == {0: 0, 1: 1}
    # After every record: Kafka falls back to the log end offset, with a warning.
    late = cli(scene, "groups", "--reset-offsets", "--group", "gf-dt", "--topic", f"{TOPIC}:1",
               "--to-datetime", "2030-01-01T00:00:00.000Z")
    assert new_offsets(late) == {1: 2}
    assert "Partition 1 from topic gf-t is empty. Falling back to latest known offset." in late.stderr


def test_reset_by_duration_then_execute(scene):
    commit_as_admin(scene, "gf-dur", {0: 0, 1: 0})
    done = cli(scene, "groups", "--reset-offsets", "--group", "gf-dur", "--all-topics", "--by-duration", "PT150M",
               "--execute")
    # 2.5 hours ago: partition 0's record of 2 hours ago is the first as late; partition 1 has none that late.
    assert new_offsets(done) == {0: 1, 1: 2}
    assert committed(scene, "gf-dur") == {0: 1, 1: 2}
    assert new_offsets(cli(scene, "groups", "reset-offsets", "gf-dur", "--topic", TOPIC, "--by-duration",
                           "P1DT0H", "--execute")) == {0: 0, 1: 2}
    assert committed(scene, "gf-dur") == {0: 0, 1: 2}


def test_reset_shift_by_is_clamped_and_needs_a_committed_offset(scene):
    commit_as_admin(scene, "gf-shift", {0: 1, 1: 1})
    assert new_offsets(cli(scene, "groups", "--reset-offsets", "--group", "gf-shift", "--all-topics",
                           "--shift-by", "-1", "--execute")) == {0: 0, 1: 0}
    far = cli(scene, "groups", "reset-offsets", "gf-shift", "--all-topics", "--shift-by", "5", "--execute")
    assert new_offsets(far) == {0: 3, 1: 2}
    assert "New offset (5) is higher than latest offset for topic partition gf-t-0. Value will be set to 3" \
        in far.stderr
    assert committed(scene, "gf-shift") == {0: 3, 1: 2}
    commit_as_admin(scene, "gf-half", {0: 1})
    one_line_error(cli(scene, "groups", "--reset-offsets", "--group", "gf-half", "--topic", TOPIC,
                       "--shift-by", "1"), 1, "Cannot shift offset for partition gf-t-1")


def test_reset_to_current_takes_the_log_end_where_nothing_is_committed(scene):
    commit_as_admin(scene, "gf-cur", {0: 1})
    assert new_offsets(cli(scene, "groups", "--reset-offsets", "--group", "gf-cur", "--topic", TOPIC,
                           "--to-current", "--execute")) == {0: 1, 1: 2}
    assert committed(scene, "gf-cur") == {0: 1, 1: 2}


def test_reset_of_a_live_group_is_refused(scene):
    one_line_error(cli(scene, "groups", "--reset-offsets", "--group", "gf-live", "--all-topics", "--to-latest",
                       "--execute"), 1, "Assignments can only be reset if the group 'gf-live' is inactive")


def test_reset_of_several_groups_resets_the_inactive_ones_and_says_which_are_not(scene):
    commit_as_admin(scene, "gf-many-a", {0: 0, 1: 0})
    commit_as_admin(scene, "gf-many-b", {0: 1})
    done = cli(scene, "groups", "--reset-offsets", "--group", "gf-many-a", "--group", "gf-live", "--group",
               "gf-many-b", "--topic", TOPIC, "--to-latest", "--execute")
    assert done.returncode == 1   # gf-live has a member: left as it is, said on stderr, the others reset
    assert done.stderr.splitlines() == ["logstore groups: Assignments can only be reset if the group 'gf-live' is "
                                        "inactive, but the current state is Stable."]
    header, rows = table(done.stdout)
    assert header == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert sorted(tuple(r) for r in rows) == [("gf-many-a", TOPIC, "0", "3"), ("gf-many-a", TOPIC, "1", "2"),
                                              ("gf-many-b", TOPIC, "0", "3"), ("gf-many-b", TOPIC, "1", "2")]
    assert committed(scene, "gf-many-a") == committed(scene, "gf-many-b") == {0: 3, 1: 2}
    # --all-groups, as JSON lines: one document per inactive group, nothing committed without --execute.
    every = cli(scene, "groups", "--reset-offsets", "--all-groups", "--topic", f"{TOPIC}:0", "--to-earliest",
                "--json")
    assert every.returncode == 1 and "'gf-live' is inactive" in every.stderr
    documents = {d["groupId"]: d for d in map(json.loads, every.stdout.splitlines())}
    assert "gf-live" not in documents
    assert documents["gf-many-a"] == {"groupId": "gf-many-a", "executed": False,
                                      "offsets": [{"topic": TOPIC, "partition": 0, "newOffset": 0}]}
    assert committed(scene, "gf-many-a") == {0: 3, 1: 2}


def test_delete_offsets_and_delete_with_flags(scene):
    commit_as_admin(scene, "gf-del", {0: 1, 1: 1})
    done = cli(scene, "groups", "--delete-offsets", "--group", "gf-del", "--topic", f"{TOPIC}:0")
    assert done.returncode == 0, done.stderr
    assert table(done.stdout.split("\n", 1)[1]) == (["TOPIC", "PARTITION", "STATUS"], [[TOPIC, "0", "Successful"]])
    assert committed(scene, "gf-del") == {1: 1}
    done = cli(scene, "groups", "--delete", "--group", "gf-del")
    assert (done.returncode, done.stdout) == (0, "Deletion of requested consumer groups ('gf-del') was successful.\n")
    assert "gf-del" not in cli(scene, "groups", "--list").stdout.splitlines()
    refused = cli(scene, "groups", "--delete", "--group", "gf-live")
    assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stderr


def test_connection_options_go_before_or_after_the_subcommand(scene):
    b = scene.bootstrap
    before = cli_at("groups", "--bootstrap-server", b, "--json", "describe", "gf-live")
    after = cli_at("groups", "describe", "gf-live", "--bootstrap-server", b, "--json")
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    assert json.loads(before.stdout)["groups"][0]["groupId"] == json.loads(after.stdout)["groups"][0]["groupId"]
    assert cli_at("groups", "--list", "--bootstrap-server", b).stdout == cli_at(
        "groups", "--bootstrap-server", b, "--list").stdout
