"""DescribeShareGroupOffsets (90), v0-1: each share-partition's start offset (SPSO), leader epoch and lag.

Behavior:
- Groups are answered one by one. Topics null: every partition the group
  has share state for (topics whose id no longer names a topic are left
  out). Topics empty: none. Named partitions without share state, of an
  unknown group or of a topic that does not exist (topic id zero), answer
  start offset -1, leader epoch 0 and lag -1 with no error, as Kafka treats
  them as the absence of data.
- Lag (v1, Kafka 4.2's): the partition's high watermark minus the start
  offset minus the records past the start offset whose delivery is complete
  (acknowledged or archived); -1 where there is no share state.
- Authorization (Kafka's KafkaApis): DESCRIBE on the GROUP, else the group
  answers GROUP_AUTHORIZATION_FAILED; DESCRIBE on each TOPIC: a named topic
  refused answers TOPIC_AUTHORIZATION_FAILED on its partitions, and with
  topics null the refused ones are left out.

Version notes: v1 (Kafka 4.2) adds Lag.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, coordinate, denied, error_code
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.share.types import DeliveryState
from logstore.errors import LogStoreError

if TYPE_CHECKING:
    from logstore.broker.context import BrokerContext
    from logstore.broker.share.types import ShareState

KEY = 90
UNINITIALIZED = -1
DEFAULT_LEADER_EPOCH = 0
ZERO_ID = uuid.UUID(int=0)
_COMPLETE = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One share-partition's row: start offset, leader epoch, lag (-1: unknown), and what failed (a refusal's
    code, or the error its log raised)."""

    partition: int
    start_offset: int = UNINITIALIZED
    leader_epoch: int = DEFAULT_LEADER_EPOCH
    lag: int = UNINITIALIZED
    refused: ErrorCode = ErrorCode.none
    failed: LogStoreError | None = None


def share_lag(state: ShareState, high_watermark: int) -> int:
    """Records from the start offset to the high watermark not yet delivered for good (Kafka 4.2's lag:
    end offset - start offset - delivery-complete count), never below 0."""
    complete = sum(max(0, min(b.last_offset, high_watermark - 1) - max(b.first_offset, state.start_offset) + 1)
                   for b in state.batches if b.delivery_state in _COMPLETE)
    return max(0, high_watermark - state.start_offset - complete)


def _row(broker: BrokerContext, state: ShareState | None, topic: str, partition: int) -> PartitionOffsets:
    if state is None or state.start_offset < 0:
        return PartitionOffsets(partition)
    try:
        high_watermark = broker.store.log(topic, partition).high_watermark
    except LogStoreError as exc:
        return PartitionOffsets(partition, state.start_offset, state.leader_epoch, failed=exc)
    return PartitionOffsets(partition, state.start_offset, state.leader_epoch, share_lag(state, high_watermark))


def group_offsets(broker: BrokerContext, group_id: str, asked: Mapping[str, Iterable[int]] | None
                  ) -> dict[str, tuple[bytes | None, list[PartitionOffsets]]]:
    """The rows of one group, by topic name with its id (None: no such topic); `asked` None for every
    partition with share state. Runs in the coordinator pool (it reads share state and logs)."""
    states = broker.share.partitions.group_states(group_id)
    out: dict[str, tuple[bytes | None, list[PartitionOffsets]]] = {}
    if asked is None:
        for (_, topic_id, partition), state in sorted(states.items(), key=lambda item: item[0][1:]):
            topic = broker.share.topic_name(topic_id)
            if topic is not None:
                out.setdefault(topic, (topic_id, []))[1].append(_row(broker, state, topic, partition))
        for _, rows in out.values():
            rows.sort(key=lambda r: r.partition)
        return out
    existing = broker.store.topics()
    for topic, partitions in asked.items():
        if topic not in existing:
            out[topic] = (None, [PartitionOffsets(p) for p in partitions])
            continue
        topic_id = broker.store.topic_id(topic)
        out[topic] = (topic_id, [_row(broker, states.get((group_id, topic_id, p)), topic, p) for p in partitions])
    return out


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each group's share-partition offsets."""
    version = request.version
    group_cls = response_type(KEY, version, "DescribeShareGroupOffsetsResponseGroup")
    groups = []
    for group in body.groups:
        refused = denied(request, AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id)
        if refused:
            groups.append(build(group_cls, group_id=group.group_id, topics=(), error_code=refused,
                                error_message=None))
            continue
        groups.append(await _describe(request, group))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, groups=tuple(groups))


async def _describe(request: Request, group: KioMessage) -> KioMessage:
    version = request.version
    group_cls = response_type(KEY, version, "DescribeShareGroupOffsetsResponseGroup")
    topic_cls = response_type(KEY, version, "DescribeShareGroupOffsetsResponseTopic")
    partition_cls = response_type(KEY, version, "DescribeShareGroupOffsetsResponsePartition")
    asked: dict[str, list[int]] | None = None
    refused: dict[str, list[int]] = {}
    if group.topics is not None:
        names = [t.topic_name for t in group.topics]
        allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        asked = {}
        for t in group.topics:
            (asked if t.topic_name in allowed else refused).setdefault(t.topic_name, []).extend(t.partitions)
        # A topic or partition named twice is answered once, as Kafka's maps of the request make it.
        asked = {topic: list(dict.fromkeys(ps)) for topic, ps in asked.items()}
        refused = {topic: list(dict.fromkeys(ps)) for topic, ps in refused.items()}
    outcome = await coordinate(request, group_offsets, request.broker, group.group_id, asked)
    if not outcome.ok:
        return build(group_cls, group_id=group.group_id, topics=(), error_code=outcome.error,
                     error_message=outcome.message)
    found = outcome.result
    if asked is None:
        allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, found)
        found = {topic: rows for topic, rows in found.items() if topic in allowed}
    found.update({topic: (None, [PartitionOffsets(p, refused=ErrorCode.topic_authorization_failed) for p in ps])
                  for topic, ps in refused.items()})

    def partition(row: PartitionOffsets) -> KioMessage:
        error = row.refused if row.failed is None else error_code(request, row.failed)
        return build(partition_cls, partition_index=row.partition, start_offset=row.start_offset,
                     leader_epoch=row.leader_epoch, lag=row.lag, error_code=error,
                     error_message=None if row.failed is None else str(row.failed))

    topics = tuple(build(topic_cls, topic_name=topic,
                         topic_id=ZERO_ID if topic_id is None else uuid.UUID(bytes=topic_id),
                         partitions=tuple(partition(r) for r in rows))
                   for topic, (topic_id, rows) in found.items())
    return build(group_cls, group_id=group.group_id, topics=topics, error_code=ErrorCode.none, error_message=None)
