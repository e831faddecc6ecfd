"""Benchmarks of transactions in the log: read_committed reads and reopening with producer state.

Run by `make bench`; bench/transactions_report.py prints them. Cases (the issue's targets):

1. read-committed: a 64 MiB log of transactions from 20 producers (4 batches
   of 100 records, 100 B values, each; producers interleaved batch by batch;
   1 in 10 transactions aborted, chosen by a seeded RNG), read whole with
   `Log.iter_records(0, isolation="read_committed")` against
   `Log.iter_records(0)` (read_uncommitted) of the same log: both decode every
   batch they keep into records; the committed side also walks the
   `.txnindex` and drops aborted batches and markers. Rate = log bytes / s.
   Target: committed >= 0.8x uncommitted.
2. reopen-producers: a child process (this file run as a script) writes 1 GiB
   in 4 segments of 256 MiB from 100,000 producers (batches of 8 records with
   200 B values, producers round-robin, so 5 batches each; every 10th
   producer transactional, one transaction per batch ending in a marker, 1 in
   10 aborted), flushes and checkpoints at 992 MiB, appends the rest and
   SIGKILLs itself. "snapshot" times `logstore.open` of that store: recovery
   scans the last segment, and producer state comes from the snapshot taken
   at the last roll (768 MiB) plus a replay of the last segment. "full"
   removes every `.snapshot` first, so all 1 GiB is replayed (information).
   Every round restores the crashed store's small files first. Target:
   snapshot < 1 s.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import logstore
from benchfiles import restore, small_files
from logstore.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpoint
from logstore.log import Log

MiB = 1 << 20
GiB = 1 << 30
SEED = 20261122

COMMITTED_LOG_BYTES = 64 * MiB
COMMITTED_PRODUCERS = 20
COMMITTED_BATCHES_PER_TXN = 4
COMMITTED_RECORDS = 100
COMMITTED_VALUE_BYTES = 100
COMMITTED_ABORT_RATE = 0.1
COMMITTED_ROUNDS = 10

REOPEN_TOPIC = "producers"
REOPEN_CONFIG = {"segment.bytes": 256 * MiB}
REOPEN_LOG_BYTES = GiB
REOPEN_FLUSH_AT = 992 * MiB
REOPEN_PRODUCERS = 100_000
REOPEN_RECORDS = 8
REOPEN_VALUE_BYTES = 200
REOPEN_TXN_EVERY = 10
REOPEN_ROUNDS = 7
REOPEN_FULL_ROUNDS = 3

TARGETS = {"read-committed": 0.8}
REOPEN_TARGET_SECONDS = 1.0


def _tag(benchmark, op, case, side, *, nbytes=None, target=None, target_seconds=None, api="", **extra):
    benchmark.group = f"{op}/{case}"
    benchmark.extra_info.update({"op": op, "case": case, "side": side, "api": api, "unit": "bytes",
                                 "bytes": nbytes, "target": target, "target_seconds": target_seconds, **extra})


@pytest.fixture(scope="session")
def scratch():
    """A session temp directory; every data set lives under it and goes with it."""
    root = tempfile.mkdtemp(prefix="logstore-bench-txn-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _now_ms() -> int:
    # Producer timestamps must be recent: older producers expire when a snapshot loads.
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------
# 1. read_committed against read_uncommitted


@pytest.fixture(scope="module")
def committed_log(scratch):
    """The 64 MiB transactional log, and how many records each isolation level returns."""
    rng = random.Random(f"{SEED}/committed")
    log = Log.open(os.path.join(scratch, "committed", "txn-0"))
    values = [rng.randbytes(COMMITTED_VALUE_BYTES) for _ in range(COMMITTED_RECORDS)]
    ts = _now_ms()
    seqs = [0] * COMMITTED_PRODUCERS
    written = kept = 0
    while log.size < COMMITTED_LOG_BYTES:
        for _ in range(COMMITTED_BATCHES_PER_TXN):
            for pid in range(COMMITTED_PRODUCERS):
                log.append_records(values, timestamps=ts, producer_id=pid, producer_epoch=0,
                                   base_sequence=seqs[pid], transactional=True)
                seqs[pid] += COMMITTED_RECORDS
        for pid in range(COMMITTED_PRODUCERS):
            commit = rng.random() >= COMMITTED_ABORT_RATE
            log.write_txn_marker(pid, 0, 0, commit=commit, timestamp=ts)
            written += COMMITTED_BATCHES_PER_TXN * COMMITTED_RECORDS
            kept += COMMITTED_BATCHES_PER_TXN * COMMITTED_RECORDS if commit else 0
    log.flush()
    yield log, written, kept
    log.delete()


@pytest.mark.parametrize("side", ("ours", "peer"))
def test_read_committed(benchmark, committed_log, side):
    log, written, kept = committed_log
    isolation = "read_committed" if side == "ours" else "read_uncommitted"

    def run():
        return sum(1 for _ in log.iter_records(0, isolation=isolation))

    _tag(benchmark, "read-committed", "10pct-aborted", side, nbytes=log.size,
         target=TARGETS["read-committed"] if side == "ours" else None,
         api=f"sum(1 for _ in Log.iter_records(0, isolation={isolation!r}))",
         records=kept if side == "ours" else written, aborted_fraction=1 - kept / written)
    count = benchmark.pedantic(run, rounds=COMMITTED_ROUNDS, warmup_rounds=1)
    assert count == (kept if side == "ours" else written)


# ---------------------------------------------------------------------------
# 2. Reopening a SIGKILLed store of 100,000 producers


def fill_and_crash(directory: str) -> None:
    """Child process: write the producers' gigabyte (see the module docstring), then SIGKILL."""
    rng = random.Random(f"{SEED}/reopen")
    values = [rng.randbytes(REOPEN_VALUE_BYTES) for _ in range(REOPEN_RECORDS)]
    store = logstore.open(directory, REOPEN_CONFIG, start_scheduler=False)
    store.create_topic(REOPEN_TOPIC)
    log = store.log(REOPEN_TOPIC)
    ts = _now_ms()
    seq = 0
    flushed = False
    while log.size < REOPEN_LOG_BYTES - 4096:
        for pid in range(REOPEN_PRODUCERS):
            txn = pid % REOPEN_TXN_EVERY == 0
            log.append_records(values, timestamps=ts, producer_id=pid, producer_epoch=0, base_sequence=seq,
                               transactional=txn)
            if txn:
                log.write_txn_marker(pid, 0, 0, commit=rng.random() >= 0.1, timestamp=ts)
            if not flushed and log.size >= REOPEN_FLUSH_AT:
                log.flush()
                store.checkpoint()
                flushed = True
            if log.size >= REOPEN_LOG_BYTES - 4096:
                break
        seq += REOPEN_RECORDS
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(scope="module")
def crashed_producers(scratch):
    """The killed child's store and its small files, as it left them."""
    directory = os.path.join(scratch, "reopen-producers")
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "fill-and-crash", directory],
                           capture_output=True, text=True, timeout=900)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert not os.path.exists(os.path.join(directory, ".kafka_cleanshutdown"))
    points = OffsetCheckpoint(os.path.join(directory, RECOVERY_POINT_CHECKPOINT)).read()
    assert points[(REOPEN_TOPIC, 0)] > 0
    yield directory, small_files(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("state", ("snapshot", "full"))
def test_reopen_producers(benchmark, crashed_producers, state):
    directory, small = crashed_producers
    opened, results = [], []

    def setup():
        restore(directory, small, drop=lambda path: state == "full" and path.endswith(".snapshot"))

    def run():
        opened.append(logstore.open(directory, REOPEN_CONFIG, start_scheduler=False))

    def teardown():
        store = opened.pop()
        log = store.log(REOPEN_TOPIC)
        results.append((log.recovery_report, len(log.producers.entries()), log.log_end_offset))
        store.close()

    _tag(benchmark, "reopen-producers", state, "ours",
         target_seconds=REOPEN_TARGET_SECONDS if state == "snapshot" else None,
         api="logstore.open(store) after SIGKILL" + (", every .snapshot removed" if state == "full" else ""))
    benchmark.pedantic(run, setup=setup, teardown=teardown,
                       rounds=REOPEN_ROUNDS if state == "snapshot" else REOPEN_FULL_ROUNDS, warmup_rounds=1)
    for report, producers, end in results:
        assert producers == REOPEN_PRODUCERS
        assert end == results[0][2] and not report.truncated
    report = results[-1][0]
    load = report.producer_state
    if state == "snapshot":
        assert load.snapshot_offset is not None and load.snapshot_offset > 0
    else:
        assert load.snapshot_offset is None
    log_bytes = sum(os.path.getsize(os.path.join(p, n)) for p, _, names in os.walk(directory)
                    for n in names if n.endswith(".log"))
    benchmark.extra_info.update({
        "bytes": report.bytes_scanned, "log_bytes": log_bytes, "producers": REOPEN_PRODUCERS,
        "snapshot_offset": load.snapshot_offset, "replayed_batches": load.replayed_batches,
        "scanned_segments": report.recovered_segments, "recovery_report_seconds": round(report.seconds, 4),
    })


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "fill-and-crash":
        fill_and_crash(sys.argv[2])
    sys.exit(f"usage: {sys.argv[0]} fill-and-crash DIR (the reopen-producers benchmark's child)")
