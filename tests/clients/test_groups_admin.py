"""The group admin APIs and `logstore groups`, against a live consumer group of real clients.

The scene, on the module's broker: three confluent-kafka consumers, one of
them a static member, form the group `ga-live` on the 6-partition topic
`ga-live` (range: two partitions each) and commit a known offset on each partition, and one on `ga-old`, a
topic none of them reads any more; each partition holds a known number of
records, so every lag is known exactly. Groups without members are made
the way admin tools make them: an OffsetCommit with generation -1.

confluent-kafka's AdminClient and kafka-python's KafkaAdminClient ask what
they can; logstore's own admin client sends each API raw, at every version
the broker advertises (DescribeGroups 0-5, ListGroups 0-4, DeleteGroups
0-2, OffsetDelete 0, OffsetFetch 1-8, OffsetCommit 2-8); the CLI runs as a
subprocess.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib
import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import GroupSubscribedToTopicError, NoError
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta, i64Timedelta

from broker_process import BrokerProcess, free_port
from logstore.broker.admin_client import AdminClient
from logstore.broker.coordinator.consumer_protocol import decode_assignment, decode_subscription

TIMEOUT = 30.0  # s: a bound on any single wait
LIVE = "ga-live"  # the live group, and the topic it consumes
PARTITIONS = 6
RECORDS = {p: 5 + 3 * p for p in range(PARTITIONS)}  # records produced to each partition of LIVE
COMMITTED = {p: 1 + p for p in range(PARTITIONS)}  # the group's offset on each: lag 4 + 2p
OLD = "ga-old"  # 2 partitions of OLD_RECORDS records; the live group committed OLD_COMMITTED on partition 0
OLD_RECORDS, OLD_COMMITTED = 4, 3
LIVE_OFFSETS = {**{(LIVE, p): o for p, o in COMMITTED.items()}, (OLD, 0): OLD_COMMITTED}  # all the group's
SPARE = "ga-spare"  # a topic tests commit to and delete offsets of (1 partition, SPARE_RECORDS records)
SPARE_RECORDS = 10
CLIENT_IDS = ("ga-c0", "ga-c1", "ga-c2")
INSTANCE_IDS = (None, "ga-static-1", None)  # the second consumer is a static member
UNKNOWN_OPERATIONS = -2147483648
OFFSET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]
MEMBER_HEADERS = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]


# -- the scene ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    """A broker that forms a group as soon as its first member joins (group.initial.rebalance.delay.ms=0)."""
    broker = BrokerProcess("127.0.0.1", free_port(), tmp_path_factory.mktemp("groups") / "data",
                           ("group.initial.rebalance.delay.ms=0",))
    broker.data_dir.mkdir()
    broker.start()
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


def produce(broker, topic: str, counts: dict[int, int]) -> None:
    """`counts[p]` records to each partition p, all delivered."""
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, f"{topic}-{partition}-{i}".encode(), partition=partition)
    assert p.flush(TIMEOUT) == 0


class Scene:
    """The live group: its consumers, and who owns what."""

    def __init__(self, broker):
        self.consumers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": LIVE, "client.id": client_id,
                                    "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                    **({"group.instance.id": instance_id} if instance_id else {})})
                          for client_id, instance_id in zip(CLIENT_IDS, INSTANCE_IDS)]
        self.owner: dict[int, int] = {}  # partition of LIVE -> index of the consumer that owns it

    def form(self) -> None:
        """Subscribe all three and serve their rebalances until each owns its two partitions."""
        for c in self.consumers:
            c.subscribe([LIVE])
        deadline = time.monotonic() + TIMEOUT
        # Eager rebalancing revokes everything before rejoining: two each means one generation's assignment.
        while [len(c.assignment()) for c in self.consumers] != [PARTITIONS // len(self.consumers)] * 3:
            assert time.monotonic() < deadline, [c.assignment() for c in self.consumers]
            for c in self.consumers:
                c.poll(0.05)
        self.owner = {tp.partition: i for i, c in enumerate(self.consumers) for tp in c.assignment()}

    def commit(self, index: int, offsets: list[TopicPartition]) -> None:
        """A synchronous commit by consumer `index`, as a member of the current generation."""
        for tp in self.consumers[index].commit(offsets=offsets, asynchronous=False):
            assert tp.error is None, tp


@pytest.fixture(scope="module")
def live(group_broker):
    """The live group, Stable, with COMMITTED on LIVE and OLD_COMMITTED on OLD-0."""
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    topics = [NewTopic(LIVE, PARTITIONS, 1), NewTopic(OLD, 2, 1), NewTopic(SPARE, 1, 1)]
    for future in admin.create_topics(topics, operation_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    produce(group_broker, LIVE, RECORDS)
    produce(group_broker, OLD, {0: OLD_RECORDS, 1: OLD_RECORDS})
    produce(group_broker, SPARE, {0: SPARE_RECORDS})
    scene = Scene(group_broker)
    scene.form()
    for i in range(len(CLIENT_IDS)):
        scene.commit(i, [TopicPartition(LIVE, p, COMMITTED[p]) for p, owner in scene.owner.items() if owner == i])
    scene.commit(0, [TopicPartition(OLD, 0, OLD_COMMITTED)])
    yield scene
    for c in scene.consumers:
        c.close()


@pytest.fixture(scope="module")
def wire(group_broker):
    """logstore's admin client: one connection, raw requests."""
    with AdminClient(group_broker.bootstrap) as client:
        yield client


@pytest.fixture(scope="module")
def kadmin(group_broker):
    """kafka-python's admin client."""
    client = KafkaAdminClient(bootstrap_servers=group_broker.bootstrap, client_id="ga-kafka-python",
                              request_timeout_ms=int(TIMEOUT * 1000))
    yield client
    client.close()


def kio(api: str, version: int):
    """kio's request module of one API version."""
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def make(cls, **fields):
    """A kio entity from the fields its version has (the others are left out)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def commit_as_admin(wire, group: str, offsets: dict[tuple[str, int], int], version: int = 8,
                    generation: int = -1, member_id: str = "", metadata: str = "", leader_epoch: int = -1):
    """OffsetCommit from outside the group (generation -1, no member, as admin tools send it):
    {(topic, partition): error code}."""
    m = kio("offset_commit", version)
    by_topic: dict[str, list] = {}
    for (topic, p), offset in offsets.items():
        by_topic.setdefault(topic, []).append(make(m.OffsetCommitRequestPartition, partition_index=p,
                                                   committed_offset=offset, committed_leader_epoch=leader_epoch,
                                                   committed_metadata=metadata))
    request = make(m.OffsetCommitRequest, group_id=group, generation_id_or_member_epoch=generation,
                   member_id=member_id, group_instance_id=None,
                   retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)),
                   topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                                for t, ps in by_topic.items()))
    response = wire.request(request)
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def fetch(wire, group: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], tuple]:
    """OffsetFetch v8: {(topic, partition): (offset, leader epoch, metadata, error code)}."""
    m = kio("offset_fetch", 8)
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        topics = tuple(m.OffsetFetchRequestTopics(name=t, partition_indexes=tuple(ps))
                       for t, ps in by_topic.items())
    response = wire.request(m.OffsetFetchRequest(groups=(m.OffsetFetchRequestGroup(group_id=group, topics=topics),),
                                                 require_stable=False))
    (g,) = response.groups
    assert g.error_code == ErrorCode.none
    return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
            for t in g.topics for p in t.partitions}


def describe(wire, group: str):
    """DescribeGroups v5 of one group."""
    (g,) = wire.request(kio("describe_groups", 5).DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False)).groups
    return g


def run_cli(broker_or_address, *args: str) -> subprocess.CompletedProcess:
    """`python -m logstore groups --bootstrap-server ... args`, its output captured."""
    address = getattr(broker_or_address, "bootstrap", broker_or_address)
    return subprocess.run([sys.executable, "-m", "logstore", "groups", "--bootstrap-server", address, *args],
                          capture_output=True, text=True, timeout=TIMEOUT)


def table(stdout: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a table (cells padded, tab-separated)."""
    lines = stdout.splitlines()
    return [c.strip() for c in lines[0].split("\t")], [[c.strip() for c in line.split("\t")] for line in lines[1:]]


# -- confluent-kafka's AdminClient ----------------------------------------------------------------------------

def test_confluent_lists_groups_with_their_state_and_filters_by_state(live, wire, group_broker):
    assert commit_as_admin(wire, "ga-c-list-empty", {(SPARE, 0): 1}) == {(SPARE, 0): ErrorCode.none}
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT).valid}
    assert listed[LIVE].state == ConsumerGroupState.STABLE and not listed[LIVE].is_simple_consumer_group
    assert listed["ga-c-list-empty"].state == ConsumerGroupState.EMPTY
    assert listed["ga-c-list-empty"].is_simple_consumer_group, "made by a commit: no protocol type"
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}, request_timeout=TIMEOUT).result(TIMEOUT)
    names = {g.group_id for g in empty.valid}
    assert "ga-c-list-empty" in names and LIVE not in names
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}, request_timeout=TIMEOUT).result(TIMEOUT)
    assert {g.group_id for g in stable.valid} == {LIVE}


def test_confluent_describes_the_live_groups_members_and_assignments(live, group_broker):
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    described = admin.describe_consumer_groups([LIVE], request_timeout=TIMEOUT)[LIVE].result(TIMEOUT)
    assert (described.state, described.partition_assignor, described.is_simple_consumer_group) == (
        ConsumerGroupState.STABLE, "range", False)
    assert described.coordinator.port == group_broker.port
    members = {m.member_id: m for m in described.members}
    assert set(members) == {c.memberid() for c in live.consumers}
    for i, c in enumerate(live.consumers):
        m = members[c.memberid()]
        assert (m.client_id, m.host, m.group_instance_id) == (CLIENT_IDS[i], "/127.0.0.1", INSTANCE_IDS[i])
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == sorted(
            p for p, owner in live.owner.items() if owner == i)
        assert {tp.topic for tp in m.assignment.topic_partitions} == {LIVE}


def test_confluent_describes_an_unknown_group_as_dead_with_no_members(live, group_broker):
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    described = admin.describe_consumer_groups(["ga-no-such-group"], request_timeout=TIMEOUT)
    unknown = described["ga-no-such-group"].result(TIMEOUT)
    assert (unknown.state, unknown.members) == (ConsumerGroupState.DEAD, [])


def test_confluent_lists_the_groups_committed_offsets(live, group_broker):
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    everything = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(LIVE)],
                                                   request_timeout=TIMEOUT)[LIVE].result(TIMEOUT)
    found = {(tp.topic, tp.partition): tp.offset for tp in everything.topic_partitions}
    assert {tp: found[tp] for tp in LIVE_OFFSETS} == LIVE_OFFSETS
    asked = [TopicPartition(LIVE, 2), TopicPartition(OLD, 1)]
    some = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(LIVE, asked)],
                                             request_timeout=TIMEOUT)[LIVE].result(TIMEOUT)
    assert [(tp.topic, tp.partition, tp.offset) for tp in some.topic_partitions] == [
        (LIVE, 2, COMMITTED[2]), (OLD, 1, -1001)], "-1001: no committed offset (librdkafka's OFFSET_INVALID)"


def test_confluent_alters_the_offsets_of_an_empty_group_but_not_of_a_live_one(live, group_broker, wire):
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    request = [ConsumerGroupTopicPartitions("ga-c-alter", [TopicPartition(LIVE, 0, 4), TopicPartition(LIVE, 5, 2)])]
    altered = admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT)["ga-c-alter"].result(TIMEOUT)
    assert [(tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions] == [(0, 4, None), (5, 2, None)]
    assert {tp: f[0] for tp, f in fetch(wire, "ga-c-alter", None).items()} == {(LIVE, 0): 4, (LIVE, 5): 2}
    request = [ConsumerGroupTopicPartitions(LIVE, [TopicPartition(LIVE, 0, 0)])]
    refused = admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT)[LIVE].result(TIMEOUT)
    assert [tp.error.name() for tp in refused.topic_partitions] == ["UNKNOWN_MEMBER_ID"], \
        "a group with members takes commits only from its members"
    assert fetch(wire, LIVE, [(LIVE, 0)])[(LIVE, 0)][0] == COMMITTED[0]


def test_confluent_deletes_an_empty_group_but_not_one_with_members(live, group_broker, wire):
    assert commit_as_admin(wire, "ga-c-delete", {(SPARE, 0): 2}) == {(SPARE, 0): ErrorCode.none}
    admin = ConfluentAdmin({"bootstrap.servers": group_broker.bootstrap})
    futures = admin.delete_consumer_groups(["ga-c-delete", LIVE, "ga-no-such-group"], request_timeout=TIMEOUT)
    assert futures["ga-c-delete"].result(TIMEOUT) is None
    for group, error in ((LIVE, "NON_EMPTY_GROUP"), ("ga-no-such-group", "GROUP_ID_NOT_FOUND")):
        with pytest.raises(KafkaException) as refused:
            futures[group].result(TIMEOUT)
        assert refused.value.args[0].name() == error, group
    assert describe(wire, "ga-c-delete").group_state == "Dead"
    assert fetch(wire, "ga-c-delete", [(SPARE, 0)])[(SPARE, 0)][0] == -1, "its offsets went with it"
    assert describe(wire, LIVE).group_state == "Stable"


# -- kafka-python's KafkaAdminClient --------------------------------------------------------------------------

def test_kafka_python_lists_and_describes_groups(live, kadmin):
    listed = {g["group_id"]: g for g in kadmin.list_groups()}
    assert listed[LIVE]["protocol_type"] == "consumer"
    stable = kadmin.list_groups(states_filter=["Stable"])
    assert [(g["group_id"], g["group_state"]) for g in stable] == [(LIVE, "Stable")]
    described = kadmin.describe_groups([LIVE, "ga-no-such-group"])
    group = described[LIVE]
    assert (group["error"], group["group_state"], group["protocol_type"], group["protocol_data"]) == (
        None, "Stable", "consumer", "range")
    members = {m["member_id"]: m for m in group["members"]}
    assert set(members) == {c.memberid() for c in live.consumers}
    for i, c in enumerate(live.consumers):
        m = members[c.memberid()]
        assert (m["client_id"], m["client_host"], m["group_instance_id"]) == (
            CLIENT_IDS[i], "/127.0.0.1", INSTANCE_IDS[i])
        assert m["member_metadata"]["topics"] == [LIVE]
        assert m["member_assignment"]["assigned_partitions"] == [
            {"topic": LIVE, "partitions": sorted(p for p, o in live.owner.items() if o == i)}]
    unknown = described["ga-no-such-group"]
    assert (unknown["error"], unknown["group_state"], unknown["members"]) == (None, "Dead", [])


def test_kafka_python_lists_group_offsets(live, kadmin):
    found = kadmin.list_group_offsets(LIVE)[LIVE]
    assert {(tp.topic, tp.partition): o.offset for tp, o in found.items() if tp.topic in (LIVE, OLD)} == \
        LIVE_OFFSETS
    some = kadmin.list_group_offsets({LIVE: [KafkaTopicPartition(LIVE, 3), KafkaTopicPartition(OLD, 1)]})[LIVE]
    assert {(tp.topic, tp.partition): o.offset for tp, o in some.items()} == {(LIVE, 3): COMMITTED[3], (OLD, 1): -1}


def test_kafka_python_deletes_groups_and_offsets(live, kadmin, wire):
    kadmin.alter_group_offsets("ga-k-delete", {KafkaTopicPartition(SPARE, 0): OffsetAndMetadata(5, "", None)})
    assert kadmin.delete_groups([LIVE, "ga-k-delete", "ga-no-such-group"]) == {
        LIVE: "NonEmptyGroupError", "ga-k-delete": "OK", "ga-no-such-group": "GroupIdNotFoundError"}
    live.commit(1, [TopicPartition(SPARE, 0, 7)])
    deleted = kadmin.delete_group_offsets(LIVE, [KafkaTopicPartition(SPARE, 0), KafkaTopicPartition(LIVE, 1)])
    assert deleted == {KafkaTopicPartition(SPARE, 0): NoError,
                       KafkaTopicPartition(LIVE, 1): GroupSubscribedToTopicError}
    offsets = fetch(wire, LIVE, [(SPARE, 0), (LIVE, 1)])
    assert (offsets[(SPARE, 0)][0], offsets[(LIVE, 1)][0]) == (-1, COMMITTED[1])


def test_kafka_python_resets_an_empty_groups_offsets_within_the_log(live, kadmin, wire):
    kadmin.alter_group_offsets("ga-k-reset", {KafkaTopicPartition(LIVE, 4): OffsetAndMetadata(1, "", None)})
    reset = kadmin.reset_group_offsets("ga-k-reset", {KafkaTopicPartition(LIVE, 4): 10_000,
                                                      KafkaTopicPartition(LIVE, 2): 3})
    assert reset == {KafkaTopicPartition(LIVE, 4): {"error": NoError, "offset": RECORDS[4]},
                     KafkaTopicPartition(LIVE, 2): {"error": NoError, "offset": 3}}
    assert {tp: f[0] for tp, f in fetch(wire, "ga-k-reset", None).items()} == {(LIVE, 4): RECORDS[4], (LIVE, 2): 3}


# -- the CLI ------------------------------------------------------------------------------------------------

def expected_offset_rows(live) -> list[list[str]]:
    """Kafka's rows for the live group: members with the most partitions first (ties by member id), each
    member's partitions in order, then the partitions nobody owns."""
    by_member = sorted(range(len(CLIENT_IDS)), key=lambda i: live.consumers[i].memberid())
    rows = []
    for i in by_member:
        for p in sorted(p for p, o in live.owner.items() if o == i):
            rows.append([LIVE, LIVE, str(p), str(COMMITTED[p]), str(RECORDS[p]), str(RECORDS[p] - COMMITTED[p]),
                         live.consumers[i].memberid(), "/127.0.0.1", CLIENT_IDS[i]])
    rows.append([LIVE, OLD, "0", str(OLD_COMMITTED), str(OLD_RECORDS), str(OLD_RECORDS - OLD_COMMITTED), "-", "-",
                 "-"])
    return rows


def test_cli_describe_shows_each_partitions_offsets_lag_and_owner(live, group_broker):
    done = run_cli(group_broker, "describe", LIVE)
    assert (done.returncode, done.stderr) == (0, "")
    header, rows = table(done.stdout)
    assert header == OFFSET_HEADERS
    assert [r for r in rows if r[1] != SPARE] == expected_offset_rows(live)
    assert [int(r[5]) for r in rows if r[1] == LIVE] == [4 + 2 * int(r[2]) for r in rows if r[1] == LIVE]


def test_cli_describe_members_decodes_each_assignment(live, group_broker):
    done = run_cli(group_broker, "describe", LIVE, "--members")
    assert (done.returncode, done.stderr) == (0, "")
    header, rows = table(done.stdout)
    assert header == MEMBER_HEADERS
    expected = []
    for i, c in enumerate(live.consumers):
        owned = sorted(p for p, o in live.owner.items() if o == i)
        expected.append([LIVE, c.memberid(), INSTANCE_IDS[i] or "-", "/127.0.0.1", CLIENT_IDS[i], str(len(owned)),
                         f"{LIVE}:{','.join(map(str, owned))}"])
    assert sorted(rows) == sorted(expected)


def test_cli_describe_state_names_the_coordinator_and_strategy(live, group_broker):
    done = run_cli(group_broker, "describe", LIVE, "--state")
    assert (done.returncode, done.stderr) == (0, "")
    header, rows = table(done.stdout)
    assert header == ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    (row,) = rows
    assert row[0] == LIVE and row[1].startswith(f"{group_broker.bootstrap}  (")
    assert row[2:] == ["range", "Stable", "3"]


def test_cli_describe_json_has_members_and_offsets(live, group_broker):
    done = run_cli(group_broker, "describe", LIVE, "ga-no-such-group", "--json")
    assert done.returncode == 1, "one group does not exist"
    assert "Consumer group 'ga-no-such-group' does not exist." in done.stderr
    groups = {g["groupId"]: g for g in json.loads(done.stdout)["groups"]}
    group = groups[LIVE]
    assert (group["state"], group["protocolType"], group["assignmentStrategy"], group["coordinator"]["port"]) == (
        "Stable", "consumer", "range", group_broker.port)
    members = {m["memberId"]: (m["groupInstanceId"], m["clientId"], m["host"],
                               [(a["topic"], a["partition"]) for a in m["assignment"]]) for m in group["members"]}
    assert members == {c.memberid(): (INSTANCE_IDS[i], CLIENT_IDS[i], "/127.0.0.1",
                                      [(LIVE, p) for p in sorted(p for p, o in live.owner.items() if o == i)])
                       for i, c in enumerate(live.consumers)}
    rows = [[LIVE, r["topic"], str(r["partition"]), str(r["currentOffset"]), str(r["logEndOffset"]), str(r["lag"]),
             r["memberId"] or "-", r["host"] or "-", r["clientId"] or "-"]
            for r in group["offsets"] if r["topic"] != SPARE]
    assert rows == expected_offset_rows(live)
    assert groups["ga-no-such-group"] == {
        "groupId": "ga-no-such-group", "state": "Dead", "protocolType": "", "assignmentStrategy": None,
        "coordinator": group["coordinator"], "members": [], "offsets": []}


def test_cli_describe_of_an_unknown_group_exits_1(live, group_broker):
    done = run_cli(group_broker, "describe", "ga-no-such-group")
    assert (done.returncode, done.stdout) == (1, "")
    assert "Consumer group 'ga-no-such-group' does not exist." in done.stderr


def test_cli_describe_of_an_empty_group_notes_it_and_shows_unowned_offsets(live, group_broker, wire):
    assert commit_as_admin(wire, "ga-cli-empty", {(LIVE, 3): 2}) == {(LIVE, 3): ErrorCode.none}
    done = run_cli(group_broker, "describe", "ga-cli-empty")
    assert done.returncode == 0
    assert "Consumer group 'ga-cli-empty' has no active members." in done.stderr
    assert table(done.stdout) == (OFFSET_HEADERS, [["ga-cli-empty", LIVE, "3", "2", str(RECORDS[3]),
                                                    str(RECORDS[3] - 2), "-", "-", "-"]])


def test_cli_list_shows_protocol_type_and_state_and_filters(live, group_broker, wire):
    assert commit_as_admin(wire, "ga-cli-list", {(SPARE, 0): 1}) == {(SPARE, 0): ErrorCode.none}
    done = run_cli(group_broker, "list")
    assert (done.returncode, done.stderr) == (0, "")
    header, rows = table(done.stdout)
    assert header == ["GROUP", "PROTOCOL-TYPE", "STATE"]
    listed = {r[0]: r[1:] for r in rows}
    assert listed[LIVE] == ["consumer", "Stable"]
    assert listed["ga-cli-list"] == ["", "Empty"]
    done = run_cli(group_broker, "list", "--state", "stable", "--json")
    assert json.loads(done.stdout) == {"groups": [{"groupId": LIVE, "protocolType": "consumer", "state": "Stable"}]}
    done = run_cli(group_broker, "list", "--state", "Empty,PreparingRebalance")
    names = [r[0] for r in table(done.stdout)[1]]
    assert "ga-cli-list" in names and LIVE not in names


def test_cli_delete_removes_empty_groups_and_refuses_live_ones(live, group_broker, wire):
    for group in ("ga-cli-del-a", "ga-cli-del-b"):
        assert commit_as_admin(wire, group, {(SPARE, 0): 1}) == {(SPARE, 0): ErrorCode.none}
    done = run_cli(group_broker, "delete", "ga-cli-del-a", "ga-cli-del-b")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "Deletion of requested consumer groups ('ga-cli-del-a', 'ga-cli-del-b') was successful.\n"
    assert [describe(wire, g).group_state for g in ("ga-cli-del-a", "ga-cli-del-b")] == ["Dead", "Dead"]
    assert commit_as_admin(wire, "ga-cli-del-c", {(SPARE, 0): 1}) == {(SPARE, 0): ErrorCode.none}
    done = run_cli(group_broker, "delete", LIVE, "ga-cli-del-c")
    assert done.returncode == 1
    assert f"* Group '{LIVE}' could not be deleted due to: NON_EMPTY_GROUP" in done.stderr
    assert done.stdout == "These consumer groups were deleted successfully: 'ga-cli-del-c'\n"
    done = run_cli(group_broker, "delete", "ga-no-such-group", "--json")
    assert (done.returncode, json.loads(done.stdout)) == (
        1, {"results": [{"groupId": "ga-no-such-group", "error": "GROUP_ID_NOT_FOUND"}]})
    assert describe(wire, LIVE).group_state == "Stable"


def test_cli_delete_offsets_of_a_subscribed_topic_is_refused(live, group_broker, wire):
    live.commit(2, [TopicPartition(SPARE, 0, 4)])
    done = run_cli(group_broker, "delete-offsets", LIVE, SPARE, f"{LIVE}:1,2", "ga-no-such-topic")
    assert done.returncode == 1
    assert table(done.stdout) == (["TOPIC", "PARTITION", "STATUS"], [
        [LIVE, "1", "Error: GROUP_SUBSCRIBED_TO_TOPIC"], [LIVE, "2", "Error: GROUP_SUBSCRIBED_TO_TOPIC"],
        ["ga-no-such-topic", "-", "Error: UNKNOWN_TOPIC_OR_PARTITION"], [SPARE, "0", "Successful"]])
    offsets = fetch(wire, LIVE, [(SPARE, 0), (LIVE, 1), (LIVE, 2)])
    assert [offsets[tp][0] for tp in ((SPARE, 0), (LIVE, 1), (LIVE, 2))] == [-1, COMMITTED[1], COMMITTED[2]]
    assert commit_as_admin(wire, "ga-cli-deloff", {(LIVE, 0): 1, (LIVE, 1): 1}) == {
        (LIVE, 0): ErrorCode.none, (LIVE, 1): ErrorCode.none}
    done = run_cli(group_broker, "delete-offsets", "ga-cli-deloff", f"{LIVE}:0", "--json")
    assert (done.returncode, json.loads(done.stdout)) == (0, {
        "groupId": "ga-cli-deloff", "error": None, "partitions": [{"topic": LIVE, "partition": 0, "error": None}]})
    assert {tp: f[0] for tp, f in fetch(wire, "ga-cli-deloff", None).items()} == {(LIVE, 1): 1}
    done = run_cli(group_broker, "delete-offsets", "ga-no-such-group", LIVE)
    assert done.returncode == 1 and "GROUP_ID_NOT_FOUND" in done.stderr


def test_cli_reset_offsets_is_a_dry_run_unless_executed_and_only_for_inactive_groups(live, group_broker, wire):
    group = "ga-cli-reset"
    assert commit_as_admin(wire, group, {(LIVE, 0): 1, (LIVE, 1): 1}) == {
        (LIVE, 0): ErrorCode.none, (LIVE, 1): ErrorCode.none}
    done = run_cli(group_broker, "reset-offsets", group, "--topic", f"{LIVE}:0,1", "--to-latest")
    assert done.returncode == 0 and "dry run" in done.stderr
    assert table(done.stdout) == (["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [
        [group, LIVE, "0", str(RECORDS[0])], [group, LIVE, "1", str(RECORDS[1])]])
    assert {tp: f[0] for tp, f in fetch(wire, group, None).items()} == {(LIVE, 0): 1, (LIVE, 1): 1}
    done = run_cli(group_broker, "reset-offsets", group, "--topic", LIVE, "--to-offset", "6", "--execute")
    assert done.returncode == 0
    clamped = {p: min(6, RECORDS[p]) for p in range(PARTITIONS)}
    assert [r[2:] for r in table(done.stdout)[1]] == [[str(p), str(o)] for p, o in clamped.items()]
    assert f"New offset (6) is higher than latest offset for topic partition {LIVE}-0. Value will be set to " \
           f"{RECORDS[0]}" in done.stderr
    assert {tp: f[0] for tp, f in fetch(wire, group, None).items()} == {(LIVE, p): o for p, o in clamped.items()}
    done = run_cli(group_broker, "reset-offsets", group, "--all-topics", "--to-earliest", "--execute", "--json")
    assert json.loads(done.stdout) == {"groupId": group, "executed": True, "offsets": [
        {"topic": LIVE, "partition": p, "newOffset": 0} for p in range(PARTITIONS)]}
    assert {tp: f[0] for tp, f in fetch(wire, group, None).items()} == {(LIVE, p): 0 for p in range(PARTITIONS)}
    done = run_cli(group_broker, "reset-offsets", LIVE, "--all-topics", "--to-earliest", "--execute")
    assert (done.returncode, done.stdout) == (1, "")
    assert f"Assignments can only be reset if the group '{LIVE}' is inactive, but the current state is Stable." \
        in done.stderr
    assert fetch(wire, LIVE, [(LIVE, 0)])[(LIVE, 0)][0] == COMMITTED[0]
    done = run_cli(group_broker, "reset-offsets", group, "--topic", f"{LIVE}:9", "--to-earliest")
    assert done.returncode == 1 and f"{LIVE}-9" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["list", "--bootstrap-server", "no-port"], "'no-port' is not host:port"),
    (["--describe"], "--describe needs --group or --all-groups"),
    (["--list", "--describe"], "exactly one action"),
    (["--bootstrap-server", "{}", "--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
     "expected YYYY-MM-DDTHH:mm:SS.sss"),
    (["--bootstrap-server", "{}", "--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"],
     "expected PnDTnHnMnS"),
    (["--bootstrap-server", "{}", "--delete-offsets", "--group", "g", "--group", "h", "--topic", "t"],
     "one --group at a time"),
    (["--bootstrap-server", "{}", "--list", "--all-groups"], "--all-groups goes with --describe, --delete or "
                                                            "--reset-offsets"),
    (["--bootstrap-server", "{}", "--describe", "--group", "g", "--to-latest"], "--to-latest goes with --reset"),
    (["--bootstrap-server", "{}", "--bogus"], "unrecognized arguments: --bogus"),
    (["--bootstrap-server", "{}", "describe"], "the following arguments are required: GROUP"),
    (["--bootstrap-server", "{}", "list", "--state", "Sleeping"], "no group state Sleeping"),
    (["--bootstrap-server", "{}", "describe", "g", "--members", "--state"], "not allowed with argument"),
    (["--bootstrap-server", "{}", "delete-offsets", "g"], "the following arguments are required"),
    (["--bootstrap-server", "{}", "delete-offsets", "g", "t:x"], "partitions must be comma-separated numbers"),
    (["--bootstrap-server", "{}", "reset-offsets", "g", "--to-earliest"],
     "give --topic (repeatable) or --all-topics"),
    (["--bootstrap-server", "{}", "reset-offsets", "g", "--all-topics"], "needs exactly one of --to-earliest"),
    (["--bootstrap-server", "{}", "reset-offsets", "g", "--all-topics", "--to-offset", "-3"], "must be >= 0"),
    (["--bootstrap-server", "{}", "reset-offsets", "g", "--all-topics", "--to-latest", "--execute", "--dry-run"],
     "--execute or --dry-run, not both"),
    (["--bootstrap-server", "no-port", "list"], "'no-port' is not host:port"),
])
def test_cli_bad_arguments_exit_2_with_a_message(group_broker, args, message):
    args = [a.format(group_broker.bootstrap) for a in args]
    done = subprocess.run([sys.executable, "-m", "logstore", "groups", *args], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert (done.returncode, done.stdout) == (2, "")
    assert message in done.stderr


def test_cli_without_a_broker_exits_2():
    address = f"127.0.0.1:{free_port()}"
    done = run_cli(address, "list")
    assert (done.returncode, done.stdout) == (2, "")
    assert f"no broker at {address}" in done.stderr and "refused" in done.stderr


# -- the APIs on the wire, at every version ---------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 6))
def test_describe_groups_at_every_version(live, wire, version):
    m = kio("describe_groups", version)
    response = wire.request(make(m.DescribeGroupsRequest, groups=(LIVE, "ga-no-such-group"),
                                 include_authorized_operations=False))
    group, unknown = response.groups
    assert (group.error_code, group.group_id, group.group_state, group.protocol_type, group.protocol_data) == (
        ErrorCode.none, LIVE, "Stable", "consumer", "range")
    members = {mb.member_id: mb for mb in group.members}
    assert set(members) == {c.memberid() for c in live.consumers}
    for i, c in enumerate(live.consumers):
        mb = members[c.memberid()]
        assert (mb.client_id, mb.client_host) == (CLIENT_IDS[i], "/127.0.0.1")
        assert decode_subscription(mb.member_metadata).topics == (LIVE,)
        assert decode_assignment(mb.member_assignment).partitions == (
            (LIVE, tuple(sorted(p for p, o in live.owner.items() if o == i))),)
        if version >= 4:  # static membership
            assert mb.group_instance_id == INSTANCE_IDS[i]
    assert (unknown.error_code, unknown.group_id, unknown.group_state, unknown.protocol_type, unknown.members) == (
        ErrorCode.none, "ga-no-such-group", "Dead", "", ())
    if version >= 3:
        assert group.authorized_operations == unknown.authorized_operations == UNKNOWN_OPERATIONS


@pytest.mark.parametrize("version", range(0, 5))
def test_list_groups_at_every_version(live, wire, version):
    empty = f"ga-w-list-v{version}"
    assert commit_as_admin(wire, empty, {(SPARE, 0): 1}) == {(SPARE, 0): ErrorCode.none}
    m = kio("list_groups", version)
    response = wire.request(m.ListGroupsRequest())
    assert response.error_code == ErrorCode.none
    listed = {g.group_id: g for g in response.groups}
    assert (listed[LIVE].protocol_type, listed[empty].protocol_type) == ("consumer", "")
    if version >= 4:
        assert (listed[LIVE].group_state, listed[empty].group_state) == ("Stable", "Empty")
        filtered = wire.request(m.ListGroupsRequest(states_filter=("Empty",)))
        names = {g.group_id for g in filtered.groups}
        assert empty in names and LIVE not in names
        assert {g.group_state for g in filtered.groups} == {"Empty"}
        both = wire.request(m.ListGroupsRequest(states_filter=("Stable", "Empty")))
        assert {LIVE, empty} <= {g.group_id for g in both.groups}


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups_at_every_version(live, wire, version):
    empty = f"ga-w-delete-v{version}"
    assert commit_as_admin(wire, empty, {(SPARE, 0): 1}) == {(SPARE, 0): ErrorCode.none}
    m = kio("delete_groups", version)
    response = wire.request(m.DeleteGroupsRequest(groups_names=(LIVE, "ga-no-such-group", empty)))
    assert [(r.group_id, r.error_code) for r in response.results] == [
        (LIVE, ErrorCode.non_empty_group), ("ga-no-such-group", ErrorCode.group_id_not_found),
        (empty, ErrorCode.none)]
    assert describe(wire, empty).group_state == "Dead"
    assert fetch(wire, empty, None) == {}
    assert describe(wire, LIVE).group_state == "Stable"
    again = wire.request(m.DeleteGroupsRequest(groups_names=(empty,)))
    assert [r.error_code for r in again.results] == [ErrorCode.group_id_not_found]


def test_offset_delete_refuses_subscribed_topics_and_unknown_groups(live, wire):
    m = kio("offset_delete", 0)

    def delete(group, partitions):
        by_topic: dict[str, list] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(m.OffsetDeleteRequestPartition(partition_index=p))
        response = wire.request(m.OffsetDeleteRequest(group_id=group, topics=tuple(
            m.OffsetDeleteRequestTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
        return response.error_code, {(t.name, p.partition_index): p.error_code
                                     for t in response.topics for p in t.partitions}

    live.commit(0, [TopicPartition(SPARE, 0, 3)])
    assert delete(LIVE, [(LIVE, 0), (SPARE, 0), ("ga-no-such-topic", 0), (SPARE, 5)]) == (ErrorCode.none, {
        (LIVE, 0): ErrorCode.group_subscribed_to_topic, (SPARE, 0): ErrorCode.none,
        ("ga-no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (SPARE, 5): ErrorCode.unknown_topic_or_partition})
    offsets = fetch(wire, LIVE, [(LIVE, 0), (SPARE, 0)])
    assert (offsets[(LIVE, 0)][0], offsets[(SPARE, 0)][0]) == (COMMITTED[0], -1)
    assert delete("ga-no-such-group", [(LIVE, 0)]) == (ErrorCode.group_id_not_found, {})
    assert commit_as_admin(wire, "ga-w-offdel", {(LIVE, 0): 1, (LIVE, 1): 2}) == {
        (LIVE, 0): ErrorCode.none, (LIVE, 1): ErrorCode.none}
    assert delete("ga-w-offdel", [(LIVE, 0)]) == (ErrorCode.none, {(LIVE, 0): ErrorCode.none}), \
        "an empty group subscribes to nothing"
    assert {tp: f[0] for tp, f in fetch(wire, "ga-w-offdel", None).items()} == {(LIVE, 1): 2}


def test_a_rebalancing_group_of_another_protocol_is_described_without_assignments(live, wire, group_broker):
    group = "ga-w-connect"
    assert commit_as_admin(wire, group, {(SPARE, 0): 6}) == {(SPARE, 0): ErrorCode.none}
    join = kio("join_group", 1)
    minute = i32Timedelta.parse(datetime.timedelta(seconds=60))
    joined = wire.request(join.JoinGroupRequest(
        group_id=group, session_timeout=minute, rebalance_timeout=minute, member_id="", protocol_type="connect",
        protocols=(join.JoinGroupRequestProtocol(name="default", metadata=b"worker-1"),)))
    assert (joined.error_code, joined.leader) == (ErrorCode.none, joined.member_id)
    # No SyncGroup yet: the group waits for its leader's assignment.
    described = describe(wire, group)
    assert (described.group_state, described.protocol_type, described.protocol_data) == (
        "CompletingRebalance", "connect", "")
    assert [(m.member_id, m.client_id, m.member_metadata, m.member_assignment) for m in described.members] == [
        (joined.member_id, wire.client_id, b"", b"")], "metadata and assignment only while Stable"
    done = run_cli(group_broker, "describe", group)
    assert done.returncode == 0 and f"Consumer group '{group}' is rebalancing." in done.stderr
    assert table(done.stdout)[1] == [[group, SPARE, "0", "6", str(SPARE_RECORDS), str(SPARE_RECORDS - 6), "-", "-",
                                      "-"]]
    done = run_cli(group_broker, "describe", group, "--members")
    assert table(done.stdout)[1] == [[group, joined.member_id, "-", "/127.0.0.1", wire.client_id, "0", "-"]]
    # Members that are not consumers subscribe to no topic Kafka can see: no offset of theirs can go.
    offset_delete = kio("offset_delete", 0)
    refused = wire.request(offset_delete.OffsetDeleteRequest(group_id=group, topics=(
        offset_delete.OffsetDeleteRequestTopic(name=SPARE, partitions=(
            offset_delete.OffsetDeleteRequestPartition(partition_index=0),)),)))
    assert (refused.error_code, refused.topics) == (ErrorCode.non_empty_group, ())
    delete = kio("delete_groups", 2)
    assert [r.error_code for r in wire.request(delete.DeleteGroupsRequest(groups_names=(group,))).results] == [
        ErrorCode.non_empty_group]
    leave = kio("leave_group", 0)
    assert wire.request(leave.LeaveGroupRequest(group_id=group, member_id=joined.member_id)).error_code == \
        ErrorCode.none
    assert describe(wire, group).group_state == "Empty"
    assert [r.error_code for r in wire.request(delete.DeleteGroupsRequest(groups_names=(group,))).results] == [
        ErrorCode.none]


def test_commit_metadata_over_offset_metadata_max_bytes_is_refused(live, wire):
    assert commit_as_admin(wire, "ga-w-metadata", {(LIVE, 0): 1}, metadata="m" * 4097) == {
        (LIVE, 0): ErrorCode.offset_metadata_too_large}
    assert commit_as_admin(wire, "ga-w-metadata", {(LIVE, 0): 1}, metadata="m" * 4096) == {
        (LIVE, 0): ErrorCode.none}
    assert fetch(wire, "ga-w-metadata", None)[(LIVE, 0)][:3] == (1, -1, "m" * 4096)


def test_the_empty_group_id_commits_fetches_and_deletes_as_in_kafka(live, wire):
    # Kafka's GroupCoordinatorService: "For backwards compatibility, we support offset commits for the
    # empty groupId" (and DeleteGroups, OffsetFetch, DescribeGroups); only JoinGroup and the like need a name.
    assert commit_as_admin(wire, "", {(LIVE, 0): 2}) == {(LIVE, 0): ErrorCode.none}
    assert fetch(wire, "", [(LIVE, 0)])[(LIVE, 0)][0] == 2
    delete = kio("delete_groups", 2)
    assert [r.error_code for r in wire.request(delete.DeleteGroupsRequest(groups_names=("",))).results] == [
        ErrorCode.none]


@pytest.mark.parametrize("version", range(2, 9))
def test_offset_commit_at_every_version(live, wire, version):
    group = f"ga-w-commit-v{version}"
    codes = commit_as_admin(wire, group, {(LIVE, 0): 3, (LIVE, 99): 1, ("ga-no-such-topic", 0): 1},
                            version=version, metadata=f"v{version}", leader_epoch=7)
    assert codes == {(LIVE, 0): ErrorCode.none, (LIVE, 99): ErrorCode.unknown_topic_or_partition,
                     ("ga-no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    epoch = 7 if version >= 6 else -1  # committed_leader_epoch is v6+
    assert fetch(wire, group, None) == {(LIVE, 0): (3, epoch, f"v{version}", ErrorCode.none)}
    # A group with members takes commits only from its members, in its generation.
    assert commit_as_admin(wire, LIVE, {(LIVE, 0): 0}, version=version) == {(LIVE, 0): ErrorCode.unknown_member_id}
    assert commit_as_admin(wire, LIVE, {(LIVE, 0): 0}, version=version, generation=1, member_id="ga-impostor") == {
        (LIVE, 0): ErrorCode.unknown_member_id}
    assert commit_as_admin(wire, "ga-w-commit-nosuch", {(LIVE, 0): 0}, version=version, generation=1,
                           member_id="ga-impostor") == {(LIVE, 0): ErrorCode.illegal_generation}
    assert fetch(wire, LIVE, [(LIVE, 0)])[(LIVE, 0)][0] == COMMITTED[0]


@pytest.mark.parametrize("version", range(1, 9))
def test_offset_fetch_at_every_version(live, wire, version):
    m = kio("offset_fetch", version)
    asked = (m.OffsetFetchRequestTopic if version < 8 else m.OffsetFetchRequestTopics)
    topics = (asked(name=LIVE, partition_indexes=tuple(range(PARTITIONS)) + (42,)),
              asked(name=OLD, partition_indexes=(0, 1)))
    expected = {**LIVE_OFFSETS, (LIVE, 42): -1, (OLD, 1): -1}

    def offsets(groups_or_response) -> dict:
        return {(t.name, p.partition_index): p.committed_offset for t in groups_or_response.topics
                for p in t.partitions if p.error_code == ErrorCode.none}

    if version < 8:
        response = wire.request(make(m.OffsetFetchRequest, group_id=LIVE, topics=topics, require_stable=True))
        assert offsets(response) == expected, "every partition asked, in order, -1 where none is committed"
        if version >= 2:
            assert response.error_code == ErrorCode.none
            everything = wire.request(make(m.OffsetFetchRequest, group_id=LIVE, topics=None))
            assert {tp: o for tp, o in offsets(everything).items() if tp[0] != SPARE} == LIVE_OFFSETS
            nobody = wire.request(make(m.OffsetFetchRequest, group_id="ga-no-such-group", topics=None))
            assert (nobody.error_code, nobody.topics) == (ErrorCode.none, ())
    else:
        response = wire.request(m.OffsetFetchRequest(groups=(
            m.OffsetFetchRequestGroup(group_id=LIVE, topics=topics),
            m.OffsetFetchRequestGroup(group_id=LIVE, topics=None),
            m.OffsetFetchRequestGroup(group_id="ga-no-such-group", topics=topics[:1])), require_stable=True))
        some, everything, nobody = response.groups
        assert [g.error_code for g in response.groups] == [ErrorCode.none] * 3
        assert offsets(some) == expected
        assert {tp: o for tp, o in offsets(everything).items() if tp[0] != SPARE} == LIVE_OFFSETS
        assert set(offsets(nobody).values()) == {-1}
