"""Power cuts at every boundary of share-state writes and deletes in `__share_group_state`: after the cut,
each share-partition's state is the one its last acknowledged write or delete left, or the one of the
write or delete the cut interrupted; never a mix, never an older one. The reopened store then takes new
writes, and they read back after another reopen.

Each case runs the workload once to count the boundaries it crosses after the store opened, then, from
the same starting directory, cuts the power at each in turn (and once after the last) in both legal
outcomes of a cut, and reopens through a file system that keeps everything. The workload is one thread:
the fsyncs the storage hands to its sync pool run in the caller, a roll's flush runs before the next
step (`DeferredFlusher`), and the store's scheduler and cleaner are not started, so the boundaries come
in the same order every run (checked: two counting runs must agree).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fault_fs import FaultFileSystem
from logstore.broker.coordinator.internal_topics import InternalTopics, ShareStateTopicConfig
from logstore.broker.coordinator.txn_config import TxnConfig
from logstore.broker.share.state_records import canonical
from logstore.broker.share.state_store import ShareStateStore
from logstore.broker.share.types import DeliveryState, SharePartitionKey, ShareState, StateBatch
from logstore.manager import LogManager
from power_loss import DeferredFlusher
from power_loss_stores import cut_step, sweep_cuts

A, K, X = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED
T1, T2 = bytes(range(16)), bytes(range(16, 32))
K0, K1, K2 = ("workers", T1, 0), ("workers", T1, 1), ("audit", T2, 0)
# Two partitions, and segments small enough that the workload rolls them.
TOPIC_CONFIG = ShareStateTopicConfig(partitions=2, segment_bytes=300)
SNAPSHOT_EVERY = 2
NOW = 1_764_000_000_000


def S(start: int, *batches: tuple[int, int, DeliveryState, int], state_epoch: int = 0) -> ShareState:
    return ShareState(state_epoch, 0, start, tuple(StateBatch(*b) for b in batches))


# ("write", key, state) or ("delete", [keys])
WORKLOAD: list[tuple] = [
    ("write", K0, S(0, (0, 2, K, 1), (3, 5, A, 1))),    # snapshot
    ("write", K1, S(10, (10, 10, X, 5))),
    ("write", K0, S(3, (3, 5, K, 2))),                   # update
    ("write", K0, S(6, (6, 8, A, 1))),                   # update
    ("write", K2, S(0)),
    ("write", K0, S(6, (6, 8, A, 2))),                   # snapshot: the cadence
    ("delete", [K1]),
    ("write", K0, S(4, (4, 8, A, 1))),                   # snapshot: the start went back
    ("write", K1, S(20, (20, 21, K, 1))),                # a new life after the delete
    ("write", K0, S(4, (4, 8, A, 1))),                   # update, nothing changed
    ("delete", [K0, K2]),
    ("write", K2, S(1, (1, 1, A, 1), state_epoch=3)),
]
KEYS = [K0, K1, K2]


@dataclass
class Journal:
    """What one run attempted and what returned before the cut."""

    flusher: DeferredFlusher = field(default_factory=DeferredFlusher)
    acked: int = 0          # steps that returned
    boundaries: int = 0     # crossed after the store opened


def _open(directory: Path, fs: FaultFileSystem) -> tuple[LogManager, ShareStateStore]:
    store = LogManager(str(directory), fs=fs, start_scheduler=False)
    states = ShareStateStore(store, InternalTopics(store, TxnConfig(), TOPIC_CONFIG), fsync=True,
                             snapshot_every=SNAPSHOT_EVERY, clock=lambda: NOW)
    states.load()
    return store, states


def _prepare(directory: Path) -> None:
    store = LogManager(str(directory), start_scheduler=False)
    InternalTopics(store, TxnConfig(), TOPIC_CONFIG).ensure_share_state_topic()
    store.close()


def _run(states: ShareStateStore, fs: FaultFileSystem, journal: Journal) -> None:
    for action, *args in WORKLOAD:
        cut_step(fs, journal.flusher, states.write if action == "write" else states.delete, *args)
        journal.acked += 1
    journal.flusher.run()


def _allowed(acked: int) -> dict[SharePartitionKey, list[ShareState | None]]:
    """Each key's possible states after `acked` steps returned and the next one (if any) was cut."""
    last: dict[SharePartitionKey, ShareState | None] = dict.fromkeys(KEYS)

    def apply(step: tuple, into: dict[SharePartitionKey, ShareState | None]) -> None:
        if step[0] == "write":
            into[step[1]] = canonical(step[2])
        else:
            into.update(dict.fromkeys(step[1]))

    for step in WORKLOAD[:acked]:
        apply(step, last)
    allowed = {k: [v] for k, v in last.items()}
    if acked < len(WORKLOAD):
        cut = dict(last)
        apply(WORKLOAD[acked], cut)
        for k in KEYS:
            allowed[k].append(cut[k])
    return allowed


def test_share_state_survives_a_cut_at_every_boundary(tmp_path, monkeypatch):
    total = sweep_cuts(tmp_path, monkeypatch, _prepare, Journal, lambda d, fs: _open(d, fs)[1], _run, _check)
    assert total > len(WORKLOAD)   # at least one fsync per step


def _check(directory: Path, journal: Journal, where: str) -> None:
    store, states = _open(directory, FaultFileSystem(real_syncs=False))
    try:
        found = {k: states.read(k) for k in KEYS}
        allowed = _allowed(journal.acked)
        for k in KEYS:
            assert found[k] in allowed[k], f"{where}: {k} is {found[k]}, not one of {allowed[k]}"
        assert states.keys() == sorted(k for k in KEYS if found[k] is not None), where
        # The store goes on from what it found: new writes (updates or snapshots, as it decides) read back.
        after = {k: S(30, (30, 31, X, 6)) for k in KEYS}
        for k, s in after.items():
            states.write(k, s)
    finally:
        store.close()
    store, states = _open(directory, FaultFileSystem(real_syncs=False))
    try:
        assert {k: states.read(k) for k in KEYS} == after, where
    finally:
        store.close()

