"""ShareGroupDescribe (77), v1: state, epochs, assignor and members of KIP-932 share groups.

Behavior:
- A share group is Empty (no members) or Stable; its assignor is "simple".
  Each member shows its id, rack, client id and host, subscribed topic
  names, member epoch and current assignment (topics by id and name).
- An unknown id answers GROUP_ID_NOT_FOUND ("Group ... not found."), a
  classic or consumer group's id GROUP_ID_NOT_FOUND ("Group ... is not a
  share group."), with Kafka's messages.
- A group the principal may not DESCRIBE answers GROUP_AUTHORIZATION_FAILED
  (Kafka's KafkaApis). Authorized operations are "not requested".

Version notes: v0 was Kafka 4.0's early-access version; v1 is Kafka 4.1/4.2's.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, error_code
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.broker.coordinator.share_groups import ShareGroupDescription

KEY = 77
UNKNOWN_OPERATIONS = -2147483648


@api(KEY, 1, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each group asked."""
    version = request.version
    allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.GROUP, body.group_ids)
    asked = [g for g in body.group_ids if g in allowed]
    described: dict[str, ShareGroupDescription] = {d.group_id: d for d in await request.broker.coordinate(
        request.broker.groups.share_group_describe, asked)}
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
        members = tuple(build(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                              client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=m.subscribed_topic_names, assignment=assignment(m.assignment))
                        for m in d.members)
        groups.append(build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=d.group_id,
                            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
                            assignor_name=d.assignor_name, members=members, authorized_operations=UNKNOWN_OPERATIONS))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, groups=tuple(groups))
