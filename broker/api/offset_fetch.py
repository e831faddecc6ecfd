"""OffsetFetch (9), v1-9: a group's committed offsets.

A partition without a committed offset answers -1 with no error. No topics
(v2+) means every partition the group has an offset for. With
require_stable (v7+, read_committed consumers) a partition whose
transactional commit is still pending answers UNSTABLE_OFFSET_COMMIT, which
clients retry. v8 asks for several groups at once. v9 (KIP-848) may name a
consumer group's member and epoch, checked as Kafka checks them (the group
answers UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH); an admin names neither.

Authorization (Kafka's KafkaApis): DESCRIBE on the GROUP, else
GROUP_AUTHORIZATION_FAILED (v1: on every partition, v2-7: at the top, v8+:
on the group); DESCRIBE on each TOPIC asked, else TOPIC_AUTHORIZATION_FAILED
on its partitions; asked for every topic, those it may not see are left out.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.group_calls import by_topic
from logstore.broker.api.kit import (
    AclOperation,
    Outcome,
    ResourceType,
    Shape,
    authorized,
    coordinate,
    denied,
    distinct_partitions,
    each_partition,
    error_code,
)
from logstore.broker.coordinator.group_state import CommittedOffset
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 9
TOP_LEVEL_ERROR = 2
BATCHED = 8
SHAPE = Shape(partitions="partition_indexes", index=None)


async def _group_topics(request: Request, group_id: str, topics: Sequence[KioMessage] | None, require_stable: bool,
                        names: tuple[str, str], member: tuple[str | None, int] = (None, -1)
                        ) -> Outcome[tuple[KioMessage, ...]]:
    """The group's rows of topics → partitions (or the error of the whole group)."""
    refused = denied(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
    if refused:
        return Outcome(error=refused)
    codes: dict[tuple[str, int], ErrorCode] = {}
    asked = None
    if topics is not None:
        checked = each_partition(request, topics, lambda *_: None, operation=AclOperation.DESCRIBE, shape=SHAPE)
        codes = {(r.topic, r.index): r.error for _, rows in checked for r in rows if not r.outcome.ok}
        asked = [(r.topic, r.index) for _, rows in checked for r in rows if r.outcome.ok]
    outcome = await coordinate(request, request.broker.groups.fetch_offsets, group_id, asked, require_stable,
                               *member)
    if not outcome.ok:
        return Outcome(None, outcome.error, outcome.message, outcome.exc)  # the same failure, with no rows
    found = outcome.result
    version = request.version
    topic_cls = response_type(KEY, version, names[0])
    partition_cls = response_type(KEY, version, names[1])
    if topics is None:  # asked for every partition the group has
        grouped = by_topic(found)
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, grouped)
        listed = [(topic, partitions) for topic, partitions in grouped.items() if topic in visible]
    else:
        listed = [(name, [index for index, _ in rows]) for name, rows in distinct_partitions(topics, SHAPE)]
    rows = []
    for topic, partitions in listed:
        entries = []
        for p in partitions:
            value = found.get((topic, p))
            committed = value if isinstance(value, CommittedOffset) else None
            error = codes.get((topic, p)) or error_code(request, value if isinstance(value, LogStoreError) else None)
            entries.append(build(partition_cls, partition_index=p,
                                 committed_offset=committed.offset if committed else -1,
                                 committed_leader_epoch=committed.leader_epoch if committed else -1,
                                 metadata=committed.metadata if committed else "", error_code=error))
        rows.append(build(topic_cls, name=topic, partitions=tuple(entries)))
    return Outcome(tuple(rows))


def _failed_v1(version: int, topics: Iterable[KioMessage] | None, error: ErrorCode) -> tuple[KioMessage, ...]:
    """v1 has no group-level error: every partition asked carries it."""
    partition_cls = response_type(KEY, version, "OffsetFetchResponsePartition")
    return tuple(build(response_type(KEY, version, "OffsetFetchResponseTopic"), name=name, partitions=tuple(
        build(partition_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
              error_code=error) for p, _ in rows)) for name, rows in distinct_partitions(topics or (), SHAPE))


@api(KEY, 1, 9)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """The committed offsets of the partitions asked (or all of them)."""
    version = request.version
    stable = getattr(body, "require_stable", False)
    if version < BATCHED:
        outcome = await _group_topics(request, body.group_id, body.topics, stable,
                                      ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition"))
        if outcome.ok:
            topics = outcome.result
        else:
            topics = _failed_v1(version, body.topics, outcome.error) if version < TOP_LEVEL_ERROR else ()
        return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=topics, error_code=outcome.error)
    group_cls = response_type(KEY, version, "OffsetFetchResponseGroup")
    groups = []
    for group in body.groups:
        member = (getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
        outcome = await _group_topics(request, group.group_id, group.topics, stable,
                                      ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"), member)
        groups.append(build(group_cls, group_id=group.group_id, topics=outcome.value or (), error_code=outcome.error))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, groups=tuple(groups))
