"""What the transaction coordinator knows of one transactional id, and Kafka's limits on its epochs."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from logstore.broker.coordinator.txn_log import TxnLogValue, TxnState

# One coordinator ever leads these partitions, so markers never meet a newer coordinator epoch.
COORDINATOR_EPOCH = 0
# Kafka moves to a new producer id once the epoch reaches Short.MAX_VALUE - 1.
EPOCH_EXHAUSTED = 32766
MAX_EPOCH = 32767
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
# Kafka's transaction versions (the `transaction.version` feature): TV_2 (KIP-890 part 2) bumps the
# epoch at the end of every transaction, and its partitions join through Produce and TxnOffsetCommit.
TV_0, TV_2 = 0, 2
ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
# KIP-939: a two-phase-commit transaction is one whose timeout is Integer.MAX_VALUE (Kafka's
# isDistributedTwoPhaseCommitTxn): persisted in the record's timeout, never aborted by a timeout.
TWO_PHASE_TIMEOUT_MS = 2_147_483_647
# `last_producer_epoch` after a second instance's InitProducerId bumped the epoch to fence the first: the
# epoch one below is a zombie's, not a retry of a bumping end (a timeout's bump leaves -1: the producer that
# timed out may still end its transaction with an abort, answered as a retry, and go on).
FENCE_BUMP = -2


@dataclass
class TxnMetadata:
    """What the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # The id before the last epoch exhaustion, and the epoch before the last bump
    # (KIP-360: a retried InitProducerId is answered, not fenced).
    previous_producer_id: int = -1
    last_producer_epoch: int = -1   # not in the log (nor in Kafka's): -1 after a load; FENCE_BUMP after a fence
    # TV_2: the producer id the Complete state moves to when ending this transaction exhausts the epoch.
    next_producer_id: int = -1
    # The transaction version of the client's last transition (Kafka's ClientTransactionVersion).
    client_version: int = TV_0
    pending: TxnState | None = None

    def transit(self, **changes: Any) -> TxnMetadata:
        """The metadata after a transition (not yet persisted)."""
        if not changes.keys() <= _FIELD_NAMES:
            raise TypeError(f"TxnMetadata has no fields {sorted(changes.keys() - _FIELD_NAMES)}")
        # A copy of the fields' values, not `dataclasses.replace` (which calls __init__ with every field
        # by name): a small transaction makes three of these.
        new = object.__new__(TxnMetadata)
        new.__dict__.update(self.__dict__, pending=None, **changes)
        return new

    def copy(self) -> TxnMetadata:
        """A copy (pending state included)."""
        new = object.__new__(TxnMetadata)
        new.__dict__.update(self.__dict__)
        return new

    def take(self, transit: TxnMetadata, pending: TxnState | None) -> None:
        """Become `transit` (persisted), with `pending` as the pending state."""
        self.__dict__.update(transit.__dict__)
        self.pending = pending

    def log_value(self) -> TxnLogValue:
        """The record that persists this metadata."""
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions,
                           self.last_update_ms, self.start_ms, self.previous_producer_id, self.next_producer_id,
                           self.client_version)

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        """The metadata a persisted record describes."""
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.state,
                   value.partitions, value.start_ms, value.last_update_ms, value.previous_producer_id,
                   next_producer_id=value.next_producer_id, client_version=value.client_transaction_version)

    @property
    def two_phase(self) -> bool:
        """Whether this is a KIP-939 two-phase-commit transaction (only its client or an operator ends it)."""
        return self.timeout_ms == TWO_PHASE_TIMEOUT_MS

    @property
    def epoch_bumping(self) -> bool:
        """Whether the last transition came from a TV_2 client: its transaction ends with an epoch bump."""
        return self.client_version >= TV_2


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(TxnMetadata))


def completed(prepared: TxnState) -> TxnState:
    """The Complete state that follows a Prepare state."""
    return TxnState.COMPLETE_COMMIT if prepared == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
