"""`ShareStateStore` over a real store: states read back after a reopen, Kafka's snapshot cadence,
updates that stand on the newest snapshot alone, compaction by the real cleaner, deletion, failed
appends and fsyncs, and concurrent writers.

`replayed` is the test's own oracle of Kafka's replay (a snapshot replaces, an update is laid over
with Kafka's combiner, a snapshot tombstone deletes), run over all of the log's records or over what
compaction may leave of them.
"""
from __future__ import annotations

import random
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem  # noqa: E402 (found through the path set just above)
from logstore.broker.coordinator.internal_topics import (  # noqa: E402
    SHARE_STATE_TOPIC,
    InternalTopics,
    ShareStateTopicConfig,
)
from logstore.broker.coordinator.txn_config import TxnConfig  # noqa: E402
from logstore.broker.share import state_records as r  # noqa: E402
from logstore.broker.share.state_store import ShareStateStore  # noqa: E402
from logstore.broker.share.types import DeliveryState, SharePartitionKey, ShareState, StateBatch  # noqa: E402
from logstore.errors import CoordinatorNotAvailableError, StorageError  # noqa: E402
from logstore.filesystem import OsFileSystem  # noqa: E402
from logstore.manager import LogManager  # noqa: E402

NOW = 1_764_000_000_000
A, K, X = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED
T1, T2 = bytes(range(16)), bytes(range(16, 32))
KEY = ("workers", T1, 0)
# Rounds only when a test asks; a map far larger than the keys here.
CLEANER = {"log.cleaner.backoff.ms": 3_600_000, "log.cleaner.dedupe.buffer.size": 1 << 20}
WAIT_S = 120.0

Record = tuple[int, SharePartitionKey, "r.ShareSnapshot | r.ShareUpdate | None"]


def _open(path: Path, *, fsync: bool = True, snapshot_every: int = 3, partitions: int = 3,
          segment_bytes: int = 1 << 20, fs: OsFileSystem | None = None,
          config: dict | None = None) -> tuple[LogManager, ShareStateStore]:
    store = LogManager(str(path), config, broker_settings=CLEANER, **({"fs": fs} if fs is not None else {}))
    topics = InternalTopics(store, TxnConfig(), ShareStateTopicConfig(partitions, segment_bytes))
    states = ShareStateStore(store, topics, fsync=fsync, snapshot_every=snapshot_every, clock=lambda: NOW)
    states.load()
    return store, states


def _records(store: LogManager) -> list[Record]:
    """Every record of `__share_group_state`, partition by partition, in log order, decoded."""
    out: list[Record] = []
    for p in range(store.topics().get(SHARE_STATE_TOPIC, 0)):
        for record in store.log(SHARE_STATE_TOPIC, p).iter_records():
            kind, key = r.decode_key(record.key)
            value = None if record.value is None else (
                r.decode_snapshot(record.value) if kind == r.SNAPSHOT else r.decode_update(record.value))
            out.append((kind, key, value))
    return out


def replayed(records: list[Record]) -> dict[SharePartitionKey, ShareState]:
    """Kafka's replay of `records` (the oracle)."""
    states: dict[SharePartitionKey, ShareState] = {}
    for kind, key, value in records:
        if kind == r.SNAPSHOT:
            if value is None:
                states.pop(key, None)
            else:
                assert isinstance(value, r.ShareSnapshot)
                states[key] = r.canonical(value.state)
        elif value is not None:
            assert isinstance(value, r.ShareUpdate)
            states[key] = r.apply_update(states.get(key), value)
    return states


def compacted(records: list[Record]) -> list[Record]:
    """What a fully compacted log keeps: the newest record of each (type, share-partition), in order."""
    newest = {(kind, key): i for i, (kind, key, _) in enumerate(records)}
    return [records[i] for i in sorted(newest.values())]


def state(start: int, *batches: tuple[int, int, DeliveryState, int], state_epoch: int = 0,
          leader_epoch: int = 0) -> ShareState:
    return ShareState(state_epoch, leader_epoch, start, tuple(StateBatch(*b) for b in batches))


def test_written_states_are_read_back_after_a_reopen(tmp_path):
    written = {KEY: state(0, (0, 4, K, 1), (5, 9, A, 2)),
               ("workers", T2, 3): state(17, (17, 17, X, 5), leader_epoch=2),
               ("billing", T1, 0): state(100, state_epoch=4)}
    store, states = _open(tmp_path)
    for key, s in written.items():
        states.write(key, s)
        assert states.read(key) == s
    store.close()

    store, states = _open(tmp_path)
    assert {k: states.read(k) for k in written} == written
    assert states.keys() == sorted(written)
    assert states.keys("workers") == [KEY, ("workers", T2, 3)]
    assert states.read(("workers", T1, 1)) is None
    store.close()


def test_a_state_is_kept_as_a_replay_leaves_it(tmp_path):
    store, states = _open(tmp_path)
    # Unsorted, touching runs of one state, a batch below the start offset.
    states.write(KEY, state(3, (6, 9, K, 1), (0, 5, K, 1), (10, 10, A, 2)))
    assert states.read(KEY) == state(3, (3, 9, K, 1), (10, 10, A, 2))
    store.close()
    store, states = _open(tmp_path)
    assert states.read(KEY) == state(3, (3, 9, K, 1), (10, 10, A, 2))
    store.close()


def test_the_first_write_is_a_snapshot_then_updates_until_the_cadence(tmp_path):
    store, states = _open(tmp_path, snapshot_every=3)
    # Each state at or past the last everywhere: counts only grow, the start only moves on.
    written = [state(n, (n, n + 1, K, n + 1), (n + 2, n + 9, A, n + 1), leader_epoch=n // 4) for n in range(8)]
    for s in written:
        states.write(KEY, s)
    records = _records(store)
    assert [kind for kind, _, _ in records] == [r.SNAPSHOT, r.UPDATE, r.UPDATE, r.UPDATE] * 2
    assert [v.snapshot_epoch for _, _, v in records] == [0] * 4 + [1] * 4
    for (kind, _, value), s in zip(records, written):
        if kind == r.SNAPSHOT:
            assert isinstance(value, r.ShareSnapshot)
            assert (value.state, value.create_timestamp, value.write_timestamp) == (s, NOW, NOW)
        else:
            # The whole batch list and the start offset: the update stands on the snapshot alone.
            assert isinstance(value, r.ShareUpdate)
            assert (value.start_offset, value.leader_epoch, value.batches) == (s.start_offset, s.leader_epoch,
                                                                               s.batches)
        assert value.delivery_complete_count == 2
    assert replayed(records) == replayed(compacted(records)) == {KEY: written[-1]}
    store.close()


def test_no_updates_between_snapshots_writes_only_snapshots(tmp_path):
    store, states = _open(tmp_path, snapshot_every=0)
    for n in range(3):
        states.write(KEY, state(n))
    assert [(kind, v.snapshot_epoch) for kind, _, v in _records(store)] == [(r.SNAPSHOT, 0), (r.SNAPSHOT, 1),
                                                                             (r.SNAPSHOT, 2)]
    store.close()


@pytest.mark.parametrize("back", [
    state(2, (2, 4, K, 1), (5, 9, A, 2)),                     # the start offset moves back
    state(3, (3, 4, K, 1), (5, 9, A, 1)),                     # a delivery count goes down
    state(3, (3, 4, K, 1), (5, 7, A, 2)),                     # offsets 8-9 dropped (never delivered again)
    state(3, (3, 4, K, 1), (5, 9, A, 2), state_epoch=1),      # a new state epoch (an update has none)
    state(3, (3, 4, K, 1), (5, 9, A, 2), leader_epoch=-1),    # the leader epoch goes back
])
def test_a_state_that_goes_back_is_written_as_a_snapshot(tmp_path, back):
    store, states = _open(tmp_path, snapshot_every=100)
    states.write(KEY, state(0, (0, 4, K, 1), (5, 9, A, 1)))
    states.write(KEY, state(3, (3, 4, K, 1), (5, 9, A, 2)))
    states.write(KEY, back)
    records = _records(store)
    assert [kind for kind, _, _ in records] == [r.SNAPSHOT, r.UPDATE, r.SNAPSHOT]
    assert replayed(records) == replayed(compacted(records)) == {KEY: back}
    store.close()
    store, states = _open(tmp_path)
    assert states.read(KEY) == back
    store.close()


# -- the invariant compaction relies on -------------------------------------------------------------------

@st.composite
def evolutions(draw) -> list[ShareState]:
    """A share-partition's successive states: acquisitions ending released, accepted or rejected, the start
    offset moving past finished records, and now and then a step back (a count lowered, a new state epoch)."""
    counts: dict[int, tuple[int, DeliveryState]] = {}
    start, state_epoch, leader_epoch = 0, 0, 0
    out = []
    for _ in range(draw(st.integers(1, 25))):
        op = draw(st.sampled_from(["deliver", "deliver", "deliver", "advance", "lower", "epoch", "leader"]))
        if op == "deliver":
            first = draw(st.integers(start, start + 15))
            last = draw(st.integers(first, first + 5))
            outcome = draw(st.sampled_from([A, K, X]))
            for o in range(first, last + 1):
                count, now = counts.get(o, (0, A))
                if now == A:
                    counts[o] = (count + 1, outcome)
        elif op == "advance":
            while counts.get(start, (0, A))[1] in (K, X):
                start += 1
        elif op == "lower":
            lowered = [o for o, (c, s) in counts.items() if s == A and c > 0 and o >= start]
            if lowered:
                o = draw(st.sampled_from(sorted(lowered)))
                counts[o] = (counts[o][0] - 1, A)
        elif op == "epoch":
            state_epoch += 1
        else:
            leader_epoch += 1
        batches = tuple(StateBatch(o, o, s, c) for o, (c, s) in sorted(counts.items()) if o >= start and c > 0)
        out.append(r.canonical(ShareState(state_epoch, leader_epoch, start, batches)))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evolutions(), st.integers(0, 4), st.randoms(use_true_random=False))
def test_any_compaction_of_the_log_replays_to_the_last_state(evolution, snapshot_every, rng):
    with tempfile.TemporaryDirectory() as directory:
        store, states = _open(Path(directory), fsync=False, snapshot_every=snapshot_every, partitions=1)
        try:
            for s in evolution:
                states.write(KEY, s)
                records = _records(store)
                expected = {KEY: s}
                assert replayed(records) == expected
                assert replayed(compacted(records)) == expected
                # A cleaner part-way: the newest snapshot, then any updates after it that end with the newest.
                snapshot = max(i for i, (kind, _, _) in enumerate(records) if kind == r.SNAPSHOT)
                later = [i for i, (kind, _, _) in enumerate(records) if kind == r.UPDATE and i > snapshot]
                kept = [i for i in later[:-1] if rng.random() < 0.5] + later[-1:]
                assert replayed([records[snapshot]] + [records[i] for i in kept]) == expected
            reloaded = ShareStateStore(store, InternalTopics(store, TxnConfig(), ShareStateTopicConfig(1)),
                                       fsync=False, snapshot_every=snapshot_every, clock=lambda: NOW)
            reloaded.load()
            assert reloaded.read(KEY) == evolution[-1]
        finally:
            store.close()


def _clean_until_caught_up(store: LogManager, partitions: int) -> None:
    for p in range(partitions):
        store.log(SHARE_STATE_TOPIC, p).roll()
    for _ in range(20):
        assert store.cleaner.await_round(WAIT_S)
        if all(store.cleaner.checkpoints.get((SHARE_STATE_TOPIC, p), 0)
               >= store.log(SHARE_STATE_TOPIC, p).segments[-1].base_offset for p in range(partitions)):
            return
    raise AssertionError("the cleaner did not catch up")


def test_the_cleaner_compacts_the_topic_and_a_reload_finds_every_state(tmp_path):
    rng = random.Random(28)
    keys = [("workers", T1, p) for p in range(4)] + [("billing", T2, 0)]
    latest: dict[SharePartitionKey, ShareState] = {}
    # Any dirty record is worth a round: the tombstones below are a small part of their log.
    store, states = _open(tmp_path, snapshot_every=5, partitions=2, segment_bytes=2048,
                          config={"min.cleanable.dirty.ratio": 0.01})
    try:
        for round_ in range(3):
            for n in range(150):
                key = rng.choice(keys)
                base = 10 * (round_ * 150 + n)
                # Mostly forward; now and then a count lowered (a snapshot).
                count = 1 if rng.random() < 0.1 else 2 + round_
                s = state(base, (base, base + 3, K, 1), (base + 4, base + 9, A, count))
                states.write(key, s)
                latest[key] = s
            written = len(_records(store))
            _clean_until_caught_up(store, 2)
            # At most the newest snapshot and update of each key below the active segments.
            assert len(_records(store)) <= 2 * len(keys) < written
            assert replayed(_records(store)) == latest
        states.delete([keys[0]])
        del latest[keys[0]]
        _clean_until_caught_up(store, 2)
        # Only the tombstones stay of the deleted key (until the delete horizon).
        assert [(kind, v) for kind, k, v in _records(store) if k == keys[0]] == [(r.UPDATE, None), (r.SNAPSHOT, None)]
    finally:
        store.close()
    store, states = _open(tmp_path)
    try:
        assert {k: states.read(k) for k in states.keys()} == latest
    finally:
        store.close()


# -- deletion ----------------------------------------------------------------------------------------------

def test_delete_writes_tombstones_for_both_keys_and_forgets_the_state(tmp_path):
    other = ("workers", T1, 1)
    store, states = _open(tmp_path, partitions=1)
    states.write(KEY, state(0, (0, 1, K, 1)))
    states.write(KEY, state(2))
    states.write(other, state(5))
    states.delete([KEY, ("nobody", T2, 9)])
    assert states.read(KEY) is None and states.keys() == [other]
    assert _records(store)[-2:] == [(r.UPDATE, KEY, None), (r.SNAPSHOT, KEY, None)]
    store.close()

    store, states = _open(tmp_path, partitions=1)
    assert states.read(KEY) is None and states.keys() == [other]
    # A new life starts with a snapshot of epoch 0.
    states.write(KEY, state(7))
    assert _records(store)[-1] == (r.SNAPSHOT, KEY, r.ShareSnapshot(0, state(7), NOW, NOW, 0))
    store.close()
    store, states = _open(tmp_path, partitions=1)
    assert (states.read(KEY), states.read(other)) == (state(7), state(5))
    store.close()


# -- failures ----------------------------------------------------------------------------------------------

def test_a_failed_fsync_raises_and_leaves_the_state_read_unchanged(tmp_path):
    fs = FaultFileSystem()
    store, states = _open(tmp_path, fs=fs, partitions=1)
    states.write(KEY, state(0, (0, 1, A, 1)))
    fs.fail_at(1, "fsync", f"*{SHARE_STATE_TOPIC}-0/*.log")
    with pytest.raises(CoordinatorNotAvailableError, match="not flushed"):
        states.write(KEY, state(1, (1, 1, K, 1)))
    assert states.read(KEY) == state(0, (0, 1, A, 1))
    # The log dir is offline now: later writes are refused, and nothing changes.
    with pytest.raises(CoordinatorNotAvailableError):
        states.write(KEY, state(2))
    assert states.read(KEY) == state(0, (0, 1, A, 1))
    with pytest.raises(StorageError, match="offline"):   # the close tells the shutdown was not clean
        store.close()


def test_an_append_refused_for_space_leaves_the_state_and_the_next_write_goes_through(tmp_path):
    fs = FaultFileSystem()
    store, states = _open(tmp_path, fs=fs, partitions=1)
    states.write(KEY, state(0, (0, 1, A, 1)))
    fs.set_free_space(10)
    with pytest.raises(CoordinatorNotAvailableError, match="not written"):
        states.write(KEY, state(1, (1, 1, K, 1)))
    assert states.read(KEY) == state(0, (0, 1, A, 1))
    fs.set_free_space(None)
    states.write(KEY, state(2, (2, 3, A, 2)))
    assert states.read(KEY) == state(2, (2, 3, A, 2))
    store.close()
    store, states = _open(tmp_path, partitions=1)
    assert states.read(KEY) == state(2, (2, 3, A, 2))
    assert [kind for kind, _, _ in _records(store)] == [r.SNAPSHOT, r.UPDATE]
    store.close()


# -- many writers -----------------------------------------------------------------------------------------

def test_concurrent_writers_each_find_their_state_durable(tmp_path):
    store, states = _open(tmp_path, snapshot_every=4)
    keys = [("g%d" % (i % 3), T1, i) for i in range(6)]
    errors: list[BaseException] = []

    def writer(key: SharePartitionKey, alone: bool) -> None:
        try:
            for n in range(40):
                s = state(n, (n, n + 1, K, 1), (n + 2, n + 4, A, n // 3 + 1))
                states.write(key, s)
                if alone:
                    assert states.read(key) == s
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    # Two writers per key: the state read after both is the one the log ends with.
    threads = [threading.Thread(target=writer, args=(k, 2 <= i < len(keys)))
               for i, k in enumerate(keys + keys[:2])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    final = {k: states.read(k) for k in keys}
    assert final == replayed(_records(store))
    store.close()
    store, states = _open(tmp_path)
    assert {k: states.read(k) for k in keys} == final
    store.close()
