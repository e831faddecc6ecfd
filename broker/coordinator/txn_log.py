"""`__transaction_state` records: Kafka's TransactionLogKey and TransactionLogValue (spec §9.4).

Key v0 is the transactional id. Value v1 (flexible, with tagged
previous/next producer ids and the client's transaction version, each
written only when it is not its default) is what Kafka 4 writes once
`transaction.version` 1 or above is finalized, and what this coordinator
writes (it finalizes 2); v0 (plain), what older brokers wrote, is read too.
A null value is the tombstone of an expired transactional id. The
partitions array is null in state Empty.
"""
from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass, field

from logstore.broker.coordinator.records import Reader, Writer
from logstore.errors import CorruptRecordError

KEY_VERSION = 0
VALUE_VERSION = 1
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
# A value's fixed head (version, ProducerId, ProducerEpoch, TransactionTimeoutMs, TransactionStatus) and
# its two times (TransactionLastUpdateTimestampMs, TransactionStartTimestampMs).
_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")
# A null array, plain (v0) and compact (v1): the partitions of an Empty state.
_NULL_ARRAY = {False: b"\xff\xff\xff\xff", True: b"\0"}


class TxnState(enum.IntEnum):
    """Kafka's transaction states; the value is the persisted TransactionStatus byte."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (`PrepareCommit`, `CompleteAbort`, ...)."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState:
        """The state Kafka's tools call `name`."""
        for state in cls:
            if state.kafka_name == name:
                return state
        raise ValueError(f"no transaction state {name!r}")


@dataclass(frozen=True)
class TxnLogValue:
    """One persisted transition of a transactional id."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    """TransactionLogKey v0."""
    return Writer().int(2, KEY_VERSION).string(False, transactional_id).getvalue()


def decode_key(data: bytes) -> str:
    """The transactional id of a TransactionLogKey (v0, the only version)."""
    reader = Reader(data, "TransactionLogKey")
    version = reader.int(2)
    if version != KEY_VERSION:
        raise CorruptRecordError(f"TransactionLogKey version {version} is not 0")
    transactional_id = reader.string(False)
    reader.end()
    return transactional_id


def encode_value(value: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    """TransactionLogValue at `version`: 1 (flexible, Kafka with transaction.version 1+) or 0."""
    flexible = version >= 1
    head = _HEAD.pack(version, value.producer_id, value.producer_epoch, value.timeout_ms, int(value.state))
    partitions = (_NULL_ARRAY[flexible] if value.state == TxnState.EMPTY
                  else _partitions_section(value.partitions, flexible))
    times = _TIMES.pack(value.last_update_ms, value.start_ms)
    if not flexible:
        return b"".join((head, partitions, times))
    # Kafka's generated writers leave out a tagged field that holds its default.
    tags = {}
    if value.previous_producer_id != -1:
        tags[0] = _I64.pack(value.previous_producer_id)
    if value.next_producer_id != -1:
        tags[1] = _I64.pack(value.next_producer_id)
    if value.client_transaction_version != 0:
        tags[2] = _I16.pack(value.client_transaction_version)
    return b"".join((head, partitions, times, Writer().tagged_fields(tags).getvalue() if tags else b"\0"))


@functools.lru_cache(maxsize=4096)
def _partitions_section(partitions: frozenset[tuple[str, int]], flexible: bool) -> bytes:
    """The TransactionPartitions array of a value: an Ongoing and a Prepare record of one transaction carry
    the same set, and a producer's next transaction often the same again."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    w = Writer().array_header(flexible, len(by_topic))
    for topic, ids in by_topic.items():
        w.string(flexible, topic).array_header(flexible, len(ids))
        for p in ids:
            w.int(4, p)
        if flexible:
            w.tagged_fields()
    return w.getvalue()


def decode_value(data: bytes) -> TxnLogValue:
    """A TransactionLogValue of version 0 or 1."""
    reader = Reader(data, "TransactionLogValue")
    version = reader.int(2)
    if version not in (0, 1):
        raise CorruptRecordError(f"TransactionLogValue version {version} is not 0 or 1")
    flexible = version >= 1
    producer_id, epoch, timeout_ms, status = reader.int(8), reader.int(2), reader.int(4), reader.int(1)
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptRecordError(f"TransactionLogValue has unknown TransactionStatus {status}") from None

    def topic_partitions() -> list[tuple[str, int]]:
        topic = reader.string(flexible)
        ids = reader.array(flexible, lambda: reader.int(4))
        if flexible:
            reader.tagged_fields()
        return [(topic, p) for p in ids]

    groups = reader.array(flexible, topic_partitions, nullable=True) or []
    last_update_ms, start_ms = reader.int(8), reader.int(8)
    tags = reader.tagged_fields() if flexible else {}
    reader.end()
    return TxnLogValue(producer_id, epoch, timeout_ms, state, frozenset(tp for g in groups for tp in g),
                       last_update_ms, start_ms,
                       previous_producer_id=_tag(tags, 0, _I64, -1), next_producer_id=_tag(tags, 1, _I64, -1),
                       client_transaction_version=_tag(tags, 2, _I16, 0))


def _tag(tags: dict[int, bytes], tag: int, fmt: struct.Struct, default: int) -> int:
    raw = tags.get(tag)
    if raw is None:
        return default
    if len(raw) != fmt.size:
        raise CorruptRecordError(f"TransactionLogValue tagged field {tag} has {len(raw)} bytes, not {fmt.size}")
    value: int = fmt.unpack(raw)[0]
    return value
