"""The loader (logstore.loader), after Kafka's LogLoaderTest: real directories, real files.

Every scenario is loaded twice: READ_ONLY first, which must leave every
byte of the directory as it was, then WRITE on the same directory; both
must arrive at the same segments, offsets, producer state, last stable
offset and aborted transactions.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

import logstore
from logstore import Log, LogConfig
from logstore.filenames import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_name,
)
from logstore.index import AbortedTxn
from logstore.loader import LoadedLog, LoadMode, load_log
from logstore.reader import StoreView

SMALL = LogConfig.from_properties({"segment.bytes": 400, "index.interval.bytes": 64})


def fingerprint(directory: Path) -> dict[str, str]:
    """Every file's name and content hash."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def outcome(loaded: LoadedLog) -> dict:
    """What both modes must agree on."""
    report = loaded.report
    load = report.producer_state
    segments = loaded.segments
    return {
        "segments": [(s.base_offset, s.size, s.max_timestamp_and_offset) for s in segments],
        "translations": [s.translate_offset(o) for s in segments
                         for o in range(s.base_offset, loaded.log_end_offset)],
        "offsets": (loaded.log_start_offset, loaded.log_end_offset, loaded.recovery_point),
        "producers": loaded.producers.entries(),
        "ongoing": loaded.producers.ongoing_transactions,
        "map_end_offset": loaded.producers.map_end_offset,
        "last_stable_offset": loaded.last_stable_offset,
        "aborted": loaded.aborted,
        "report": (report.recovered_segments, report.truncations, report.deleted_segments,
                   report.rebuilt_indexes, report.removed_files, report.recovery_point),
        "producer_load": (load.snapshot_offset, [o for o, _ in load.corrupt_snapshots], load.replayed_from,
                          load.replayed_batches, load.rebuilt_txn_indexes),
    }


def load_both(directory: Path, config: LogConfig = SMALL, **kwargs) -> dict:
    """READ_ONLY (checked to write nothing), then WRITE on the same directory; returns their shared outcome."""
    before = fingerprint(directory)
    read_only = load_log(str(directory), config, LoadMode.READ_ONLY, **kwargs)
    try:
        seen = outcome(read_only)
    finally:
        read_only.close()
    assert fingerprint(directory) == before, "a read-only load changed the directory"
    written = load_log(str(directory), config, LoadMode.WRITE, **kwargs)
    try:
        assert outcome(written) == seen
        # Written, the aborted transactions are the `.txnindex` files themselves.
        assert written.aborted == sorted((t for s in written.segments for t in s.txn_index.entries),
                                         key=lambda t: t.last_offset)
    finally:
        written.close()
    return seen


def txn(log: Log, pid: int, seq: int, count: int = 1) -> None:
    """A transactional batch of `count` records."""
    log.append_records([b"t%d-%d" % (pid, seq + i) for i in range(count)], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, transactional=True)


def plain(log: Log, count: int = 1, producer_id: int = -1, seq: int = -1) -> None:
    """A batch outside any transaction (idempotent with a producer id)."""
    log.append_records([b"x" * 30] * count, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=seq)


def build(directory: Path, config: LogConfig = SMALL) -> dict:
    """A closed log of several segments: idempotent batches, a transaction aborted across segments,
    one committed, one still open at the end. Returns what the live log said before closing."""
    with Log.open(str(directory), config) as log:
        txn(log, 7, 0)                     # 0: producer 7 opens a transaction
        for seq in range(6):
            plain(log, 2, producer_id=9, seq=seq * 2)
        txn(log, 7, 1)
        log.write_txn_marker(7, 0, 0, commit=False)   # aborts 7's transaction, segments later
        txn(log, 8, 0, 2)
        log.write_txn_marker(8, 0, 0, commit=True)
        for seq in range(6, 10):
            plain(log, 2, producer_id=9, seq=seq * 2)
        txn(log, 5, 0)                     # left open: the last stable offset stops here
        plain(log, 1)
        assert len(log.segments) >= 4
        return {"end": log.log_end_offset, "lso": log.last_stable_offset,
                "bases": [s.base_offset for s in log.segments],
                "aborted": [t for s in log.segments for t in s.txn_index.entries],
                "producers": log.producers.entries(), "ongoing": log.producers.ongoing_transactions}


@pytest.fixture
def built(tmp_path):
    directory = tmp_path / "t-0"
    return directory, build(directory)


def seg(directory: Path, base: int, suffix: str) -> Path:
    """The file of offset `base` with `suffix` in `directory`."""
    return directory / offset_name(base, suffix)


# -- shutdowns --------------------------------------------------------------------------------


def test_clean_shutdown_loads_the_closing_snapshot_and_scans_nothing(built):
    directory, live = built
    seen = load_both(directory, clean_shutdown=True)
    assert seen["report"][0] == [] and seen["offsets"][1] == live["end"]
    assert seen["producer_load"][0] == live["end"] and seen["producer_load"][3] == 0
    assert seen["last_stable_offset"] == live["lso"] and seen["aborted"] == live["aborted"]
    assert seen["ongoing"] == live["ongoing"]


def test_log_recovery_is_called_upon_broker_crash(built):
    directory, live = built
    seen = load_both(directory, recovery_point=0)
    assert seen["report"][0] == live["bases"] and seen["report"][1] == []
    assert seen["offsets"][1] == live["end"] and seen["last_stable_offset"] == live["lso"]
    assert seen["aborted"] == live["aborted"] and seen["ongoing"] == live["ongoing"]
    # Snapshots above the first scanned base are stale once the scan starts there.
    assert seen["producer_load"][0] is None and seen["producer_load"][4] == live["bases"]


def test_recovery_starts_at_the_segment_holding_the_recovery_point(built):
    directory, live = built
    bases = live["bases"]
    seen = load_both(directory, recovery_point=bases[2] + 1)
    assert seen["report"][0] == bases[2:]
    assert seen["producer_load"][0] == bases[2]  # the roll snapshot at that base
    assert seen["offsets"][2] == bases[2] + 1
    assert seen["last_stable_offset"] == live["lso"] and seen["aborted"] == live["aborted"]


def test_a_recovery_point_past_the_log_end_is_lowered_to_it(built):
    directory, live = built
    seen = load_both(directory, recovery_point=live["end"] + 50)
    assert seen["offsets"] == (0, live["end"], live["end"])
    assert seen["report"][0] == live["bases"][-1:]


# -- torn and corrupt logs ----------------------------------------------------------------------


def test_a_torn_last_batch_is_truncated(built):
    directory, live = built
    last = seg(directory, live["bases"][-1], LOG_SUFFIX)
    whole = last.read_bytes()
    last.write_bytes(whole + whole[:40])  # a kill mid-append
    seen = load_both(directory, recovery_point=live["bases"][-1])
    assert [(t.base_offset, t.position, t.bytes_removed) for t in seen["report"][1]] == \
        [(live["bases"][-1], len(whole), 40)]
    assert seen["offsets"][1] == live["end"]
    assert last.read_bytes() == whole  # WRITE cut it


def test_corrupt_log_cuts_at_the_broken_batch_and_drops_later_segments(built):
    directory, live = built
    bases = live["bases"]
    middle = seg(directory, bases[1], LOG_SUFFIX)
    data = bytearray(middle.read_bytes())
    data[-5] ^= 0xFF  # the last batch of the segment fails its CRC
    middle.write_bytes(bytes(data))
    seen = load_both(directory, recovery_point=0)
    assert seen["report"][2] == bases[2:]
    assert [s[0] for s in seen["segments"]] == bases[:2]
    assert seen["offsets"][1] < bases[2]
    assert not seg(directory, bases[2], LOG_SUFFIX).exists()
    # What recovery kept is what the state was rebuilt from: 7's abort marker was cut off with the rest.
    assert seen["last_stable_offset"] == 0 and seen["aborted"] == []


def test_a_crash_in_a_clean_log_segment_is_not_scanned_when_the_shutdown_was_clean(built):
    directory, live = built
    last = seg(directory, live["bases"][-1], LOG_SUFFIX)
    data = bytearray(last.read_bytes())
    data[-5] ^= 0xFF
    last.write_bytes(bytes(data))
    seen = load_both(directory, clean_shutdown=True)
    assert seen["report"][1] == [] and seen["offsets"][1] == live["end"]


# -- indexes ------------------------------------------------------------------------------------


def test_missing_indexes_are_rebuilt(built):
    directory, live = built
    base = live["bases"][1]
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        seg(directory, base, suffix).unlink()
    seen = load_both(directory, clean_shutdown=True)
    assert [b for b, _ in seen["report"][3]] == [base] and "missing" in seen["report"][3][0][1]
    assert seg(directory, base, INDEX_SUFFIX).stat().st_size > 0


def test_corrupt_index_is_rebuilt(built):
    directory, live = built
    base = live["bases"][1]
    index = seg(directory, base, INDEX_SUFFIX)
    good = index.read_bytes()
    index.write_bytes(good[:-8] + (1).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))  # past the log's end
    seen = load_both(directory, clean_shutdown=True)
    assert [b for b, _ in seen["report"][3]] == [base] and "position" in seen["report"][3][0][1]
    assert index.read_bytes() == good


def test_an_index_of_a_partial_entry_length_is_rebuilt(built):
    directory, live = built
    base = live["bases"][0]
    time_index = seg(directory, base, TIME_INDEX_SUFFIX)
    good = time_index.read_bytes()
    time_index.write_bytes(good + b"\0" * 5)  # oversized: not a whole number of 12-byte entries
    seen = load_both(directory, clean_shutdown=True)
    assert [b for b, _ in seen["report"][3]] == [base] and "multiple" in seen["report"][3][0][1]
    assert time_index.read_bytes() == good


# -- leftover files -----------------------------------------------------------------------------


def test_open_deletes_obsolete_and_orphan_files(built):
    directory, live = built
    base = live["bases"][1]
    shutil.copy(seg(directory, base, LOG_SUFFIX), seg(directory, base, LOG_SUFFIX + DELETED_SUFFIX))
    shutil.copy(seg(directory, base, LOG_SUFFIX), seg(directory, base, LOG_SUFFIX + CLEANED_SUFFIX))
    seg(directory, 9_999, INDEX_SUFFIX).write_bytes(b"\0" * 8)  # an index without its log
    seen = load_both(directory, clean_shutdown=True)
    assert sorted(seen["report"][4]) == sorted([offset_name(base, LOG_SUFFIX + DELETED_SUFFIX),
                                                offset_name(base, LOG_SUFFIX + CLEANED_SUFFIX),
                                                offset_name(9_999, INDEX_SUFFIX)])
    assert [s[0] for s in seen["segments"]] == live["bases"]
    names = {p.name for p in directory.iterdir()}
    assert not any(n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX)) for n in names)
    assert offset_name(9_999, INDEX_SUFFIX) not in names


def test_recovery_after_a_crash_between_the_swap_and_the_old_segments_renames(built):
    # The cleaner's output of segments 1 and 2 as one `.swap` segment (here: their bytes unchanged); the
    # kill came before the old segments became `.deleted`.
    directory, live = built
    bases = live["bases"]
    merged = seg(directory, bases[1], LOG_SUFFIX).read_bytes() + seg(directory, bases[2], LOG_SUFFIX).read_bytes()
    seg(directory, bases[1], LOG_SUFFIX + SWAP_SUFFIX).write_bytes(merged)
    seen = load_both(directory, clean_shutdown=True)
    assert [s[0] for s in seen["segments"]] == [bases[0], bases[1]] + bases[3:]
    assert seen["segments"][1][1] == len(merged)
    assert offset_name(bases[2], LOG_SUFFIX) in seen["report"][4]
    assert seg(directory, bases[1], LOG_SUFFIX).read_bytes() == merged
    assert not seg(directory, bases[1], LOG_SUFFIX + SWAP_SUFFIX).exists()
    assert seen["offsets"][1] == live["end"] and seen["aborted"] == live["aborted"]


def test_recovery_after_a_crash_with_the_old_segments_already_deleted(built):
    directory, live = built
    base = live["bases"][1]
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        path = seg(directory, base, suffix)
        if path.exists():
            shutil.copy(path, seg(directory, base, suffix + SWAP_SUFFIX))
            path.rename(seg(directory, base, suffix + DELETED_SUFFIX))
    seen = load_both(directory, recovery_point=0)
    assert [s[0] for s in seen["segments"]] == live["bases"]
    assert seen["offsets"][1] == live["end"] and seen["last_stable_offset"] == live["lso"]
    assert seen["aborted"] == live["aborted"]


# -- producer snapshots -------------------------------------------------------------------------


def test_a_snapshot_ahead_of_the_log_end_is_not_loaded(built):
    directory, live = built
    ahead = live["end"] + 100
    shutil.copy(seg(directory, live["end"], SNAPSHOT_SUFFIX), seg(directory, ahead, SNAPSHOT_SUFFIX))
    seen = load_both(directory, clean_shutdown=True)
    assert seen["producer_load"][0] == live["end"]
    assert not seg(directory, ahead, SNAPSHOT_SUFFIX).exists()


def test_missing_snapshots_replay_the_whole_log(built):
    directory, live = built
    for path in directory.glob("*" + SNAPSHOT_SUFFIX):
        path.unlink()
    seen = load_both(directory, recovery_point=live["bases"][-1])
    load = seen["producer_load"]
    assert load[0] is None and load[2] == 0 and load[3] > 0
    assert seen["ongoing"] == live["ongoing"] and seen["last_stable_offset"] == live["lso"]
    assert {p: (e.epoch, e.batches[-1]) for p, e in seen["producers"].items()} == \
        {p: (e.epoch, e.batches[-1]) for p, e in live["producers"].items()}
    # WRITE snapshots the end of the rebuild, so the next open replays nothing.
    assert seg(directory, live["end"], SNAPSHOT_SUFFIX).exists()


def test_a_corrupt_snapshot_falls_back_to_the_previous_one(built):
    directory, live = built
    newest = seg(directory, live["end"], SNAPSHOT_SUFFIX)
    newest.write_bytes(newest.read_bytes()[:-3])
    seen = load_both(directory, clean_shutdown=True)
    load = seen["producer_load"]
    assert load[1] == [live["end"]] and load[0] == live["bases"][-1]
    assert seen["ongoing"] == live["ongoing"] and seen["last_stable_offset"] == live["lso"]


def test_a_snapshot_off_the_segment_bases_is_passed_over(built):
    directory, live = built
    stray = live["bases"][1] + 1
    shutil.copy(seg(directory, live["bases"][1], SNAPSHOT_SUFFIX), seg(directory, stray, SNAPSHOT_SUFFIX))
    seen = load_both(directory, recovery_point=live["bases"][2])
    assert seen["producer_load"][0] == live["bases"][2]
    assert not seg(directory, stray, SNAPSHOT_SUFFIX).exists()


# -- transactions ------------------------------------------------------------------------------


def test_full_transaction_index_recovery(built):
    # Every `.txnindex` lost with the crash: the scan rebuilds them from the markers.
    directory, live = built
    for path in directory.glob("*" + TXN_INDEX_SUFFIX):
        path.unlink()
    seen = load_both(directory, recovery_point=0)
    assert seen["aborted"] == live["aborted"] and len(live["aborted"]) == 1
    assert seen["aborted"][0].producer_id == 7 and seen["aborted"][0].first_offset == 0
    assert seen["last_stable_offset"] == live["lso"] and seen["ongoing"] == live["ongoing"]


def test_transactions_open_across_segments_bound_the_last_stable_offset(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), SMALL) as log:
        txn(log, 3, 0)
        for seq in range(10):
            plain(log, 2)
            txn(log, 4, seq)
        log.write_txn_marker(4, 0, 0, commit=False)
        plain(log, 2)
        bases = [s.base_offset for s in log.segments]
        end = log.log_end_offset
        marker = end - 3
    assert len(bases) >= 3
    seen = load_both(directory, recovery_point=bases[-1])
    assert seen["last_stable_offset"] == 0 and seen["ongoing"] == {3: 0}
    assert seen["aborted"] == [AbortedTxn(4, 3, marker, 0)]


def test_an_abort_marker_whose_index_entry_was_lost_is_found_by_the_scan(built):
    directory, live = built
    for path in directory.glob("*" + TXN_INDEX_SUFFIX):
        path.write_bytes(b"")
    seen = load_both(directory, recovery_point=live["bases"][0])
    assert seen["aborted"] == live["aborted"]


# -- log start offset ---------------------------------------------------------------------------


def test_a_log_start_offset_above_the_first_segment(built):
    directory, live = built
    start = live["bases"][1] + 2
    seen = load_both(directory, recovery_point=live["bases"][-1], log_start_offset=start)
    assert seen["offsets"][0] == start and seen["segments"][0][0] == live["bases"][0]
    assert seen["last_stable_offset"] == live["lso"]


def test_a_log_start_offset_above_every_snapshot_replays_from_it(built):
    directory, live = built
    for path in directory.glob("*" + SNAPSHOT_SUFFIX):
        path.unlink()
    start = live["bases"][2]
    seen = load_both(directory, clean_shutdown=False, recovery_point=live["end"], log_start_offset=start)
    load = seen["producer_load"]
    assert load[0] is None and load[2] == start
    # Producer 7's transaction began below the start; only its marker (an abort) is replayed.
    assert 7 not in seen["ongoing"]


# -- an empty directory -------------------------------------------------------------------------


def test_an_empty_directory_gets_one_empty_segment_at_the_log_start_when_written(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    read_only = load_log(str(directory), SMALL, LoadMode.READ_ONLY, log_start_offset=42)
    assert (read_only.segments, read_only.log_end_offset, read_only.last_stable_offset) == ([], 42, 42)
    assert list(directory.iterdir()) == []
    written = load_log(str(directory), SMALL, LoadMode.WRITE, log_start_offset=42)
    try:
        assert [s.base_offset for s in written.segments] == [42] and written.log_end_offset == 42
    finally:
        written.close()
    assert os.path.exists(directory / offset_name(42, LOG_SUFFIX))


# -- the read-only load beside a store ----------------------------------------------------------


def test_a_store_view_loads_each_partition_as_the_store_would_reopen_it(tmp_path):
    data = tmp_path / "data"
    with logstore.open(str(data), {"segment.bytes": 400}, start_scheduler=False) as store:
        store.create_topic("t")
        for seq in range(20):
            plain(store.log("t"), 2, producer_id=3, seq=seq * 2)
    # Closed: the clean-shutdown marker tells the view there is nothing to check.
    with StoreView(str(data)).view("t", 0) as view:
        assert view.report.clean_shutdown and view.report.recovered_segments == []
        assert view.high_watermark == 40
    with logstore.open(str(data), {"segment.bytes": 400}, start_scheduler=False) as store:
        log = store.log("t")
        store.checkpoint()
        recovery_point = log.recovery_point
        txn(log, 4, 0)
        before = fingerprint(Path(log.directory))
        # Live: the view checks what a crash now would make the store scan, from the checkpointed recovery point.
        with StoreView(str(data)).view("t", 0) as view:
            bases = [s.base_offset for s in log.segments]
            assert not view.report.clean_shutdown
            assert view.report.recovered_segments == [b for b in bases if b >= max(b for b in bases
                                                                                   if b <= recovery_point)]
            assert (view.high_watermark, view.last_stable_offset) == (log.log_end_offset, log.last_stable_offset)
        assert fingerprint(Path(log.directory)) == before
