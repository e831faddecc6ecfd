"""What the admin tools ask a broker, shared by `logstore topics`, `groups` and `get-offsets`.

Each function sends one request over a blocking `AdminClient` and returns
plain values: topics with their partitions (Metadata), offsets for a
timestamp (ListOffsets), a group's committed offsets (OffsetFetch). A
broker error is a `BrokerError` naming Kafka's error, or (where a caller
reports errors per item) the `ErrorCode` in the item's place.

`TopicFilter` is Kafka's IncludeList: the `--topic` regular expression of
kafka-topics and kafka-get-offsets, matched against the whole name, with
`,` meaning `|`.
"""
from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.transactions_cli import BrokerError, UsageError

if TYPE_CHECKING:
    from kio.schema.list_offsets.v7.response import ListOffsetsResponse
    from kio.schema.metadata.v12.response import MetadataResponse
    from kio.schema.offset_fetch.v8.response import OffsetFetchResponse

__all__ = ["EARLIEST", "LATEST", "MAX_TIMESTAMP", "INTERNAL_TOPICS", "PartitionInfo", "TopicInfo", "TopicFilter",
           "TopicPartition", "check", "committed_offsets", "describe_topics", "list_offsets", "parse_partitions",
           "topic_partitions"]

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3  # ListOffsets' special timestamps
READ_UNCOMMITTED = i8(0)
# Kafka's Topic.isInternal: the topics --exclude-internal leaves out.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

TopicPartition = tuple[str, int]


def parse_partitions(spec: str) -> tuple[str, list[int] | None]:
    """`TOPIC` (all partitions: None) or `TOPIC:P[,P...]`, as Kafka's --topic; ValueError if malformed."""
    topic, sep, partitions = spec.partition(":")
    if not topic:
        raise ValueError(f"{spec!r}: no topic name")
    if not sep:
        return topic, None
    try:
        numbers = [int(p) for p in partitions.split(",")]
    except ValueError:
        raise ValueError(f"{spec!r}: partitions must be comma-separated numbers") from None
    if any(p < 0 for p in numbers):
        raise ValueError(f"{spec!r}: a partition must be >= 0")
    return topic, sorted(set(numbers))


def check(code: int, what: str) -> None:
    """Raise `BrokerError` ("what: KAFKA_ERROR") unless `code` is NONE."""
    if code != ErrorCode.none:
        raise BrokerError(f"{what}: {error_name(code)}")


class TopicFilter:
    """Kafka's IncludeList: a regular expression over whole topic names (`,` is `|`, quotes and spaces dropped)."""

    def __init__(self, raw: str):
        text = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|").replace(" ", "")))
        self.text = text
        try:
            self.pattern = re.compile(text)
        except re.error:
            raise UsageError(f"{text} is an invalid regex.") from None

    def allows(self, topic: str, exclude_internal: bool = False) -> bool:
        """Whether `topic` matches as a whole (and is not internal, when those are excluded)."""
        return self.pattern.fullmatch(topic) is not None and not (exclude_internal and topic in INTERNAL_TOPICS)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as Metadata shows it: leader (None without one), replicas, in-sync replicas."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None


@dataclass(frozen=True)
class TopicInfo:
    """One topic as Metadata shows it, partitions in order."""

    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionInfo, ...]


def describe_topics(client: AdminClient, names: Iterable[str] | None = None) -> dict[str, TopicInfo | ErrorCode]:
    """Metadata of `names` (None: every topic, internal ones too): each topic, or the error given for it."""
    wanted = None if names is None else tuple(
        MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in sorted(set(names)))
    if wanted == ():
        return {}
    response: MetadataResponse = client.request(MetadataRequest(
        topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    found: dict[str, TopicInfo | ErrorCode] = {}
    for t in response.topics:
        if t.name is None:
            continue
        if t.error_code != ErrorCode.none:
            found[t.name] = ErrorCode(t.error_code)
            continue
        partitions = tuple(sorted(
            (PartitionInfo(p.partition_index, p.leader_id if p.leader_id >= 0 else None, tuple(p.replica_nodes),
                           tuple(p.isr_nodes), None if p.error_code == ErrorCode.none else error_name(p.error_code))
             for p in t.partitions), key=lambda p: p.partition))
        topic_id = None if t.topic_id is None or t.topic_id.int == 0 else t.topic_id
        found[t.name] = TopicInfo(t.name, topic_id, t.is_internal, partitions)
    return found


def topic_partitions(client: AdminClient, topics: Iterable[str]) -> dict[str, int | ErrorCode]:
    """Each topic's partition count, or the error Metadata gave for it (UNKNOWN_TOPIC_OR_PARTITION, ...)."""
    return {name: info if isinstance(info, ErrorCode) else len(info.partitions)
            for name, info in describe_topics(client, topics).items()}


def list_offsets(client: AdminClient, partitions: Iterable[TopicPartition],
                 timestamp: int) -> dict[TopicPartition, int | ErrorCode]:
    """Each partition's offset for `timestamp` (EARLIEST, LATEST, MAX_TIMESTAMP or ms since the epoch: -1
    when no record is that late), or the error the broker gave; read_uncommitted, as Kafka's tools ask."""
    by_topic: defaultdict[str, list[ListOffsetsPartition]] = defaultdict(list)
    for topic, p in sorted(set(partitions)):
        by_topic[topic].append(ListOffsetsPartition(partition_index=i32(p), timestamp=i64(timestamp)))
    if not by_topic:
        return {}
    response: ListOffsetsResponse = client.request(ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=READ_UNCOMMITTED, topics=tuple(
            ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    return {(t.name, p.partition_index): p.offset if p.error_code == ErrorCode.none else ErrorCode(p.error_code)
            for t in response.topics for p in t.partitions}


def offsets_at(client: AdminClient, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
    """`list_offsets` of partitions that must all answer: an error is a `BrokerError` naming the partition."""
    found = list_offsets(client, partitions, timestamp)
    offsets: dict[TopicPartition, int] = {}
    for tp in partitions:
        value = found.get(tp, ErrorCode.unknown_topic_or_partition)
        if isinstance(value, ErrorCode):
            raise BrokerError(f"Failed to list the offsets of {tp[0]}-{tp[1]}: {error_name(value)}")
        offsets[tp] = value
    return offsets


def named_partitions(client: AdminClient, specs: Iterable[str]) -> list[TopicPartition]:
    """The partitions TOPIC[:P,...] arguments name (a bare topic: all of its partitions), sorted; a topic or
    partition that does not exist is a `BrokerError`, as the reset tools of Kafka check before asking."""
    parsed = [parse_partitions(spec) for spec in specs]
    counts = topic_partitions(client, {topic for topic, _ in parsed})
    partitions: set[TopicPartition] = set()
    for topic, asked in parsed:
        count = counts.get(topic, ErrorCode.unknown_topic_or_partition)
        if isinstance(count, ErrorCode):
            raise BrokerError(f"Failed to describe topic {topic}: {error_name(count)}")
        beyond = [p for p in asked or () if p >= count]
        if beyond:
            raise BrokerError(f"Failed to describe partitions {', '.join(f'{topic}-{p}' for p in beyond)}: "
                              f"{error_name(ErrorCode.unknown_topic_or_partition)}")
        partitions |= {(topic, p) for p in (range(count) if asked is None else asked)}
    return sorted(partitions)


def committed_offsets(client: AdminClient, group_id: str) -> dict[TopicPartition, tuple[int, int | None]]:
    """Every offset the group has: (offset, leader epoch or None)."""
    response: OffsetFetchResponse = client.request(OffsetFetchRequest(
        groups=(OffsetFetchRequestGroup(group_id=GroupId(group_id), topics=None),), require_stable=False))
    found: dict[TopicPartition, tuple[int, int | None]] = {}
    for group in response.groups:
        check(group.error_code, f"Failed to fetch the offsets of group '{group_id}'")
        for topic in group.topics:
            for p in topic.partitions:
                check(p.error_code, f"Failed to fetch the offset of group '{group_id}' for {topic.name}-"
                                    f"{p.partition_index}")
                if p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None
                    found[(topic.name, p.partition_index)] = (p.committed_offset, epoch)
    return found
