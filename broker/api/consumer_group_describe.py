"""ConsumerGroupDescribe (69), v0-1: state, epochs, assignor and members of KIP-848 consumer groups.

Behavior:
- Each member shows its epoch, subscription, current assignment and target
  assignment (topics by id and name).
- A group that does not exist, or is a classic group, answers
  GROUP_ID_NOT_FOUND with Kafka's message ("... is not a consumer group."),
  which is how admin clients know to fall back to DescribeGroups.
- A group the principal may not DESCRIBE answers GROUP_AUTHORIZATION_FAILED
  (Kafka's KafkaApis). Authorized operations are "not requested".

Version notes: v1 adds MemberType (1: a member of the consumer protocol, 0: a
classic member that stayed in, or joined, through online migration).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, error_code
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.broker.coordinator.consumer_groups import ConsumerGroupDescription

KEY = 69
UNKNOWN_OPERATIONS = -2147483648
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each group asked."""
    version = request.version
    allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.GROUP, body.group_ids)
    asked = [g for g in body.group_ids if g in allowed]
    described: dict[str, ConsumerGroupDescription] = {d.group_id: d for d in await request.broker.coordinate(
        request.broker.groups.consumer_group_describe, asked)}
    group_cls = response_type(KEY, version, "DescribedGroup")
    member_cls = response_type(KEY, version, "Member")
    assignment_cls = response_type(KEY, version, "Assignment")
    partitions_cls = response_type(KEY, version, "TopicPartitions")

    def assignment(rows: Iterable[tuple[bytes, str, tuple[int, ...]]]) -> KioMessage:
        return build(assignment_cls, topic_partitions=tuple(
            build(partitions_cls, topic_id=uuid.UUID(bytes=topic_id), topic_name=name, partitions=partitions)
            for topic_id, name, partitions in rows))

    groups = []
    for group_id in body.group_ids:
        d = described.get(group_id)
        if d is None or d.error is not None:
            error = ErrorCode.group_authorization_failed if d is None else error_code(request, d.error)
            groups.append(build(group_cls, error_code=error, error_message=None if d is None else str(d.error),
                                group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                                assignor_name="", members=(), authorized_operations=UNKNOWN_OPERATIONS))
            continue
        members = tuple(build(member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                              member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=m.subscribed_topic_names,
                              subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assignment),
                              target_assignment=assignment(m.target_assignment),
                              member_type=CLASSIC_MEMBER if m.classic else CONSUMER_MEMBER)
                        for m in d.members)
        groups.append(build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=d.group_id,
                            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
                            assignor_name=d.assignor_name, members=members,
                            authorized_operations=UNKNOWN_OPERATIONS))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, groups=tuple(groups))
