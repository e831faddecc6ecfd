"""The share-group admin APIs against a real broker: DescribeShareGroupOffsets (90), AlterShareGroupOffsets
(91), DeleteShareGroupOffsets (92), with confluent-kafka's ShareConsumer making the share state.

A share group's start offset (SPSO) moves as its members accept records; its
lag is what is left to deliver up to the high watermark. An empty group's
start offsets can be set, and its share state of a topic forgotten; a group
with members refuses both (NON_EMPTY_GROUP), and the ACLs are Kafka's.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_share_group_offsets.v0.request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from kio.schema.describe_share_group_offsets.v0.request import DescribeShareGroupOffsetsRequest as DescribeV0
from kio.schema.describe_share_group_offsets.v0.request import (
    DescribeShareGroupOffsetsRequestGroup as GroupV0,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from logstore.broker.admin_client import AdminClient
from logstore.broker.authorizer import STANDARD_AUTHORIZER, AclOperation, ResourceType
from logstore.broker.client_security import ClientSecurity
from logstore.broker.protocol import ErrorCode
from share_helpers import (
    TIMEOUT,
    commit,
    consume_until,
    create_topic,
    describe,
    produce_values,
    share_consumer,
    start_offsets,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from acl_wire import make  # noqa: E402
from broker_process import BrokerProcess, finish_brokers, free_port  # noqa: E402


def alter(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], client: AdminClient | None = None):
    """AlterShareGroupOffsets: the response."""
    topics: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
    for (topic, p), offset in offsets.items():
        topics.setdefault(topic, []).append(
            AlterShareGroupOffsetsRequestPartition(partition_index=i32(p), start_offset=i64(offset)))
    request = AlterShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
        AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()))
    if client is not None:
        return client.request(request)
    with AdminClient(bootstrap) as own:
        return own.request(request)


def delete(bootstrap: str, group: str, topics: list[str], client: AdminClient | None = None):
    """DeleteShareGroupOffsets: the response."""
    request = DeleteShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
        DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in topics))
    if client is not None:
        return client.request(request)
    with AdminClient(bootstrap) as own:
        return own.request(request)


def partition_errors(response) -> dict[tuple[str, int], int]:
    return {(t.topic_name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}


def member_count(bootstrap: str, group: str, client: AdminClient | None = None) -> int:
    """How many members ShareGroupDescribe shows (0 for an unknown group)."""
    from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
    request = ShareGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=False)
    if client is not None:
        (described,) = client.request(request).groups
    else:
        with AdminClient(bootstrap) as own:
            (described,) = own.request(request).groups
    return len(described.members)


def close_and_wait_for_leave(consumer, bootstrap: str, group: str, client: AdminClient | None = None) -> None:
    """Close a member and wait until its group no longer shows it (the leave may land after close returns)."""
    consumer.close()
    deadline = time.monotonic() + TIMEOUT
    while member_count(bootstrap, group, client):
        assert time.monotonic() < deadline, "the closed member never left"
        time.sleep(0.05)   # the leave lands in the broker process: no event to wait on from here


def join_and_wait_for_state(bootstrap: str, group: str, topic: str):
    """A subscribed share consumer that has fetched once: the group's share state of `topic` exists (at
    the log end, `share.auto.offset.reset=latest`)."""
    consumer = share_consumer(bootstrap, group, topic)
    deadline = time.monotonic() + TIMEOUT
    while (topic, 0) not in start_offsets(bootstrap, group):
        assert time.monotonic() < deadline, "the share consumer never fetched"
        consumer.poll(0.2)
    return consumer


def test_describe_shows_start_offset_and_lag_as_records_are_accepted(broker, topic):
    """The SPSO follows accepted records; lag counts what is left up to the high watermark."""
    create_topic(broker.bootstrap, topic)
    consumer = join_and_wait_for_state(broker.bootstrap, "described", topic)
    try:
        assert start_offsets(broker.bootstrap, "described") == {(topic, 0): (0, 0)}
        produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(30)))
        assert start_offsets(broker.bootstrap, "described") == {(topic, 0): (0, 30)}
        seen: list[int] = []
        consume_until(consumer, lambda: len(seen) >= 30, lambda m: seen.append(m.offset()))
        commit(consumer)
    finally:
        consumer.close()
    assert sorted(seen) == list(range(30))
    assert start_offsets(broker.bootstrap, "described") == {(topic, 0): (30, 0)}
    produce_values(broker.bootstrap, topic, [b"late"] * 4)
    assert start_offsets(broker.bootstrap, "described") == {(topic, 0): (30, 4)}
    # Named partitions: one without state, and a topic that does not exist, answer -1 without an error.
    answer = describe(broker.bootstrap, "described", {topic: [0], "no-such-topic": [0]})
    rows = {t.topic_name: (t.topic_id, [(p.partition_index, p.start_offset, p.leader_epoch, p.lag, p.error_code)
                                            for p in t.partitions]) for t in answer.topics}
    assert rows["no-such-topic"] == (None, [(0, -1, 0, -1, ErrorCode.none)])   # the zero id reads as None
    ((index, start, _, lag, error),) = rows[topic][1]
    assert (index, start, lag, error) == (0, 30, 4, ErrorCode.none)
    # v0 has no lag; an unknown group has no share state.
    with AdminClient(broker.bootstrap) as client:
        (old,) = client.request(DescribeV0(groups=(GroupV0(group_id=GroupId("described"), topics=None),))).groups
        (unknown,) = client.request(DescribeV0(groups=(GroupV0(group_id=GroupId("nobody"), topics=None),))).groups
    assert [(p.partition_index, p.start_offset) for t in old.topics for p in t.partitions] == [(0, 30)]
    assert (unknown.error_code, unknown.topics) == (ErrorCode.none, ())


def test_alter_sets_the_start_offset_of_an_empty_group_only(broker, topic):
    """A member present: NON_EMPTY_GROUP and nothing changes; once it left, the new SPSO is where the next
    member starts."""
    create_topic(broker.bootstrap, topic)
    consumer = join_and_wait_for_state(broker.bootstrap, "altered", topic)
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(10)))
    try:
        refused = alter(broker.bootstrap, "altered", {(topic, 0): 7})
        # The group's error is the answer's and each partition's (Kafka's getErrorResponse fills them all).
        assert refused.error_code == ErrorCode.non_empty_group
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in refused.responses] == [(topic, [(0, ErrorCode.non_empty_group)])]
        assert start_offsets(broker.bootstrap, "altered")[(topic, 0)][0] == 0
    finally:
        close_and_wait_for_leave(consumer, broker.bootstrap, "altered")
    done = alter(broker.bootstrap, "altered", {(topic, 0): 7, (topic, 3): 1, ("no-such-topic", 0): 1})
    assert done.error_code == ErrorCode.none
    assert partition_errors(done) == {(topic, 0): ErrorCode.none, (topic, 3): ErrorCode.unknown_topic_or_partition,
                                      ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    assert start_offsets(broker.bootstrap, "altered") == {(topic, 0): (7, 3)}
    again = share_consumer(broker.bootstrap, "altered", topic)
    seen: list[int] = []
    try:
        consume_until(again, lambda: len(seen) >= 3, lambda m: seen.append(m.offset()))
        commit(again)
    finally:
        again.close()
    assert sorted(seen) == [7, 8, 9]


def test_alter_a_group_that_does_not_exist_yet(broker, topic):
    """Kafka 4.2 sets a new group's offsets (its first member starts there); a classic group's id is refused."""
    create_topic(broker.bootstrap, topic)
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(6)))
    assert alter(broker.bootstrap, "fresh", {(topic, 0): 4}).error_code == ErrorCode.none
    assert start_offsets(broker.bootstrap, "fresh", {topic: [0]}) == {(topic, 0): (4, 2)}
    consumer = share_consumer(broker.bootstrap, "fresh", topic)
    seen: list[int] = []
    try:
        consume_until(consumer, lambda: len(seen) >= 2, lambda m: seen.append(m.offset()))
    finally:
        consumer.close()
    assert sorted(seen) == [4, 5]
    classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic-one",
                        "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    try:
        deadline = time.monotonic() + TIMEOUT
        while not classic.assignment():
            assert time.monotonic() < deadline, "the classic consumer never joined"
            classic.poll(0.2)
        refused = alter(broker.bootstrap, "classic-one", {(topic, 0): 0})
        assert refused.error_code == ErrorCode.group_id_not_found
        assert "not a share group" in refused.error_message
    finally:
        classic.close()
    assert alter(broker.bootstrap, "", {(topic, 0): 0}).error_code == ErrorCode.invalid_group_id


def test_delete_offsets_forgets_the_topic_of_an_empty_group(broker, topic):
    """The deleted topic's state is gone (describe: -1); a topic without state, an unknown topic and an
    unknown group are Kafka's errors."""
    create_topic(broker.bootstrap, topic)
    other = topic[:180] + "-other"
    create_topic(broker.bootstrap, other)
    consumer = join_and_wait_for_state(broker.bootstrap, "forgetful", topic)
    try:
        refused = delete(broker.bootstrap, "forgetful", [topic])
        assert refused.error_code == ErrorCode.non_empty_group
    finally:
        close_and_wait_for_leave(consumer, broker.bootstrap, "forgetful")
    done = delete(broker.bootstrap, "forgetful", [topic, other, "no-such-topic"])
    assert done.error_code == ErrorCode.none
    results = {t.topic_name: (t.error_code, t.error_message) for t in done.responses}
    assert results == {topic: (ErrorCode.none, None),
                       other: (ErrorCode.unknown_topic_or_partition, "There is no offset information to delete."),
                       "no-such-topic": (ErrorCode.unknown_topic_or_partition, None)}
    assert start_offsets(broker.bootstrap, "forgetful") == {}
    assert start_offsets(broker.bootstrap, "forgetful", {topic: [0]}) == {(topic, 0): (-1, -1)}
    assert delete(broker.bootstrap, "never-was", [topic]).error_code == ErrorCode.group_id_not_found


ADMIN = ClientSecurity("SASL_PLAINTEXT", mechanism="PLAIN", username="admin", password="admin-secret")
ADMIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'


@pytest.fixture
def secured(tmp_path):
    """A broker with the StandardAuthorizer: (admin client as the super user, client address for
    User:ANONYMOUS)."""
    started: list[BrokerProcess] = []
    admin_port, client_port = free_port(), free_port()
    broker = BrokerProcess("127.0.0.1", admin_port, tmp_path, (
        f"listeners=ADMIN://127.0.0.1:{admin_port},CLIENT://127.0.0.1:{client_port}",
        "listener.security.protocol.map=ADMIN:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
        "listener.name.admin.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.admin.plain.sasl.jaas.config={ADMIN_JAAS}",
        f"authorizer.class.name={STANDARD_AUTHORIZER}", "super.users=User:admin",
        # A member's leave under ACLs may only land at its session's end: a short one keeps the test short.
        "group.share.min.session.timeout.ms=2000", "group.share.session.timeout.ms=2000",
        "group.share.min.heartbeat.interval.ms=500", "group.share.heartbeat.interval.ms=500"))
    started.append(broker)
    broker.start()
    with AdminClient(f"127.0.0.1:{admin_port}", security=ADMIN) as admin:
        yield admin, f"127.0.0.1:{client_port}"
    finish_brokers(started)


def allow(admin: AdminClient, resource_type: ResourceType, name: str, operation: AclOperation) -> None:
    from kio.index import load_request_schema
    response = admin.request(make(load_request_schema(30, 3), creations=[{
        "resource_type": int(resource_type), "resource_name": name, "resource_pattern_type": 3,
        "principal": "User:ANONYMOUS", "host": "*", "operation": int(operation), "permission_type": 3}]))
    assert [r.error_code for r in response.results] == [ErrorCode.none]


def test_acls_are_kafkas(secured):
    """Describe: DESCRIBE on the group and topics; alter: READ on both; delete: DELETE on the group, READ on
    the topics."""
    admin, bootstrap = secured
    from kio.index import load_request_schema
    created = admin.request(make(load_request_schema(19, 5), topics=[
        {"name": "guarded", "num_partitions": 1, "replication_factor": 1}], timeout=30_000))
    assert [t.error_code for t in created.topics] == [ErrorCode.none]
    assert describe(bootstrap, "acl-group").error_code == ErrorCode.group_authorization_failed
    assert alter(bootstrap, "acl-group", {("guarded", 0): 0}).error_code == ErrorCode.group_authorization_failed
    assert delete(bootstrap, "acl-group", ["guarded"]).error_code == ErrorCode.group_authorization_failed
    allow(admin, ResourceType.GROUP, "acl-group", AclOperation.READ)
    allow(admin, ResourceType.GROUP, "acl-group", AclOperation.DELETE)
    denied = alter(bootstrap, "acl-group", {("guarded", 0): 0})
    assert partition_errors(denied) == {("guarded", 0): ErrorCode.topic_authorization_failed}
    allow(admin, ResourceType.TOPIC, "guarded", AclOperation.READ)
    allow(admin, ResourceType.TOPIC, "guarded", AclOperation.DESCRIBE)
    assert partition_errors(alter(bootstrap, "acl-group", {("guarded", 0): 0})) == {("guarded", 0): ErrorCode.none}
    # READ implies DESCRIBE (Kafka's rule), so the group and topic may now be described.
    assert start_offsets(bootstrap, "acl-group") == {("guarded", 0): (0, 0)}
    # A member that came and went makes the (empty) group the coordinator knows, whose offsets are deleted.
    member = share_consumer(bootstrap, "acl-group", "guarded")
    deadline = time.monotonic() + TIMEOUT
    while member_count(bootstrap, "acl-group", admin) == 0:
        assert time.monotonic() < deadline, "the share consumer never joined"
        member.poll(0.2)
    close_and_wait_for_leave(member, bootstrap, "acl-group", admin)
    deleted = delete(bootstrap, "acl-group", ["guarded", "hidden"])
    assert [(t.topic_name, t.error_code) for t in deleted.responses] == [
        ("guarded", ErrorCode.none), ("hidden", ErrorCode.topic_authorization_failed)]
