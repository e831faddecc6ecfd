"""What the group APIs share: the topics → partitions shape of the offset APIs' requests and answers,
with the partition checks Kafka makes before the coordinator (authorization, existence)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Never, TypeVar

from logstore.broker.api import KioMessage, Request, build, response_type
from logstore.broker.api.kit import AclOperation, Outcome, distinct_partitions, each_partition, refuse
from logstore.broker.protocol import ErrorCode

TopicPartition = tuple[str, int]
T = TypeVar("T")


def millis(duration: timedelta | int) -> int:
    """kio's duration fields (timedelta) in whole milliseconds."""
    return duration // timedelta(milliseconds=1) if isinstance(duration, timedelta) else int(duration)


def known_partitions(request: Request, topics: Iterable[KioMessage], offset_of: Callable[[KioMessage], T], *,
                     operation: AclOperation = AclOperation.READ, error: ErrorCode = ErrorCode.none
                     ) -> tuple[dict[TopicPartition, T], dict[TopicPartition, ErrorCode]]:
    """The asked partitions split into those the coordinator is asked about (→ offset_of(partition))
    and the codes of the others, as Kafka checks before the coordinator: a request-level `error`
    on all, TOPIC_AUTHORIZATION_FAILED for a topic the principal may not perform `operation` on,
    UNKNOWN_TOPIC_OR_PARTITION for one that does not exist."""
    count_of = request.broker.store.partition_count   # not topics(): a copy of every topic's count

    def check(topic: str, index: int, asked: KioMessage) -> T | Outcome[Never]:
        if not 0 <= index < count_of(topic):
            return refuse(ErrorCode.unknown_topic_or_partition)
        return offset_of(asked)

    found: dict[TopicPartition, T] = {}
    codes: dict[TopicPartition, ErrorCode] = {}
    for _, rows in each_partition(request, topics, check, operation=operation, error=error):
        for r in rows:
            if r.outcome.ok:
                found[(r.topic, r.index)] = r.outcome.result
            else:
                codes[(r.topic, r.index)] = r.error
    return found, codes


def partition_codes(key: int, version: int, prefix: str, topics: Iterable[KioMessage],
                    codes: dict[TopicPartition, ErrorCode]) -> tuple[KioMessage, ...]:
    """The answer's topics → partitions with an error code each, in the request's order
    (`prefix` names kio's classes: OffsetCommitResponseTopic, OffsetCommitResponsePartition, ...)."""
    topic_cls = response_type(key, version, f"{prefix}Topic")
    partition_cls = response_type(key, version, f"{prefix}Partition")
    # One row per distinct partition, as the kit answered them.
    return tuple(build(topic_cls, name=name, partitions=tuple(
        build(partition_cls, partition_index=index, error_code=codes.get((name, index), ErrorCode.none))
        for index, _ in partitions))
        for name, partitions in distinct_partitions(topics))


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, topics and partitions sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped
