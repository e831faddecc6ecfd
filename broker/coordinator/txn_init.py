"""InitProducerId's transition of a transactional id: which epoch (or new producer id) a returning or new
producer instance gets, and when it is fenced or told to retry (Kafka's prepareInitProducerIdTransit)."""
from __future__ import annotations

from collections.abc import Callable

from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.coordinator.txn_metadata import (
    ENDED,
    EPOCH_EXHAUSTED,
    FENCE_BUMP,
    MAX_EPOCH,
    PREPARED,
    TxnMetadata,
)
from logstore.errors import ConcurrentTransactionsError, InvalidTxnStateError, ProducerFencedError


def init_transit(meta: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None, now: int,
                 allocate: Callable[[], int], keep_prepared: bool = False) -> TxnMetadata:
    """InitProducerId's transition of an id (called under the coordinator's lock): Kafka's
    prepareInitProducerIdTransit. `expected` is the KIP-360 (producer id, epoch) of the instance asking,
    `allocate` hands out a new producer id; raises the request's error."""
    if meta.pending is not None:
        raise ConcurrentTransactionsError(f"transactional id {meta.transactional_id!r} is changing state")
    if expected is not None and not (
            meta.producer_epoch == -1 or expected[0] == meta.producer_id
            or (expected[0] == meta.previous_producer_id and expected[1] >= EPOCH_EXHAUSTED)):
        raise ProducerFencedError(f"producer {expected[0]} no longer holds {meta.transactional_id!r}")
    if meta.state in PREPARED:
        raise ConcurrentTransactionsError(f"transactional id {meta.transactional_id!r} is ending a transaction")
    if meta.state == TxnState.ONGOING and keep_prepared:
        if not meta.two_phase:
            raise InvalidTxnStateError(f"the open transaction of {meta.transactional_id!r} is not a "
                                       "two-phase-commit one: it cannot be kept")
        # KIP-939: the transaction stays open for this instance to end; the bump fences the one that wrote it.
        return meta.transit(producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                            last_producer_epoch=meta.producer_epoch, last_update_ms=now)
    if meta.state == TxnState.ONGOING:
        # The bumped epoch goes into the abort's markers, which fences the old producer
        # in every partition; the caller's retry bumps once more.
        return meta.transit(state=TxnState.PREPARE_EPOCH_FENCE,
                            producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                            last_producer_epoch=FENCE_BUMP)
    if meta.state not in ENDED:
        raise AssertionError(f"transactional id {meta.transactional_id!r} is {meta.state.kafka_name}")
    fresh = dict(state=TxnState.EMPTY, timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1,
                 last_update_ms=now)
    if meta.producer_epoch >= EPOCH_EXHAUSTED and (expected is None or expected[1] == meta.producer_epoch):
        return meta.transit(producer_id=allocate(), producer_epoch=0,
                            previous_producer_id=meta.producer_id,
                            last_producer_epoch=meta.producer_epoch if expected else -1, **fresh)
    bumped = meta.producer_epoch + 1
    if expected is None:
        return meta.transit(producer_epoch=bumped, last_producer_epoch=-1, **fresh)
    if meta.producer_epoch == -1 or expected[1] == meta.producer_epoch:
        return meta.transit(producer_epoch=bumped, last_producer_epoch=meta.producer_epoch, **fresh)
    if expected[1] == meta.last_producer_epoch:
        # A retry of a bump that succeeded: answer it again, unchanged.
        return meta.transit(**fresh)
    raise ProducerFencedError(f"epoch {expected[1]} of producer {expected[0]} has been fenced")
