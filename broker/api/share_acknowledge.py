"""ShareAcknowledge (79), v1-2: a share-group member accepts, releases, rejects or renews records it holds,
without fetching.

Behavior:
- The request moves the member's share session (epoch 0 cannot open one:
  INVALID_SHARE_SESSION_EPOCH; -1 closes it after the acknowledgements and
  releases what the member still holds). Acknowledgements are durable when
  answered.
- Each batch's AcknowledgeTypes is one type for its whole range or one per
  offset: 0 gap, 1 accept, 2 release, 3 reject, 4 renew. A partition whose
  batches name records the member does not hold answers INVALID_RECORD_STATE;
  an unknown topic id UNKNOWN_TOPIC_ID.
- Authorization (Kafka's KafkaApis): READ on the GROUP, else
  GROUP_AUTHORIZATION_FAILED; READ on each TOPIC, else its partitions answer
  TOPIC_AUTHORIZATION_FAILED.

Version notes: v2 (Kafka 4.2) adds IsRenewAck, and AcquisitionLockTimeoutMs to the
response (the group's record lock duration, 0 with a request-level error);
RENEW is honoured either way.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from kio.static.primitive import i32Timedelta

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.api.share_fetch import NO_LEADER, partition_acks, readable_topics
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 79


@api(KEY, 1, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Apply the acknowledgements in the member's session."""
    version = request.version
    response = response_type(KEY, version)
    lock_ms = 0

    def answer(error: ErrorCode, message: str | None = None, topics: tuple[KioMessage, ...] = ()) -> ResponsePayload:
        # v2's AcquisitionLockTimeoutMs: how long a RENEW acknowledgement extends the lock.
        return build(response, throttle_time=ZERO_MS, error_code=error, error_message=message,
                     acquisition_lock_timeout=i32Timedelta.parse(timedelta(milliseconds=lock_ms)),
                     responses=topics, node_endpoints=())

    group_id = body.group_id or ""
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, group_id)
    if refused:
        return answer(refused)
    acks = partition_acks(body.topics)
    readable, denied_ids = readable_topics(request, {a.topic_id for a in acks})
    outcome = await coordinate(request, request.broker.share.acknowledge, group_id, body.member_id or "",
                               body.share_session_epoch, [a for a in acks if a.topic_id in readable])
    if not outcome.ok:
        return answer(outcome.error, outcome.message)
    lock_ms = int(request.broker.group_setting(group_id, "share.record.lock.duration.ms"))
    errors = outcome.result
    partition_cls = response_type(KEY, version, "PartitionData")
    leader_cls = response_type(KEY, version, "LeaderIdAndEpoch")
    by_topic: dict[bytes, list[KioMessage]] = {}
    for ack in acks:
        if ack.topic_id in denied_ids:
            error = ErrorCode.topic_authorization_failed
        elif ack.topic_id not in readable:
            error = ErrorCode.unknown_topic_id
        else:
            error = ErrorCode(errors.get((ack.topic_id, ack.partition), 0))
        by_topic.setdefault(ack.topic_id, []).append(build(
            partition_cls, partition_index=ack.partition, error_code=error, error_message=None,
            current_leader=build(leader_cls, leader_id=NO_LEADER[0], leader_epoch=NO_LEADER[1])))
    topic_cls = response_type(KEY, version, "ShareAcknowledgeTopicResponse")
    return answer(ErrorCode.none, None, tuple(build(topic_cls, topic_id=uuid.UUID(bytes=tid), partitions=tuple(parts))
                                              for tid, parts in by_topic.items()))
