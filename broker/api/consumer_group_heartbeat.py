"""ConsumerGroupHeartbeat (68), v0-1: a KIP-848 consumer joins, stays in, or leaves its group.

Behavior:
- MemberEpoch 0 joins (RebalanceTimeoutMs, a subscription and an empty
  TopicPartitions are required), the member's epoch heartbeats, -1 leaves,
  -2 leaves a static member's place open for its next instance.
- The answer carries the member's epoch and, when it changed (or the request
  was a join or a full one), its assignment by topic id: the partitions it
  may read now. A partition another member still holds comes later.
- Fields left null are unchanged since the member's last heartbeat.
- Errors are Kafka's, with its messages: INVALID_REQUEST, UNKNOWN_MEMBER_ID,
  FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
  UNSUPPORTED_ASSIGNOR, GROUP_MAX_SIZE_REACHED, INVALID_REGULAR_EXPRESSION,
  GROUP_ID_NOT_FOUND (a classic group with members).
- Authorization (Kafka's KafkaApis): READ on the GROUP, else
  GROUP_AUTHORIZATION_FAILED; DESCRIBE on every subscribed TOPIC, else
  TOPIC_AUTHORIZATION_FAILED (a member may not learn of topics it cannot see).

Version notes: v1 (Kafka 4.0) makes the client generate its member id (an
empty one is INVALID_REQUEST) and adds SubscribedTopicRegex; v0's member id
may be empty on a join, and the coordinator makes one.
"""
from __future__ import annotations

from functools import partial

from logstore.broker.api import KioMessage, Request, ResponsePayload, api
from logstore.broker.api.group_calls import millis
from logstore.broker.api.kit import coordinate
from logstore.broker.api.member_groups import heartbeat_answer, heartbeat_failed, heartbeat_refusal

KEY = 68
CLIENT_MEMBER_ID = 1


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Run the heartbeat through the group coordinator."""
    version = request.version
    owned = None if body.topic_partitions is None else [
        (t.topic_id.bytes if t.topic_id is not None else bytes(16), tuple(t.partitions)) for t in body.topic_partitions]
    refused = heartbeat_refusal(request, body)
    if refused:
        return heartbeat_failed(KEY, version, refused)
    outcome = await coordinate(request, partial(
        request.broker.groups.consumer_group_heartbeat, body.group_id, body.member_id, body.member_epoch,
        instance_id=body.instance_id, rack_id=body.rack_id,
        rebalance_timeout_ms=millis(body.rebalance_timeout), subscribed_topic_names=body.subscribed_topic_names,
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor, owned=owned, client_id=request.client_id or "",
        client_host=request.client_host, member_id_required=version >= CLIENT_MEMBER_ID))
    return heartbeat_answer(KEY, version, outcome)
