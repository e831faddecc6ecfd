"""SharePartition as a state machine, under hypothesis, against a plain dict-per-offset model.

Three members acquire from a fixed log (batches of 1-6 records, control or aborted batches among them,
compaction gaps between them), acknowledge what they hold or something else (another's records, ranges
past the end, malformed batches), let locks expire as the clock moves, leave, and the broker restarts
from the persisted state, while the start offset is forced forward (retention) or reset. The model keeps
one record per offset and applies Kafka's rules offset by offset; after every step the share-partition
must agree with it on everything a client or `__share_group_state` can see, and hold the invariants:
no record held by two members, SPSO never backward but by move_start, nothing acknowledged or archived
handed out again, no delivery count past the limit, and a restart from state() gives the same offsets.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logstore.broker.share.partition import INVALID_RECORD_STATE, INVALID_REQUEST, SharePartition
from logstore.broker.share.types import AckType, AcquiredRange, DeliveryState, ShareState, StateBatch

MEMBERS = ("a", "b", "c")
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (int(s) for s in DeliveryState)
DONE = (ACKNOWLEDGED, ARCHIVED)
TYPES = [int(t) for t in AckType]
ACCEPT, RELEASE, REJECT = int(AckType.ACCEPT), int(AckType.RELEASE), int(AckType.REJECT)


@dataclass
class Rec:
    """One offset of the model's window."""

    state: int
    count: int
    member: str | None = None
    deadline: int | None = None


class Model:
    """Kafka's share-partition rules, one offset at a time."""

    def __init__(self, start: int, max_in_flight: int, limit: int) -> None:
        self.start = self.end = start
        self.max_in_flight = max_in_flight
        self.limit = limit
        self.recs: dict[int, Rec] = {}

    def advance(self) -> None:
        while self.start < self.end and self.recs[self.start].state in DONE:
            del self.recs[self.start]
            self.start += 1

    def next_fetch(self) -> int:
        return next((o for o in range(self.start, self.end) if self.recs[o].state == AVAILABLE), self.end)

    def release(self, rec: Rec) -> None:
        rec.state = ARCHIVED if rec.count >= self.limit else AVAILABLE
        rec.member = rec.deadline = None

    def restart_at(self, offset: int) -> None:
        self.start = self.end = offset
        self.recs = {}

    def acquire(self, member: str, batches: list[tuple[int, int, bool]], max_records: int,
                deadline: int) -> list[tuple[int, int]]:
        """(offset, delivery count) of each record handed out."""
        out: list[tuple[int, int]] = []
        if max_records <= 0 or not batches:
            return out
        fetch = self.next_fetch()
        previous_last = -1
        for first, last, deliverable in batches:
            gap_from = fetch if previous_last < 0 else previous_last + 1
            previous_last = last
            for o in range(max(gap_from, self.start), min(first, self.end)):
                if self.recs[o].state == AVAILABLE:
                    self.recs[o].state = ARCHIVED
            if last < self.start:
                continue
            if len(out) >= max_records:
                break
            if first < self.end:
                stop = False
                for o in range(max(first, self.start), min(last + 1, self.end)):
                    rec = self.recs[o]
                    if rec.state != AVAILABLE:
                        continue
                    if not deliverable or rec.count >= self.limit:
                        rec.state = ARCHIVED
                        continue
                    last_attempt = self.limit > 2 and rec.count == self.limit - 1
                    if last_attempt and out:
                        stop = True
                        break
                    rec.state, rec.count, rec.member, rec.deadline = ACQUIRED, rec.count + 1, member, deadline
                    out.append((o, rec.count))
                    if last_attempt:
                        stop = True
                        break
                if stop:
                    break
                self.advance()
            if last < self.end:
                continue
            new_first = max(first, self.end)
            empty = self.start == self.end
            if not empty and last + 1 - self.start > self.max_in_flight:
                break
            if new_first > self.end and empty:
                self.restart_at(new_first)
            for o in range(self.end, new_first):
                self.recs[o] = Rec(ARCHIVED, 0)
            for o in range(new_first, last + 1):
                if deliverable:
                    self.recs[o] = Rec(ACQUIRED, 1, member, deadline)
                    out.append((o, 1))
                else:
                    self.recs[o] = Rec(ARCHIVED, 0)
            self.end = last + 1
            self.advance()
        self.advance()
        return out

    def acknowledge(self, member: str, first: int, last: int, types: list[int], deadline: int) -> int:
        n = last - first + 1
        if first < 0 or n <= 0 or len(types) not in (1, n) or any(t not in TYPES for t in types):
            return INVALID_REQUEST
        if last < self.start:
            return 0
        if last >= self.end:
            return INVALID_REQUEST
        plan = [(o, types[0] if len(types) == 1 else types[o - first]) for o in range(max(first, self.start), last + 1)]
        for o, ack in plan:
            rec = self.recs[o]
            held = rec.state == ACQUIRED and rec.member == member
            if not held and not (ack == AckType.GAP and rec.state == ARCHIVED):
                return INVALID_RECORD_STATE
        for o, ack in plan:
            rec = self.recs[o]
            if ack == AckType.ACCEPT:
                rec.state, rec.member, rec.deadline = ACKNOWLEDGED, None, None
            elif ack in (AckType.REJECT, AckType.GAP):
                rec.state, rec.member, rec.deadline = ARCHIVED, None, None
            elif ack == AckType.RELEASE:
                self.release(rec)
            else:
                rec.deadline = deadline
        self.advance()
        return 0

    def expire(self, now: int) -> bool:
        due = [rec for rec in self.recs.values() if rec.state == ACQUIRED and rec.deadline is not None
               and rec.deadline <= now]
        for rec in due:
            self.release(rec)
        self.advance()
        return bool(due)

    def release_member(self, member: str) -> bool:
        held = [rec for rec in self.recs.values() if rec.state == ACQUIRED and rec.member == member]
        for rec in held:
            rec.state, rec.count, rec.member, rec.deadline = AVAILABLE, max(rec.count - 1, 0), None, None
        return bool(held)

    def move_start(self, offset: int, reset: bool) -> None:
        if reset or offset < self.start or offset >= self.end:
            self.restart_at(offset)
            return
        for o in range(self.start, offset):
            del self.recs[o]
        self.start = offset
        self.advance()

    def restart(self) -> None:
        """What a reload from the persisted form holds: no locks, never-delivered tail records gone."""
        for rec in self.recs.values():
            if rec.state == ACQUIRED:
                rec.state, rec.member, rec.deadline = AVAILABLE, None, None
        while self.end > self.start and (self.recs[self.end - 1].state, self.recs[self.end - 1].count) == (
                AVAILABLE, 0):
            self.end -= 1
            del self.recs[self.end]

    def persisted(self) -> tuple[StateBatch, ...]:
        out: list[list[int]] = []
        for o in range(self.start, self.end):
            rec = self.recs[o]
            state = AVAILABLE if rec.state == ACQUIRED else rec.state
            if (state, rec.count) == (AVAILABLE, 0):
                continue
            if out and out[-1][1] == o - 1 and (out[-1][2], out[-1][3]) == (state, rec.count):
                out[-1][1] = o
            else:
                out.append([o, o, state, rec.count])
        return tuple(StateBatch(f, la, DeliveryState(s), c) for f, la, s, c in out)

    def next_deadline(self) -> int | None:
        deadlines = [rec.deadline for rec in self.recs.values() if rec.state == ACQUIRED and rec.deadline is not None]
        return min(deadlines) if deadlines else None


def offsets_of(ranges: list[AcquiredRange]) -> list[tuple[int, int]]:
    return [(o, r.delivery_count) for r in ranges for o in range(r.first_offset, r.last_offset + 1)]


class SharePartitionMachine(RuleBasedStateMachine):
    """A SharePartition and its model, driven side by side."""

    @initialize(sizes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3), st.booleans(), st.booleans()),
                               min_size=5, max_size=60),
                start=st.integers(0, 4), max_in_flight=st.integers(4, 30), limit=st.integers(2, 5))
    def setup(self, sizes: list[tuple[int, int, bool, bool]], start: int, max_in_flight: int, limit: int) -> None:
        self.log: list[tuple[int, int, bool]] = []
        at = 0
        for size, gap, gapped, control in sizes:
            at += gap if gapped else 0
            self.log.append((at, at + size - 1, not (control and size <= 2)))
            at += size
        self.sp = SharePartition(ShareState(0, 0, start, ()), max_in_flight=max_in_flight, delivery_limit=limit)
        self.model = Model(start, max_in_flight, limit)
        self.now = 0
        self.low_start = start
        self.done: set[int] = set()
        self.held: dict[str, list[tuple[int, int]]] = {m: [] for m in MEMBERS}

    def read(self, offset: int, count: int) -> list[tuple[int, int, bool]]:
        """The log's batches from the one holding `offset` (or the next one), `count` of them."""
        return [b for b in self.log if b[1] >= offset][:count]

    @rule(member=st.sampled_from(MEMBERS), count=st.integers(1, 6), max_records=st.integers(0, 20),
          lock=st.integers(1, 50))
    def acquire(self, member: str, count: int, max_records: int, lock: int) -> None:
        batches = self.read(self.sp.next_fetch_offset(), count)
        before = {o: (r.state, r.count) for o, r in self.model.recs.items()}
        got = self.sp.acquire(member, batches, max_records, lock, self.now)
        expected = self.model.acquire(member, batches, max_records, self.now + lock)
        assert offsets_of(got) == expected
        for o, delivery_count in expected:
            assert delivery_count <= self.model.limit
            assert o not in self.done, f"{o} handed out again after it was done"
            if o in before:
                assert before[o][0] == AVAILABLE, f"{o} handed out while {before[o]}"
        self.held[member] += [(r.first_offset, r.last_offset) for r in got]

    @rule(member=st.sampled_from(MEMBERS), source=st.sampled_from(("own", "own", "other", "window")),
          pick=st.integers(0, 1000), shift=st.integers(-2, 2), width=st.integers(-1, 3),
          types=st.lists(st.sampled_from(TYPES + [RELEASE, RELEASE, 9]), min_size=1, max_size=8),
          per_offset=st.booleans(), lock=st.integers(1, 50))
    def acknowledge(self, member: str, source: str, pick: int, shift: int, width: int, types: list[int],
                    per_offset: bool, lock: int) -> None:
        """An acknowledgement of a range the member was handed, another's, or any offsets near the window."""
        ranges = self.held[member] if source == "own" else self.held[MEMBERS[pick % 3]] if source == "other" else []
        if ranges:
            first, last = ranges[pick % len(ranges)]
            first = max(0, first + shift)
            last = first + width if width < 0 or pick % 4 == 0 else last
        else:
            first = max(0, self.model.start - 2 + pick % (self.model.end - self.model.start + 4))
            last = first + width
        n = last - first + 1
        if per_offset and n > 1:
            types = (types * n)[:n]
        else:
            types = types[:1] if pick % 17 else types[:2]
        code = self.sp.acknowledge(member, first, last, types, self.now, lock)
        assert code == self.model.acknowledge(member, first, last, types, self.now + lock)

    @rule(member=st.sampled_from(MEMBERS), ack=st.sampled_from([RELEASE, RELEASE, ACCEPT, REJECT]))
    def acknowledge_everything_held(self, member: str, ack: int) -> None:
        """What a client does with a whole fetch: one type for each range it was handed."""
        for first, last in self.held[member]:
            code = self.sp.acknowledge(member, first, last, [ack], self.now, 10)
            assert code == self.model.acknowledge(member, first, last, [ack], self.now + 10)
        self.held[member] = []

    @precondition(lambda self: any(r.state == ARCHIVED for r in self.model.recs.values()))
    @rule(member=st.sampled_from(MEMBERS), pick=st.integers(0, 1000), width=st.integers(0, 2))
    def gap_over_archived(self, member: str, pick: int, width: int) -> None:
        """GAP naming records archived already (a client acknowledging a control record's offset)."""
        archived = sorted(o for o, r in self.model.recs.items() if r.state == ARCHIVED)
        first = archived[pick % len(archived)]
        code = self.sp.acknowledge(member, first, first + width, [int(AckType.GAP)], self.now, 10)
        assert code == self.model.acknowledge(member, first, first + width, [int(AckType.GAP)], self.now + 10)

    @rule(dt=st.integers(0, 60))
    def tick(self, dt: int) -> None:
        self.now += dt
        assert self.sp.expire(self.now) == self.model.expire(self.now)

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        assert self.sp.release_member(member) == self.model.release_member(member)
        self.held[member] = []

    @rule()
    def release_all(self) -> None:
        expected = any(r.state == ACQUIRED for r in self.model.recs.values())
        for rec in self.model.recs.values():
            if rec.state == ACQUIRED:
                self.model.release(rec)
        self.model.advance()
        assert self.sp.release_all() == expected

    @rule(data=st.data(), reset=st.booleans())
    def move_start(self, data: st.DataObject, reset: bool) -> None:
        offset = data.draw(st.integers(0, self.model.end + 5))
        forward = offset >= self.sp.start_offset and not reset
        self.sp.move_start(offset, reset=reset)
        self.model.move_start(offset, reset)
        self.low_start = self.sp.start_offset
        if not (forward and offset < self.model.end):
            self.done = {o for o in self.done if o < offset}

    @rule(limit=st.integers(2, 5))
    def change_limit(self, limit: int) -> None:
        self.sp.delivery_limit = self.model.limit = limit

    @rule()
    def restart(self) -> None:
        persisted = self.sp.state()
        self.sp = SharePartition(persisted, max_in_flight=self.model.max_in_flight, delivery_limit=self.model.limit)
        self.model.restart()
        assert self.sp.state() == persisted
        self.held = {m: [] for m in MEMBERS}

    @precondition(lambda self: self.model.next_fetch() < self.model.end)
    @rule()
    def redeliver_after_compaction(self) -> None:
        """A read from the next fetch offset that finds the available records there compacted away."""
        offset = self.model.next_fetch()
        self.log = [b for b in self.log if not b[0] <= offset <= b[1]]
        self.acquire("c", 3, 20, 10)

    @invariant()
    def agrees_with_the_model(self) -> None:
        sp, model = self.sp, self.model
        assert (sp.start_offset, sp.end_offset) == (model.start, model.end)
        assert sp.next_fetch_offset() == model.next_fetch()
        assert sp.acquired_count() == sum(r.state == ACQUIRED for r in model.recs.values())
        assert sp.next_deadline() == model.next_deadline()
        assert sp.state().batches == model.persisted()
        assert sp.can_acquire() == (model.next_fetch() < model.end or model.end - model.start < model.max_in_flight)
        for o in range(model.start, model.end):
            record = sp.record(o)
            assert record is not None
            rec = model.recs[o]
            assert (record.state, record.delivery_count, record.member_id) == (rec.state, rec.count, rec.member)
            if rec.state in DONE:
                self.done.add(o)

    @invariant()
    def start_never_moves_backward(self) -> None:
        assert self.sp.start_offset >= self.low_start
        self.low_start = self.sp.start_offset

    @invariant()
    def a_restart_gives_the_same_offsets(self) -> None:
        again = SharePartition(self.sp.state(), max_in_flight=self.model.max_in_flight,
                               delivery_limit=self.model.limit)
        assert again.start_offset == self.sp.start_offset
        held = [o for o, r in self.model.recs.items() if r.state == ACQUIRED]
        assert again.next_fetch_offset() == min([self.sp.next_fetch_offset()] + held)


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
