"""Producer state as the log applies it: Kafka's ProducerStateManager and transaction scenarios,
end to end through `Log` (appends, markers, the .txnindex, the last stable offset, read_committed)."""
from __future__ import annotations

import json
import os
import time

import pytest

import logstore.formats.kafka as K
from logstore.config import LogConfig
from logstore.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from logstore.index import AbortedTxn
from logstore.log import Log
from vector_dirs import VECTORS

MAX_SEQ = 2**31 - 1
# Now: snapshots drop producers idle past producer.id.expiration.ms (24 h) on load.
TS = int(time.time() * 1000)


@pytest.fixture
def log(tmp_path):
    opened = Log.open(str(tmp_path / "t-0"))
    yield opened
    opened.close()


def produce(log, pid, epoch, seq, n=1, *, txn=False, ts=TS):
    """One batch of `n` records from a producer."""
    return log.append_records([b"%d:%d" % (pid, seq + i) for i in range(n)], timestamps=ts, producer_id=pid,
                              producer_epoch=epoch, base_sequence=seq, transactional=txn)


def plain(log, n=1):
    return log.append_records([b"plain"] * n, timestamps=TS)


def end_txn(log, pid, epoch, *, commit, coordinator_epoch=0, ts=TS):
    return log.write_txn_marker(pid, epoch, coordinator_epoch, commit=commit, timestamp=ts)


def aborted_entries(log):
    return [t for s in log.segments for t in s.txn_index.entries]


# -- idempotence ---------------------------------------------------------------------------


def test_each_of_the_last_five_batches_is_a_duplicate_and_the_sixth_is_not(log):
    firsts = [produce(log, 7, 0, seq * 2, 2) for seq in range(6)]
    end = log.log_end_offset
    size = log.size
    for original in firsts[1:]:
        retry = produce(log, 7, 0, original.first_offset, 2)
        assert retry.duplicate and (retry.first_offset, retry.last_offset) == \
            (original.first_offset, original.last_offset)
    assert (log.log_end_offset, log.size) == (end, size)
    # The oldest fell out of the five cached: not recognised, and out of sequence.
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 7, 0, 0, 2)
    assert (log.log_end_offset, log.size) == (end, size)


def test_a_sequence_gap_is_out_of_order_and_writes_nothing(log):
    produce(log, 7, 0, 0, 3)
    with pytest.raises(OutOfOrderSequenceError) as info:
        produce(log, 7, 0, 4)
    assert info.value.code == 45
    assert log.log_end_offset == 3
    assert produce(log, 7, 0, 3).first_offset == 3


def test_an_unknown_producer_may_start_at_any_sequence(log):
    # Kafka >= 2.5 (KIP-360): state may have been lost to retention or expiry.
    assert produce(log, 9, 4, 1234).first_offset == 0
    assert produce(log, 9, 4, 1235).first_offset == 1


def test_an_older_epoch_is_fenced(log):
    produce(log, 7, 0, 0)
    produce(log, 7, 1, 0)
    with pytest.raises(InvalidProducerEpochError) as info:
        produce(log, 7, 0, 1)
    assert info.value.code == 47


def test_a_new_epoch_must_start_at_sequence_zero(log):
    produce(log, 7, 0, 0, 5)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 7, 1, 5)
    assert produce(log, 7, 1, 0).first_offset == 5


def test_sequences_wrap_around_after_int32_max(log):
    produce(log, 7, 0, MAX_SEQ - 1, 2)
    assert produce(log, 7, 0, 0, 2).first_offset == 2
    # A batch whose sequences wrap inside it: MAX-1, MAX, 0.
    produce(log, 8, 0, MAX_SEQ - 1, 3)
    assert produce(log, 8, 0, 1).last_offset == 7
    assert produce(log, 8, 0, MAX_SEQ - 1, 3).duplicate


def test_a_failed_batch_in_a_multi_batch_append_changes_nothing(log):
    produce(log, 7, 0, 0)
    good = K.encode_batch([None], [b"a"], None, TS, producer_id=7, producer_epoch=0, base_sequence=1)
    follows = K.encode_batch([None], [b"b"], None, TS, producer_id=8, producer_epoch=0, base_sequence=0)
    gap = K.encode_batch([None], [b"c"], None, TS, producer_id=7, producer_epoch=0, base_sequence=3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(bytearray(good + follows + gap))
    assert log.log_end_offset == 1 and log.producers.entry(8) is None
    assert log.producers.entry(7).batches[-1][1] == 0
    # The second batch of one producer is checked against the first of the same append.
    chained = K.encode_batch([None], [b"c"], None, TS, producer_id=7, producer_epoch=0, base_sequence=2)
    result = log.append(bytearray(good + follows + chained))
    assert (result.first_offset, result.last_offset) == (1, 3)
    assert log.producers.entry(7).batches[-1][:2] == (2, 2)


# -- transactions --------------------------------------------------------------------------


def test_non_transactional_write_inside_an_open_transaction_is_refused(log):
    produce(log, 7, 0, 0, txn=True)
    with pytest.raises(InvalidTxnStateError) as info:
        produce(log, 7, 0, 1)
    assert info.value.code == 48


def test_a_marker_from_a_fenced_coordinator_is_refused(log):
    produce(log, 7, 0, 0, txn=True)
    end_txn(log, 7, 0, commit=True, coordinator_epoch=5)
    produce(log, 7, 0, 1, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError) as info:
        end_txn(log, 7, 0, commit=False, coordinator_epoch=4)
    assert info.value.code == 52
    assert log.last_stable_offset == 2  # still open
    end_txn(log, 7, 0, commit=False, coordinator_epoch=5)
    assert log.last_stable_offset == log.log_end_offset == 4


def test_a_marker_without_an_open_transaction_completes_nothing(log):
    end_txn(log, 7, 0, commit=False)
    assert aborted_entries(log) == [] and log.last_stable_offset == 1
    assert log.producers.entry(7).coordinator_epoch == 0


def test_interleaved_transactions_give_kafkas_aborted_entries_and_lso(log):
    plain(log)                                          # 0
    assert log.last_stable_offset == 1
    produce(log, 1, 0, 0, 2, txn=True)                  # 1-2: txn A opens at 1
    assert log.last_stable_offset == 1
    produce(log, 2, 0, 0, txn=True)                     # 3: txn B opens at 3
    plain(log)                                          # 4
    assert log.last_stable_offset == 1
    end_txn(log, 2, 0, commit=False)                    # 5: B aborted; A (from 1) still open
    assert aborted_entries(log) == [AbortedTxn(2, 3, 5, 1)]
    assert log.last_stable_offset == 1
    produce(log, 1, 0, 2, txn=True)                     # 6
    produce(log, 3, 0, 0, txn=True)                     # 7: txn C opens at 7
    end_txn(log, 1, 0, commit=True)                     # 8: A committed; C is the oldest open
    assert log.last_stable_offset == 7
    end_txn(log, 3, 0, commit=False)                    # 9: C aborted, no other open: LSO marker + 1
    assert aborted_entries(log) == [AbortedTxn(2, 3, 5, 1), AbortedTxn(3, 7, 9, 10)]
    assert log.last_stable_offset == log.log_end_offset == 10


def test_read_committed_stops_at_the_lso_and_drops_aborted_batches(log):
    plain(log)                                          # 0
    produce(log, 1, 0, 0, 2, txn=True)                  # 1-2 (aborted below)
    produce(log, 2, 0, 0, txn=True)                     # 3   (committed below)
    end_txn(log, 1, 0, commit=False)                    # 4
    plain(log)                                          # 5
    produce(log, 3, 0, 0, txn=True)                     # 6   (open)
    end_txn(log, 2, 0, commit=True)                     # 7
    assert log.last_stable_offset == 6
    committed = log.read_records(0, isolation="read_committed")
    assert [r.offset for r in committed] == [0, 3, 5]
    uncommitted = log.read_records(0)
    assert [r.offset for r in uncommitted] == [0, 1, 2, 3, 5, 6]
    data = log.read(0, isolation="read_committed")
    assert data.last_stable_offset == 6
    # B (from 3) was still open when A's abort marker went in: Kafka records 3 as the LSO then.
    assert data.aborted_transactions == [AbortedTxn(1, 1, 4, 3)]
    # The slice ends at the batch holding the LSO.
    assert max(e.last_offset for e in K.iter_entries(data.read())) == 5
    assert log.read(0).aborted_transactions is None
    end_txn(log, 3, 0, commit=False)                    # 8
    assert [r.offset for r in log.read_records(0, isolation="read_committed")] == [0, 3, 5]


def test_isolation_names_are_kafkas(log):
    with pytest.raises(ValueError, match="isolation"):
        log.read(0, isolation="committed")


# -- snapshots, reopening, expiration ------------------------------------------------------


def _state(log):
    return log.producers.entries(), log.producers.ongoing_transactions, aborted_entries(log)


def _fill_transactions(log):
    produce(log, 1, 0, 0, 2, txn=True)
    produce(log, 2, 3, 10, 2)
    end_txn(log, 1, 0, commit=False, coordinator_epoch=2)
    produce(log, 1, 0, 2, txn=True)
    produce(log, 4, 0, 0, txn=True)
    end_txn(log, 1, 0, commit=True, coordinator_epoch=2)


def test_close_snapshots_at_the_log_end_and_reopen_replays_nothing(tmp_path):
    path = str(tmp_path / "t-0")
    with Log.open(path) as log:
        _fill_transactions(log)
        before = _state(log)
        end = log.log_end_offset
    assert os.path.exists(os.path.join(path, f"{end:020d}.snapshot"))
    with Log.open(path, clean_shutdown=True) as log:
        load = log.recovery_report.producer_state
        assert (load.snapshot_offset, load.replayed_batches) == (end, 0)
        # A snapshot keeps only the last batch of each producer, as Kafka's does.
        entries, ongoing, aborted = _state(log)
        assert ongoing == before[1] and aborted == before[2]
        for pid, entry in entries.items():
            assert entry._replace(batches=entry.batches[-1:]) == before[0][pid]._replace(
                batches=before[0][pid].batches[-1:])
        # The retry of the last batch is still caught.
        assert produce(log, 2, 3, 10, 2).duplicate
        assert log.last_stable_offset == before[1][4]


def test_unclean_reopen_replays_from_the_roll_snapshot_and_rebuilds_the_txnindex(tmp_path):
    path = str(tmp_path / "t-0")
    config = LogConfig.from_properties({"segment.bytes": 250})
    log = Log.open(path, config)
    _fill_transactions(log)
    produce(log, 5, 0, 0, txn=True)
    end_txn(log, 5, 0, commit=False)
    assert len(log.segments) > 2
    before = _state(log)
    log.flush()
    # A crash: nothing closed; the txnindex of the last segments is lost too.
    for segment in log.segments:
        if os.path.exists(segment.txn_index.path):
            os.unlink(segment.txn_index.path)
    reopened = Log.open(path, config, recovery_point=log.segments[-2].base_offset)
    try:
        load = reopened.recovery_report.producer_state
        assert load.snapshot_offset is not None and load.replayed_batches > 0
        assert load.rebuilt_txn_indexes == [s.base_offset for s in log.segments[-2:]]
        entries, ongoing, aborted = _state(reopened)
        assert ongoing == before[1]
        rebuilt_from = log.segments[-2].base_offset
        assert aborted == [t for t in before[2] if t.last_offset >= rebuilt_from]
        assert {p: e.epoch for p, e in entries.items()} == {p: e.epoch for p, e in before[0].items()}
        # The aborted batch is still the producer's last: its retry is caught, the next sequence goes on.
        assert produce(reopened, 5, 0, 0).duplicate
        assert produce(reopened, 5, 0, 1).first_offset == reopened.log_end_offset - 1
    finally:
        reopened.close()
        for segment in log.segments:
            segment.close()


def test_a_corrupt_snapshot_falls_back_to_an_older_one(tmp_path):
    path = str(tmp_path / "t-0")
    config = LogConfig.from_properties({"segment.bytes": 300})
    with Log.open(path, config) as log:
        for seq in range(12):
            produce(log, 7, 0, seq)
        end = log.log_end_offset
    snapshots = log.producers.snapshot_offsets()
    assert snapshots[-1] == end and len(snapshots) >= 2
    newest = os.path.join(path, f"{end:020d}.snapshot")
    data = bytearray(open(newest, "rb").read())
    data[-1] ^= 0xFF
    open(newest, "wb").write(data)
    with Log.open(path, config, clean_shutdown=True) as log:
        load = log.recovery_report.producer_state
        assert [o for o, _ in load.corrupt_snapshots] == [end]
        assert load.snapshot_offset == snapshots[-2] and load.replayed_batches == end - snapshots[-2]
        assert log.producers.entry(7).batches[-1][1] == 11
        assert produce(log, 7, 0, 11).duplicate


def test_truncation_reloads_producer_state_from_a_snapshot(tmp_path):
    config = LogConfig.from_properties({"segment.bytes": 300})
    with Log.open(str(tmp_path / "t-0"), config) as log:
        for seq in range(10):
            produce(log, 7, 0, seq)
        produce(log, 8, 0, 0, txn=True)
        log.truncate_to(6)
        assert log.producers.entry(7).batches[-1][1] == 5
        assert log.producers.entry(8) is None and log.last_stable_offset == 6
        assert all(o <= 6 for o in log.producers.snapshot_offsets())
        assert produce(log, 7, 0, 6).first_offset == 6


def test_expiration_keeps_producers_with_an_open_transaction(log):
    produce(log, 1, 0, 0, ts=1_000)
    produce(log, 2, 0, 0, txn=True, ts=1_000)
    produce(log, 3, 0, 0, ts=5_000)
    expiration = log.producers.expiration_ms
    assert sorted(log.expire_producers(now_ms=1_000 + expiration)) == [1]
    assert log.producers.entry(2) is not None and log.producers.entry(3) is not None
    # An expired producer is unknown again: any sequence goes.
    assert produce(log, 1, 0, 77).duplicate is False


def test_the_segment_txn_vector_loads_with_its_documented_state(segment_txn_dir):
    expected = json.loads((VECTORS / "segment_txn" / "segment_txn.json").read_text())["expected"]
    # Its producers wrote in 2023: they would expire on load under the 24 h default.
    with Log.open(str(segment_txn_dir), clean_shutdown=True, producer_id_expiration_ms=2**62) as log:
        assert log.recovery_report.producer_state.snapshot_offset == expected["snapshotOffset"]
        for pid, want in expected["producers"].items():
            entry = log.producers.entry(int(pid))
            first_seq, last_seq, first_offset, last_offset, _ = entry.batches[-1]
            assert (entry.epoch, last_seq, last_offset, last_offset - first_offset, entry.last_timestamp,
                    entry.coordinator_epoch, entry.txn_first_offset) == \
                (want["epoch"], want["lastSeq"], want["lastOffset"], want["offsetDelta"], want["timestamp"],
                 want["coordinatorEpoch"], want["currentTxnFirstOffset"])
        assert aborted_entries(log) == [AbortedTxn(t["producerId"], t["firstOffset"], t["lastOffset"],
                                                   t["lastStableOffset"]) for t in expected["abortedTxns"]]
        assert log.last_stable_offset == expected["logEndOffset"]
        assert [r.offset for r in log.read_records(0, isolation="read_committed")] == [0, 1, 2, 3, 4, 5, 6, 11]


def test_the_segment_txn_vector_replayed_without_its_snapshot_gives_the_same_state(segment_txn_dir):
    os.unlink(segment_txn_dir / "00000000000000000012.snapshot")
    os.unlink(segment_txn_dir / "00000000000000000000.txnindex")
    with Log.open(str(segment_txn_dir), recovery_point=0, producer_id_expiration_ms=2**62) as log:
        load = log.recovery_report.producer_state
        assert load.snapshot_offset is None and load.replayed_batches == 5  # the two plain batches have none
        assert aborted_entries(log) == [AbortedTxn(4001, 8, 10, 11)]
        assert log.producers.entry(4000).coordinator_epoch == 2
