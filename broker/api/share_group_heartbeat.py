"""ShareGroupHeartbeat (76), v1: a KIP-932 share consumer joins, stays in, or leaves its share group.

Behavior:
- MemberEpoch 0 joins (SubscribedTopicNames required, non-empty), the
  member's epoch heartbeats, -1 leaves. The client makes its member id; an
  empty one is INVALID_REQUEST.
- The answer carries the member's epoch, the heartbeat interval (the group's
  `share.heartbeat.interval.ms`, else `group.share.heartbeat.interval.ms`)
  and, on a join or when it changed, its assignment by topic id. Partitions
  are shared: a new target is the member's at its next heartbeat, with no
  revocation phase.
- Fields left null are unchanged since the member's last heartbeat.
- Errors are Kafka's, with its messages: INVALID_REQUEST, UNKNOWN_MEMBER_ID,
  FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED (`group.share.max.size`),
  GROUP_ID_NOT_FOUND (the id is a classic or consumer group's, or an unknown
  group's with an epoch other than 0).
- Authorization (Kafka's KafkaApis): READ on the GROUP, else
  GROUP_AUTHORIZATION_FAILED; DESCRIBE on every subscribed TOPIC, else
  TOPIC_AUTHORIZATION_FAILED.

Version notes: v0 was Kafka 4.0's early-access version, which Kafka 4.1 no
longer serves; v1 is what Kafka 4.1/4.2 and librdkafka 2.16 speak.
"""
from __future__ import annotations

from functools import partial

from logstore.broker.api import KioMessage, Request, ResponsePayload, api
from logstore.broker.api.kit import coordinate
from logstore.broker.api.member_groups import heartbeat_answer, heartbeat_failed, heartbeat_refusal

KEY = 76


@api(KEY, 1, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Run the heartbeat through the group coordinator."""
    refused = heartbeat_refusal(request, body)
    if refused:
        return heartbeat_failed(KEY, request.version, refused)
    outcome = await coordinate(request, partial(
        request.broker.groups.share_group_heartbeat, body.group_id, body.member_id, body.member_epoch,
        rack_id=body.rack_id, subscribed_topic_names=body.subscribed_topic_names,
        client_id=request.client_id or "", client_host=request.client_host))
    return heartbeat_answer(KEY, request.version, outcome)
