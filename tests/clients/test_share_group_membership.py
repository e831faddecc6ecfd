"""Share-group membership against a real broker process: confluent-kafka's ShareConsumer joins, splits the
partitions and leaves; raw ShareGroupHeartbeat/ShareGroupDescribe (kio) show Kafka's answers and errors;
ListGroups and DeleteGroups see share groups; the other kinds' calls on a share group's id are refused as
Kafka refuses them; and a share group survives a broker restart and follows its topics' growth."""
from __future__ import annotations

import time
import uuid
from datetime import timedelta

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from raw_wire import kio_round_trip

TIMEOUT = 30.0  # s


def create_topic(broker, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        future.result(TIMEOUT)


def heartbeat(broker, group: str, member: str, epoch: int, topics=None):
    return kio_round_trip(broker, 76, 1, ShareGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics), 1)


def describe(broker, *groups: str):
    return kio_round_trip(broker, 77, 1, ShareGroupDescribeRequest(group_ids=groups,
                                                                   include_authorized_operations=False), 2).groups


def listed(broker, *types: str):
    answer = kio_round_trip(broker, 16, 5, ListGroupsRequest(states_filter=(), types_filter=types), 3)
    return {(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in answer.groups}


def assigned(group) -> dict[str, set[tuple[str, int]]]:
    return {m.member_id: {(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions}
            for m in group.members}


def test_share_consumers_split_the_partitions_are_listed_and_leave(broker, topic):
    create_topic(broker, topic, 4)
    group = f"{topic}-share"
    consumers = [ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while True:
            for consumer in consumers:
                consumer.poll(0.1)
            (described,) = describe(broker, group)
            split = assigned(described)
            if len(split) == 2 and all(m.member_epoch == described.assignment_epoch for m in described.members):
                break
            assert time.monotonic() < deadline, f"the two members never settled: {described}"
        assert described.group_state == "Stable" and described.assignor_name == "simple"
        assert sorted(len(p) for p in split.values()) == [2, 2]
        assert set().union(*split.values()) == {(topic, p) for p in range(4)}
        assert all(m.subscribed_topic_names == (topic,) and m.client_host == "/127.0.0.1"
                   for m in described.members)
        assert (group, "share", "Stable", "share") in listed(broker, "share")
        assert group not in {g[0] for g in listed(broker, "consumer", "classic")}
    finally:
        for consumer in consumers:
            consumer.close()
    (described,) = describe(broker, group)
    assert described.group_state == "Empty" and described.members == ()
    deleted = kio_round_trip(broker, 42, 2, DeleteGroupsRequest(groups_names=(group,)), 4)
    assert deleted.results[0].error_code == ErrorCode.none
    (gone,) = describe(broker, group)
    assert (gone.error_code, gone.error_message) == (ErrorCode.group_id_not_found, f"Group {group} not found.")


def test_heartbeats_answer_kafkas_errors_and_other_kinds_of_calls_are_refused(broker, topic):
    create_topic(broker, topic, 2)
    group, member = f"{topic}-share", str(uuid.uuid4())
    assert heartbeat(broker, group, "", 0, (topic,)).error_code == ErrorCode.invalid_request
    assert heartbeat(broker, group, member, 0, ()).error_code == ErrorCode.invalid_request
    unknown = heartbeat(broker, group, member, 3)
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.group_id_not_found,
                                                           f"Share group {group} not found.")
    joined = heartbeat(broker, group, member, 0, (topic,))
    assert joined.error_code == ErrorCode.none and joined.member_epoch == 1
    assert joined.heartbeat_interval == timedelta(milliseconds=5_000)
    assert [sorted(t.partitions) for t in joined.assignment.topic_partitions] == [[0, 1]]
    assert heartbeat(broker, group, member, 1).assignment is None, "unchanged: no assignment"
    assert heartbeat(broker, group, member, 7).error_code == ErrorCode.fenced_member_epoch
    assert heartbeat(broker, group, str(uuid.uuid4()), 1).error_code == ErrorCode.unknown_member_id

    commit = kio_round_trip(broker, 8, 9, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=topic, partitions=(OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""),)),)), 5)
    assert commit.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found
    join = kio_round_trip(broker, 11, 7, JoinGroupRequest(
        group_id=group, session_timeout=timedelta(seconds=10), rebalance_timeout=timedelta(seconds=10),
        member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),)), 6)
    assert join.error_code == ErrorCode.inconsistent_group_protocol
    consumer = kio_round_trip(broker, 68, 1, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout=timedelta(seconds=10),
        subscribed_topic_names=(topic,), topic_partitions=()), 7)
    assert (consumer.error_code, consumer.error_message) == (ErrorCode.group_id_not_found,
                                                             f"Group {group} is not a consumer group.")

    # A group that has committed offsets (a classic one) is not a share group.
    simple = f"{topic}-simple"
    kio_round_trip(broker, 8, 9, OffsetCommitRequest(
        group_id=simple, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=topic, partitions=(OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""),)),)), 8)
    refused = heartbeat(broker, simple, member, 0, (topic,))
    assert (refused.error_code, refused.error_message) == (ErrorCode.group_id_not_found,
                                                           f"Group {simple} is not a share group.")
    (not_share,) = describe(broker, simple)
    assert not_share.error_message == f"Group {simple} is not a share group."

    nonempty = kio_round_trip(broker, 42, 2, DeleteGroupsRequest(groups_names=(group,)), 9)
    assert nonempty.results[0].error_code == ErrorCode.non_empty_group
    left = heartbeat(broker, group, member, -1)
    assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)


def test_a_share_group_survives_a_restart_and_follows_its_topics_growth(start_broker, topic):
    broker = start_broker()
    create_topic(broker, topic, 2)
    group, member = "restarting", str(uuid.uuid4())
    epoch = heartbeat(broker, group, member, 0, (topic,)).member_epoch
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
        future.result(TIMEOUT)
    grown = heartbeat(broker, group, member, epoch)
    assert grown.member_epoch == epoch + 1
    assert [sorted(t.partitions) for t in grown.assignment.topic_partitions] == [[0, 1, 2]]
    (before,) = describe(broker, group)
    broker.stop()
    broker.start()
    # The restarted broker loads its groups behind its listener: asked meanwhile, COORDINATOR_LOAD_IN_PROGRESS.
    deadline = time.monotonic() + 30
    while (after := describe(broker, group)[0]).error_code == ErrorCode.coordinator_load_in_progress:
        assert time.monotonic() < deadline, "the group never finished loading"
    assert after == before and after.group_state == "Stable"
    again = heartbeat(broker, group, member, grown.member_epoch)
    assert (again.error_code, again.member_epoch, again.assignment) == (ErrorCode.none, grown.member_epoch, None)
    assert heartbeat(broker, group, member, -1).error_code == ErrorCode.none
