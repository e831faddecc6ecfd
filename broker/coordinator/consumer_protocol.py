"""Kafka's ConsumerProtocol: the subscription and assignment blobs of a "consumer" group.

Members of a classic group pass the coordinator opaque bytes: a subscription
per protocol (assignor) in JoinGroup and, from the leader, an assignment per
member in SyncGroup. For protocolType "consumer" they are Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment (clients/.../
common/message), an int16 version then a non-flexible struct:

  Subscription v0  topics [string], userData nullable bytes
               v1  + ownedPartitions [topic string, partitions [int32]]
               v2  + generationId int32 (default -1)
               v3  + rackId nullable string (default null)
  Assignment v0-3  assignedPartitions [topic string, partitions [int32]],
                   userData nullable bytes

The coordinator decodes them where Kafka does, e.g. to learn which topics a
consumer group subscribes to. Both schemas promise that a new version only
appends fields, so, as Kafka's ConsumerProtocol does, a version above 3 is
read with the v3 layout and the bytes after the known fields are ignored
(trailing bytes are never an error here); only a negative version is refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from logstore.broker.coordinator.records import Reader, Writer
from logstore.errors import CorruptRecordError

HIGHEST_VERSION = 3

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Subscription:
    """A member's subscription; `version` is the layout written, or read (a newer one reads as 3)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = HIGHEST_VERSION


@dataclass(frozen=True)
class Assignment:
    """The partitions the leader gave one member; `version` as for `Subscription`."""

    partitions: TopicPartitions
    user_data: bytes | None = None
    version: int = HIGHEST_VERSION


def decode_subscription(data: bytes) -> Subscription:
    """A ConsumerProtocolSubscription of any version >= 0."""
    reader = Reader(data, "ConsumerProtocolSubscription")
    version = _read_version(reader)
    topics = tuple(reader.array(False, lambda: reader.string(False)))
    user_data = reader.bytes(False)
    owned = _read_partitions(reader) if version >= 1 else ()
    generation_id = reader.int(4) if version >= 2 else -1
    rack_id = reader.string(False, nullable=True) if version >= 3 else None
    return Subscription(topics, user_data, owned, generation_id, rack_id, version)


def encode_subscription(sub: Subscription) -> bytes:
    """ConsumerProtocolSubscription at `sub.version`; fields that version lacks are left out."""
    version = _check_version(sub.version)
    w = Writer().int(2, version).array_header(False, len(sub.topics))
    for topic in sub.topics:
        w.string(False, topic)
    w.bytes_(False, sub.user_data)
    if version >= 1:
        _write_partitions(w, sub.owned_partitions)
    if version >= 2:
        w.int(4, sub.generation_id)
    if version >= 3:
        w.string(False, sub.rack_id)
    return w.getvalue()


def decode_assignment(data: bytes) -> Assignment:
    """A ConsumerProtocolAssignment of any version >= 0; empty bytes are the empty assignment."""
    if not len(data):
        # SyncGroup gives a member the leader left out empty bytes, not an encoded empty assignment.
        return Assignment(())
    reader = Reader(data, "ConsumerProtocolAssignment")
    version = _read_version(reader)
    partitions = _read_partitions(reader)
    return Assignment(partitions, reader.bytes(False), version)


def encode_assignment(assignment: Assignment) -> bytes:
    """ConsumerProtocolAssignment at `assignment.version`."""
    w = Writer().int(2, _check_version(assignment.version))
    _write_partitions(w, assignment.partitions)
    return w.bytes_(False, assignment.user_data).getvalue()


def _read_version(reader: Reader) -> int:
    version = reader.int(2)
    if version < 0:
        raise CorruptRecordError(f"{reader.what} version {version} is negative")
    return min(version, HIGHEST_VERSION)


def _check_version(version: int) -> int:
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"ConsumerProtocol version {version} is not one of 0..{HIGHEST_VERSION}")
    return version


def _read_partitions(reader: Reader) -> TopicPartitions:
    def topic_partitions() -> tuple[str, tuple[int, ...]]:
        topic = reader.string(False)
        return topic, tuple(reader.array(False, lambda: reader.int(4)))

    return tuple(reader.array(False, topic_partitions))


def _write_partitions(w: Writer, partitions: TopicPartitions) -> None:
    w.array_header(False, len(partitions))
    for topic, ids in partitions:
        w.string(False, topic).array_header(False, len(ids))
        for p in ids:
            w.int(4, p)
