"""What the parts of share groups exchange: delivery states, acknowledgement types, state batches."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

# A share-partition: (group id, topic id, partition index), as `__share_group_state` keys it.
SharePartitionKey = tuple[str, bytes, int]


class DeliveryState(IntEnum):
    """A record's state in a share-partition (Kafka's RecordState); ACQUIRED is never persisted."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """An acknowledgement's type on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets in one persisted state with one delivery count (ShareSnapshotValue's StateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: DeliveryState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """What `__share_group_state` keeps of one share-partition: the start offset (SPSO) and the state of
    the in-flight records past it (offsets not covered are available, never delivered)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets handed to one member under one lock, as ShareFetch's AcquiredRecords carries them."""

    first_offset: int
    last_offset: int
    delivery_count: int
