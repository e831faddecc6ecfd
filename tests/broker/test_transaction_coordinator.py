"""The transaction coordinator without a network: a real store in a temporary directory, a clock we move.

Scenario names follow Kafka's TransactionCoordinatorTest where one matches.
Every test looks at what was written (the `__transaction_state` records, the
markers in the data partitions), not only at what the coordinator answers.
"""
from __future__ import annotations

import itertools

import pytest

from logstore.broker.coordinator.partitioning import partition_for
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC, TXN_STATE_TOPIC, TransactionCoordinator, TxnConfig
from logstore.broker.coordinator.txn_log import TxnLogValue, TxnState, decode_key, decode_value
from logstore.broker.coordinator.txn_metadata import TV_2
from logstore.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from logstore.manager import LogManager

TXN = "txn-a"
TIMEOUT = 60_000
CONFIG = TxnConfig(state_partitions=5, offsets_partitions=3, fsync=False, id_expiration_ms=3_600_000)


class Clock:
    """Milliseconds that move only when a test says so."""

    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def env(tmp_path):
    """(coordinator, store, clock) over a fresh store with topic `t` of 3 partitions."""
    store = LogManager([str(tmp_path)])
    store.create_topic("t", 3)
    clock = Clock()
    ids = itertools.count(1000)
    coordinator = TransactionCoordinator(store, lambda: next(ids), CONFIG, clock=clock)
    yield coordinator, store, clock
    store.close()


def reopen(store, tmp_path, clock, next_id=5000) -> tuple[TransactionCoordinator, LogManager]:
    """Close the store and start over from its files, as a restarted broker does."""
    store.close()
    store = LogManager([str(tmp_path)])
    ids = itertools.count(next_id)
    coordinator = TransactionCoordinator(store, lambda: next(ids), CONFIG, clock=clock)
    coordinator.load()
    return coordinator, store


def state_records(store, transactional_id=TXN) -> list[TxnLogValue | None]:
    """Every value written for `transactional_id`, in order (None for a tombstone)."""
    partition = store.log(TXN_STATE_TOPIC, partition_for(transactional_id, CONFIG.state_partitions))
    return [None if r.value is None else decode_value(r.value) for r in partition.iter_records()
            if decode_key(r.key) == transactional_id]


def markers(store, topic="t", partition=0) -> list[tuple[str, int, int]]:
    """(COMMIT|ABORT, producer id, epoch) of every control batch in a partition."""
    log_ = store.log(topic, partition)
    buf = log_.read(0, 1 << 24).read() if log_.log_end_offset else b""
    fmt = log_.format
    return [(fmt.read_marker(buf, e.position).type_name, e.producer_id, e.producer_epoch)
            for e in fmt.iter_entries(buf) if e.is_control]


def transactional_write(coordinator, store, pid, epoch, partition=0, seq=0, values=(b"v",)):
    """A transactional batch appended the way the Produce handler does it."""
    log_ = store.log("t", partition)
    with coordinator.verified_write(TXN, pid, epoch, "t", partition):
        return log_.append_records(list(values), producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                   transactional=True)


def open_transaction(coordinator, partitions=(0, 1, 2)):
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    coordinator.add_partitions(TXN, pid, epoch, [("t", p) for p in partitions])
    return pid, epoch


# -- InitProducerId -------------------------------------------------------------------------------

def test_init_of_a_new_id_allocates_a_producer_id_at_epoch_0_and_persists_empty(env):
    coordinator, store, clock = env
    assert coordinator.init_producer_id(TXN, TIMEOUT) == (1000, 0)
    (record,) = state_records(store)
    assert record == TxnLogValue(1000, 0, TIMEOUT, TxnState.EMPTY, frozenset(), clock.now, -1)


def test_init_again_bumps_the_epoch_of_the_same_producer_id(env):
    coordinator, store, _ = env
    coordinator.init_producer_id(TXN, TIMEOUT)
    assert coordinator.init_producer_id(TXN, 30_000) == (1000, 1)
    assert [r.producer_epoch for r in state_records(store)] == [0, 1]
    assert coordinator.describe(TXN).timeout_ms == 30_000


def test_without_a_transactional_id_every_call_gets_a_fresh_producer_id_at_epoch_0(env):
    coordinator, store, _ = env
    assert [coordinator.init_producer_id(None, 0) for _ in range(3)] == [(1000, 0), (1001, 0), (1002, 0)]
    assert TXN_STATE_TOPIC not in store.topics()


@pytest.mark.parametrize("timeout_ms", [0, -1, CONFIG.max_timeout_ms + 1])
def test_a_timeout_outside_1_to_the_maximum_is_refused(env, timeout_ms):
    coordinator, _, _ = env
    with pytest.raises(InvalidTransactionTimeoutError):
        coordinator.init_producer_id(TXN, timeout_ms)


def test_an_empty_transactional_id_is_an_invalid_request(env):
    coordinator, _, _ = env
    for call in (lambda: coordinator.init_producer_id("", TIMEOUT),
                 lambda: coordinator.add_partitions("", 1, 0, [("t", 0)]),
                 lambda: coordinator.end_transaction("", 1, 0, True)):
        with pytest.raises(InvalidRequestError):
            call()


def test_exhausted_epoch_moves_to_a_new_producer_id(env, tmp_path):
    coordinator, store, clock = env
    coordinator._state.write(TXN, TxnLogValue(77, 32766, TIMEOUT, TxnState.COMPLETE_COMMIT, frozenset(), clock.now, -1))
    coordinator.load()
    assert coordinator.init_producer_id(TXN, TIMEOUT) == (1000, 0)
    meta = coordinator.describe(TXN)
    assert (meta.previous_producer_id, meta.last_producer_epoch) == (77, -1)


def test_kip360_retry_after_an_exhausting_bump_gets_the_new_producer_id_again(env):
    coordinator, _, clock = env
    coordinator._state.write(TXN, TxnLogValue(77, 32766, TIMEOUT, TxnState.COMPLETE_COMMIT, frozenset(), clock.now, -1))
    coordinator.load()
    assert coordinator.init_producer_id(TXN, TIMEOUT, 77, 32766) == (1000, 0)
    # The answer was lost: the client asks again with the same (old) id and epoch, and gets
    # the same answer (Kafka matches the old epoch against the one it recorded at the bump).
    assert coordinator.init_producer_id(TXN, TIMEOUT, 77, 32766) == (1000, 0)


def test_kip360_bump_with_the_current_epoch_and_its_retry(env):
    coordinator, _, _ = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    assert coordinator.init_producer_id(TXN, TIMEOUT, pid, epoch) == (pid, epoch + 1)
    # A retry of that call (its answer lost) gets the same epoch, not a second bump.
    assert coordinator.init_producer_id(TXN, TIMEOUT, pid, epoch) == (pid, epoch + 1)


def test_kip360_with_a_fenced_epoch_or_a_foreign_producer_id_is_producer_fenced(env):
    coordinator, _, _ = env
    pid, _ = coordinator.init_producer_id(TXN, TIMEOUT)
    coordinator.init_producer_id(TXN, TIMEOUT)
    coordinator.init_producer_id(TXN, TIMEOUT)
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer_id(TXN, TIMEOUT, pid, 0)
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer_id(TXN, TIMEOUT, pid + 1, 2)


def test_init_while_a_transaction_is_open_aborts_it_with_a_bumped_epoch_then_asks_for_a_retry(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator)
    transactional_write(coordinator, store, pid, epoch, partition=1)
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id(TXN, TIMEOUT)
    assert coordinator.describe(TXN).state == TxnState.COMPLETE_ABORT
    for p in range(3):
        assert markers(store, partition=p) == [("ABORT", pid, epoch + 1)]
    assert store.log("t", 1).last_stable_offset == store.log("t", 1).log_end_offset
    assert [r.state for r in state_records(store)][-2:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
    assert coordinator.init_producer_id(TXN, TIMEOUT) == (pid, epoch + 2)


def test_a_tv2_end_from_the_producer_a_fence_aborted_is_fenced_not_taken_for_a_retry(env):
    coordinator, store, _ = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    coordinator.add_partitions(TXN, pid, epoch, [("t", 0)], TV_2)
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id(TXN, TIMEOUT)   # a second instance fences: epoch + 1, aborted
    # The zombie's abort carries the epoch one below the fence's: no EndTxn of its own bumped it.
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction(TXN, pid, epoch, False, TV_2)
    assert coordinator.init_producer_id(TXN, TIMEOUT) == (pid, epoch + 2)


def test_init_while_markers_are_being_written_is_concurrent_transactions(env):
    coordinator, _, _ = env
    pid, epoch = open_transaction(coordinator)
    coordinator._state.txns[TXN].state = TxnState.PREPARE_COMMIT
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id(TXN, TIMEOUT)


# -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------

def test_add_partitions_opens_the_transaction_and_records_its_start(env):
    coordinator, store, clock = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    clock.now += 5
    coordinator.add_partitions(TXN, pid, epoch, [("t", 0)])
    clock.now += 5
    coordinator.add_partitions(TXN, pid, epoch, [("t", 2)])
    last = state_records(store)[-1]
    assert (last.state, last.partitions, last.start_ms, last.last_update_ms) == (
        TxnState.ONGOING, frozenset({("t", 0), ("t", 2)}), clock.now - 5, clock.now)


def test_adding_partitions_already_in_the_transaction_writes_nothing(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator)
    before = len(state_records(store))
    coordinator.add_partitions(TXN, pid, epoch, [("t", 1)])
    assert len(state_records(store)) == before


def test_unknown_partitions_are_named_and_nothing_is_added(env):
    coordinator, store, _ = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    with pytest.raises(UnknownTopicOrPartitionError) as caught:
        coordinator.add_partitions(TXN, pid, epoch, [("t", 0), ("t", 3), ("nope", 0)])
    assert caught.value.partitions == [("nope", 0), ("t", 3)]
    assert coordinator.describe(TXN).state == TxnState.EMPTY


def test_add_partitions_checks_producer_id_then_epoch(env):
    coordinator, _, _ = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.add_partitions(TXN, pid + 1, epoch, [("t", 0)])
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.add_partitions("other", pid, epoch, [("t", 0)])
    with pytest.raises(ProducerFencedError):
        coordinator.add_partitions(TXN, pid, epoch + 1, [("t", 0)])


def test_add_offsets_adds_the_groups_consumer_offsets_partition(env):
    coordinator, store, _ = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    coordinator.add_offsets(TXN, pid, epoch, "my-group")
    assert store.partitions(OFFSETS_TOPIC) == CONFIG.offsets_partitions
    expected = (OFFSETS_TOPIC, partition_for("my-group", CONFIG.offsets_partitions))
    assert coordinator.describe(TXN).partitions == frozenset({expected})
    coordinator.end_transaction(TXN, pid, epoch, True)
    assert markers(store, *expected) == [("COMMIT", pid, epoch)]


# -- EndTxn ---------------------------------------------------------------------------------------

def test_commit_writes_prepare_then_a_marker_per_partition_then_complete(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator)
    for p in range(3):
        transactional_write(coordinator, store, pid, epoch, partition=p, values=[b"a", b"b"])
        assert store.log("t", p).last_stable_offset == 0
    coordinator.end_transaction(TXN, pid, epoch, True)
    states = [r.state for r in state_records(store)]
    assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert state_records(store)[-1].partitions == frozenset()
    for p in range(3):
        log_ = store.log("t", p)
        assert markers(store, partition=p) == [("COMMIT", pid, epoch)]
        assert log_.last_stable_offset == log_.log_end_offset == 3
        assert [r.value for r in log_.iter_records(isolation="read_committed")] == [b"a", b"b"]


def test_abort_hides_the_records_from_read_committed(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator, partitions=(0,))
    transactional_write(coordinator, store, pid, epoch, values=[b"x"])
    coordinator.end_transaction(TXN, pid, epoch, False)
    assert markers(store) == [("ABORT", pid, epoch)]
    assert list(store.log("t", 0).iter_records(isolation="read_committed")) == []


def test_a_retried_end_is_answered_again_and_the_opposite_end_is_invalid(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator)
    coordinator.end_transaction(TXN, pid, epoch, True)
    coordinator.end_transaction(TXN, pid, epoch, True)
    assert markers(store) == [("COMMIT", pid, epoch)]
    with pytest.raises(InvalidTxnStateError):
        coordinator.end_transaction(TXN, pid, epoch, False)


def test_end_with_no_transaction_open_is_invalid_txn_state(env):
    coordinator, _, _ = env
    pid, epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    with pytest.raises(InvalidTxnStateError):
        coordinator.end_transaction(TXN, pid, epoch, True)


def test_end_from_an_old_epoch_is_producer_fenced(env):
    coordinator, _, _ = env
    pid, epoch = open_transaction(coordinator)
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction(TXN, pid, epoch - 1, True)


def test_a_decision_being_carried_out_is_not_claimed_by_the_completion_sweep(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator)
    meta = coordinator._state.txns[TXN]
    # end_transaction's first step: the decision persisted, the id kept for its markers.
    meta.pending = TxnState.PREPARE_COMMIT
    coordinator._state.persist(meta, meta.transit(state=TxnState.PREPARE_COMMIT), then=TxnState.COMPLETE_COMMIT)
    assert coordinator.complete_prepared() == []
    assert coordinator._completer.complete(meta, claimed=True)
    assert markers(store) == [("COMMIT", pid, epoch)]
    assert coordinator.describe(TXN).state == TxnState.COMPLETE_COMMIT


# -- the produce check (KIP-890 part 1) -----------------------------------------------------------

def test_a_write_to_a_partition_not_in_the_transaction_is_refused(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator, partitions=(0,))
    with pytest.raises(InvalidTxnStateError):
        transactional_write(coordinator, store, pid, epoch, partition=1)
    assert store.log("t", 1).log_end_offset == 0


def test_a_late_write_after_the_commit_never_lands_in_the_next_transaction(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator, partitions=(0,))
    transactional_write(coordinator, store, pid, epoch)
    coordinator.end_transaction(TXN, pid, epoch, True)
    with pytest.raises(InvalidTxnStateError):
        transactional_write(coordinator, store, pid, epoch, seq=1)
    assert store.log("t", 0).last_stable_offset == store.log("t", 0).log_end_offset


def test_a_write_from_a_fenced_epoch_is_invalid_producer_epoch_and_never_visible(env):
    coordinator, store, _ = env
    pid, epoch = open_transaction(coordinator, partitions=(0,))
    transactional_write(coordinator, store, pid, epoch, values=[b"zombie"])
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.init_producer_id(TXN, TIMEOUT)
    new_pid, new_epoch = coordinator.init_producer_id(TXN, TIMEOUT)
    with pytest.raises(InvalidProducerEpochError):
        transactional_write(coordinator, store, pid, epoch, seq=1, values=[b"zombie2"])
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction(TXN, pid, epoch, True)
    coordinator.add_partitions(TXN, new_pid, new_epoch, [("t", 0)])
    transactional_write(coordinator, store, new_pid, new_epoch, values=[b"new"])
    coordinator.end_transaction(TXN, new_pid, new_epoch, True)
    assert [r.value for r in store.log("t", 0).iter_records(isolation="read_committed")] == [b"new"]


def test_a_write_from_a_producer_without_a_transaction_is_refused(env):
    coordinator, _, _ = env
    with pytest.raises(InvalidTxnStateError):
        with coordinator.verified_write(None, 42, 0, "t", 0):
            pass


# -- timeouts, expiry -----------------------------------------------------------------------------

def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(env):
    coordinator, store, clock = env
    pid, epoch = open_transaction(coordinator, partitions=(0,))
    transactional_write(coordinator, store, pid, epoch)
    clock.now += TIMEOUT
    assert coordinator.abort_timed_out() == []
    clock.now += 1
    assert coordinator.abort_timed_out() == [TXN]
    assert markers(store) == [("ABORT", pid, epoch + 1)]
    assert coordinator.describe(TXN).state == TxnState.COMPLETE_ABORT
    with pytest.raises(ProducerFencedError):
        coordinator.end_transaction(TXN, pid, epoch, True)
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer_id(TXN, TIMEOUT, pid, epoch)
    assert store.log("t", 0).last_stable_offset == store.log("t", 0).log_end_offset


def test_idle_ids_expire_with_a_tombstone_and_stay_gone_after_a_restart(env, tmp_path):
    coordinator, store, clock = env
    coordinator.init_producer_id(TXN, TIMEOUT)
    pid, epoch = coordinator.init_producer_id("busy", TIMEOUT)
    coordinator.add_partitions("busy", pid, epoch, [("t", 0)])
    clock.now += CONFIG.id_expiration_ms
    assert coordinator.expire_transactional_ids() == [TXN]
    assert state_records(store)[-1] is None
    coordinator, store = reopen(store, tmp_path, clock)
    try:
        assert [m.transactional_id for m in coordinator.transactions()] == ["busy"]
        # A new producer for the expired id gets a new producer id: none is ever reused.
        assert coordinator.init_producer_id(TXN, TIMEOUT) == (5000, 0)
    finally:
        store.close()


# -- loading ----------------------------------------------------------------------------------------

def test_a_restart_rebuilds_every_id_from_the_log(env, tmp_path):
    coordinator, store, clock = env
    pid, epoch = open_transaction(coordinator, partitions=(0, 2))
    coordinator.init_producer_id("done", TIMEOUT)
    before = {m.transactional_id: m for m in coordinator.transactions()}
    coordinator, store = reopen(store, tmp_path, clock)
    try:
        after = {m.transactional_id: m for m in coordinator.transactions()}
        assert after == before
        # The open transaction goes on where it was.
        transactional_write(coordinator, store, pid, epoch, partition=2)
        coordinator.end_transaction(TXN, pid, epoch, True)
        assert markers(store, partition=2) == [("COMMIT", pid, epoch)]
    finally:
        store.close()


@pytest.mark.parametrize("commit", [True, False])
def test_a_decision_found_on_start_is_carried_out(env, tmp_path, commit):
    coordinator, store, clock = env
    pid, epoch = open_transaction(coordinator, partitions=(0, 1))
    transactional_write(coordinator, store, pid, epoch, partition=1)
    meta = coordinator.describe(TXN)
    prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    # What a crash right after persisting the decision leaves.
    coordinator._state.write(TXN, meta.transit(state=prepared).log_value())
    coordinator, store = reopen(store, tmp_path, clock)
    try:
        assert coordinator.describe(TXN).state == prepared
        with pytest.raises(ConcurrentTransactionsError):
            coordinator.init_producer_id(TXN, TIMEOUT)
        assert coordinator.complete_prepared() == [TXN]
        kind = "COMMIT" if commit else "ABORT"
        assert markers(store, partition=0) == markers(store, partition=1) == [(kind, pid, epoch)]
        assert coordinator.describe(TXN).state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
        assert store.log("t", 1).last_stable_offset == store.log("t", 1).log_end_offset
    finally:
        store.close()


def test_an_undecodable_record_stops_the_load(env):
    coordinator, store, _ = env
    coordinator.init_producer_id(TXN, TIMEOUT)
    partition = store.log(TXN_STATE_TOPIC, partition_for(TXN, CONFIG.state_partitions))
    partition.append(bytearray(partition.format.encode_batch([b"\x00\x00\x00\x01x"], [b"\x00\x09junk"])),
                     client=False)
    with pytest.raises(StorageError, match="TransactionLogValue version 9"):
        coordinator.load()
