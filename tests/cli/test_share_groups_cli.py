"""`logstore share-groups` with kafka-share-groups.sh's flags, run as a process against a real broker.

The scene, on the module's broker: topic `sg-t` (2 partitions: ten records in
partition 0, two of September 2001 in partition 1); `sg-live`, a share group
with one confluent-kafka ShareConsumer that stays (Stable); `sg-idle`, a share
group whose only member came and went (Empty). Each test leaves the scene as
it found it or works on a group of its own.
"""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId

import admin_cli_broker
from admin_cli_broker import TIMEOUT, cli, one_line_error, table
from logstore.broker.admin_client import AdminClient
from share_helpers import share_consumer, start_offsets

admin_broker = admin_cli_broker.admin_broker   # the fixture

TOPIC = "sg-t"
SEPT_2001 = 1_000_000_000_000  # 2001-09-09T01:46:40.000Z: partition 1's first record, the second a minute later


def members(broker, group: str) -> int:
    """How many members ShareGroupDescribe shows (0 for an unknown group)."""
    with AdminClient(broker.bootstrap) as client:
        (described,) = client.request(ShareGroupDescribeRequest(group_ids=(GroupId(group),),
                                                                include_authorized_operations=False)).groups
    return len(described.members)


def joined(broker, group: str):
    """A ShareConsumer of `group` on TOPIC, polled until the group shows it and it fetched from both
    partitions (their share state exists)."""
    consumer = share_consumer(broker.bootstrap, group, TOPIC)
    deadline = time.monotonic() + TIMEOUT
    while members(broker, group) == 0 or len(start_offsets(broker.bootstrap, group)) < 2:
        assert time.monotonic() < deadline, f"the share consumer of {group} never fetched"
        consumer.poll(0.2)
    return consumer


def leave(consumer, broker, group: str) -> None:
    """Close a member and wait until its group no longer shows it (the leave may land after close returns)."""
    consumer.close()
    deadline = time.monotonic() + TIMEOUT
    while members(broker, group):
        assert time.monotonic() < deadline, "the closed member never left"
        time.sleep(0.05)   # the leave lands in the broker process: no event to wait on from here


def offset_rows(broker, group: str) -> list[list[str]]:
    done = cli(broker, "share-groups", "--describe", "--group", group)
    return table(done.stdout)[1] if done.returncode == 0 and done.stdout else []


@pytest.fixture(scope="module")
def scene(admin_broker):
    admin = ConfluentAdmin({"bootstrap.servers": admin_broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(TOPIC, b"%d" % i, partition=0)
    for stamp in (SEPT_2001, SEPT_2001 + 60_000):
        producer.produce(TOPIC, b"old", partition=1, timestamp=stamp)
    assert producer.flush(TIMEOUT) == 0
    leave(joined(admin_broker, "sg-idle"), admin_broker, "sg-idle")
    live = joined(admin_broker, "sg-live")
    yield admin_broker
    live.close()


def test_list_names_and_states(scene):
    """--list prints the names; --list --state a table of GROUP and STATE, filtered by state if given."""
    names = cli(scene, "share-groups", "--list")
    assert names.returncode == 0, names.stderr
    assert sorted(names.stdout.split()) == ["sg-idle", "sg-live"]
    header, rows = table(cli(scene, "share-groups", "--list", "--state").stdout)
    assert header == ["GROUP", "STATE"]
    assert rows == [["sg-idle", "Empty"], ["sg-live", "Stable"]]
    assert table(cli(scene, "share-groups", "--list", "--state", "stable").stdout)[1] == [["sg-live", "Stable"]]


def test_describe_offsets_members_and_state(scene):
    """Kafka's three views, and --verbose's extra columns."""
    header, rows = table(cli(scene, "share-groups", "--describe", "--group", "sg-live").stdout)
    assert header == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    # share.auto.offset.reset=latest: the group started at the log end of each partition.
    assert rows == [["sg-live", TOPIC, "0", "10", "0"], ["sg-live", TOPIC, "1", "2", "0"]]
    header, rows = table(cli(scene, "share-groups", "--describe", "--group", "sg-live", "--verbose").stdout)
    assert header == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    header, rows = table(cli(scene, "share-groups", "--describe", "--group", "sg-live", "--members").stdout)
    assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    ((group, _, _, _, count, assignment),) = rows
    assert (group, count, assignment) == ("sg-live", "2", f"{TOPIC}:0,1")
    header, _ = table(cli(scene, "share-groups", "--describe", "--group", "sg-live", "--members", "--verbose").stdout)
    assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
    header, rows = table(cli(scene, "share-groups", "--describe", "--group", "sg-live", "--state").stdout)
    assert header == ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
    assert [rows[0][0], rows[0][2], rows[0][3]] == ["sg-live", "Stable", "1"]
    header, _ = table(cli(scene, "share-groups", "--describe", "--group", "sg-live", "--state", "--verbose").stdout)
    assert header == ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    empty = cli(scene, "share-groups", "--describe", "--group", "sg-idle", "--members")
    assert empty.returncode == 0 and "has no active members" in empty.stderr
    document = json.loads(cli(scene, "share-groups", "--describe", "--all-groups", "--json").stdout)
    assert [g["groupId"] for g in document["groups"]] == ["sg-idle", "sg-live"]
    assert [(o["partition"], o["startOffset"], o["lag"]) for o in document["groups"][1]["offsets"]] == [(0, 10, 0),
                                                                                                       (1, 2, 0)]


def test_describe_a_group_that_does_not_exist(scene):
    """One readable line, exit status 1."""
    one_line_error(cli(scene, "share-groups", "--describe", "--group", "sg-nobody"), 1,
                   "Share group 'sg-nobody' does not exist.")


def test_reset_offsets_dry_run_execute_and_refusal(scene):
    """A dry run changes nothing; --execute sets the start offsets; a group with members is refused."""
    before = offset_rows(scene, "sg-idle")
    dry = cli(scene, "share-groups", "--reset-offsets", "--group", "sg-idle", "--topic", TOPIC, "--to-earliest",
              "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert table(dry.stdout) == (["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                 [["sg-idle", TOPIC, "0", "0"], ["sg-idle", TOPIC, "1", "0"]])
    assert offset_rows(scene, "sg-idle") == before
    done = cli(scene, "share-groups", "--reset-offsets", "--group", "sg-idle", "--topic", f"{TOPIC}:0",
               "--to-offset", "7", "--execute")
    assert table(done.stdout)[1] == [["sg-idle", TOPIC, "0", "7"]], done.stderr
    by_time = cli(scene, "share-groups", "--reset-offsets", "--group", "sg-idle", "--topic", f"{TOPIC}:1",
                  "--to-datetime", "2001-09-09T01:47:00.000", "--execute")
    assert table(by_time.stdout)[1] == [["sg-idle", TOPIC, "1", "1"]], by_time.stderr
    assert offset_rows(scene, "sg-idle") == [["sg-idle", TOPIC, "0", "7", "3"], ["sg-idle", TOPIC, "1", "1", "1"]]
    back = cli(scene, "share-groups", "--reset-offsets", "--group", "sg-idle", "--all-topics", "--to-latest",
               "--execute")
    assert table(back.stdout)[1] == [["sg-idle", TOPIC, "0", "10"], ["sg-idle", TOPIC, "1", "2"]], back.stderr
    one_line_error(cli(scene, "share-groups", "--reset-offsets", "--group", "sg-live", "--topic", TOPIC,
                       "--to-earliest", "--execute"), 1, "Share group 'sg-live' is not empty.")


def test_delete_offsets_and_delete(scene):
    """--delete-offsets forgets a topic's share state of an empty group; --delete removes empty share groups and
    refuses others, as Kafka's tool does."""
    leave(joined(scene, "sg-doomed"), scene, "sg-doomed")
    forgot = cli(scene, "share-groups", "--delete-offsets", "--group", "sg-doomed", "--topic", TOPIC,
                 "--topic", "sg-none")
    assert forgot.returncode == 1
    header, rows = table(forgot.stdout)
    assert header == ["TOPIC", "STATUS"]
    assert rows[0][0] == "sg-none" and "UNKNOWN_TOPIC_OR_PARTITION" in rows[0][1]
    assert rows[1] == [TOPIC, "Successful"]
    assert offset_rows(scene, "sg-doomed") == []
    refused = cli(scene, "share-groups", "--delete", "--group", "sg-live", "--group", "sg-nothing")
    assert refused.returncode == 1
    assert "Share group 'sg-live' is not EMPTY." in refused.stderr
    assert "Group 'sg-nothing' is not a share group." in refused.stderr
    deleted = cli(scene, "share-groups", "--delete", "--group", "sg-doomed")
    assert (deleted.returncode, deleted.stdout.strip()) == (
        0, "Deletion of requested share groups ('sg-doomed') was successful."), deleted.stderr
    assert "sg-doomed" not in cli(scene, "share-groups", "--list").stdout.split()


@pytest.mark.parametrize("args, fragment", [
    ((), "exactly one action"),
    (("--describe",), "--describe takes one of these options"),
    (("--describe", "--group", "g", "--members", "--state"), "at most one of"),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"), "--execute or --dry-run"),
    (("--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest", "--execute"),
     "takes one of these options: --to-datetime"),
    (("--reset-offsets", "--group", "g", "--to-earliest", "--execute"), "--all-topics, --topic"),
    (("--delete-offsets", "--group", "g"), "--delete-offsets takes the following options"),
    (("--list", "--state", "Rebalancing"), "Invalid state list"),
    (("--delete", "--group", "g", "--all-groups"), "not both"),
])
def test_usage_errors_are_one_line(args, fragment):
    """Kafka's tool's refusals, before any broker is asked: exit status 2, one line."""
    one_line_error(cli("127.0.0.1:1", "share-groups", *args), 2, fragment)
