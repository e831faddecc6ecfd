"""OffsetFetch (9), v1-9: a group's committed offsets.

A partition without a committed offset answers -1 with no error. No topics
(v2+) means every partition the group has an offset for. With
require_stable (v7+, read_committed consumers) a partition whose
transactional commit is still pending answers UNSTABLE_OFFSET_COMMIT, which
clients retry. v8 asks for several groups at once. v9 (KIP-848) may name a
consumer group's member and epoch, checked as Kafka checks them (the group
answers UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH); an admin names neither.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.api.group_calls import by_topic
from logstore.broker.coordinator.group_state import CommittedOffset
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 9
BATCHED = 8


async def _group_topics(request, group_id: str, topics, require_stable: bool, names: tuple[str, str],
                        member: tuple[str | None, int] = (None, -1)) -> tuple:
    asked = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    found = await request.broker.coordinate(request.broker.groups.fetch_offsets, group_id, asked, require_stable,
                                            *member)
    version = request.version
    topic_cls = response_type(KEY, version, names[0])
    partition_cls = response_type(KEY, version, names[1])
    rows = []
    for topic, partitions in (by_topic(found).items() if asked is None else _in_order(topics)):
        entries = []
        for p in partitions:
            value = found.get((topic, p))
            committed = value if isinstance(value, CommittedOffset) else None
            error = ErrorCode(value.code) if isinstance(value, LogStoreError) else ErrorCode.none
            entries.append(build(partition_cls, partition_index=p,
                                 committed_offset=committed.offset if committed else -1,
                                 committed_leader_epoch=committed.leader_epoch if committed else -1,
                                 metadata=committed.metadata if committed else "", error_code=error))
        rows.append(build(topic_cls, name=topic, partitions=tuple(entries)))
    return tuple(rows)


def _in_order(topics):
    return [(t.name, list(t.partition_indexes)) for t in topics]


@api(KEY, 1, 9)
async def handle(request, body):
    """The committed offsets of the partitions asked (or all of them)."""
    version = request.version
    stable = getattr(body, "require_stable", False)
    if version < BATCHED:
        topics = await _group_topics(request, body.group_id, body.topics, stable,
                                     ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition"))
        return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=topics, error_code=ErrorCode.none)
    group_cls = response_type(KEY, version, "OffsetFetchResponseGroup")
    groups = []
    for group in body.groups:
        member = (getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
        try:
            topics = await _group_topics(request, group.group_id, group.topics, stable,
                                         ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"), member)
        except LogStoreError as exc:
            groups.append(build(group_cls, group_id=group.group_id, topics=(), error_code=ErrorCode(exc.code)))
            continue
        groups.append(build(group_cls, group_id=group.group_id, topics=topics, error_code=ErrorCode.none))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, groups=tuple(groups))
