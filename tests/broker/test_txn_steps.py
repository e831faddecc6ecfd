"""The transaction coordinator in steps (`*_durably`): what each step has written and waits for, the id held
between steps, and what a failed or late fsync answers. A real store with fsync on, real appends; the
broker's way of waiting (`until_durable` on an event loop) drives one case end to end.
"""
from __future__ import annotations

import asyncio
import itertools

import pytest

from logstore.broker.coordinator.partitioning import partition_for
from logstore.broker.coordinator.transaction import TXN_STATE_TOPIC, TransactionCoordinator, TxnConfig
from logstore.broker.coordinator.txn_log import TxnState, decode_value
from logstore.broker.coordinator.txn_metadata import TV_2
from logstore.broker.coordinator.txn_steps import Durably, run_blocking
from logstore.broker.durable_waits import LoopInbox, NotDurableInTime, until_durable
from logstore.errors import ConcurrentTransactionsError, CoordinatorNotAvailableError
from logstore.manager import LogManager

TXN = "txn-steps"
TOPIC = "t"
CONFIG = TxnConfig(state_partitions=3, offsets_partitions=2, fsync=True)


@pytest.fixture
def env(tmp_path):
    """(coordinator, store) over a fresh store with topic `t` of 2 partitions, fsync on."""
    store = LogManager([str(tmp_path)])
    store.create_topic(TOPIC, 2)
    ids = itertools.count(1000)
    coordinator = TransactionCoordinator(store, lambda: next(ids), CONFIG)
    yield coordinator, store
    store.close()


def _state_log(store):
    return store.log(TXN_STATE_TOPIC, partition_for(TXN, CONFIG.state_partitions))


def _states(store) -> list[TxnState]:
    return [decode_value(r.value).state for r in _state_log(store).iter_records() if r.value is not None]


def _markers(store, partition: int) -> int:
    return sum(1 for entry, _ in store.log(TOPIC, partition).iter_batches() if entry.is_control)


def _synced(step: Durably) -> list[BaseException | None]:
    """The step's appends made durable for real, as the broker's wait would find them."""
    for log, end in step.waits:
        log.flush(end)
    return [None] * len(step.waits)


def test_an_add_is_appended_before_its_fsync_and_takes_effect_once_resumed(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    step = coordinator.add_partitions_durably(TXN, pid, epoch, [(TOPIC, 0)])
    assert isinstance(step, Durably)
    state_log = _state_log(store)
    assert [(log, end) for log, end in step.waits] == [(state_log, state_log.log_end_offset)]
    assert state_log.recovery_point < state_log.log_end_offset   # in the log, not yet durable
    assert _states(store)[-1] == TxnState.ONGOING
    # Held between the steps: nothing else changes the id, and it is not Ongoing before it is durable.
    assert coordinator.describe(TXN).state == TxnState.EMPTY
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 1)])
    assert step.resume(_synced(step)) is None
    assert state_log.recovery_point == state_log.log_end_offset
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.partitions, meta.pending) == (TxnState.ONGOING, frozenset({(TOPIC, 0)}), None)


@pytest.mark.parametrize("failure", [NotDurableInTime("not durable within the request's timeout"),
                                     OSError(5, "Input/output error")])
def test_an_add_whose_fsync_failed_or_was_late_is_coordinator_not_available_and_leaves_the_id_as_it_was(
        env, failure):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    step = coordinator.add_partitions_durably(TXN, pid, epoch, [(TOPIC, 0)])
    assert isinstance(step, Durably)
    with pytest.raises(CoordinatorNotAvailableError):
        step.resume([failure])
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.partitions, meta.pending) == (TxnState.EMPTY, frozenset(), None)
    # The client's retry goes through.
    coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)])
    assert coordinator.describe(TXN).state == TxnState.ONGOING


def test_an_end_writes_no_marker_before_its_decision_is_resumed_durable_nor_complete_before_its_markers(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
    store.log(TOPIC, 0).append_records([b"a"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                       transactional=True)
    decided = coordinator.end_transaction_durably(TXN, pid, epoch, True)
    assert isinstance(decided, Durably)
    assert [log for log, _ in decided.waits] == [_state_log(store)]
    assert _states(store)[-1] == TxnState.PREPARE_COMMIT
    assert _markers(store, 0) == _markers(store, 1) == 0
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.end_transaction(TXN, pid, epoch, True)

    marked = decided.resume(_synced(decided))
    assert isinstance(marked, Durably)
    assert sorted((log.topic, log.partition) for log, _ in marked.waits) == [(TOPIC, 0), (TOPIC, 1)]
    assert _markers(store, 0) == _markers(store, 1) == 1
    assert _states(store)[-1] == TxnState.PREPARE_COMMIT   # no Complete before the markers are durable
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.pending) == (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.end_transaction(TXN, pid, epoch, True)

    assert marked.resume(_synced(marked)) == (-1, -1)
    assert _states(store) == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert coordinator.describe(TXN).state == TxnState.COMPLETE_COMMIT
    # A retry of the EndTxn that succeeded succeeds again.
    assert coordinator.end_transaction(TXN, pid, epoch, True) == (-1, -1)


def test_a_decision_whose_fsync_failed_is_coordinator_not_available_and_the_transaction_stays_open(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)])
    decided = coordinator.end_transaction_durably(TXN, pid, epoch, False)
    assert isinstance(decided, Durably)
    with pytest.raises(CoordinatorNotAvailableError):
        decided.resume([NotDurableInTime("late")])
    assert _markers(store, 0) == 0
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.pending) == (TxnState.ONGOING, None)
    assert coordinator.end_transaction(TXN, pid, epoch, False) == (-1, -1)
    assert coordinator.describe(TXN).state == TxnState.COMPLETE_ABORT


def test_markers_not_durable_in_time_still_answer_the_durable_decision_and_are_finished_later(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 1)])
    decided = coordinator.end_transaction_durably(TXN, pid, epoch, True)
    assert isinstance(decided, Durably)
    marked = decided.resume(_synced(decided))
    assert isinstance(marked, Durably)
    # The decision is durable: EndTxn succeeds, as Kafka answers once PrepareCommit is written.
    assert marked.resume([NotDurableInTime("late")]) == (-1, -1)
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.pending) == (TxnState.PREPARE_COMMIT, None)
    assert coordinator.complete_prepared() == [TXN]
    assert coordinator.describe(TXN).state == TxnState.COMPLETE_COMMIT
    assert _states(store)[-1] == TxnState.COMPLETE_COMMIT


def test_a_transaction_version_2_end_in_steps_answers_the_bumped_epoch(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)], TV_2)
    assert run_blocking(coordinator.end_transaction_durably(TXN, pid, epoch, True, TV_2)) == (pid, epoch + 1)
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, epoch + 1)


def test_steps_waited_on_an_event_loop_with_the_brokers_wait_complete_a_transaction(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)

    async def carried(step):
        inbox = LoopInbox(asyncio.get_running_loop())
        while isinstance(step, Durably):
            step = step.resume(await until_durable(inbox, step.waits, 30))
        return step

    async def transaction():
        await carried(coordinator.add_partitions_durably(TXN, pid, epoch, [(TOPIC, 0)]))
        return await carried(coordinator.end_transaction_durably(TXN, pid, epoch, True))

    assert asyncio.run(transaction()) == (-1, -1)
    assert _states(store) == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert _markers(store, 0) == 1
    data = store.log(TOPIC, 0)
    assert data.recovery_point == data.log_end_offset


def test_an_init_that_fences_an_open_transaction_aborts_it_in_steps_then_asks_for_a_retry(env):
    coordinator, store = env
    pid, epoch = coordinator.init_producer_id(TXN, 60_000)
    coordinator.add_partitions(TXN, pid, epoch, [(TOPIC, 0)])
    fencing = coordinator.init_two_phase_durably(TXN, 60_000)
    assert isinstance(fencing, Durably)
    assert _states(store)[-1] == TxnState.PREPARE_ABORT and _markers(store, 0) == 0
    marked = fencing.resume(_synced(fencing))
    assert isinstance(marked, Durably)
    assert _markers(store, 0) == 1
    with pytest.raises(ConcurrentTransactionsError):
        marked.resume(_synced(marked))
    meta = coordinator.describe(TXN)
    assert (meta.state, meta.producer_epoch, meta.pending) == (TxnState.COMPLETE_ABORT, epoch + 1, None)
    # The retry bumps once more and starts afresh.
    assert run_blocking(coordinator.init_two_phase_durably(TXN, 60_000)) == (pid, epoch + 2, -1, -1)
