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

from collections.abc import Callable
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.member_groups import TopicRows, describe_groups

if TYPE_CHECKING:
    from logstore.broker.coordinator.consumer_groups import ConsumerGroupDescription

KEY = 69
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each group asked."""
    member_cls = response_type(KEY, request.version, "Member")

    def members(d: ConsumerGroupDescription, assignment: Callable[[TopicRows], KioMessage]
                ) -> tuple[KioMessage, ...]:
        return tuple(build(member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                           member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                           subscribed_topic_names=m.subscribed_topic_names,
                           subscribed_topic_regex=m.subscribed_topic_regex, assignment=assignment(m.assignment),
                           target_assignment=assignment(m.target_assignment),
                           member_type=CLASSIC_MEMBER if m.classic else CONSUMER_MEMBER)
                     for m in d.members)
    return await describe_groups(request, KEY, body.group_ids, request.broker.groups.consumer_group_describe,
                                 members)
