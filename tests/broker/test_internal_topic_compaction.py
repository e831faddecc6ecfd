"""`__consumer_offsets` is compacted: a million commits over a thousand keys end up near the size of a
thousand, and a restarted coordinator replays about a thousand records and finds every latest offset.

The group coordinator runs without a network over a real store whose
background cleaner runs; commits come as a simple consumer's OffsetCommit of
all 1,000 partitions at once (one batch each, as Kafka writes them).
"""
from __future__ import annotations

import itertools
import os

from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC, TransactionCoordinator, TxnConfig
from logstore.manager import LogManager

KEYS = 1_000
COMMITS = 1_000
SEGMENT_BYTES = 1 << 20
WAIT_S = 120.0
GROUP = "copier"
CONFIG = GroupConfig(initial_rebalance_delay_ms=0, fsync=False)
TXN_CONFIG = TxnConfig(state_partitions=1, offsets_partitions=1, offsets_segment_bytes=SEGMENT_BYTES, fsync=False)
# Rounds when the test asks; a map far larger than a thousand keys.
SETTINGS = {"log.cleaner.backoff.ms": 3_600_000, "log.cleaner.dedupe.buffer.size": 1 << 20}


def _coordinators(path):
    store = LogManager(str(path), broker_settings=SETTINGS)
    ids = itertools.count(1000)
    txn = TransactionCoordinator(store, lambda: next(ids), TXN_CONFIG)
    groups = GroupCoordinator(store, txn, CONFIG)
    txn.on_offsets_marker = groups.complete_txn_offsets
    return store, groups


def _commit_rounds(groups: GroupCoordinator, rounds: int) -> None:
    for n in range(rounds):
        offsets = {("events", p): (n * 10 + p % 7, -1, "") for p in range(KEYS)}
        errors = groups.commit_offsets(GROUP, "", None, -1, offsets)
        assert not any(errors.values())


def _disk_bytes(store: LogManager) -> int:
    directory = store.log(OFFSETS_TOPIC, 0).directory
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".log"))


def _clean_until_caught_up(store: LogManager) -> None:
    target = store.log(OFFSETS_TOPIC, 0)
    target.roll()
    for _ in range(20):
        assert store.cleaner.await_round(WAIT_S)
        if store.cleaner.checkpoints.get((OFFSETS_TOPIC, 0), 0) >= target.segments[-1].base_offset:
            return
    raise AssertionError("the cleaner did not catch up")


def test_a_million_commits_compact_to_about_a_thousand_keys(tmp_path):
    store, groups = _coordinators(tmp_path / "few")
    try:
        groups.ensure_offsets_topic()
        _commit_rounds(groups, 1)
        store.log(OFFSETS_TOPIC, 0).roll()
        few_bytes = _disk_bytes(store)
    finally:
        store.close()

    store, groups = _coordinators(tmp_path / "many")
    try:
        groups.ensure_offsets_topic()
        _commit_rounds(groups, COMMITS)
        written = store.log(OFFSETS_TOPIC, 0).log_end_offset
        assert written >= KEYS * COMMITS
        assert _disk_bytes(store) > 100 * few_bytes
        _clean_until_caught_up(store)
        # Everything below the active segment is one record per key; the active one holds what came last.
        assert _disk_bytes(store) <= 2 * few_bytes + SEGMENT_BYTES
    finally:
        store.close()

    store, groups = _coordinators(tmp_path / "many")
    try:
        groups.load()
        replayed = sum(1 for _ in store.log(OFFSETS_TOPIC, 0).iter_records())
        assert replayed <= 2 * KEYS
        found = groups.fetch_offsets(GROUP, None, False)
        last = COMMITS - 1
        assert {tp: c.offset for tp, c in found.items()} == {("events", p): last * 10 + p % 7 for p in range(KEYS)}
    finally:
        store.close()
