"""What the group APIs share: calling the group coordinator, and the topics → partitions shape
of the offset APIs' requests and answers."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Callable, Iterable

from logstore.broker.api import build, response_type
from logstore.broker.protocol import ErrorCode
from logstore.errors import LogStoreError

TopicPartition = tuple[str, int]


def millis(duration) -> int:
    """kio's duration fields (timedelta) in whole milliseconds."""
    return duration // timedelta(milliseconds=1) if isinstance(duration, timedelta) else int(duration)


async def held(request, call: Callable, *args) -> Any:
    """Run a coordinator call whose answer is a future (JoinGroup, SyncGroup) and wait for that answer."""
    future = await request.broker.coordinate(call, *args)
    return await asyncio.wrap_future(future)


def code_of(error: LogStoreError | None) -> ErrorCode:
    """NONE, or the Kafka code of a coordinator's error."""
    return ErrorCode.none if error is None else ErrorCode(error.code)


def known_partitions(request, topics, offset_of: Callable | None = None):
    """The asked partitions split into those that exist (→ offset_of(partition), or None) and an
    UNKNOWN_TOPIC_OR_PARTITION code for the others, as Kafka checks before the coordinator."""
    existing = request.broker.store.topics()
    found: dict[TopicPartition, Any] = {}
    codes: dict[TopicPartition, ErrorCode] = {}
    for topic in topics:
        for p in topic.partitions:
            index = p.partition_index
            tp = (topic.name, index)
            if 0 <= index < existing.get(topic.name, 0):
                found[tp] = offset_of(p) if offset_of is not None else None
            else:
                codes[tp] = ErrorCode.unknown_topic_or_partition
    return found, codes


def partition_codes(key: int, version: int, prefix: str, topics, codes: dict[TopicPartition, ErrorCode]) -> tuple:
    """The answer's topics → partitions with an error code each, in the request's order
    (`prefix` names kio's classes: OffsetCommitResponseTopic, OffsetCommitResponsePartition, ...)."""
    topic_cls = response_type(key, version, f"{prefix}Topic")
    partition_cls = response_type(key, version, f"{prefix}Partition")
    return tuple(build(topic_cls, name=t.name, partitions=tuple(
        build(partition_cls, partition_index=p.partition_index,
              error_code=codes.get((t.name, p.partition_index), ErrorCode.none)) for p in t.partitions))
        for t in topics)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, topics and partitions sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped
