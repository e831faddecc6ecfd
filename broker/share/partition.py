"""One share-partition's in-flight records (Kafka's SharePartition), kept as compact per-offset arrays.

A share-partition is one group's view of one topic partition: the share-partition start offset (SPSO),
below which every record is done with, and the window [SPSO, SPEO) of records that were read at least once,
each AVAILABLE, ACQUIRED by one member under a time-limited lock, ACKNOWLEDGED or ARCHIVED, with the number
of times it was handed out. Kafka's rules, as its SharePartition and InFlightState apply them:

- acquiring hands out AVAILABLE records (delivery count + 1) and new ones past SPEO (count 1), whole log
  batches at a time, no new batch once `max_records` are out or the window would pass `max_in_flight`;
  a record on its last attempt (count = limit - 1, limit > 2) goes out alone, so one poison record cannot
  drag a whole batch to the archive with it;
- ACCEPT acknowledges, REJECT and GAP archive, RELEASE and an expired lock make the record AVAILABLE again,
  or ARCHIVED once its count has reached the delivery limit; RENEW restarts the lock;
- a member that leaves returns what it holds with its count lowered by one (Kafka assumes the records
  never reached the application) and never archived for it;
- SPSO moves over the leading run of ACKNOWLEDGED and ARCHIVED records.

Memory: 9 bytes per in-flight record (state, count, member slot, lock stamp), one small entry per
outstanding acquisition (acquisition_locks.py); the arrays are cut from the front once SPSO is past half
of them, so moving SPSO costs amortised O(1) per record.
"""
from __future__ import annotations

import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby

from logstore.broker.share.acquisition_locks import AcquisitionLocks
from logstore.broker.share.types import AckType, AcquiredRange, DeliveryState, ShareState, StateBatch
from logstore.errors import ERROR_BY_NAME

INVALID_REQUEST = ERROR_BY_NAME["INVALID_REQUEST"].code
INVALID_RECORD_STATE = ERROR_BY_NAME["INVALID_RECORD_STATE"].code

_AVAILABLE = int(DeliveryState.AVAILABLE)
_ACQUIRED = int(DeliveryState.ACQUIRED)
_ACKNOWLEDGED = int(DeliveryState.ACKNOWLEDGED)
_ARCHIVED = int(DeliveryState.ARCHIVED)
_ACK_TYPES = frozenset(int(t) for t in AckType)
_STATE_BYTE = {s: bytes((s,)) for s in (_AVAILABLE, _ACQUIRED, _ACKNOWLEDGED, _ARCHIVED)}

_LIVE = re.compile(b"[\x00\x01]")               # not yet acknowledged or archived
_AVAILABLE_RUNS = re.compile(b"\x00+")
_ACQUIRED_RUNS = re.compile(b"\x01+")
_PERSISTED_RUNS = re.compile(b"\x00+|\x02+|\x04+")
_AS_PERSISTED = bytes.maketrans(b"\x01", b"\x00")  # a lock does not outlive the broker
_PERSISTED_STATES = {_AVAILABLE: _AVAILABLE, _ACQUIRED: _AVAILABLE, _ACKNOWLEDGED: _ACKNOWLEDGED, _ARCHIVED: _ARCHIVED}

_NO_MEMBER = 0
_MAX_MEMBERS = 0xFFFF                 # member slots are array('H') entries; 0 is "nobody"
_MAX_SPAN = 1 << 24                   # a persisted window this wide is not one this code wrote
_TRIM_AT = 1024                       # records below SPSO kept before the arrays are cut


@dataclass(frozen=True, slots=True)
class InFlightRecord:
    """One offset of the window as it stands: its state, delivery count, holder and lock deadline (ms)."""

    offset: int
    state: DeliveryState
    delivery_count: int
    member_id: str | None
    lock_deadline_ms: int | None


class SharePartition:
    """The in-memory state of one share-partition (one group, one topic partition).

    Owns the window's per-offset arrays, indexed by `offset - base`: `_state` (DeliveryState values),
    `_count` (delivery counts), `_member` (member slots, `_NO_MEMBER` unless ACQUIRED) and `_stamp` (the
    lock an ACQUIRED record is held under; meaningless otherwise), and the locks those stamps name.
    Invariants: base <= start_offset <= end_offset = base + len(_state); every offset below start_offset
    is ACKNOWLEDGED or ARCHIVED (or was dropped by `move_start`); start_offset is AVAILABLE or ACQUIRED
    unless it equals end_offset; a lock's held count is the number of ACQUIRED records stamped with it.
    No locking, no I/O and no clock: the caller serialises every call (the share manager's lock per
    share-partition) and passes the time. Offsets are log offsets; times and durations are ms.
    """

    def __init__(self, state: ShareState, *, max_in_flight: int, delivery_limit: int) -> None:
        """Rebuild the window from its persisted form: what was ACQUIRED comes back AVAILABLE, count kept."""
        if state.start_offset < 0:
            raise ValueError(f"share-partition start offset {state.start_offset} is negative "
                             "(an uninitialized state is resolved by share.auto.offset.reset first)")
        self.max_in_flight = max_in_flight
        self.delivery_limit = delivery_limit
        self.state_epoch = state.state_epoch
        self.leader_epoch = state.leader_epoch
        self._members: list[str] = [""]
        self._member_slots: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._locks = AcquisitionLocks()
        start = state.start_offset
        batches = sorted((b for b in state.batches if b.last_offset >= start), key=lambda b: b.first_offset)
        end = max([start] + [b.last_offset + 1 for b in batches])
        if end - start > _MAX_SPAN:
            raise ValueError(f"persisted share state spans {end - start} offsets from {start}: "
                             f"more than {_MAX_SPAN}")
        self._base = self._start = start
        self._state = bytearray(end - start)
        self._count = _filled("H", 0, end - start)
        self._member = _filled("H", _NO_MEMBER, end - start)
        self._stamp = _filled("I", 0, end - start)
        for batch in batches:
            persisted = _PERSISTED_STATES.get(int(batch.delivery_state))
            if persisted is None or batch.first_offset > batch.last_offset or not 0 <= batch.delivery_count <= 0x7FFF:
                # ShareSnapshotValue's DeliveryCount is an int16.
                raise ValueError(f"persisted state batch {batch} is not one a share-partition writes")
            i, j = max(batch.first_offset, start) - start, batch.last_offset + 1 - start
            self._state[i:j] = _STATE_BYTE[persisted] * (j - i)
            self._count[i:j] = _filled("H", batch.delivery_count, j - i)
        self._advance()

    @property
    def start_offset(self) -> int:
        """SPSO: every offset below is acknowledged, archived or never to be delivered."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO: one past the highest offset ever read into the window (start_offset when none)."""
        return self._base + len(self._state)

    def in_flight(self) -> int:
        """Records in the window, whatever their state: end_offset - start_offset."""
        return self.end_offset - self._start

    def acquired_count(self) -> int:
        """Records currently held under a lock."""
        return self._state.count(_ACQUIRED, self._start - self._base)

    def next_fetch_offset(self) -> int:
        """The lowest offset a fetch should read from: the first AVAILABLE one, else end_offset."""
        i = self._state.find(_AVAILABLE, self._start - self._base)
        return self.end_offset if i < 0 else self._base + i

    def can_acquire(self) -> bool:
        """False when nothing in the window is AVAILABLE and the window is full (Kafka's canAcquireRecords)."""
        available = self._state.find(_AVAILABLE, self._start - self._base) >= 0
        return available or self.in_flight() < self.max_in_flight

    def next_deadline(self) -> int | None:
        """The earliest lock deadline (ms) of any record still held, for the caller's timer."""
        return self._locks.next_deadline()

    def record(self, offset: int) -> InFlightRecord | None:
        """One offset's state, or None outside [start_offset, end_offset)."""
        if not self._start <= offset < self.end_offset:
            return None
        i = offset - self._base
        state = self._state[i]
        held = state == _ACQUIRED
        return InFlightRecord(offset, DeliveryState(state), self._count[i],
                              self._members[self._member[i]] if held else None,
                              self._locks.deadline(self._stamp[i]) if held else None)

    def state(self) -> ShareState:
        """The persisted form: ACQUIRED written AVAILABLE with its count, equal neighbours merged, and
        AVAILABLE records never delivered left out (uncovered offsets read back as exactly that)."""
        return ShareState(self.state_epoch, self.leader_epoch, self._start,
                          self.state_batches(self._start, self.end_offset - 1))

    def state_batches(self, first: int, last: int) -> tuple[StateBatch, ...]:
        """The persisted form of [first, last] clipped to the window, as `state()` writes it (for an update
        that carries only what an acknowledgement changed)."""
        i, j = max(first, self._start) - self._base, min(last + 1, self.end_offset) - self._base
        if i >= j:
            return ()
        view = self._state[i:j].translate(_AS_PERSISTED)
        batches: list[StateBatch] = []
        for run in _PERSISTED_RUNS.finditer(view):
            s, e = run.span()
            state = DeliveryState(view[s])
            at = self._base + i + s
            for count, n in _runs(self._count[i + s:i + e]):
                if state != DeliveryState.AVAILABLE or count:
                    batches.append(StateBatch(at, at + n - 1, state, count))
                at += n
        return tuple(batches)

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int, bool]], max_records: int,
                lock_ms: int, now_ms: int, *, fetch_offset: int | None = None) -> list[AcquiredRange]:
        """Hand `member_id` what it may have of a read's batches, each range under a lock until
        now_ms + lock_ms.

        `batches` are the log's batches from one read, in order, as (first offset, last offset,
        deliverable); the read started at `fetch_offset` (default: next_fetch_offset()), so offsets from
        there to the first batch, and between batches, are not in the log (compacted away): AVAILABLE ones
        are archived. Batches not deliverable (control batches, aborted transactions under read_committed)
        are archived at once. Returns contiguous ranges, each with one delivery count.
        """
        if max_records <= 0 or not batches:
            return []
        previous_last = -1
        for first, last, _ in batches:
            if last < first or first <= previous_last:
                raise ValueError(f"log batches out of order: {first}-{last} after {previous_last}")
            previous_last = last
        start_fetch = self.next_fetch_offset() if fetch_offset is None else fetch_offset
        slot = self._slot(member_id)
        stamp = self._locks.peek_stamp()
        taken: list[list[int]] = []     # [first, last, delivery count], in offset order
        acquired = 0
        previous_last = -1
        for first, last, deliverable in batches:
            gap_from = start_fetch if previous_last < 0 else previous_last + 1
            previous_last = last
            end = self.end_offset
            if gap_from < first:
                self._archive_available(max(gap_from, self._start), min(first, end))
            if last < self._start:
                continue
            if acquired >= max_records:
                break
            if first < end:
                a, b = max(first, self._start), min(last + 1, end)
                if deliverable:
                    got, stop = self._reacquire(a, b, slot, stamp, taken, acquired)
                    acquired += got
                    if stop:
                        break
                else:
                    self._archive_available(a, b)
                self._advance()
            if last < end:
                continue
            new_first = max(first, end)
            empty = self._start == end
            if not empty and last + 1 - self._start > self.max_in_flight:
                break
            if new_first > end:
                if empty:
                    self._restart_at(new_first)
                else:
                    self._append(_ARCHIVED, 0, _NO_MEMBER, 0, new_first - end)
            n = last + 1 - new_first
            if deliverable:
                self._append(_ACQUIRED, 1, slot, stamp, n)
                taken.append([new_first, last, 1])
                acquired += n
            else:
                self._append(_ARCHIVED, 0, _NO_MEMBER, 0, n)
            self._advance()
        if acquired:
            self._locks.add(now_ms + lock_ms, taken[0][0], taken[-1][1], acquired)
        self._advance()
        return _merged(taken)

    def _reacquire(self, a: int, b: int, slot: int, stamp: int, taken: list[list[int]],
                   acquired: int) -> tuple[int, bool]:
        """Acquire the AVAILABLE records of [a, b); (how many, whether acquiring must stop here)."""
        got = 0
        limit = self.delivery_limit
        for run in _AVAILABLE_RUNS.finditer(self._state, a - self._base, b - self._base):
            at = run.start()
            for count, n in _runs(self._count[at:run.end()]):
                if count >= limit:
                    # Persisted under a higher limit, or the limit was lowered since: no attempt left.
                    self._state[at:at + n] = _STATE_BYTE[_ARCHIVED] * n
                    at += n
                    continue
                last_attempt = limit > 2 and count == limit - 1
                if last_attempt:
                    if acquired + got:
                        return got, True
                    n = 1
                self._state[at:at + n] = _STATE_BYTE[_ACQUIRED] * n
                self._count[at:at + n] = _filled("H", count + 1, n)
                self._member[at:at + n] = _filled("H", slot, n)
                self._stamp[at:at + n] = _filled("I", stamp, n)
                taken.append([self._base + at, self._base + at + n - 1, count + 1])
                got += n
                at += n
                if last_attempt:
                    return got, True
        return got, False

    def acknowledge(self, member_id: str, first: int, last: int, types: Sequence[int], now_ms: int,
                    lock_ms: int) -> int:
        """Apply one acknowledgement batch; 0, or the Kafka error code with nothing changed.

        `types` holds one AckType for the whole range or one per offset. Offsets below start_offset are
        done with already and skipped, as Kafka skips them. INVALID_REQUEST: a malformed batch, or one
        reaching past end_offset; INVALID_RECORD_STATE: an offset not ACQUIRED by `member_id` (GAP may
        also name an offset already archived).
        """
        n = last - first + 1
        if first < 0 or n <= 0 or len(types) not in (1, n) or not _ACK_TYPES.issuperset(types):
            return INVALID_REQUEST
        if last < self._start:
            return 0
        if last >= self.end_offset:
            return INVALID_REQUEST
        per_offset = list(types[self._start - first:] if first < self._start else types) if len(types) > 1 else None
        first = max(first, self._start)
        # A member holding nothing here may still name archived offsets as GAP: -1 matches no record.
        slot = self._member_slots.get(member_id, -1)
        i = first - self._base
        runs: list[tuple[int, int, int]] = []     # (ack type, start index, end index)
        if per_offset is None:
            runs.append((types[0], i, last + 1 - self._base))
        else:
            for ack, n_run in _runs(per_offset):
                runs.append((ack, i, i + n_run))
                i += n_run
        for ack, s, e in runs:
            states = self._state[s:e]
            held = states.count(_ACQUIRED)
            if self._member[s:e].count(slot) != held:
                return INVALID_RECORD_STATE
            settled = states.count(_ARCHIVED) if ack == AckType.GAP else 0
            if held + settled != e - s:
                return INVALID_RECORD_STATE
        for ack, s, e in runs:
            if ack in (AckType.ACCEPT, AckType.REJECT):
                self._unlock(s, e)
                self._state[s:e] = _STATE_BYTE[_ACKNOWLEDGED if ack == AckType.ACCEPT else _ARCHIVED] * (e - s)
            elif ack == AckType.RELEASE:
                self._unlock(s, e)
                self._release(s, e)
            elif ack == AckType.RENEW:
                self._unlock(s, e)
                self._member[s:e] = _filled("H", slot, e - s)
                self._stamp[s:e] = _filled("I", self._locks.peek_stamp(), e - s)
                self._locks.add(now_ms + lock_ms, self._base + s, self._base + e - 1, e - s)
            else:
                for run in _ACQUIRED_RUNS.finditer(self._state, s, e):
                    self._unlock(*run.span())
                self._state[s:e] = _STATE_BYTE[_ARCHIVED] * (e - s)
        self._advance()
        return 0

    def expire(self, now_ms: int) -> bool:
        """Release every record whose lock deadline is at or before now_ms (archived at the delivery
        limit); True if any record changed."""
        base, start, end = self._base, self._start, self.end_offset
        return self._release_runs([run for stamp, first, last in self._locks.due(now_ms)
                                   for run in self._held_runs(max(first, start) - base, min(last + 1, end) - base,
                                                              self._stamp, stamp)])

    def release_member(self, member_id: str) -> bool:
        """A member gone: the records it holds become AVAILABLE, their delivery count lowered by one (the
        application never saw them, as Kafka assumes); True if it held any."""
        slot = self._member_slots.pop(member_id, None)
        if slot is None:
            return False
        changed = False
        for s, e in list(self._held_runs(self._start - self._base, len(self._state), self._member, slot)):
            self._unlock(s, e)
            self._state[s:e] = _STATE_BYTE[_AVAILABLE] * (e - s)
            self._count[s:e] = array("H", (c - 1 if c else 0 for c in self._count[s:e]))
            changed = True
        self._members[slot] = ""
        self._free_slots.append(slot)
        return changed

    def release_all(self) -> bool:
        """Release every held record as an expired lock would (count kept, archived at the delivery limit);
        True if any was held."""
        held = _ACQUIRED_RUNS.finditer(self._state, self._start - self._base)
        return self._release_runs([run.span() for run in held])

    def move_start(self, offset: int, *, reset: bool = False) -> None:
        """Force SPSO to `offset`.

        Forward (the log start moved: retention, DeleteRecords): what lies below is dropped, held records
        included (acknowledging them later is a no-op, as in Kafka), and the window above is kept. Backward,
        past the end, or with `reset` (an admin's offsets reset): the window is cleared and starts empty at
        `offset`.
        """
        if offset < 0:
            raise ValueError(f"share-partition start offset {offset} is negative")
        if reset or offset < self._start or offset >= self.end_offset:
            self._restart_at(offset)
            return
        i, j = self._start - self._base, offset - self._base
        for run in list(_ACQUIRED_RUNS.finditer(self._state, i, j)):
            self._unlock(*run.span())
        self._state[i:j] = _STATE_BYTE[_ARCHIVED] * (j - i)
        self._advance()

    def _slot(self, member_id: str) -> int:
        """The member's slot in `_member`, allocated on first use."""
        slot = self._member_slots.get(member_id)
        if slot is not None:
            return slot
        if self._free_slots:
            slot = self._free_slots.pop()
            self._members[slot] = member_id
        else:
            slot = len(self._members)
            if slot > _MAX_MEMBERS:
                raise RuntimeError(f"more than {_MAX_MEMBERS} members hold records of one share-partition")
            self._members.append(member_id)
        self._member_slots[member_id] = slot
        return slot

    def _unlock(self, s: int, e: int) -> None:
        """Records [s, e) (indexes, all ACQUIRED) leave their locks: the locks' held counts drop and a lock
        holding nothing more goes."""
        self._locks.drop(_runs(self._stamp[s:e]))
        self._member[s:e] = _filled("H", _NO_MEMBER, e - s)

    def _release_runs(self, runs: list[tuple[int, int]]) -> bool:
        """Held index runs released (archived at the delivery limit); True if there were any."""
        for s, e in runs:
            self._unlock(s, e)
            self._release(s, e)
        self._advance()
        return bool(runs)

    def _release(self, s: int, e: int) -> None:
        """Records [s, e) (indexes, unlocked) AVAILABLE again, or ARCHIVED once at the delivery limit."""
        counts = self._count[s:e]
        limit = self.delivery_limit
        if max(counts) < limit:
            self._state[s:e] = _STATE_BYTE[_AVAILABLE] * (e - s)
            return
        for k, count in enumerate(counts, s):
            self._state[k] = _ARCHIVED if count >= limit else _AVAILABLE

    def _archive_available(self, first: int, end: int) -> None:
        """AVAILABLE records in [first, end) archived (they are no longer in the log)."""
        if first >= end:
            return
        for run in _AVAILABLE_RUNS.finditer(self._state, first - self._base, end - self._base):
            s, e = run.span()
            self._state[s:e] = _STATE_BYTE[_ARCHIVED] * (e - s)

    def _held_runs(self, lo: int, hi: int, owners: array[int], owner: int) -> Iterator[tuple[int, int]]:
        """Index runs in [lo, hi) of ACQUIRED records whose `owners` entry (stamp or member slot) is `owner`."""
        for run in _ACQUIRED_RUNS.finditer(self._state, lo, max(lo, hi)):
            s, e = run.span()
            values = owners[s:e]
            if values.count(owner) == e - s:
                yield s, e
                continue
            at = s
            for value, n in _runs(values):
                if value == owner:
                    yield at, at + n
                at += n

    def _append(self, state: int, count: int, slot: int, stamp: int, n: int) -> None:
        """Extend the window by n records past end_offset."""
        self._state += _STATE_BYTE[state] * n
        self._count.extend(_filled("H", count, n))
        self._member.extend(_filled("H", slot, n))
        self._stamp.extend(_filled("I", stamp, n))

    def _restart_at(self, offset: int) -> None:
        """An empty window at `offset`: every record and lock dropped."""
        self._base = self._start = offset
        self._state = bytearray()
        self._count = array("H")
        self._member = array("H")
        self._stamp = array("I")
        self._locks.clear()

    def _advance(self) -> None:
        """SPSO over the leading ACKNOWLEDGED/ARCHIVED run; the arrays cut once it is past half of them."""
        live = _LIVE.search(self._state, self._start - self._base)
        self._start = self._base + (live.start() if live is not None else len(self._state))
        cut = self._start - self._base
        if cut >= _TRIM_AT and 2 * cut >= len(self._state):
            del self._state[:cut]
            del self._count[:cut]
            del self._member[:cut]
            del self._stamp[:cut]
            self._base = self._start


def _filled(typecode: str, value: int, n: int) -> array[int]:
    """An array of n copies of value."""
    return array(typecode, (value,)) * n


def _runs(values: Sequence[int]) -> Iterator[tuple[int, int]]:
    """(value, length) of each run of equal neighbours."""
    if not values:
        return
    first = values[0]
    if values.count(first) == len(values):
        yield first, len(values)
        return
    for value, group in groupby(values):
        yield value, sum(1 for _ in group)


def _merged(taken: list[list[int]]) -> list[AcquiredRange]:
    """Adjacent ranges with one delivery count merged."""
    out: list[list[int]] = []
    for first, last, count in taken:
        if out and out[-1][1] + 1 == first and out[-1][2] == count:
            out[-1][1] = last
        else:
            out.append([first, last, count])
    return [AcquiredRange(first, last, count) for first, last, count in out]
