"""`__share_group_state` records: Kafka's ShareSnapshot and ShareUpdate, as Kafka 4.2's share coordinator
writes them (share-coordinator/src/main/resources/common/message/Share*.json).

A key is its record type (int16: 0 snapshot, 1 update), then a non-flexible struct: GroupId string
(int16 length), TopicId uuid (16 bytes), Partition int32. The two types differ in their first bytes,
so compaction keeps the newest snapshot and the newest update of a share-partition side by side.
A value is its version (int16, 0), then a flexible struct (compact arrays, a tagged-field section
closing every struct):

  ShareSnapshotValue  SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32, StartOffset int64,
                      CreateTimestamp int64, WriteTimestamp int64, StateBatches [FirstOffset int64,
                      LastOffset int64, DeliveryState int8, DeliveryCount int16],
                      tag 0 DeliveryCompleteCount int32 (default -1, KIP-1226)
  ShareUpdateValue    SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1: unchanged),
                      StateBatches [as above], tag 0 DeliveryCompleteCount int32 (default -1)

A null value is a tombstone. Unknown tags are skipped, so a later Kafka's additions load; a damaged
record raises `CorruptRecordError`.
"""
from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace

from logstore.broker.coordinator.records import Reader, Writer
from logstore.broker.share.types import DeliveryState, SharePartitionKey, ShareState, StateBatch
from logstore.errors import CorruptRecordError

SNAPSHOT, UPDATE = 0, 1   # the record types (a key's version)
VALUE_VERSION = 0
DELIVERY_COMPLETE_COUNT_TAG = 0
UNKNOWN_COUNT = -1   # DeliveryCompleteCount's default: not written
_UUID = struct.Struct(">qq")
_I32 = struct.Struct(">i")
_DONE = (DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """A ShareSnapshotValue: the whole state of a share-partition; timestamps in ms."""

    snapshot_epoch: int
    state: ShareState
    create_timestamp: int
    write_timestamp: int
    delivery_complete_count: int = UNKNOWN_COUNT


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """A ShareUpdateValue: batches laid over the state so far (Kafka's combiner), a new start offset
    (-1: unchanged) and leader epoch, under the snapshot epoch of the snapshot it follows."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int = UNKNOWN_COUNT


def delivery_complete_count(state: ShareState) -> int:
    """Offsets at or past the start offset whose delivery is complete (acknowledged or archived)."""
    return sum(b.last_offset - max(b.first_offset, state.start_offset) + 1 for b in state.batches
               if b.delivery_state in _DONE and b.last_offset >= state.start_offset)


# -- laying batches over each other ------------------------------------------------------------------

def combine(batches: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """Kafka's PersisterStateBatchCombiner: the batches cut below `start_offset` (-1: none cut), and
    where they overlap, the one with the higher (delivery count, delivery state) wins; touching runs
    of the same count and state become one. Sorted and non-overlapping."""
    kept = []
    for b in batches:
        if start_offset != -1 and b.first_offset < start_offset:
            if b.last_offset < start_offset:
                continue
            b = replace(b, first_offset=start_offset)
        if b.first_offset <= b.last_offset:
            kept.append(b)
    kept.sort(key=lambda b: b.first_offset)
    points = sorted({b.first_offset for b in kept} | {b.last_offset + 1 for b in kept})
    # The batches covering the current stretch, highest priority first; ended ones leave lazily.
    covering: list[tuple[int, int, int, StateBatch]] = []
    out: list[StateBatch] = []
    i = 0
    for low, high in zip(points, points[1:]):
        while i < len(kept) and kept[i].first_offset <= low:
            b = kept[i]
            heapq.heappush(covering, (-b.delivery_count, -int(b.delivery_state), i, b))
            i += 1
        while covering and covering[0][3].last_offset < low:
            heapq.heappop(covering)
        if not covering:
            continue
        top = covering[0][3]
        last = out[-1] if out else None
        if (last is not None and last.last_offset + 1 == low and last.delivery_state == top.delivery_state
                and last.delivery_count == top.delivery_count):
            out[-1] = replace(last, last_offset=high - 1)
        else:
            out.append(StateBatch(low, high - 1, top.delivery_state, top.delivery_count))
    return tuple(out)


def canonical(state: ShareState) -> ShareState:
    """`state` with its batches as a replay leaves them (`combine` at its own start offset)."""
    return replace(state, batches=combine(state.batches, state.start_offset))


def apply_update(current: ShareState | None, update: ShareUpdate) -> ShareState:
    """What replaying `update` over `current` (None: no snapshot before it) gives, as Kafka's shard does."""
    if current is None:
        return ShareState(0, update.leader_epoch, update.start_offset, combine(update.batches, update.start_offset))
    start = current.start_offset if update.start_offset == -1 else update.start_offset
    leader_epoch = current.leader_epoch if update.leader_epoch == -1 else update.leader_epoch
    return ShareState(current.state_epoch, leader_epoch, start, combine(current.batches + update.batches, start))


# -- keys ----------------------------------------------------------------------------------------------

def encode_key(record_type: int, key: SharePartitionKey) -> bytes:
    """ShareSnapshotKey (`SNAPSHOT`) or ShareUpdateKey (`UPDATE`) of a share-partition."""
    if record_type not in (SNAPSHOT, UPDATE):
        raise ValueError(f"no share-state record type {record_type}")
    group_id, topic_id, partition = key
    if len(topic_id) != 16:
        raise ValueError(f"a topic id has 16 bytes, not {len(topic_id)}")
    w = Writer().int(2, record_type).string(False, group_id)
    w.parts.append(bytes(topic_id))
    return w.int(4, partition).getvalue()


def record_type(key: bytes) -> int:
    """The record type a key's first two bytes name (any value: the caller decides what it knows)."""
    if len(key) < 2:
        raise CorruptRecordError(f"a __share_group_state key has {len(key)} bytes, fewer than its type", 0)
    return int.from_bytes(bytes(key[:2]), "big", signed=True)


def decode_key(data: bytes) -> tuple[int, SharePartitionKey]:
    """(record type, share-partition) of a ShareSnapshotKey or ShareUpdateKey."""
    reader = Reader(data, "ShareStateKey")
    kind = reader.int(2)
    if kind not in (SNAPSHOT, UPDATE):
        raise CorruptRecordError(f"__share_group_state record type {kind} is neither 0 nor 1", 0)
    group_id = reader.string(False)
    topic_id = _UUID.pack(reader.int(8), reader.int(8))
    partition = reader.int(4)
    reader.end()
    return kind, (group_id, topic_id, partition)


# -- values --------------------------------------------------------------------------------------------

def encode_snapshot(snapshot: ShareSnapshot) -> bytes:
    """ShareSnapshotValue v0."""
    s = snapshot.state
    w = Writer().int(2, VALUE_VERSION)
    w.int(4, snapshot.snapshot_epoch).int(4, s.state_epoch).int(4, s.leader_epoch).int(8, s.start_offset)
    w.int(8, snapshot.create_timestamp).int(8, snapshot.write_timestamp)
    _write_batches(w, s.batches)
    return _write_count(w, snapshot.delivery_complete_count).getvalue()


def encode_update(update: ShareUpdate) -> bytes:
    """ShareUpdateValue v0."""
    w = Writer().int(2, VALUE_VERSION)
    w.int(4, update.snapshot_epoch).int(4, update.leader_epoch).int(8, update.start_offset)
    _write_batches(w, update.batches)
    return _write_count(w, update.delivery_complete_count).getvalue()


def decode_snapshot(data: bytes) -> ShareSnapshot:
    """A ShareSnapshotValue (version 0)."""
    reader = _value_reader(data, "ShareSnapshotValue")
    snapshot_epoch, state_epoch, leader_epoch = reader.int(4), reader.int(4), reader.int(4)
    start_offset, created, written = reader.int(8), reader.int(8), reader.int(8)
    batches = _read_batches(reader)
    count = _read_count(reader)
    reader.end()
    return ShareSnapshot(snapshot_epoch, ShareState(state_epoch, leader_epoch, start_offset, batches),
                         created, written, count)


def decode_update(data: bytes) -> ShareUpdate:
    """A ShareUpdateValue (version 0)."""
    reader = _value_reader(data, "ShareUpdateValue")
    snapshot_epoch, leader_epoch, start_offset = reader.int(4), reader.int(4), reader.int(8)
    batches = _read_batches(reader)
    count = _read_count(reader)
    reader.end()
    return ShareUpdate(snapshot_epoch, leader_epoch, start_offset, batches, count)


def _write_batches(w: Writer, batches: tuple[StateBatch, ...]) -> None:
    w.array_header(True, len(batches))
    for b in batches:
        w.int(8, b.first_offset).int(8, b.last_offset).int(1, int(b.delivery_state)).int(2, b.delivery_count)
        w.tagged_fields()


def _write_count(w: Writer, count: int) -> Writer:
    # A tagged field at its default is left out, as Kafka's generated writers do.
    return w.tagged_fields({} if count == UNKNOWN_COUNT else {DELIVERY_COMPLETE_COUNT_TAG: _I32.pack(count)})


def _value_reader(data: bytes, what: str) -> Reader:
    reader = Reader(data, what)
    version = reader.int(2)
    if version != VALUE_VERSION:
        raise CorruptRecordError(f"{what} version {version} is not {VALUE_VERSION}", 0)
    return reader


def _read_batches(reader: Reader) -> tuple[StateBatch, ...]:
    def batch() -> StateBatch:
        first, last, state, count = reader.int(8), reader.int(8), reader.int(1), reader.int(2)
        reader.tagged_fields()
        try:
            delivery_state = DeliveryState(state)
        except ValueError:
            raise CorruptRecordError(f"{reader.what}: unknown DeliveryState {state}", reader.pos) from None
        return StateBatch(first, last, delivery_state, count)

    return tuple(reader.array(True, batch))


def _read_count(reader: Reader) -> int:
    raw = reader.tagged_fields().get(DELIVERY_COMPLETE_COUNT_TAG)
    if raw is None:
        return UNKNOWN_COUNT
    if len(raw) != _I32.size:
        raise CorruptRecordError(f"{reader.what}: DeliveryCompleteCount has {len(raw)} bytes, not 4", reader.pos)
    count: int = _I32.unpack(raw)[0]
    return count
