"""The native producer-state table: Kafka's ProducerStateManagerTest scenarios, snapshots, a stateful model.

Scenario names follow Kafka's ProducerStateManagerTest where one exists. The
helpers append the way the broker's client path does: `find_duplicate`
first, then `check_batch`, then `update_batch` if the check passed. Offsets
and sequences in the comments are what the table holds after the step.
"""
from __future__ import annotations

import json
import random

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import logstore.formats.kafka as K
from logstore.errors import CorruptSnapshotError
from logstore.native import producer_state as ps
from logstore.native.producer_state import ProducerEntry, ProducerTable
from model import INT32_MAX, ProducerModel, decrement_sequence, increment_sequence
from spec_vectors import VECTORS_DIR as VECTORS

CLIENT, COORDINATOR, REPLICATION = ps.ORIGIN_CLIENT, ps.ORIGIN_COORDINATOR, ps.ORIGIN_REPLICATION
OUT_OF_ORDER = ps.OUT_OF_ORDER_SEQUENCE_NUMBER
INVALID_EPOCH = ps.INVALID_PRODUCER_EPOCH
INVALID_TXN_STATE = ps.INVALID_TXN_STATE
FENCED = ps.TRANSACTION_COORDINATOR_FENCED
T0 = 1_700_000_000_000
PID = 1
EXPIRATION_MS = 86_400_000


def append(table, pid, epoch, first_seq, first_offset, *, records=1, timestamp=T0, transactional=False,
           origin=CLIENT):
    """The client append path for one batch: the duplicate's offsets, an error code, or 0 once applied."""
    last_seq = increment_sequence(first_seq, records - 1) if first_seq >= 0 else first_seq
    last_offset = first_offset + records - 1
    if origin == CLIENT:
        duplicate = table.find_duplicate(pid, epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate
    code = table.check_batch(pid, epoch, first_seq, last_seq, transactional, origin)
    if code == 0:
        table.update_batch(pid, epoch, first_seq, last_seq, first_offset, last_offset, timestamp, transactional)
    return code


def marker(table, pid, epoch, coordinator_epoch=0, timestamp=T0, origin=CLIENT):
    """A COMMIT/ABORT marker: an error code, or the first offset of the transaction it completed (-1: none)."""
    code = table.check_marker(pid, epoch, coordinator_epoch, origin)
    if code:
        return ("refused", code)
    return table.update_marker(pid, epoch, coordinator_epoch, timestamp)


def last_seq(table, pid):
    batches = table.get(pid).batches
    return batches[-1][1] if batches else -1


# ---------------------------------------------------------------------------
# Idempotence: sequences, duplicates, epochs


def test_basic_id_mapping():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0) == 0                     # seq 0 at offset 0
    assert append(t, PID, 0, 1, 1) == 0                     # seq 1 at offset 1
    # The retry of seq 1 is a duplicate: the original offsets come back.
    assert append(t, PID, 0, 1, 2) == (1, 1, T0)
    # Without the duplicate check the same batch is out of order, as in Kafka.
    assert t.check_batch(PID, 0, 1, 1, False, CLIENT) == OUT_OF_ORDER
    assert append(t, PID, 0, 5, 2) == OUT_OF_ORDER          # a gap
    assert append(t, PID, 1, 0, 3) == 0                     # epoch bump at seq 0
    assert append(t, PID, 0, 0, 4) == INVALID_EPOCH         # the old epoch is fenced
    assert len(t) == 1 and PID in t and 2 not in t


def test_each_of_the_last_five_batches_is_a_duplicate_and_the_sixth_is_not():
    t = ProducerTable()
    for k in range(6):                                      # seqs 10k..10k+9 at offsets 100k..
        assert append(t, PID, 0, 10 * k, 100 * k, records=10, timestamp=T0 + k) == 0
    entry = t.get(PID)
    assert [b[:2] for b in entry.batches] == [(10 * k, 10 * k + 9) for k in range(1, 6)]
    for k in range(1, 6):
        assert t.find_duplicate(PID, 0, 10 * k, 10 * k + 9) == (100 * k, 100 * k + 9, T0 + k)
        assert append(t, PID, 0, 10 * k, 999, records=10) == (100 * k, 100 * k + 9, T0 + k)
    assert t.find_duplicate(PID, 0, 0, 9) is None           # the 6th oldest was dropped
    assert append(t, PID, 0, 0, 999, records=10) == OUT_OF_ORDER
    # A duplicate must match both ends of the range and the epoch.
    assert t.find_duplicate(PID, 0, 10, 18) is None
    assert t.find_duplicate(PID, 0, 11, 19) is None
    assert t.find_duplicate(PID, 1, 10, 19) is None
    assert t.find_duplicate(2, 0, 10, 19) is None


def test_out_of_order_sequence():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, records=5) == 0          # seqs 0..4
    assert append(t, PID, 0, 6, 5) == OUT_OF_ORDER          # gap
    assert append(t, PID, 0, 4, 5) == OUT_OF_ORDER          # overlap, not a duplicate
    assert append(t, PID, 0, 3, 5, records=2) == OUT_OF_ORDER
    assert append(t, PID, 0, 5, 5) == 0                     # seq 5
    assert last_seq(t, PID) == 5


def test_stale_epoch_is_fenced_before_the_sequence_is_looked_at():
    t = ProducerTable()
    assert append(t, PID, 5, 0, 0) == 0
    assert t.check_batch(PID, 4, 1, 1, False, CLIENT) == INVALID_EPOCH
    assert t.check_batch(PID, 4, 77, 77, False, COORDINATOR) == INVALID_EPOCH
    assert t.check_batch(PID, 4, 77, 77, False, REPLICATION) == 0


def test_epoch_bump_must_start_at_sequence_zero():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, records=3) == 0
    assert append(t, PID, 1, 3, 3) == OUT_OF_ORDER          # new epoch, seq not 0
    assert append(t, PID, 1, 0, 3) == 0
    assert t.get(PID).epoch == 1 and [b[:2] for b in t.get(PID).batches] == [(0, 0)]  # old batches cleared


def test_out_of_sequence_after_control_record_epoch_bump():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, transactional=True) == 0
    assert append(t, PID, 0, 1, 1, transactional=True) == 0
    assert marker(t, PID, 1) == 0                           # abort with a bumped epoch: txn 0.. completed
    assert append(t, PID, 1, 2, 2, transactional=True) == OUT_OF_ORDER
    assert append(t, PID, 2, 2, 2, transactional=True) == OUT_OF_ORDER
    assert append(t, PID, 1, 0, 2, transactional=True) == 0
    entry = t.get(PID)
    assert (entry.epoch, entry.batches[-1][1]) == (1, 0)


def test_control_record_bumps_producer_epoch():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0) == 0
    assert marker(t, PID, 1, timestamp=T0 + 1) == -1        # no open transaction
    entry = t.get(PID)
    assert (entry.epoch, entry.txn_first_offset, entry.batches) == (1, -1, [])
    assert append(t, PID, 1, 0, 2) == 0


def test_append_txn_marker_with_no_producer_state():
    # Kafka: "if the transaction marker is the only thing left in the log, then
    # an attempt to write using a non-zero sequence number should cause an
    # OutOfOrderSequenceException". The spec's §8.8 reads as if any sequence were
    # accepted here; Kafka's checkSequence accepts any only for an unknown epoch.
    t = ProducerTable()
    assert marker(t, PID, 2, timestamp=T0 + 27) == -1
    entry = t.get(PID)
    assert (entry.epoch, entry.coordinator_epoch, entry.last_timestamp, entry.batches) == (2, 0, T0 + 27, [])
    assert append(t, PID, 0, 0, 4) == INVALID_EPOCH         # fencing works with only a marker left
    assert append(t, PID, 2, 17, 4) == OUT_OF_ORDER
    assert append(t, PID, 2, 0, 4) == 0
    assert last_seq(t, PID) == 0


def test_unknown_producer_is_accepted_at_any_sequence():
    t = ProducerTable()
    assert t.check_batch(PID, 3, 12345, 12349, False, CLIENT) == 0
    assert append(t, PID, 3, 12345, 0, records=5) == 0      # seqs 12345..12349
    assert append(t, PID, 3, 12350, 5) == 0
    assert append(t, PID, 3, 12352, 6) == OUT_OF_ORDER      # now known: gaps are refused
    assert t.remove(PID)                                    # expired or removed: unknown again
    assert append(t, PID, 3, 999, 7) == 0


def test_no_validation_on_first_entry_when_loading_log():
    t = ProducerTable()
    assert append(t, PID, 5, 16, 735, origin=REPLICATION) == 0
    assert t.get(PID).batches == [(16, 16, 735, 735, T0)]


def test_accept_append_with_sequence_gaps_on_replica():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0) == 0
    assert append(t, PID, 0, 3, 1) == OUT_OF_ORDER
    assert last_seq(t, PID) == 0
    assert append(t, PID, 0, 3, 1, origin=REPLICATION) == 0
    assert last_seq(t, PID) == 3


def test_sequence_not_validated_for_coordinator_origin():
    t = ProducerTable()
    assert append(t, PID, 0, -1, 99, transactional=True, origin=COORDINATOR) == 0
    assert append(t, PID, 0, -1, 100, transactional=True, origin=COORDINATOR) == 0
    assert t.check_batch(PID, 0, 7, 7, False, COORDINATOR) == INVALID_TXN_STATE  # txn state still checked


def test_producer_sequence_wrap_around():
    t = ProducerTable()
    assert append(t, PID, 15, INT32_MAX, 735, origin=REPLICATION) == 0
    assert append(t, PID, 15, 0, 1235) == 0                 # MAX then 0 is in sequence
    entry = t.get(PID)
    assert (entry.batches[0][0], entry.batches[-1][1]) == (INT32_MAX, 0)


def test_producer_sequence_with_wrap_around_batch_record():
    t = ProducerTable()
    first, last = INT32_MAX - 10, 9                         # 21 records across the wrap
    t.update_batch(PID, 15, first, last, 2000, 2020, T0, False)
    assert t.get(PID).batches == [(first, last, 2000, 2020, T0)]
    assert t.find_duplicate(PID, 15, first, last) == (2000, 2020, T0)
    assert t.check_batch(PID, 15, 10, 10, False, CLIENT) == 0


def test_producer_sequence_invalid_wrap_around():
    t = ProducerTable()
    assert append(t, PID, 15, INT32_MAX, 735, origin=REPLICATION) == 0
    assert append(t, PID, 15, 1, 1235) == OUT_OF_ORDER


# ---------------------------------------------------------------------------
# Transactions and markers


def test_non_transactional_append_with_ongoing_transaction():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, transactional=True) == 0
    assert append(t, PID, 0, 1, 1) == INVALID_TXN_STATE
    assert t.check_batch(PID, 0, 1, 1, False, REPLICATION) == 0  # replication checks nothing


def test_update_producer_transaction_state():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 9) == 0                     # seq 0 at 9, no transaction
    assert t.update_batch(PID, 0, 1, 5, 16, 20, T0, True) == 16   # opens the transaction at 16
    assert t.update_batch(PID, 0, 6, 10, 26, 30, T0, True) == -1  # already open
    assert t.open_transactions() == [(16, PID)]
    assert marker(t, PID, 0, coordinator_epoch=15, timestamp=T0 + 40) == 16   # COMMIT at 40 completes 16..40
    entry = t.get(PID)
    # The marker leaves the cached batches alone.
    assert entry == ProducerEntry(PID, 0, 15, -1, T0 + 40,
                                  [(0, 0, 9, 9, T0), (1, 5, 16, 20, T0), (6, 10, 26, 30, T0)])
    assert t.open_transactions() == []


def test_coordinator_fencing():
    t = ProducerTable()
    assert append(t, PID, 5, 0, 99, transactional=True) == 0
    assert marker(t, PID, 5, coordinator_epoch=1) == 99
    assert t.get(PID).coordinator_epoch == 1
    assert marker(t, PID, 5, coordinator_epoch=1) == -1     # the current coordinator epoch is allowed
    assert marker(t, PID, 5, coordinator_epoch=2) == -1     # so is a newer one
    assert marker(t, PID, 5, coordinator_epoch=1) == ("refused", FENCED)
    assert marker(t, PID, 5, coordinator_epoch=1, origin=REPLICATION) == -1


def test_old_epoch_for_control_record():
    t = ProducerTable()
    assert append(t, PID, 5, 0, 99, transactional=True) == 0
    assert marker(t, PID, 3) == ("refused", INVALID_EPOCH)
    assert t.open_transactions() == [(99, PID)]


def test_marker_with_no_open_transaction_completes_nothing():
    t = ProducerTable()
    assert marker(t, PID, 0) == -1
    assert append(t, PID, 0, 0, 0) == 0
    assert marker(t, PID, 0) == -1
    assert t.open_transactions() == []


def test_producer_state_after_fencing_abort_marker():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, transactional=True) == 0
    assert marker(t, PID, 1, timestamp=T0 + 1) == 0
    entry = t.get(PID)
    assert (entry.txn_first_offset, entry.batches) == (-1, [])
    assert t.expire(T0 + 1, EXPIRATION_MS) == []            # the fencing epoch is kept


def test_interleaved_transactions_of_several_producers():
    t = ProducerTable()
    assert append(t, 10, 0, 0, 0, transactional=True) == 0  # txn 10 opens at 0
    assert append(t, 11, 0, 0, 1, transactional=True) == 0  # txn 11 opens at 1
    assert append(t, 10, 0, 1, 2, transactional=True) == 0
    assert t.open_transactions() == [(0, 10), (1, 11)]
    assert marker(t, 10, 0, timestamp=T0 + 3) == 0          # abort at 3 completes 0..3
    assert t.open_transactions() == [(1, 11)]
    assert append(t, 10, 0, 2, 4, transactional=True) == 0  # a new txn of 10 at 4
    assert t.open_transactions() == [(1, 11), (4, 10)]


# ---------------------------------------------------------------------------
# Staging: prepare, then commit


def test_prepare_update_does_not_mutate():
    t = ProducerTable()
    t.begin()
    assert t.check_batch(PID, 0, 0, 5, False, CLIENT) == 0
    t.update_batch(PID, 0, 0, 5, 15, 20, T0, False)
    assert t.get(PID) is None and len(t) == 0 and PID not in t
    t.commit()
    t.begin()
    assert t.check_batch(PID, 0, 6, 10, False, CLIENT) == 0
    t.update_batch(PID, 0, 6, 10, 26, 30, T0, False)
    assert t.get(PID).batches == [(0, 5, 15, 20, T0)]
    t.commit()
    assert t.get(PID).batches == [(0, 5, 15, 20, T0), (6, 10, 26, 30, T0)]


def test_staged_second_batch_is_checked_against_the_first():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, records=5) == 0          # seqs 0..4
    t.begin()
    assert t.check_batch(PID, 0, 5, 9, False, CLIENT) == 0
    t.update_batch(PID, 0, 5, 9, 5, 9, T0, False)
    assert t.check_batch(PID, 0, 5, 9, False, CLIENT) == OUT_OF_ORDER  # checked against the staged batch
    assert t.check_batch(PID, 0, 10, 14, False, CLIENT) == 0
    # A transaction opened by the first batch makes a plain second batch invalid.
    assert t.check_batch(7, 0, 0, 0, True, CLIENT) == 0
    assert t.update_batch(7, 0, 0, 0, 10, 10, T0, True) == 10
    assert t.check_batch(7, 0, 1, 1, False, CLIENT) == INVALID_TXN_STATE
    assert t.check_marker(7, 0, 0, CLIENT) == 0
    assert t.update_marker(7, 0, 3, T0) == 10
    assert t.check_marker(7, 0, 2, CLIENT) == FENCED        # the staged marker's coordinator epoch
    t.commit()
    assert t.get(7).coordinator_epoch == 3 and t.open_transactions() == []


def test_staged_rollback_leaves_no_trace():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, transactional=True) == 0
    before = (t.to_snapshot(), list(t.items()), t.open_transactions())
    t.begin()
    t.update_batch(PID, 0, 1, 1, 1, 1, T0 + 1, True)
    t.update_marker(PID, 1, 4, T0 + 2)
    t.update_batch(2, 0, 0, 0, 3, 3, T0 + 3, True)
    assert t.staging
    t.rollback()
    assert not t.staging
    assert (t.to_snapshot(), list(t.items()), t.open_transactions()) == before
    t.rollback()                                            # nothing staged: a no-op


def test_staged_duplicates_read_committed_state():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0) == 0
    t.begin()
    t.update_batch(PID, 0, 1, 1, 1, 1, T0, False)
    assert t.find_duplicate(PID, 0, 1, 1) is None           # staged batches are not duplicates yet
    assert t.find_duplicate(PID, 0, 0, 0) == (0, 0, T0)
    t.commit()
    assert t.find_duplicate(PID, 0, 1, 1) == (1, 1, T0)


def test_staged_epoch_bump_keeps_kafkas_merge():
    # Kafka merges the staged entry into the committed one (ProducerStateEntry.update):
    # the committed batches survive unless the committed epoch differs.
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0) == 0
    t.begin()
    t.update_batch(PID, 1, 0, 0, 1, 1, T0, False)           # replication: epoch 1 ...
    t.update_batch(PID, 0, 7, 7, 2, 2, T0, False)           # ... and back to 0
    t.commit()
    assert [b[1] for b in t.get(PID).batches] == [0, 7]


def test_staged_unknown_producer_accepts_any_sequence_for_the_whole_append():
    # Kafka's checkSequence tests the *committed* epoch for "unknown": within one
    # append the second batch of a new producer is not sequence-checked either.
    t = ProducerTable()
    t.begin()
    assert t.check_batch(PID, 0, 50, 50, False, CLIENT) == 0
    t.update_batch(PID, 0, 50, 50, 0, 0, T0, False)
    assert t.check_batch(PID, 0, 90, 90, False, CLIENT) == 0
    t.commit()
    assert t.check_batch(PID, 0, 90, 90, False, CLIENT) == OUT_OF_ORDER


def test_staging_misuse_is_refused():
    t = ProducerTable()
    with pytest.raises(RuntimeError):
        t.commit()
    t.begin()
    with pytest.raises(RuntimeError):
        t.begin()
    for call in (lambda: t.remove(PID), t.clear, lambda: t.expire(T0, 1)):
        with pytest.raises(RuntimeError):
            call()
    t.rollback()
    with pytest.raises(ValueError):
        t.check_batch(PID, 0, 0, 0, False, 7)
    with pytest.raises(ValueError):
        t.check_marker(PID, 0, 0, -1)
    with pytest.raises(OverflowError):
        t.check_batch(PID, 2**15, 0, 0, False, CLIENT)


def test_staging_many_producers_in_one_append():
    t = ProducerTable()
    t.begin()
    for pid in range(100):
        t.update_batch(pid, 0, 0, 0, pid, pid, T0, pid % 2 == 0)
    t.commit()
    assert len(t) == 100 and len(t.open_transactions()) == 50
    assert t.memory_bytes() < 64 * 1024


# ---------------------------------------------------------------------------
# Expiration, removal, the map


def test_pid_expiration_timeout():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, timestamp=T0) == 0
    assert t.expire(T0 + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    assert t.expire(T0 + EXPIRATION_MS, EXPIRATION_MS) == [PID]
    assert append(t, PID, 0, 1, 1) == 0                     # unknown again: any sequence


def test_producers_with_ongoing_transactions_dont_expire():
    t = ProducerTable()
    assert append(t, PID, 5, 0, 99, transactional=True, timestamp=T0) == 0
    assert append(t, 2, 5, 0, 100, timestamp=T0) == 0
    assert t.expire(T0 + EXPIRATION_MS + 1, EXPIRATION_MS) == [2]
    assert t.open_transactions() == [(99, PID)]
    assert marker(t, PID, 5, timestamp=T0) == 99
    assert t.expire(T0 + EXPIRATION_MS + 1, EXPIRATION_MS) == [PID]


def test_remove_and_swap_move_keep_every_producer_findable():
    t = ProducerTable()
    rng = random.Random(4)
    ids = rng.sample(range(2**62), 100_000)
    for i, pid in enumerate(ids):
        t.update_batch(pid, i % 7, 0, 2, 3 * i, 3 * i + 2, T0 + i, i % 3 == 0)
    assert len(t) == len(ids)
    gone = set(rng.sample(ids, 50_000))
    for pid in gone:
        assert t.remove(pid)
    assert not t.remove(next(iter(gone)))
    assert len(t) == 50_000
    for i, pid in enumerate(ids):
        entry = t.get(pid)
        if pid in gone:
            assert entry is None and pid not in t
        else:
            assert entry == ProducerEntry(pid, i % 7, -1, 3 * i if i % 3 == 0 else -1, T0 + i,
                                          [(0, 2, 3 * i, 3 * i + 2, T0 + i)])
    assert sorted(e.producer_id for e in t.items()) == sorted(set(ids) - gone)
    for pid in gone:                                        # and they come back
        t.update_batch(pid, 0, 0, 0, 0, 0, T0, False)
    assert len(t) == 100_000 and all(pid in t for pid in ids)


def test_expire_many_keeps_the_rest():
    t = ProducerTable()
    for pid in range(20_000):
        t.update_batch(pid, 0, 0, 0, pid, pid, T0 + pid % 100, pid % 10 == 0)
    gone = t.expire(T0 + 50 + EXPIRATION_MS, EXPIRATION_MS)  # idle ones, timestamp <= T0 + 50
    expected = [p for p in range(20_000) if p % 100 <= 50 and p % 10 != 0]
    assert sorted(gone) == expected
    assert sorted(e.producer_id for e in t.items()) == sorted(set(range(20_000)) - set(expected))


def test_items_refuse_a_table_that_changes_under_them():
    t = ProducerTable()
    for pid in range(10):
        t.update_batch(pid, 0, 0, 0, 0, 0, T0, False)
    it = t.items()
    next(it)
    t.remove(5)
    with pytest.raises(RuntimeError):
        list(it)


def test_clear_and_memory():
    t = ProducerTable()
    small = t.memory_bytes()
    for pid in range(20_000):
        for k in range(5):
            t.update_batch(pid, 0, k, k, k, k, T0, False)
    assert t.memory_bytes() / len(t) <= 256
    assert t.get(19_999).batches[0][:2] == (0, 0) and len(t.get(19_999).batches) == 5
    t.clear()
    assert len(t) == 0 and t.memory_bytes() == small and t.get(0) is None
    one = ProducerTable()
    one.update_batch(PID, 0, 0, 0, 0, 0, T0, False)
    assert one.memory_bytes() < 4096                        # a partition with one producer stays small


# ---------------------------------------------------------------------------
# Snapshots


def _entries(data: bytes) -> list[bytes]:
    return sorted(data[p:p + 46] for p in range(10, len(data), 46))


def test_empty_snapshot_is_the_vector(vector):
    data, doc = vector("producer_snapshot_empty")
    assert ProducerTable().to_snapshot() == data == bytes.fromhex("000148674bc700000000")
    assert len(ProducerTable.from_snapshot(data)) == 0
    assert doc["expected"]["crc"] == crc32c(data[6:])


def test_take_snapshot_keeps_only_the_last_batch():
    t = ProducerTable()
    for k in range(5):
        assert append(t, PID, 3, 10 * k, 100 * k, records=10, timestamp=T0 + k) == 0
    assert append(t, 2, 0, 0, 500, transactional=True, timestamp=T0 + 9) == 0
    assert marker(t, 3, 4, coordinator_epoch=6, timestamp=T0 + 11) == -1   # no batch: lastOffset -1
    data = t.to_snapshot()
    assert len(data) == 10 + 46 * 3 and data[:2] == b"\x00\x01"
    assert int.from_bytes(data[2:6], "big") == crc32c(data[6:])
    back = ProducerTable.from_snapshot(data)
    assert back.get(PID) == ProducerEntry(PID, 3, -1, -1, T0 + 4, [(40, 49, 400, 409, T0 + 4)])
    assert back.get(2) == ProducerEntry(2, 0, -1, 500, T0 + 9, [(0, 0, 500, 500, T0 + 9)])
    assert back.get(3) == ProducerEntry(3, 4, 6, -1, T0 + 11, [])
    assert back.open_transactions() == [(500, 2)]
    assert back.to_snapshot() == data                       # same order: byte-identical
    # Retries of the last batch are still duplicates; older ones are now out of order.
    assert append(back, PID, 3, 40, 999, records=10) == (400, 409, T0 + 4)
    assert append(back, PID, 3, 30, 999, records=10) == OUT_OF_ORDER


def test_batch_timestamp_after_reload_is_the_producers_last_timestamp():
    # A snapshot has one timestamp per producer; Kafka gives it to the restored batch too.
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, transactional=True, timestamp=T0) == 0
    assert marker(t, PID, 0, timestamp=T0 + 30) == 0
    back = ProducerTable.from_snapshot(t.to_snapshot())
    assert back.get(PID).batches == [(0, 0, 0, 0, T0 + 30)]


def test_recover_from_snapshot_unfinished_and_finished_transaction():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, transactional=True) == 0
    assert append(t, 2, 0, 0, 1, transactional=True) == 0
    assert marker(t, 2, 0) == 1
    back = ProducerTable.from_snapshot(t.to_snapshot())
    assert back.open_transactions() == [(0, PID)]
    assert append(back, PID, 0, 1, 2) == INVALID_TXN_STATE
    assert marker(back, PID, 0) == 0


def test_coordinator_fenced_after_reload():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 99, transactional=True) == 0
    assert marker(t, PID, 0, coordinator_epoch=1) == 99
    back = ProducerTable.from_snapshot(t.to_snapshot())
    assert marker(back, PID, 0, coordinator_epoch=0) == ("refused", FENCED)


def test_remove_expired_pids_on_reload():
    t = ProducerTable()
    assert append(t, PID, 0, 0, 0, timestamp=0) == 0
    assert append(t, PID, 0, 1, 1, timestamp=1) == 0
    assert append(t, 2, 0, 0, 2, timestamp=0, transactional=True) == 0
    assert append(t, 3, 0, 0, 3, timestamp=60_000) == 0
    back = ProducerTable.from_snapshot(t.to_snapshot(), 70_000, 60_000)
    assert sorted(e.producer_id for e in back.items()) == [2, 3]   # 1 expired; 2 has an open transaction
    assert append(back, PID, 0, 2, 4) == 0                  # unknown again: accepted
    assert len(ProducerTable.from_snapshot(t.to_snapshot())) == 3
    with pytest.raises(ValueError):
        ProducerTable.from_snapshot(t.to_snapshot(), 70_000)


def test_duplicate_producer_ids_in_a_snapshot_keep_the_last_entry():
    a, b = ProducerTable(), ProducerTable()
    assert append(a, PID, 0, 0, 0) == 0
    assert append(b, PID, 4, 0, 7, transactional=True) == 0
    body = a.to_snapshot()[6:] + b.to_snapshot()[10:]
    body = (2).to_bytes(4, "big") + body[4:]
    data = b"\x00\x01" + crc32c(body).to_bytes(4, "big") + body
    back = ProducerTable.from_snapshot(data)
    assert len(back) == 1 and back.get(PID) == b.get(PID)


def _snapshot_with(count: int = 2) -> bytes:
    t = ProducerTable()
    for pid in range(count):
        assert append(t, pid, 0, 0, pid, transactional=True) == 0
    return t.to_snapshot()


@pytest.mark.parametrize("damage, reason", [
    (lambda d: d[:len(d) // 2], "truncated"),                                   # testLoadFromTruncatedSnapshotFile
    (lambda d: b"", "truncated"),                                               # testLoadFromEmptySnapshotFile
    (lambda d: d[:9], "truncated"),
    (lambda d: d[:-1], "truncated"),
    (lambda d: d + b"\x00", "padded"),
    (lambda d: d[:40] + bytes(37) + d[77:], "CRC"),                             # testLoadFromCorruptSnapshotFile
    (lambda d: d[:2] + bytes(4) + d[6:], "CRC"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "CRC"),
    (lambda d: b"\x00\x02" + d[2:], "version"),
    (lambda d: b"\x00\x00" + d[2:], "version"),
    (lambda d: d[:6] + b"\xff\xff\xff\xff" + d[10:], "negative"),
    (lambda d: d[:6] + b"\x00\x00\x00\x03" + d[10:], "truncated"),
], ids=["half", "empty", "header-cut", "entry-cut", "padded", "garbage", "zero-crc", "flipped-bit",
        "version-2", "version-0", "negative-count", "count-too-big"])
def test_corrupt_snapshot_raises(damage, reason):
    data = _snapshot_with()
    with pytest.raises(CorruptSnapshotError, match=reason):
        ProducerTable.from_snapshot(damage(data))


def test_snapshot_accepts_any_bytes_like():
    data = _snapshot_with(3)
    for form in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert ProducerTable.from_snapshot(form).to_snapshot() == data
    with pytest.raises(TypeError):
        ProducerTable.from_snapshot("not bytes")


def _segment_txn():
    doc = (VECTORS / "segment_txn" / "segment_txn.json").read_text()
    snapshot = bytes.fromhex("".join((VECTORS / "segment_txn" / "00000000000000000012.snapshot.hex")
                                     .read_text().split()))
    log = bytes.fromhex("".join((VECTORS / "segment_txn" / "00000000000000000000.log.hex").read_text().split()))
    return json.loads(doc)["expected"], snapshot, log


def test_segment_txn_snapshot_loads_with_the_documented_producers():
    expected, snapshot, _ = _segment_txn()
    table = ProducerTable.from_snapshot(snapshot)
    assert len(table) == len(expected["producers"])
    for pid, p in expected["producers"].items():
        batches = []
        if p["lastOffset"] >= 0:
            first_seq = p["lastSeq"] - p["offsetDelta"]
            batches = [(first_seq, p["lastSeq"], p["lastOffset"] - p["offsetDelta"], p["lastOffset"], p["timestamp"])]
        assert table.get(int(pid)) == ProducerEntry(int(pid), p["epoch"], p["coordinatorEpoch"],
                                                    p["currentTxnFirstOffset"], p["timestamp"], batches)
    assert table.to_snapshot() == snapshot                  # loaded in file order, written in the same order


def test_replaying_segment_txn_log_gives_its_snapshot():
    """Replication-origin replay of the vector's .log ends in exactly the vector's snapshot entries."""
    _, snapshot, log = _segment_txn()
    table = ProducerTable()
    completed = []
    for entry in K.iter_entries(log):
        h = K.read_header(log[entry.position:entry.position + entry.size_in_bytes])
        if h.producer_id < 0:
            continue
        if h.is_control:
            control = K.read_control_record(K.decode_entry(log, entry)[0])
            assert table.check_marker(h.producer_id, h.producer_epoch, control.coordinator_epoch, REPLICATION) == 0
            first = table.update_marker(h.producer_id, h.producer_epoch, control.coordinator_epoch, h.max_timestamp)
            completed.append((h.producer_id, first, h.base_offset, control.type_name))
        else:
            assert table.check_batch(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                                     h.is_transactional, REPLICATION) == 0
            table.update_batch(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                               h.base_offset, h.last_offset, h.max_timestamp, h.is_transactional)
    assert completed == [(4000, 2, 7, "COMMIT"), (4001, 8, 10, "ABORT")]
    assert _entries(table.to_snapshot()) == _entries(snapshot)


# ---------------------------------------------------------------------------
# The table against the model


PIDS = (0, 1, 2, 3, 2**40 + 7, 2**63 - 1)
SEQ_KINDS = ("next", "next", "next", "zero", "dup", "near-max", "random")
EPOCH_KINDS = ("same", "same", "same", "same", "bump", "stale", "random")


class ProducerTableMachine(RuleBasedStateMachine):
    """Random batches, markers, staged appends, expirations, removals and snapshot round trips."""

    def __init__(self):
        super().__init__()
        self.table = ProducerTable()
        self.model = ProducerModel()
        self.offset = 0
        self.now = T0

    # -- choosing inputs from the model's state --------------------------------------------

    def _current(self, pid):
        """Kafka's view for checks: the staged entry if any, else the committed one."""
        stage = self.model.stage or {}
        return stage.get(pid) or self.model.producers.get(pid)

    def _epoch(self, pid, kind, rand):
        entry = self._current(pid)
        epoch = 0 if entry is None or entry.epoch < 0 else entry.epoch
        return {"same": epoch, "bump": min(epoch + 1, 2**15 - 1), "stale": max(epoch - 1, 0),
                "random": rand % 4}[kind]

    def _first_seq(self, pid, kind, rand):
        entry = self._current(pid)
        committed = self.model.producers.get(pid)
        if kind == "next":
            last = entry.last_seq() if entry is not None and entry.batches else (
                committed.last_seq() if committed is not None else -1)
            return 0 if last == INT32_MAX else last + 1
        if kind == "dup" and committed is not None and committed.batches:
            seq, _, delta, _ = committed.batches[rand % len(committed.batches)]
            return ("dup", seq, delta)
        if kind == "near-max":
            return INT32_MAX - rand % 3
        if kind == "random":
            return rand % 20
        return 0

    def _batch(self, pid, epoch_kind, seq_kind, records, rand, transactional, origin):
        epoch = self._epoch(pid, epoch_kind, rand)
        first = self._first_seq(pid, seq_kind, rand)
        if isinstance(first, tuple):
            _, last, delta = first
            first = decrement_sequence(last, delta)
            records = delta + 1
        else:
            last = increment_sequence(first, records - 1)
        first_offset, last_offset = self.offset, self.offset + records - 1
        self.offset += records
        timestamp = self.now + rand % 5
        if rand & 1:
            return self._one_call_batch(pid, epoch, first, last, first_offset, last_offset, timestamp,
                                        transactional, origin)
        if origin == CLIENT:
            found = self.table.find_duplicate(pid, epoch, first, last)
            assert found == self.model.find_duplicate(pid, epoch, first, last), (pid, epoch, first, last)
            if found is not None:
                event("batch: duplicate")
                return "duplicate"
        code = self.table.check_batch(pid, epoch, first, last, transactional, origin)
        assert code == self.model.check_batch(pid, epoch, first, last, transactional, origin), \
            (pid, epoch, first, last, transactional, origin, self._current(pid))
        event(f"batch: {code}")
        if code:
            return code
        args = (pid, epoch, first, last, first_offset, last_offset, timestamp, transactional)
        assert self.table.update_batch(*args) == self.model.update_batch(*args)
        return 0

    def _one_call_batch(self, pid, epoch, first, last, first_offset, last_offset, timestamp, transactional, origin):
        # append_batch, the append path's single call, must be the three calls in one.
        code = self.table.append_batch(pid, epoch, first, last, first_offset, last_offset, timestamp,
                                       transactional, origin)
        found = self.model.find_duplicate(pid, epoch, first, last) if origin == CLIENT else None
        if found is not None:
            assert code == ps.DUPLICATE and self.table.duplicate == found
            event("one call: duplicate")
            return "duplicate"
        assert code == self.model.check_batch(pid, epoch, first, last, transactional, origin), \
            (pid, epoch, first, last, transactional, origin, self._current(pid))
        event(f"one call: {code}")
        if code:
            return code
        opened = self.model.update_batch(pid, epoch, first, last, first_offset, last_offset, timestamp, transactional)
        assert self.table.opened_txn == opened
        return 0

    def _marker(self, pid, epoch_kind, coordinator_epoch, rand, origin):
        epoch = self._epoch(pid, epoch_kind, rand)
        code = self.table.check_marker(pid, epoch, coordinator_epoch, origin)
        assert code == self.model.check_marker(pid, epoch, coordinator_epoch, origin)
        event(f"marker: {code}")
        if code:
            return code
        self.offset += 1
        args = (pid, epoch, coordinator_epoch, self.now)
        assert self.table.update_marker(*args) == self.model.update_marker(*args)
        return 0

    # -- rules ------------------------------------------------------------------------------

    batch_args = dict(pid=st.sampled_from(PIDS), epoch_kind=st.sampled_from(EPOCH_KINDS),
                      seq_kind=st.sampled_from(SEQ_KINDS), records=st.integers(1, 4),
                      rand=st.integers(0, 2**16), transactional=st.booleans(),
                      origin=st.sampled_from((CLIENT, CLIENT, CLIENT, COORDINATOR, REPLICATION)))
    marker_args = dict(pid=st.sampled_from(PIDS), epoch_kind=st.sampled_from(EPOCH_KINDS),
                       coordinator_epoch=st.integers(0, 3), rand=st.integers(0, 2**16),
                       origin=st.sampled_from((CLIENT, CLIENT, COORDINATOR, REPLICATION)))

    @rule(**batch_args)
    def batch(self, pid, epoch_kind, seq_kind, records, rand, transactional, origin):
        self._batch(pid, epoch_kind, seq_kind, records, rand, transactional, origin)

    @rule(**marker_args)
    def end_transaction(self, pid, epoch_kind, coordinator_epoch, rand, origin):
        self._marker(pid, epoch_kind, coordinator_epoch, rand, origin)

    @rule(ops=st.lists(st.one_of(st.fixed_dictionaries({"kind": st.just("batch"), **batch_args}),
                                 st.fixed_dictionaries({"kind": st.just("marker"), **marker_args})),
                       min_size=1, max_size=5),
          write_fails=st.booleans())
    def staged_append(self, ops, write_fails):
        self.table.begin()
        self.model.begin()
        ok = True
        for op in ops:
            op = dict(op)
            kind = op.pop("kind")
            if kind == "batch":
                result = self._batch(**op)
            else:
                result = self._marker(**op)
            if result != 0:
                ok = False  # a duplicate or a refused batch fails the whole append
                break
        if ok and not write_fails:
            self.table.commit()
            self.model.commit()
        else:
            self.table.rollback()
            self.model.rollback()

    @rule(ms=st.integers(0, 3 * EXPIRATION_MS // 4))
    def time_passes(self, ms):
        self.now += ms

    @rule(expiration=st.sampled_from((1, 1000, EXPIRATION_MS)))
    def expire(self, expiration):
        assert sorted(self.table.expire(self.now, expiration)) == sorted(self.model.expire(self.now, expiration))

    @rule(pid=st.sampled_from(PIDS))
    def remove(self, pid):
        assert self.table.remove(pid) == self.model.remove(pid)

    @rule(expire=st.booleans())
    def snapshot_round_trip(self, expire):
        data = self.table.to_snapshot()
        if expire:
            self.table = ProducerTable.from_snapshot(data, self.now, EXPIRATION_MS)
            self.model.snapshot_roundtrip(self.now, EXPIRATION_MS)
        else:
            self.table = ProducerTable.from_snapshot(data)
            self.model.snapshot_roundtrip()
            assert self.table.to_snapshot() == data

    # -- what must always hold ----------------------------------------------------------------

    @invariant()
    def same_state(self):
        assert not self.table.staging
        for pid in PIDS:
            found = self.table.get(pid)
            assert (None if found is None else tuple(found)) == self.model.view(pid), pid
        assert len(self.table) == len(self.model.producers)
        assert self.table.open_transactions() == self.model.open_transactions()
        assert sorted(tuple(e) for e in self.table.items()) == sorted(self.model.view(p) for p in self.model.producers)


def test_table_matches_the_model():
    run_state_machine_as_test(ProducerTableMachine, settings=settings(
        max_examples=150, stateful_step_count=50, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]))


@pytest.mark.soak
def test_table_matches_the_model_soak():
    run_state_machine_as_test(ProducerTableMachine, settings=settings(
        max_examples=3000, stateful_step_count=100, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]))
