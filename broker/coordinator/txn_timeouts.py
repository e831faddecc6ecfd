"""What the upkeep thread does to transactional ids over time: abort transactions open past their timeout
(fencing their producer), and forget ids idle for transactional.id.expiration.ms."""
from __future__ import annotations

import logging
from collections.abc import Callable

from logstore.broker.coordinator.txn_config import TxnConfig
from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.coordinator.txn_markers import TxnCompleter
from logstore.broker.coordinator.txn_metadata import ENDED, MAX_EPOCH, TxnMetadata
from logstore.broker.coordinator.txn_state_store import TxnStateStore
from logstore.errors import LogStoreError

log = logging.getLogger(__name__)


class TxnTimeouts:
    """Kafka's abortTimedOutTransactions and removeExpiredTransactionalIds; times are ms. Task-safe: an id is
    claimed through its `pending` state under the state store's lock, then written outside it."""

    def __init__(self, state: TxnStateStore, completer: TxnCompleter, clock: Callable[[], int],
                 config: TxnConfig) -> None:
        self._state = state
        self._completer = completer
        self._clock = clock
        self._config = config

    def abort_timed_out(self, now: int | None = None) -> list[str]:
        """Abort transactions open longer than their timeout, bumping the epoch so their producer is fenced."""
        now = self._clock() if now is None else now
        fences: list[tuple[TxnMetadata, TxnMetadata]] = []
        with self._state.lock:
            for meta in self._state.txns.values():
                # KIP-939: a two-phase-commit transaction waits for its decision however long it takes.
                if (meta.state == TxnState.ONGOING and meta.pending is None and not meta.two_phase
                        and meta.start_ms + meta.timeout_ms < now):
                    fence = meta.transit(state=TxnState.PREPARE_EPOCH_FENCE,
                                         producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                                         last_producer_epoch=-1)
                    meta.pending = fence.state
                    fences.append((meta, fence))
        aborted = []
        for meta, fence in fences:
            try:
                log.info("aborting transaction of %r (producer %d): open longer than its timeout of %d ms",
                         meta.transactional_id, meta.producer_id, meta.timeout_ms)
                self._completer.fence_and_abort(meta, fence)
                aborted.append(meta.transactional_id)
            except LogStoreError as exc:
                log.warning("timed-out transaction of %r not aborted yet: %s", meta.transactional_id, exc)
        return aborted

    def expire_transactional_ids(self, now: int | None = None) -> list[str]:
        """Forget ids idle for transactional.id.expiration.ms with no transaction open (a tombstone each)."""
        now = self._clock() if now is None else now
        with self._state.lock:
            idle = [m for m in self._state.txns.values() if m.state in ENDED and m.pending is None
                    and m.last_update_ms + self._config.id_expiration_ms <= now]
            for meta in idle:
                meta.pending = TxnState.DEAD
        expired = []
        for meta in idle:
            try:
                self._state.write(meta.transactional_id, None)
            except LogStoreError as exc:
                log.warning("transactional id %r not expired yet: %s", meta.transactional_id, exc)
                with self._state.lock:
                    meta.pending = None
                continue
            with self._state.lock:
                self._state.forget(meta)
            expired.append(meta.transactional_id)
        return expired
