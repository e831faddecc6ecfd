"""What the `__consumer_offsets` records of KIP-848 consumer groups (consumer_group_log.py) and KIP-932
share groups (share_group_log.py) share: the key, the value framing and the partition lists.

A key is the record type (int16, standing where a version would), the group id (string) and, for the
three types of a family that belong to one member (member metadata, target assignment member, current
assignment), the member id (string); keys are never flexible. A value is version 0, flexible (compact
lengths, a tagged-field section closing each struct). A partition list is [TopicId uuid, Partitions
[int32]]: topics are named by id (16 bytes), as in Kafka, and a topic deleted since is left out.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from logstore.broker.coordinator.records import Reader, Writer
from logstore.errors import CorruptRecordError

VALUE_VERSION = 0

TopicPartition = tuple[str, int]
TopicIds = Callable[[str], bytes | None]   # topic name -> its 16-byte id (None: the topic is gone)
TopicNames = Callable[[bytes], str | None]  # id -> name
Records = list[tuple[bytes, bytes | None]]


@dataclass(frozen=True)
class GroupKey:
    """The key of a group record: its type, group and (for member records) member."""

    record_type: int
    group: str
    member: str | None = None

    @property
    def member_id(self) -> str:
        """The member of a member record (whose keys `RecordFamily.decode_key` always gives one)."""
        if self.member is None:
            raise ValueError(f"a record of type {self.record_type} for group {self.group!r} names no member")
        return self.member


class Member(Protocol):
    """What the records of a member depend on."""

    def metadata_key(self) -> object:
        """What its member-metadata record holds: a change of it is a record to write."""
        ...

    def assignment_key(self) -> object:
        """What its current-assignment record holds."""
        ...


M = TypeVar("M", bound=Member)
M_co = TypeVar("M_co", bound=Member, covariant=True)


class Group(Protocol[M_co]):
    """What the records of a group's members and target assignment depend on."""

    @property
    def members(self) -> Mapping[str, M_co]: ...
    @property
    def target(self) -> Mapping[str, frozenset[TopicPartition]]: ...
    @property
    def assignment_epoch(self) -> int: ...


class Loading(Protocol):
    """A group being loaded: what the target records set."""

    assignment_epoch: int
    target: dict[str, frozenset[TopicPartition]]


@dataclass(frozen=True)
class RecordFamily:
    """The record types of one kind of group: the range they take, the three keyed by a member, and the
    target assignment's epoch."""

    first: int
    last: int
    member_metadata: int
    target_member: int
    current_assignment: int
    target_epoch: int

    @property
    def member_types(self) -> tuple[int, int, int]:
        """The member-keyed types, in the order Kafka writes a member's tombstones."""
        return self.current_assignment, self.target_member, self.member_metadata

    def encode_key(self, key: GroupKey) -> bytes:
        """The key bytes (its version is the record type)."""
        w = Writer().int(2, key.record_type).string(False, key.group)
        if key.record_type in self.member_types:
            w.string(False, key.member)
        return w.getvalue()

    def decode_key(self, data: bytes) -> GroupKey | None:
        """A key of this family, or None for another record type."""
        reader = Reader(data, "__consumer_offsets key")
        record_type = reader.int(2)
        if not self.first <= record_type <= self.last:
            return None
        group = reader.string(False)
        member = reader.string(False) if record_type in self.member_types else None
        reader.end()
        return GroupKey(record_type, group, member)

    def writer(self, group_id: str) -> RecordWriter:
        """Collects the records of one change of `group_id`."""
        return RecordWriter(self, group_id)

    def replay_target(self, g: Loading, key: GroupKey, value: bytes | None, what: str,
                      topic_names: TopicNames) -> bool:
        """Apply a target-assignment record (epoch or member) to `g`; whether `key` is one."""
        if key.record_type == self.target_epoch:
            if value is not None:   # its tombstone comes with the group's: the group's epoch record decides
                g.assignment_epoch = read_epoch(value, what)
        elif key.record_type == self.target_member:
            if value is None:
                g.target.pop(key.member_id, None)
            else:
                g.target[key.member_id] = read_target(value, what, topic_names)
        else:
            return False
        return True


class RecordWriter:
    """The (key, value) records one change of a group writes, in the order they are put."""

    def __init__(self, family: RecordFamily, group_id: str):
        self.family = family
        self.group_id = group_id
        self.records: Records = []

    def put(self, record_type: int, value: bytes | None, member: str | None = None) -> None:
        """One record (value None: a tombstone)."""
        self.records.append((self.family.encode_key(GroupKey(record_type, self.group_id, member)), value))

    def group_tombstones(self, member_ids: Iterable[str]) -> None:
        """The member records of a group that is gone: type by type, as Kafka's
        createGroupTombstoneRecords orders them (the group's own records follow)."""
        ids = list(member_ids)
        for record_type in self.family.member_types:
            for member_id in ids:
                self.put(record_type, None, member_id)

    def member_tombstones(self, member_ids: Iterable[str]) -> None:
        """The records of members that left a group that stays, member by member."""
        for member_id in member_ids:
            for record_type in self.family.member_types:
                self.put(record_type, None, member_id)

    def member_metadata(self, old: Group[M], new: Group[M], value: Callable[[M], bytes]) -> None:
        """The metadata of each member that joined, or changed it."""
        for member_id, m in new.members.items():
            was = old.members.get(member_id)
            if was is None or was.metadata_key() != m.metadata_key():
                self.put(self.family.member_metadata, value(m), member_id)

    def targets(self, old: Group[M], new: Group[M], topic_ids: TopicIds) -> None:
        """The target of each member whose target changed, or who is new."""
        for member_id, partitions in new.target.items():
            if old.target.get(member_id) != partitions or member_id not in old.members:
                self.put(self.family.target_member, target_value(partitions, topic_ids), member_id)

    def target_epoch(self, old: Group[M], new: Group[M]) -> None:
        """The target assignment's epoch, if it moved."""
        if new.assignment_epoch != old.assignment_epoch:
            self.put(self.family.target_epoch, epoch_value(new.assignment_epoch))

    def assignments(self, old: Group[M], new: Group[M], value: Callable[[M], bytes]) -> None:
        """The current assignment of each member that joined, or whose assignment changed."""
        for member_id, m in new.members.items():
            was = old.members.get(member_id)
            if was is None or was.assignment_key() != m.assignment_key():
                self.put(self.family.current_assignment, value(m), member_id)


# -- values ------------------------------------------------------------------------------------------

_UUID = struct.Struct(">qq")


def put_uuid(w: Writer, topic_id: bytes) -> Writer:
    """A 16-byte topic id, as Kafka's uuid field (two int64)."""
    high, low = _UUID.unpack(topic_id)
    return w.int(8, high).int(8, low)


def read_uuid(reader: Reader) -> bytes:
    """A uuid field as 16 bytes."""
    return _UUID.pack(reader.int(8), reader.int(8))


def value_writer() -> Writer:
    """A value's writer, its version written."""
    return Writer().int(2, VALUE_VERSION)


def value_reader(data: bytes, what: str) -> Reader:
    """A value's reader past its version, which must be 0."""
    reader = Reader(data, what)
    version = reader.int(2)
    if version != VALUE_VERSION:
        raise CorruptRecordError(f"{what} version {version} is not 0")
    return reader


def by_topic(partitions: Iterable[TopicPartition], topic_ids: TopicIds) -> list[tuple[bytes, str, list[int]]]:
    """(topic id, name, sorted partitions) of each topic that still has an id, in name order."""
    grouped: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        grouped.setdefault(topic, []).append(p)
    return [(topic_id, t, ps) for t, ps in grouped.items() if (topic_id := topic_ids(t)) is not None]


def put_partitions(w: Writer, partitions: Iterable[TopicPartition], topic_ids: TopicIds) -> None:
    """A partition list."""
    rows = by_topic(partitions, topic_ids)
    w.array_header(True, len(rows))
    for topic_id, _, ps in rows:
        put_uuid(w, topic_id).array_header(True, len(ps))
        for p in ps:
            w.int(4, p)
        w.tagged_fields()


def read_partitions(reader: Reader, topic_names: TopicNames) -> frozenset[TopicPartition]:
    """A partition list, less the topics deleted since."""
    def entry() -> tuple[bytes, list[int]]:
        topic_id = read_uuid(reader)
        ps = reader.array(True, lambda: reader.int(4))
        reader.tagged_fields()
        return topic_id, ps
    found: set[TopicPartition] = set()
    for topic_id, ps in reader.array(True, entry):
        name = topic_names(topic_id)
        if name is not None:
            found.update((name, p) for p in ps)
    return frozenset(found)


def epoch_value(epoch: int) -> bytes:
    """A value holding one epoch (int32): a target assignment's, a consumer group's."""
    return value_writer().int(4, epoch).tagged_fields().getvalue()


def read_epoch(value: bytes, what: str) -> int:
    """The epoch of an `epoch_value`."""
    reader = value_reader(value, what)
    epoch = reader.int(4)
    reader.tagged_fields()
    reader.end()
    return epoch


def target_value(partitions: Iterable[TopicPartition], topic_ids: TopicIds) -> bytes:
    """A target assignment member's value: its partitions."""
    w = value_writer()
    put_partitions(w, partitions, topic_ids)
    return w.tagged_fields().getvalue()


def read_target(value: bytes, what: str, topic_names: TopicNames) -> frozenset[TopicPartition]:
    """The partitions of a `target_value`."""
    reader = value_reader(value, what)
    partitions = read_partitions(reader, topic_names)
    reader.tagged_fields()
    reader.end()
    return partitions
