"""The group coordinator as a state machine, under hypothesis.

Three dynamic consumers and one static one (group.instance.id "host-s") of
one group join, sync, heartbeat, leave and restart in any order while the
clock moves and deadlines fire at their time. Each client behaves as a
Kafka client does with the answers it gets (adopts the member id and
generation of a JoinGroup answer, forgets its id on UNKNOWN_MEMBER_ID or
FENCED_INSTANCE_ID, assigns as leader). The leader gives every member it was
told of the assignment "<generation>/<member key>", so any assignment a
member receives can be checked. After every step the group must hold
Kafka's invariants, every state change must be one of ClassicGroupState's
edges, and whenever the clients stop talking every held JoinGroup and
SyncGroup must be answered once the timeouts pass.
"""
from __future__ import annotations

import itertools
import shutil
import tempfile
from concurrent.futures import Future
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from logstore.broker.coordinator.consumer_protocol import Subscription, encode_subscription
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator, JoinResult, SyncResult
from logstore.broker.coordinator.group_state import Group
from logstore.broker.coordinator.transaction import TransactionCoordinator, TxnConfig
from logstore.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    LogStoreError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from logstore.manager import LogManager

GROUP = "machine"
SESSION = 10_000
REBALANCE = 20_000
STATIC = "s"
CLIENTS = ("a", "b", "c", STATIC)
_T = encode_subscription(Subscription(("t",)))
_TU = encode_subscription(Subscription(("t", "u")))
# Every variant supports "range", so no JoinGroup may be refused as inconsistent.
PROTOCOLS = ([("range", _T), ("roundrobin", _T)], [("roundrobin", _T), ("range", _T)], [("range", _TU)])

# Kafka's ClassicGroupState: each state and the states it may be entered from.
_ENTERED_FROM = {
    "PreparingRebalance": {"Stable", "CompletingRebalance", "Empty"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Empty": {"PreparingRebalance"},
    "Dead": {"Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead"},
}
_REAL_TRANSITION = Group.transition


@dataclass
class Client:
    """What one consumer knows of its membership."""

    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    members: tuple = ()          # the members a JoinGroup answer listed (the leader's only)
    is_leader: bool = False
    variant: int = 0             # the protocols it joins with
    next: str = "join"           # what a Kafka client would send next: join | sync | heartbeat

    def forget(self) -> None:
        """Back to no membership (the client rejoins with no member id)."""
        self.member_id, self.generation, self.is_leader, self.next = "", -1, False, "join"


@dataclass
class Call:
    """A request in flight and what the client sent with it."""

    future: Future
    client: str
    kind: str                    # join | sync | heartbeat
    member_id: str
    generation: int


@dataclass
class Generation:
    """What the model saw of one generation."""

    leaders: set = field(default_factory=set)
    protocols: set = field(default_factory=set)
    listed: set | None = None    # member keys in the leader's answer
    answered: set = field(default_factory=set)
    dynamic_listed: set = field(default_factory=set)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="group-machine-")
        self.now = 1_700_000_000_000
        self.ids = itertools.count(100)
        self.store = LogManager([self.dir])
        self.coordinator: GroupCoordinator | None = None
        self.clients = {name: Client(name, "host-s" if name == STATIC else None) for name in CLIENTS}
        self.calls: list[Call] = []
        self.generations: dict[int, Generation] = {}
        self.max_generation = 0
        self.transitions: list[tuple[str, str]] = []
        self.instance_of: dict[str, str | None] = {}   # member id -> group.instance.id, as the answers told
        machine = self

        def spy(group, state, now):
            machine.transitions.append((group.state.value, state.value))
            return _REAL_TRANSITION(group, state, now)

        Group.transition = spy

    def teardown(self):
        Group.transition = _REAL_TRANSITION
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(delay=st.sampled_from([0, 3_000]))
    def start(self, delay):
        txn = TransactionCoordinator(self.store, lambda: next(self.ids),
                                     TxnConfig(state_partitions=1, offsets_partitions=2, fsync=False),
                                     clock=lambda: self.now)
        config = GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=delay, fsync=False)
        self.coordinator = GroupCoordinator(self.store, txn, config, clock=lambda: self.now)

    # -- the model's bookkeeping -----------------------------------------------------------------

    def key(self, member_id: str) -> str:
        """A member's identity across restarts: its instance id if static, else its member id."""
        instance = self.instance_of.get(member_id)
        return instance if instance is not None else member_id

    def track(self, future: Future, client: Client, kind: str) -> None:
        self.calls.append(Call(future, client.name, kind, client.member_id, client.generation))
        self.harvest()

    def answered(self, call_result, client: Client, kind: str) -> None:
        """Track a call that answers at once (Heartbeat)."""
        future: Future = Future()
        if isinstance(call_result, BaseException):
            future.set_exception(call_result)
        else:
            future.set_result(call_result)
        self.track(future, client, kind)

    def harvest(self) -> None:
        """Let each client act on the answers that came, in the order its requests went."""
        for call in [c for c in self.calls if c.future.done()]:
            self.calls.remove(call)
            client = self.clients[call.client]
            current = client.member_id == call.member_id
            error = call.future.exception(timeout=0)
            if error is None:
                result = call.future.result(timeout=0)
                if isinstance(result, JoinResult):
                    self.joined(call, client, result, current)
                elif isinstance(result, SyncResult):
                    self.synced(call, result)
                    if current and call.generation == client.generation:
                        client.next = "heartbeat"
            elif isinstance(error, MemberIdRequiredError):
                assert call.kind == "join" and call.member_id == "" and client.instance is None
                if current:
                    client.member_id = error.member_id
            elif isinstance(error, (UnknownMemberIdError, FencedInstanceIdError)):
                if current:
                    client.forget()
            elif isinstance(error, IllegalGenerationError):
                if current:
                    client.generation, client.next = -1, "join"
            elif isinstance(error, RebalanceInProgressError):
                if current:
                    client.next = "join"
            else:
                raise AssertionError(f"{call.kind} from {call.client} got an answer no rule allows: {error!r}")

    def joined(self, call: Call, client: Client, result: JoinResult, current: bool) -> None:
        self.instance_of[result.member_id] = client.instance
        for member_id, instance, _ in result.members:
            self.instance_of[member_id] = instance
        gen = self.generations.setdefault(result.generation_id, Generation())
        gen.leaders.add(result.leader_id)
        gen.protocols.add(result.protocol_name)
        gen.answered.add(self.key(result.member_id))
        assert len(gen.protocols) == 1, f"generation {result.generation_id} answered with protocols {gen.protocols}"
        if result.members:
            assert result.leader_id == result.member_id, "only the leader's answer lists the members"
            listed = {self.key(m) for m, _, _ in result.members}
            assert gen.listed in (None, listed), f"generation {result.generation_id} listed two member sets"
            gen.listed = listed
            gen.dynamic_listed = {m for m, instance, _ in result.members if instance is None}
        self.max_generation = max(self.max_generation, result.generation_id)
        if current or (call.member_id == "" and client.member_id == ""):
            client.member_id, client.generation = result.member_id, result.generation_id
            client.is_leader = result.leader_id == result.member_id
            client.members = result.members
            client.next = "sync"

    def synced(self, call: Call, result: SyncResult) -> None:
        key = self.key(call.member_id)
        gen = self.generations.get(call.generation)
        expected = f"{call.generation}/{key}".encode()
        if gen is not None and gen.listed is not None and key in gen.listed:
            assert result.assignment == expected, (
                f"{key} got {result.assignment!r} for generation {call.generation}, the leader gave it {expected!r}")
        else:
            assert result.assignment in (expected, b""), f"{key} got {result.assignment!r}"

    def run_until(self, target: int) -> None:
        """Move the clock to `target`, running each deadline at its time, as the broker's timer task does."""
        wake = self.coordinator.poll(self.now)
        while wake is not None and wake <= target:
            self.now = wake
            wake = self.coordinator.poll(wake)
        self.now = target
        self.coordinator.poll(target)
        self.harvest()

    # -- what clients do -----------------------------------------------------------------------

    @rule(name=st.sampled_from(CLIENTS), variant=st.integers(0, len(PROTOCOLS) - 1),
          require_known=st.booleans())
    def join(self, name, variant, require_known):
        client = self.clients[name]
        if not client.member_id and any(c.client == name and c.kind == "join" for c in self.calls):
            return  # a client waits for its first JoinGroup before it sends another
        client.variant = variant
        future = self.coordinator.join_group(GROUP, client.member_id, client.instance, name, "/10.0.0.1", SESSION,
                                             REBALANCE, "consumer", PROTOCOLS[variant], require_known)
        self.track(future, client, "join")

    @rule(name=st.sampled_from(CLIENTS))
    def act(self, name):
        """What a Kafka client does next: rejoin when told to, sync after a join, else heartbeat."""
        client = self.clients[name]
        if any(c.client == name for c in self.calls):
            self.heartbeat(name)   # waiting for an answer: the heartbeat thread keeps going
        elif client.next == "join":
            self.join(name, client.variant, True)
        elif client.next == "sync":
            self.sync(name)
        else:
            self.heartbeat(name)

    @rule(order=st.permutations(CLIENTS))
    def everyone_acts(self, order):
        for name in order:
            self.act(name)

    @rule(name=st.sampled_from(CLIENTS))
    def sync(self, name):
        client = self.clients[name]
        if not client.member_id or client.generation < 0:
            return
        assignments = {}
        if client.is_leader:
            assignments = {m: f"{client.generation}/{instance if instance is not None else m}".encode()
                           for m, instance, _ in client.members}
        future = self.coordinator.sync_group(GROUP, client.generation, client.member_id, client.instance,
                                             assignments)
        self.track(future, client, "sync")

    @rule(name=st.sampled_from(CLIENTS))
    def heartbeat(self, name):
        client = self.clients[name]
        if not client.member_id:
            return
        try:
            outcome = self.coordinator.heartbeat(GROUP, client.generation, client.member_id, client.instance)
        except LogStoreError as exc:
            outcome = exc
        self.answered(outcome, client, "heartbeat")

    @rule(name=st.sampled_from(CLIENTS), while_waiting=st.booleans())
    def leave(self, name, while_waiting):
        if while_waiting:
            # Consumers close in the middle of a rebalance too: prefer one whose request is held.
            name = next((c.client for c in self.calls if self.clients[c.client].member_id), name)
        client = self.clients[name]
        if not client.member_id:
            return
        (error,) = self.coordinator.leave_group(GROUP, [(client.member_id, client.instance)])
        assert error is None or isinstance(error, (UnknownMemberIdError, FencedInstanceIdError)), repr(error)
        client.forget()
        self.harvest()

    @rule()
    def restart_static_member(self):
        # A new process with the same group.instance.id: it knows no member id; the old one's requests are fenced
        # when it joins.
        self.clients[STATIC].forget()

    @rule(ms=st.sampled_from([1, 500, 1_000, 3_000, SESSION // 2, SESSION, REBALANCE]))
    def advance(self, ms):
        self.run_until(self.now + ms)

    @rule()
    def clients_go_quiet(self):
        self.settle()

    def settle(self) -> None:
        """No client talks any more: once the timeouts pass, nothing may be left waiting."""
        deadline = self.now + 3 * (SESSION + REBALANCE) + self.coordinator.config.initial_rebalance_delay_ms
        self.run_until(deadline)
        hanging = [(c.client, c.kind, c.member_id) for c in self.calls]
        assert not hanging, f"requests never answered although every timeout passed: {hanging}"
        description = self.coordinator.describe(GROUP)
        assert description.members == (), f"members outlived their sessions: {description}"
        assert description.state in ("Empty", "Dead"), description.state

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def transitions_follow_kafkas_edges(self):
        for before, after in self.transitions:
            assert before in _ENTERED_FROM[after], f"{before} -> {after} is not one of Kafka's transitions"

    @invariant()
    def the_group_is_consistent(self):
        if self.coordinator is None:
            return
        with self.coordinator._context.lock:
            group = self.coordinator._group_store.get(GROUP)
            if group is None:
                return
            assert group.generation_id >= self.max_generation, "the generation went back"
            self.max_generation = group.generation_id
            assert (group.leader_id is None) == (not group.members), (group.leader_id, list(group.members))
            assert group.leader_id is None or group.leader_id in group.members, "the leader is not a member"
            for instance, member_id in group.static_members.items():
                assert group.members[member_id].group_instance_id == instance
            if group.state.value == "Stable":
                for member in group.members.values():
                    key = member.group_instance_id if member.group_instance_id is not None else member.member_id
                    assert member.assignment == f"{group.generation_id}/{key}".encode(), (
                        f"Stable member {key} holds {member.assignment!r}")
            if group.state.value == "Empty":
                assert not group.members

    @invariant()
    def every_generation_answers_its_members(self):
        for number, gen in self.generations.items():
            # By key: a static leader restarted in Stable is answered under its new member id.
            leaders = {self.key(leader) for leader in gen.leaders}
            assert len(leaders) == 1, f"generation {number} answered with leaders {leaders}"
            if gen.listed is None:
                continue
            assert gen.answered <= gen.listed, (
                f"generation {number}: {gen.answered - gen.listed} were answered but not listed to the leader")
            missing = {self.key(m) for m in gen.dynamic_listed} - gen.answered
            assert not missing, f"generation {number}: listed members {missing} never got its JoinGroup answer"

    @invariant()
    def held_requests_belong_to_members(self):
        if self.coordinator is None:
            return
        with self.coordinator._context.lock:
            group = self.coordinator._group_store.get(GROUP)
            members = set(group.members) if group is not None else set()
        orphans = [(c.client, c.kind, c.member_id) for c in self.calls if c.member_id and c.member_id not in members]
        assert not orphans, f"requests held for members no longer in the group: {orphans}"

    @invariant()
    def answers_are_harvested(self):
        assert all(not c.future.done() for c in self.calls)


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)

