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

from collections.abc import Callable
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.member_groups import TopicRows, describe_groups

if TYPE_CHECKING:
    from logstore.broker.coordinator.share_groups import ShareGroupDescription

KEY = 77


@api(KEY, 1, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each group asked."""
    member_cls = response_type(KEY, request.version, "Member")

    def members(d: ShareGroupDescription, assignment: Callable[[TopicRows], KioMessage]) -> tuple[KioMessage, ...]:
        return tuple(build(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                           client_id=m.client_id, client_host=m.client_host,
                           subscribed_topic_names=m.subscribed_topic_names, assignment=assignment(m.assignment))
                     for m in d.members)
    return await describe_groups(request, KEY, body.group_ids, request.broker.groups.share_group_describe, members)
