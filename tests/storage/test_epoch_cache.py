"""LeaderEpochCache against on-disk-format.md §6.1 and Kafka's LeaderEpochFileCache.

Each change must rewrite the checkpoint and each non-change must leave it
alone: tests delete the file and check whether it comes back.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore.checkpoints import CorruptCheckpointError, read_leader_epoch_checkpoint
from logstore.epoch_cache import LeaderEpochCache
from spec_vectors import VECTORS_DIR

SEGMENT_TXN = VECTORS_DIR / "segment_txn"


def _cache(tmp_path, entries=(), **kwargs) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", **kwargs)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def _rewritten_by(cache: LeaderEpochCache, change) -> bool:
    """Whether `change(cache)` wrote the checkpoint file."""
    Path(cache.path).unlink(missing_ok=True)
    change(cache)
    return Path(cache.path).exists()


# ---------------------------------------------------------------------------
# Loading


def test_loads_the_vector_checkpoint():
    if not SEGMENT_TXN.is_dir():
        pytest.fail(f"test vectors not found at {SEGMENT_TXN}")
    cache = LeaderEpochCache(SEGMENT_TXN / "leader-epoch-checkpoint", persist=False)
    assert cache.entries == [(5, 0), (7, 2)]
    assert cache.latest_epoch == 7


def test_missing_file_is_an_empty_cache_and_is_not_created(tmp_path):
    cache = _cache(tmp_path)
    assert cache.entries == [] and cache.latest_epoch is None
    assert not (tmp_path / "leader-epoch-checkpoint").exists()


@pytest.mark.parametrize("text, line", [
    ("0\n2\n5 0\n5 2\n", 4),    # epoch repeated
    ("0\n2\n7 0\n5 2\n", 4),    # epoch decreasing
    ("0\n2\n5 2\n7 2\n", 4),    # start offset repeated
    ("0\n2\n5 3\n7 2\n", 4),    # start offset decreasing
    ("0\n1\n-1 0\n", 3),        # negative epoch
    ("0\n1\n0 -3\n", 3),        # negative start offset
])
def test_checkpoint_breaking_the_invariants_is_corrupt(tmp_path, text, line):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        LeaderEpochCache(path)
    assert info.value.line == line and str(path) in str(info.value)


def test_entries_survive_reopening(tmp_path):
    _cache(tmp_path, [(1, 0), (3, 10), (4, 25)])
    assert _cache(tmp_path).entries == [(1, 0), (3, 10), (4, 25)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n4 25\n"


def test_without_persist_nothing_is_written(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (2, 5)], persist=False)
    cache.truncate_from_start(3)
    cache.clear()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# assign


def test_assign_within_the_latest_epoch_is_a_no_op(tmp_path):
    cache = _cache(tmp_path, [(5, 0), (7, 2)])
    assert not _rewritten_by(cache, lambda c: c.assign(7, 2))
    assert not _rewritten_by(cache, lambda c: c.assign(7, 9))
    assert cache.entries == [(5, 0), (7, 2)]


def test_assign_a_new_epoch_appends(tmp_path):
    cache = _cache(tmp_path, [(5, 0)])
    assert _rewritten_by(cache, lambda c: c.assign(7, 2))
    assert read_leader_epoch_checkpoint(cache.path) == cache.entries == [(5, 0), (7, 2)]


def test_assign_latest_epoch_at_an_earlier_offset_moves_its_start(tmp_path):
    cache = _cache(tmp_path, [(5, 0), (7, 4)])
    cache.assign(7, 2)
    assert cache.entries == [(5, 0), (7, 2)]


def test_assign_an_older_epoch_removes_every_later_epoch(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (3, 10), (5, 20)])
    cache.assign(3, 30)
    assert cache.entries == [(1, 0), (3, 30)]


def test_assign_a_newer_epoch_at_an_earlier_offset_removes_entries_at_or_after_it(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (3, 10), (5, 20)])
    cache.assign(6, 10)
    assert cache.entries == [(1, 0), (6, 10)]


@pytest.mark.parametrize("epoch, offset", [(-1, 0), (0, -1)])
def test_assign_refuses_negative_values(tmp_path, epoch, offset):
    cache = _cache(tmp_path, [(1, 0)])
    with pytest.raises(ValueError):
        cache.assign(epoch, offset)
    assert cache.entries == [(1, 0)]


# ---------------------------------------------------------------------------
# Truncation


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_end(tmp_path):
    cache = _cache(tmp_path, [(2, 6), (3, 8), (4, 11)])
    cache.truncate_from_end(11)
    assert cache.entries == [(2, 6), (3, 8)]
    assert not _rewritten_by(cache, lambda c: c.truncate_from_end(9))  # nothing starts at ≥ 9
    cache.truncate_from_end(0)
    assert read_leader_epoch_checkpoint(cache.path) == cache.entries == []


@pytest.mark.parametrize("start, expected", [
    (5, [(2, 6), (3, 8), (4, 11)]),   # before the first entry: unchanged
    (6, [(2, 6), (3, 8), (4, 11)]),   # exactly at the first entry: unchanged
    (8, [(3, 8), (4, 11)]),
    (9, [(3, 9), (4, 11)]),           # epoch 3 re-inserted at the new start
    (12, [(4, 12)]),                  # past every entry: the last epoch survives
])
def test_truncate_from_start(tmp_path, start, expected):
    cache = _cache(tmp_path, [(2, 6), (3, 8), (4, 11)])
    rewritten = _rewritten_by(cache, lambda c: c.truncate_from_start(start))
    assert cache.entries == expected
    assert rewritten == (expected != [(2, 6), (3, 8), (4, 11)])
    if rewritten:
        assert read_leader_epoch_checkpoint(cache.path) == expected


def test_truncation_refuses_negative_offsets(tmp_path):
    cache = _cache(tmp_path, [(1, 0)])
    with pytest.raises(ValueError):
        cache.truncate_from_end(-1)
    with pytest.raises(ValueError):
        cache.truncate_from_start(-1)


def test_clear_writes_an_empty_checkpoint(tmp_path):
    cache = _cache(tmp_path, [(1, 0)])
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch is None
    assert (tmp_path / "leader-epoch-checkpoint").read_bytes() == b"0\n0\n"
    assert not _rewritten_by(cache, LeaderEpochCache.clear)


# ---------------------------------------------------------------------------
# end_offset_for (OffsetsForLeaderEpoch)


@pytest.mark.parametrize("epoch, expected", [
    (9, (9, 15)),     # latest epoch: ends at the log end offset
    (7, (7, 10)),     # ends where the next epoch starts
    (8, (7, 10)),     # unknown epoch between two: the one below it
    (5, (5, 2)),
    (6, (5, 2)),
    (3, (3, 0)),      # below the first entry: Kafka answers the first start offset
    (10, (-1, -1)),   # above the latest epoch
    (-1, (-1, -1)),   # UNDEFINED_EPOCH
])
def test_end_offset_for(tmp_path, epoch, expected):
    cache = _cache(tmp_path, [(5, 0), (7, 2), (9, 10)])
    assert cache.end_offset_for(epoch, 15) == expected


def test_end_offset_for_on_an_empty_cache_is_undefined(tmp_path):
    assert _cache(tmp_path).end_offset_for(0, 15) == (-1, -1)


# ---------------------------------------------------------------------------
# Property: any sequence of changes keeps the invariants and the file in step

OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
    st.tuples(st.just("truncate_from_end"), st.integers(0, 60)),
    st.tuples(st.just("truncate_from_start"), st.integers(0, 60)),
    st.tuples(st.just("clear")),
), max_size=40)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPERATIONS)
def test_random_changes_keep_invariants_and_match_the_file(tmp_path, operations):
    path = tmp_path / "leader-epoch-checkpoint"
    path.unlink(missing_ok=True)
    cache = LeaderEpochCache(path)
    for name, *args in operations:
        before = cache.entries
        getattr(cache, name)(*args)
        after = cache.entries
        assert all(e1 < e2 and o1 < o2 for (e1, o1), (e2, o2) in zip(after, after[1:]))
        assert all(e >= 0 and o >= 0 for e, o in after)
        if name == "assign" and after != before:
            assert after[-1] == tuple(args)
        elif name == "truncate_from_end":
            assert all(o < args[0] for _, o in after)
        elif name == "truncate_from_start" and before and before[0][1] <= args[0]:
            assert after[0][1] == args[0]
        assert LeaderEpochCache(path).entries == after
