"""The offset, time and aborted-transaction indexes against Kafka's rules (§5.3-5.5)."""
from __future__ import annotations

import bisect
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.index import (
    AbortedTxn,
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    OffsetIndex,
    TimeIndex,
    TxnIndex,
)


def test_new_index_is_made_preallocated_by_its_first_use_and_trimmed_on_close(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    index = OffsetIndex(path, 100, max_index_size=1005)
    # Kafka's LazyIndex: no file yet, and the lookups of an index with no entry need none.
    assert not os.path.exists(path) and index.entries == 0 and not index.is_full
    assert index.lookup(500) == (100, 0) and index.last_entry() == (100, 0) and not os.path.exists(path)
    index.append(105, 0)
    assert os.path.getsize(path) == 1000 and index.max_entries == 125
    index.append(110, 4200)
    index.close()
    assert open(path, "rb").read() == bytes.fromhex("00000005 00000000 0000000a 00001068")
    reopened = OffsetIndex(path, 100, max_index_size=1005)
    assert reopened.entries == 2 and reopened.last_entry() == (110, 4200)
    reopened.make_active()
    assert os.path.getsize(path) == 1000 and reopened.entries == 2
    reopened.close()


def test_offset_lookup_is_floor_with_base_default(tmp_path):
    index = OffsetIndex(str(tmp_path / "a.index"), 1000, max_index_size=800)
    for i in range(1, 50):
        index.append(1000 + i * 10, i * 4096)
    assert index.lookup(999) == (1000, 0)
    assert index.lookup(1009) == (1000, 0)
    assert index.lookup(1010) == (1010, 4096)
    assert index.lookup(1019) == (1010, 4096)
    assert index.lookup(10**12) == (1490, 49 * 4096)
    index.close()


def test_offset_index_refuses_disorder_and_overflow(tmp_path):
    index = OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=16)
    index.append(5, 10)
    with pytest.raises(InvalidOffsetError):
        index.append(5, 20)
    with pytest.raises(InvalidOffsetError):
        index.append(2**31, 20)
    index.append(6, 20)
    assert index.is_full
    with pytest.raises(IndexFullError):
        index.append(7, 30)
    index.close()


def test_truncate_removes_the_target_and_above(tmp_path):
    index = OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=800)
    for offset in (10, 20, 30):
        index.append(offset, offset * 100)
    index.truncate_to(20)
    assert [index.entry(i) for i in range(index.entries)] == [(10, 1000)]
    index.truncate_to(0)
    assert index.entries == 0 and index.last_entry() == (0, 0)
    index.close()


def test_time_index_appends_only_increasing_and_keeps_a_slot_for_close(tmp_path):
    index = TimeIndex(str(tmp_path / "a.timeindex"), 50, max_index_size=36)
    assert index.last_entry() == (-1, 50)
    assert index.maybe_append(100, 52)
    assert not index.maybe_append(100, 53)
    assert index.maybe_append(150, 55)
    assert index.is_full
    with pytest.raises(IndexFullError):
        index.maybe_append(200, 57)
    assert index.maybe_append(200, 57, final=True)
    assert index.lookup(99) == (-1, 50)
    assert index.lookup(149) == (100, 52)
    assert index.lookup(10**15) == (200, 57)
    index.truncate_to(55)
    assert index.entries == 1
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(300, 51)
    index.close()


def test_sanity_checks_catch_bad_files(tmp_path):
    path = tmp_path / "00000000000000000010.index"
    path.write_bytes(bytes(12))
    index = OffsetIndex(str(path), 10)
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        index.sanity_check(log_size=100)
    index.close(trim=False)
    path.write_bytes(bytes.fromhex("00000001 00000200"))
    index = OffsetIndex(str(path), 10)
    with pytest.raises(CorruptIndexError, match="past the log"):
        index.sanity_check(log_size=100)
    index.close(trim=False)
    tpath = tmp_path / "00000000000000000010.timeindex"
    tpath.write_bytes(bytes.fromhex("0000000000000009 00000001 0000000000000005 00000002"))
    tindex = TimeIndex(str(tpath), 10)
    with pytest.raises(CorruptIndexError, match="below the first"):
        tindex.sanity_check()
    tindex.close(trim=False)


def test_read_only_index_searches_but_refuses_appends(tmp_path):
    path = str(tmp_path / "a.index")
    index = OffsetIndex(path, 0, max_index_size=80)
    index.append(3, 64)
    index.close()
    os.chmod(path, 0o444)
    ro = OffsetIndex(path, 0, writable=False)
    assert ro.lookup(10) == (3, 64)
    with pytest.raises((IndexFullError, InvalidOffsetError)):
        ro.append(4, 128)
    ro.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 5000)), max_size=80),
       st.lists(st.integers(-5, 100_000), max_size=30))
def test_offset_lookup_matches_a_sorted_list(tmp_path_factory, steps, targets):
    directory = tmp_path_factory.mktemp("idx")
    index = OffsetIndex(str(directory / "x.index"), 7, max_index_size=8 * 100)
    offsets, positions = [], []
    offset, position = 7, 0
    for offset_step, position_step in steps:
        offset += offset_step
        position += position_step
        index.append(offset, position)
        offsets.append(offset)
        positions.append(position)
    for target in targets:
        slot = bisect.bisect_right(offsets, target) - 1
        assert index.lookup(target) == ((offsets[slot], positions[slot]) if slot >= 0 else (7, 0))
    index.close()
    # An index never appended to never made its file.
    assert (os.path.getsize(directory / "x.index") == 8 * len(offsets)) if offsets \
        else not os.path.exists(directory / "x.index")


def test_txn_index_round_trip_truncate_and_collect(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TxnIndex(path, 0)
    assert index.entries == [] and not os.path.exists(path)
    a = AbortedTxn(4001, 8, 10, 11)
    b = AbortedTxn(5, 12, 20, 30)
    index.append(a)
    index.append(b)
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(9, 1, 20, 21))
    assert open(path, "rb").read()[:34] == bytes.fromhex(
        "0000 0000000000000fa1 0000000000000008 000000000000000a 000000000000000b")
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)  # a partial trailing entry is ignored
    reread = TxnIndex(path, 0)
    assert reread.entries == [a, b]
    assert reread.collect(0, 9) == ([a], True)
    assert reread.collect(11, 30) == ([b], True)
    assert reread.collect(11, 40) == ([b], False)
    assert reread.collect(21, 50) == ([], False)
    reread.truncate_to(20)
    assert TxnIndex(path, 0).entries == [a]
    with open(path, "r+b") as f:
        f.write(b"\x01")
    with pytest.raises(CorruptIndexError):
        TxnIndex(path, 0).entries  # noqa: B018 (reading them is what fails)
