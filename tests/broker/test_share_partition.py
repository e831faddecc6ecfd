"""SharePartition's rules one by one: acquisition, acknowledgement, locks, delivery counts, SPSO, persistence.

Each test drives one share-partition as the share manager does (reads handed in as log batches, the clock
passed in) and checks what a consumer would see: the ranges it is handed, the errors it gets, and the
state that would be written to `__share_group_state`.
"""
from __future__ import annotations

import tracemalloc

import pytest

from logstore.broker.share.partition import INVALID_RECORD_STATE, INVALID_REQUEST, SharePartition
from logstore.broker.share.types import AckType, AcquiredRange, DeliveryState, ShareState, StateBatch

LOCK = 30_000
ACCEPT, RELEASE, REJECT, GAP, RENEW = (int(t) for t in (AckType.ACCEPT, AckType.RELEASE, AckType.REJECT,
                                                           AckType.GAP, AckType.RENEW))
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (DeliveryState.AVAILABLE, DeliveryState.ACQUIRED,
                                               DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED)


def fresh(start: int = 0, *, max_in_flight: int = 2000, delivery_limit: int = 5) -> SharePartition:
    """A share-partition with nothing delivered yet, starting at `start`."""
    return SharePartition(ShareState(0, 0, start, ()), max_in_flight=max_in_flight, delivery_limit=delivery_limit)


def log_batches(first: int, last: int, size: int) -> list[tuple[int, int, bool]]:
    """Deliverable log batches of `size` records covering [first, last]."""
    return [(at, min(at + size - 1, last), True) for at in range(first, last + 1, size)]


def ranges(*triples: tuple[int, int, int]) -> list[AcquiredRange]:
    return [AcquiredRange(*t) for t in triples]


def states(sp: SharePartition, first: int, last: int) -> list[tuple[DeliveryState, int]]:
    """(state, delivery count) of each offset in [first, last]."""
    out = []
    for offset in range(first, last + 1):
        record = sp.record(offset)
        assert record is not None, offset
        out.append((record.state, record.delivery_count))
    return out


# -- acquisition -----------------------------------------------------------------------------------


def test_new_records_are_acquired_with_count_one_and_move_the_end() -> None:
    sp = fresh(100)
    got = sp.acquire("m1", log_batches(100, 119, 10), 500, LOCK, 0)
    assert got == ranges((100, 119, 1))                     # neighbouring batches merged
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (100, 120, 120)
    assert sp.acquired_count() == 20 and sp.in_flight() == 20
    record = sp.record(105)
    assert record is not None and record.member_id == "m1" and record.lock_deadline_ms == LOCK


def test_acquisition_is_batch_aligned_past_max_records() -> None:
    sp = fresh()
    # The batch it started is finished (10 > 4 asked for), but no second batch is started.
    assert sp.acquire("m1", log_batches(0, 29, 10), 4, LOCK, 0) == ranges((0, 9, 1))
    assert sp.end_offset == 10
    # Two batches of 3 for max_records 5: the second is started at 3 < 5, the third is not.
    assert sp.acquire("m1", log_batches(10, 18, 3), 5, LOCK, 0) == ranges((10, 15, 1))
    assert sp.acquire("m1", [], 5, LOCK, 0) == []
    assert sp.acquire("m1", log_batches(16, 18, 3), 0, LOCK, 0) == []


def test_the_window_limit_stops_new_batches_but_not_redelivery() -> None:
    sp = fresh(max_in_flight=10)
    assert sp.acquire("m1", log_batches(0, 19, 4), 500, LOCK, 0) == ranges((0, 7, 1))   # 12 > 10: stop at 8
    assert sp.can_acquire()                                                             # 8 < 10 in flight
    assert sp.acquire("m2", log_batches(8, 19, 4), 500, LOCK, 0) == []                  # 8..11 would make 12
    assert sp.acknowledge("m1", 0, 1, [RELEASE], 1, LOCK) == 0
    # Released records inside the window go out again though the window cannot grow.
    assert sp.acquire("m2", log_batches(0, 19, 4), 500, LOCK, 2) == ranges((0, 1, 2))
    assert sp.acknowledge("m1", 2, 7, [ACCEPT], 3, LOCK) == 0
    assert sp.acknowledge("m2", 0, 1, [ACCEPT], 3, LOCK) == 0
    assert sp.start_offset == 8 and sp.in_flight() == 0
    assert sp.acquire("m2", log_batches(8, 19, 4), 500, LOCK, 4) == ranges((8, 15, 1))


def test_can_acquire_is_false_only_with_a_full_window_and_nothing_available() -> None:
    sp = fresh(max_in_flight=8)
    sp.acquire("m1", log_batches(0, 7, 4), 500, LOCK, 0)
    assert not sp.can_acquire()
    sp.acknowledge("m1", 3, 3, [RELEASE], 1, LOCK)
    assert sp.can_acquire() and sp.next_fetch_offset() == 3


def test_one_batch_larger_than_the_window_is_taken_when_the_window_is_empty() -> None:
    sp = fresh(max_in_flight=10)
    assert sp.acquire("m1", [(0, 49, True)], 5, LOCK, 0) == ranges((0, 49, 1))
    assert sp.in_flight() == 50 and not sp.can_acquire()
    assert sp.acquire("m2", [(50, 59, True)], 5, LOCK, 0) == []
    assert sp.acknowledge("m1", 0, 49, [ACCEPT], 1, LOCK) == 0
    assert sp.acquire("m2", [(50, 109, True)], 5, LOCK, 1) == ranges((50, 109, 1))


def test_control_and_aborted_batches_are_archived_never_handed_out() -> None:
    sp = fresh()
    batches = [(0, 0, False), (1, 4, True), (5, 5, False), (6, 9, False), (10, 12, True), (13, 13, False)]
    assert sp.acquire("m1", batches, 500, LOCK, 0) == ranges((1, 4, 1), (10, 12, 1))
    assert sp.start_offset == 1                             # the leading control record is done with
    assert states(sp, 5, 9) == [(ARCHIVED, 0)] * 5
    assert sp.end_offset == 14
    assert sp.acknowledge("m1", 1, 4, [ACCEPT], 1, LOCK) == 0
    assert sp.start_offset == 10                            # over the accepted run and the archived ones
    assert sp.acknowledge("m1", 10, 12, [ACCEPT], 1, LOCK) == 0
    assert (sp.start_offset, sp.end_offset, sp.in_flight()) == (14, 14, 0)
    # A window holding only archived records moves on by itself.
    assert sp.acquire("m1", [(14, 20, False)], 500, LOCK, 2) == []
    assert (sp.start_offset, sp.end_offset) == (21, 21)


def test_offsets_missing_between_batches_are_archived() -> None:
    sp = fresh()
    assert sp.acquire("m1", [(0, 4, True), (8, 9, True)], 500, LOCK, 0) == ranges((0, 4, 1), (8, 9, 1))
    assert states(sp, 5, 7) == [(ARCHIVED, 0)] * 3
    # A window that is empty jumps over a gap instead of holding it.
    assert sp.acknowledge("m1", 0, 9, [ACCEPT] * 5 + [GAP] * 3 + [ACCEPT] * 2, 1, LOCK) == 0
    assert sp.acquire("m1", [(50, 59, True)], 500, LOCK, 1) == ranges((50, 59, 1))
    assert (sp.start_offset, sp.end_offset, sp.in_flight()) == (50, 60, 10)


def test_released_records_compacted_away_meanwhile_are_archived() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 5), 500, LOCK, 0)
    assert sp.acknowledge("m1", 0, 9, [RELEASE], 1, LOCK) == 0
    # The cleaner removed 0..2: the read from the next fetch offset (0) starts at 3.
    assert sp.acquire("m2", [(3, 4, True), (5, 9, True)], 500, LOCK, 2) == ranges((3, 9, 2))
    assert sp.start_offset == 3 and states(sp, 3, 3) == [(ACQUIRED, 2)]


def test_a_read_below_the_start_offset_is_clipped() -> None:
    sp = fresh(7)
    assert sp.acquire("m1", [(0, 9, True), (10, 14, True)], 500, LOCK, 0) == ranges((7, 14, 1))


def test_batches_out_of_order_are_refused_before_anything_changes() -> None:
    sp = fresh()
    before = sp.state()
    with pytest.raises(ValueError):
        sp.acquire("m1", [(0, 4, True), (3, 9, True)], 500, LOCK, 0)
    assert sp.state() == before and sp.end_offset == 0


# -- delivery counts and the limit -----------------------------------------------------------------


def test_redelivery_raises_the_count_and_release_at_the_limit_archives() -> None:
    sp = fresh(delivery_limit=2)
    for count in (1, 2):
        assert sp.acquire("m1", log_batches(0, 4, 5), 500, LOCK, count) == ranges((0, 4, count))
        assert sp.acknowledge("m1", 0, 4, [RELEASE], count, LOCK) == 0
    assert sp.start_offset == 5 and sp.in_flight() == 0             # archived: SPSO moved over them
    assert sp.acquire("m1", log_batches(0, 4, 5), 500, LOCK, 9) == []


def test_lock_expiry_releases_and_archives_at_the_limit() -> None:
    sp = fresh(delivery_limit=2)
    sp.acquire("m1", log_batches(0, 4, 5), 500, LOCK, 0)
    assert sp.next_deadline() == LOCK
    assert not sp.expire(LOCK - 1)
    assert sp.expire(LOCK) and states(sp, 0, 4) == [(AVAILABLE, 1)] * 5
    assert sp.next_deadline() is None
    assert sp.acknowledge("m1", 0, 4, [ACCEPT], LOCK, LOCK) == INVALID_RECORD_STATE   # its lock is gone
    assert sp.acquire("m2", log_batches(0, 4, 5), 500, LOCK, LOCK) == ranges((0, 4, 2))
    assert sp.expire(2 * LOCK) and sp.start_offset == 5 and sp.in_flight() == 0


def test_mixed_counts_release_archives_only_those_at_the_limit() -> None:
    sp = fresh(delivery_limit=2)
    sp.acquire("m1", log_batches(0, 3, 4), 500, LOCK, 0)
    sp.acknowledge("m1", 2, 3, [RELEASE], 1, LOCK)
    assert sp.acquire("m1", log_batches(0, 3, 4), 500, LOCK, 2) == ranges((2, 3, 2))
    assert sp.acknowledge("m1", 0, 3, [RELEASE], 3, LOCK) == 0
    assert states(sp, 0, 3) == [(AVAILABLE, 1)] * 2 + [(ARCHIVED, 2)] * 2
    assert sp.acquire("m2", log_batches(0, 3, 4), 500, LOCK, 4) == ranges((0, 1, 2))
    assert sp.expire(4 + LOCK) and sp.start_offset == 4 and sp.next_deadline() is None


def test_a_record_on_its_last_attempt_goes_out_alone() -> None:
    sp = fresh(delivery_limit=3)
    sp.acquire("m1", log_batches(0, 5, 6), 500, LOCK, 0)
    sp.acknowledge("m1", 0, 5, [RELEASE], 1, LOCK)
    sp.acquire("m1", log_batches(0, 5, 6), 500, LOCK, 2)
    sp.acknowledge("m1", 0, 5, [ACCEPT, ACCEPT, RELEASE, RELEASE, ACCEPT, RELEASE], 3, LOCK)
    # 2, 3 and 5 were delivered twice: each final attempt is handed out on its own.
    for offset in (2, 3, 5):
        assert sp.acquire("m1", log_batches(0, 5, 6), 500, LOCK, 4) == ranges((offset, offset, 3))
    assert sp.acknowledge("m1", 2, 3, [RELEASE], 5, LOCK) == 0
    assert sp.acknowledge("m1", 5, 5, [RELEASE], 5, LOCK) == 0
    assert sp.start_offset == 6


def test_a_lowered_limit_archives_records_with_no_attempt_left() -> None:
    persisted = ShareState(3, 0, 0, (StateBatch(0, 4, AVAILABLE, 4), StateBatch(5, 9, AVAILABLE, 1)))
    sp = SharePartition(persisted, max_in_flight=2000, delivery_limit=3)
    assert sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0) == ranges((5, 9, 2))
    assert sp.start_offset == 5


def test_rejected_records_never_come_back() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    assert sp.acknowledge("m1", 3, 4, [REJECT], 1, LOCK) == 0
    assert sp.acknowledge("m1", 0, 9, [RELEASE, RELEASE, RELEASE, ACCEPT, ACCEPT] + [RELEASE] * 5, 1, LOCK) \
        == INVALID_RECORD_STATE                           # 3 and 4 are no longer held
    assert sp.acknowledge("m1", 0, 2, [RELEASE], 1, LOCK) == 0
    assert sp.acknowledge("m1", 5, 9, [RELEASE], 1, LOCK) == 0
    got = sp.acquire("m2", log_batches(0, 9, 10), 500, LOCK, 2)
    assert got == ranges((0, 2, 2), (5, 9, 2))
    assert states(sp, 3, 4) == [(ARCHIVED, 1)] * 2


# -- acknowledgement types and errors --------------------------------------------------------------


def test_gap_archives_held_offsets_and_may_name_archived_ones() -> None:
    sp = fresh()
    sp.acquire("m1", [(0, 4, True), (7, 9, True)], 500, LOCK, 0)
    assert sp.acknowledge("m1", 0, 9, [ACCEPT, GAP, ACCEPT, ACCEPT, ACCEPT, GAP, GAP, GAP, ACCEPT, ACCEPT],
                          1, LOCK) == 0
    assert (sp.start_offset, sp.in_flight()) == (10, 0)
    assert sp.state().batches == ()


def test_gap_of_archived_offsets_is_fine_from_a_member_holding_nothing() -> None:
    sp = fresh()
    sp.acquire("m1", [(0, 0, False), (1, 4, True)], 500, LOCK, 0)
    sp.acquire("m1", [(5, 5, False), (6, 9, True)], 500, LOCK, 0)
    assert sp.acknowledge("m2", 5, 5, [GAP], 1, LOCK) == 0             # m2 never held a record here
    assert sp.acknowledge("m2", 5, 6, [GAP], 1, LOCK) == INVALID_RECORD_STATE
    sp = SharePartition(sp.state(), max_in_flight=2000, delivery_limit=5)   # after a restart, nobody does
    assert sp.acknowledge("m1", 5, 5, [GAP], 1, LOCK) == 0
    assert sp.acknowledge("m1", 4, 5, [GAP], 1, LOCK) == INVALID_RECORD_STATE


def test_renew_extends_the_lock() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    assert sp.acknowledge("m1", 0, 4, [RENEW], 20_000, LOCK) == 0
    assert sp.next_deadline() == LOCK
    assert sp.expire(LOCK)
    assert states(sp, 0, 4) == [(ACQUIRED, 1)] * 5 and states(sp, 5, 9) == [(AVAILABLE, 1)] * 5
    record = sp.record(0)
    assert record is not None and record.lock_deadline_ms == 20_000 + LOCK
    assert sp.next_deadline() == 20_000 + LOCK
    assert sp.acknowledge("m1", 0, 4, [ACCEPT], 40_000, LOCK) == 0
    assert sp.next_deadline() is None and sp.start_offset == 5


def test_per_offset_types_are_applied_offset_by_offset() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 5, 6), 500, LOCK, 0)
    assert sp.acknowledge("m1", 0, 5, [ACCEPT, RELEASE, REJECT, RENEW, GAP, ACCEPT], 10, LOCK) == 0
    assert states(sp, 1, 5) == [(AVAILABLE, 1), (ARCHIVED, 1), (ACQUIRED, 1), (ARCHIVED, 1), (ACKNOWLEDGED, 1)]
    assert sp.start_offset == 1 and sp.next_fetch_offset() == 1


def test_wrong_member_or_records_not_held_change_nothing() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    sp.acquire("m2", log_batches(10, 19, 10), 500, LOCK, 0)
    sp.acknowledge("m1", 5, 5, [RELEASE], 1, LOCK)
    before = (sp.state(), [sp.record(o) for o in range(20)], sp.next_deadline())
    cases = [
        ("m2", 0, 9, [ACCEPT]),                    # held by another member
        ("m1", 8, 12, [ACCEPT]),                   # partly another member's
        ("m1", 0, 9, [ACCEPT]),                    # 5 is available, not held
        ("m1", 5, 5, [GAP]),                       # GAP of an available record
        ("m3", 0, 0, [ACCEPT]),                    # a member never seen
        ("m1", 0, 9, [ACCEPT] * 9 + [REJECT]),     # per offset, 5 among them
    ]
    for member, first, last, types in cases:
        assert sp.acknowledge(member, first, last, types, 2, LOCK) == INVALID_RECORD_STATE, (member, first)
        assert (sp.state(), [sp.record(o) for o in range(20)], sp.next_deadline()) == before


def test_malformed_acknowledgements_are_invalid_requests() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    before = sp.state()
    for first, last, types in [(5, 4, [ACCEPT]), (0, 9, [ACCEPT, ACCEPT]), (0, 0, []), (0, 0, [7]),
                               (0, 1, [ACCEPT, -1]), (-1, 3, [ACCEPT]), (8, 10, [ACCEPT]), (20, 30, [ACCEPT])]:
        assert sp.acknowledge("m1", first, last, types, 1, LOCK) == INVALID_REQUEST, (first, last, types)
    assert sp.state() == before and sp.acquired_count() == 10


def test_offsets_below_the_start_offset_are_skipped() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    assert sp.acknowledge("m1", 0, 4, [ACCEPT], 1, LOCK) == 0
    assert sp.acknowledge("m1", 0, 4, [ACCEPT], 1, LOCK) == 0          # done with already: a no-op
    assert sp.acknowledge("m1", 2, 6, [REJECT, REJECT, REJECT, ACCEPT, REJECT], 1, LOCK) == 0
    assert sp.start_offset == 7


# -- SPSO and the window ---------------------------------------------------------------------------


def test_the_start_offset_moves_over_the_leading_done_records_only() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    sp.acknowledge("m1", 1, 4, [ACCEPT], 1, LOCK)
    assert sp.start_offset == 0
    sp.acknowledge("m1", 0, 0, [REJECT], 1, LOCK)
    assert sp.start_offset == 5
    sp.acknowledge("m1", 6, 9, [ACCEPT], 1, LOCK)
    assert sp.start_offset == 5
    sp.acknowledge("m1", 5, 5, [ACCEPT], 1, LOCK)
    assert sp.start_offset == 10 and sp.in_flight() == 0 and sp.state().batches == ()


def test_memory_stays_flat_while_records_stream_through() -> None:
    sp = fresh(max_in_flight=2000)
    offset = 0

    def round_trip(n: int) -> None:
        nonlocal offset
        for _ in range(n):
            got = sp.acquire("m1", log_batches(offset, offset + 499, 100), 500, LOCK, offset)
            assert got == ranges((offset, offset + 499, 1))
            assert sp.acknowledge("m1", offset, offset + 499, [ACCEPT], offset, LOCK) == 0
            offset += 500

    round_trip(50)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        round_trip(400)                                   # 200,000 records through the window
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 2000, grown
    assert sp.in_flight() == 0 and sp.next_deadline() is None


def test_move_start_forward_keeps_the_window_above_and_drops_held_records_below() -> None:
    sp = fresh()
    sp.acquire("m1", log_batches(0, 9, 10), 500, LOCK, 0)
    sp.acknowledge("m1", 6, 7, [RELEASE], 1, LOCK)
    sp.move_start(5)
    assert (sp.start_offset, sp.end_offset, sp.acquired_count()) == (5, 10, 3)
    assert sp.acknowledge("m1", 0, 4, [ACCEPT], 2, LOCK) == 0          # dropped: a no-op
    assert sp.next_fetch_offset() == 6 and states(sp, 6, 7) == [(AVAILABLE, 1)] * 2
    sp.move_start(6)
    assert sp.start_offset == 6 and sp.record(5) is None
    sp.move_start(40)                                                  # past the end: empty at 40
    assert (sp.start_offset, sp.end_offset, sp.acquired_count(), sp.next_deadline()) == (40, 40, 0, None)
    assert sp.acquire("m1", [(38, 45, True)], 500, LOCK, 3) == ranges((40, 45, 1))


def test_move_start_backward_or_reset_clears_the_window() -> None:
    sp = fresh(10)
    sp.acquire("m1", log_batches(10, 19, 10), 500, LOCK, 0)
    sp.move_start(3)
    assert (sp.start_offset, sp.end_offset, sp.acquired_count(), sp.next_deadline()) == (3, 3, 0, None)
    assert sp.acknowledge("m1", 10, 19, [ACCEPT], 1, LOCK) == INVALID_REQUEST
    sp.acquire("m1", log_batches(3, 9, 7), 500, LOCK, 0)
    sp.move_start(5, reset=True)
    assert (sp.start_offset, sp.end_offset, sp.acquired_count()) == (5, 5, 0)
    assert sp.acquire("m2", log_batches(3, 9, 7), 500, LOCK, 0) == ranges((5, 9, 1))


# -- members ---------------------------------------------------------------------------------------


def test_a_member_gone_returns_its_records_with_the_count_lowered() -> None:
    sp = fresh(delivery_limit=2)
    sp.acquire("m1", log_batches(0, 4, 5), 500, LOCK, 0)
    sp.acknowledge("m1", 0, 4, [RELEASE], 1, LOCK)
    sp.acquire("m1", log_batches(0, 4, 5), 500, LOCK, 2)               # count 2: the limit
    sp.acquire("m2", log_batches(5, 9, 5), 500, LOCK, 2)
    assert sp.release_member("m1")
    assert states(sp, 0, 4) == [(AVAILABLE, 1)] * 5                    # not archived: never seen
    assert states(sp, 5, 9) == [(ACQUIRED, 1)] * 5
    assert not sp.release_member("m1")
    assert sp.acknowledge("m1", 0, 4, [ACCEPT], 3, LOCK) == INVALID_RECORD_STATE
    assert sp.acquire("m3", log_batches(0, 9, 5), 500, LOCK, 3) == ranges((0, 4, 2))
    assert sp.next_deadline() == 2 + LOCK


def test_release_all_works_as_lock_expiry() -> None:
    sp = fresh(delivery_limit=1)
    sp.acquire("m1", log_batches(0, 4, 5), 500, LOCK, 0)
    sp.acquire("m2", log_batches(5, 9, 5), 500, LOCK, 0)
    assert sp.release_all() and not sp.release_all()
    assert sp.start_offset == 10 and sp.next_deadline() is None


# -- persistence -----------------------------------------------------------------------------------


def test_state_round_trip_turns_held_records_available_and_keeps_counts() -> None:
    sp = fresh(100)
    sp.acquire("m1", [(100, 104, True), (105, 105, False), (106, 111, True)], 500, LOCK, 0)
    sp.acknowledge("m1", 100, 111, [RELEASE, ACCEPT, ACCEPT, REJECT, RELEASE, GAP] + [ACCEPT] * 3 + [RENEW] * 3,
                   1, LOCK)
    sp.acquire("m2", [(100, 104, True), (105, 105, False), (106, 111, True)], 500, LOCK, 2)
    persisted = sp.state()
    assert persisted.start_offset == 100
    assert persisted.batches == (
        StateBatch(100, 100, AVAILABLE, 2), StateBatch(101, 102, ACKNOWLEDGED, 1),
        StateBatch(103, 103, ARCHIVED, 1), StateBatch(104, 104, AVAILABLE, 2),
        StateBatch(105, 105, ARCHIVED, 0), StateBatch(106, 108, ACKNOWLEDGED, 1),
        StateBatch(109, 111, AVAILABLE, 1))
    again = SharePartition(persisted, max_in_flight=2000, delivery_limit=5)
    assert (again.start_offset, again.end_offset, again.next_fetch_offset()) == (100, 112, 100)
    assert again.acquired_count() == 0 and again.next_deadline() is None
    assert again.state() == persisted
    got = again.acquire("m3", [(100, 104, True), (105, 105, False), (106, 111, True)], 500, LOCK, 0)
    assert got == ranges((100, 100, 3), (104, 104, 3), (109, 111, 2))


def test_offsets_uncovered_by_persisted_batches_are_new_and_acquired_is_available() -> None:
    persisted = ShareState(2, 7, 10, (StateBatch(5, 11, ACKNOWLEDGED, 1), StateBatch(14, 15, ACQUIRED, 3),
                                      StateBatch(18, 19, ARCHIVED, 2)))
    sp = SharePartition(persisted, max_in_flight=2000, delivery_limit=5)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (12, 20, 12)
    assert sp.acquire("m1", log_batches(12, 24, 20), 500, LOCK, 0) == ranges((12, 13, 1), (14, 15, 4),
                                                                              (16, 17, 1), (20, 24, 1))
    state = sp.state()
    assert (state.state_epoch, state.leader_epoch) == (2, 7)


@pytest.mark.parametrize("batch", [StateBatch(3, 2, AVAILABLE, 0), StateBatch(0, 2, AVAILABLE, -1),
                                   StateBatch(0, 2, 3, 1), StateBatch(0, 1 << 30, ARCHIVED, 1)])  # type: ignore[arg-type]  # an unknown state on purpose
def test_broken_persisted_state_is_refused(batch: StateBatch) -> None:
    with pytest.raises(ValueError):
        SharePartition(ShareState(0, 0, 0, (batch,)), max_in_flight=2000, delivery_limit=5)


def test_a_negative_start_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        fresh(-1)
    sp = fresh()
    with pytest.raises(ValueError):
        sp.move_start(-1)
