"""ShareFetch (78), v1-2: a share-group member's records, each offset acquired under a time-limited lock.

Behavior:
- The request moves the member's share session (epoch 0 opens it with the
  partitions named, later epochs add and forget partitions, -1 closes it and
  releases what the member holds); its acknowledgement batches are applied
  before records are acquired, and both are durable before the answer (one
  `__share_group_state` write per partition for the two).
- Records come from every partition of the session, at most about
  MaxRecords in all (whole batches) and MaxBytes; if none can be acquired
  the request waits up to MaxWaitMs for an append or a release on one of
  them. Each partition answers its batches' bytes and the AcquiredRecords
  ranges (with their delivery counts) that are the member's to acknowledge;
  AcquisitionLockTimeoutMs says how long it holds them.
- Errors: SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
  SHARE_SESSION_LIMIT_REACHED, INVALID_REQUEST (no member id) for the whole
  request; UNKNOWN_TOPIC_ID per partition; an acknowledgement refused is the
  partition's AcknowledgeErrorCode (INVALID_RECORD_STATE for records the
  member does not hold).
- Authorization (Kafka's KafkaApis): READ on the GROUP, else
  GROUP_AUTHORIZATION_FAILED; READ on each TOPIC, else its partitions answer
  TOPIC_AUTHORIZATION_FAILED and are not fetched.

Version notes: v2 (Kafka 4.2) adds ShareAcquireMode and IsRenewAck; both are
taken as v1's behaviour (batch-optimized acquisition; RENEW types honoured).
"""
from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from kio.static.primitive import i32Timedelta

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.share.coordinator import PartitionAck
from logstore.broker.share.manager import Acquired
from logstore.broker.share.sessions import FINAL_EPOCH

KEY = 78
NO_LEADER = (-1, -1)


def partition_acks(topics: tuple[KioMessage, ...]) -> list[PartitionAck]:
    """The acknowledgement batches of a ShareFetch or ShareAcknowledge, by topic id and partition."""
    return [PartitionAck(t.topic_id.bytes if t.topic_id is not None else bytes(16), p.partition_index,
                         tuple((b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                               for b in p.acknowledgement_batches))
            for t in topics for p in t.partitions]


def readable_topics(request: Request, topic_ids: set[bytes]) -> tuple[set[bytes], set[bytes]]:
    """Which of the request's topic ids exist and may be read: (readable, refused); unknown ids are in
    neither."""
    share = request.broker.share
    names = {tid: share.topic_name(tid) for tid in topic_ids}
    known = {tid: name for tid, name in names.items() if name is not None}
    allowed = authorized(request, AclOperation.READ, ResourceType.TOPIC, set(known.values()))
    readable = {tid for tid, name in known.items() if name in allowed}
    return readable, set(known) - readable


@api(KEY, 1, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Acknowledge, then acquire records from the member's session, long-polled."""
    version = request.version
    response = response_type(KEY, version)
    lock_ms = 0

    def answer(error: ErrorCode, message: str | None = None, topics: tuple[KioMessage, ...] = ()) -> ResponsePayload:
        return build(response, throttle_time=ZERO_MS, error_code=error, error_message=message,
                     acquisition_lock_timeout=i32Timedelta.parse(timedelta(milliseconds=lock_ms)),
                     responses=topics, node_endpoints=())

    group_id = body.group_id or ""
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, group_id)
    if refused:
        return answer(refused)
    share = request.broker.share
    asked = [(t.topic_id.bytes if t.topic_id is not None else bytes(16), p.partition_index)
             for t in body.topics for p in t.partitions]
    readable, denied_ids = readable_topics(request, {tid for tid, _ in asked})
    forgotten = [(t.topic_id.bytes if t.topic_id is not None else bytes(16), p)
                 for t in body.forgotten_topics_data for p in t.partitions]
    acks = [a for a in partition_acks(body.topics) if a.topic_id in readable]
    if body.share_session_epoch == FINAL_EPOCH and any(not a.batches for a in partition_acks(body.topics)):
        return answer(ErrorCode.invalid_request, "A final ShareFetch may only acknowledge")
    opened = await coordinate(request, share.open_fetch, group_id, body.member_id or "",
                              body.share_session_epoch, [a for a in asked if a[0] in readable], forgotten, acks,
                              body.max_records, body.max_bytes)
    if not opened.ok:
        return answer(opened.error, opened.message)
    lock_ms = int(request.broker.group_setting(group_id, "share.record.lock.duration.ms"))
    fetched: dict[tuple[bytes, int], Acquired | int] = opened.result.acquired
    fetch = opened.result.fetch
    if fetch and body.max_records > 0 and not fetched:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + body.max_wait.total_seconds()
        request.waiting()
        while True:
            remaining = deadline - loop.time()
            gone = request.gone
            if remaining <= 0 or request.broker.closing or (gone is not None and gone.done()):
                break
            await request.broker.wait_for_appends({(name, p) for _, name, p in fetch}, remaining, gone)
            got = await coordinate(request, share.acquire, group_id, body.member_id, fetch, body.max_records,
                                   body.max_bytes)
            if not got.ok:
                return answer(got.error, got.message)
            fetched = got.result
            if fetched:
                break
    return answer(ErrorCode.none, None, _topics(version, asked, readable, denied_ids, opened.result.acks, fetched))


def _topics(version: int, asked: list[tuple[bytes, int]], readable: set[bytes], denied_ids: set[bytes],
            acks: dict[tuple[bytes, int], int], fetched: dict[tuple[bytes, int], Acquired | int]
            ) -> tuple[KioMessage, ...]:
    """The response's topics: every partition asked, acknowledged or with records."""
    partition_cls = response_type(KEY, version, "PartitionData")
    leader_cls = response_type(KEY, version, "LeaderIdAndEpoch")
    acquired_cls = response_type(KEY, version, "AcquiredRecords")
    topic_cls = response_type(KEY, version, "ShareFetchableTopicResponse")
    keys = list(dict.fromkeys([*asked, *acks, *fetched]))
    by_topic: dict[bytes, list[KioMessage]] = {}
    for topic_id, index in keys:
        got = fetched.get((topic_id, index))
        error = ErrorCode.none
        if topic_id in denied_ids:
            error = ErrorCode.topic_authorization_failed
        elif topic_id not in readable and (topic_id, index) not in fetched:
            error = ErrorCode.unknown_topic_id
        if isinstance(got, int):
            error = ErrorCode(got)
        records = got.records if isinstance(got, Acquired) else b""
        ranges = tuple(build(acquired_cls, first_offset=r.first_offset, last_offset=r.last_offset,
                             delivery_count=r.delivery_count)
                       for r in (got.ranges if isinstance(got, Acquired) else ()))
        by_topic.setdefault(topic_id, []).append(build(
            partition_cls, partition_index=index, error_code=error, error_message=None,
            acknowledge_error_code=acks.get((topic_id, index), 0), acknowledge_error_message=None,
            current_leader=build(leader_cls, leader_id=NO_LEADER[0], leader_epoch=NO_LEADER[1]),
            records=records, acquired_records=ranges))
    return tuple(build(topic_cls, topic_id=uuid.UUID(bytes=topic_id), partitions=tuple(parts))
                 for topic_id, parts in by_topic.items())
