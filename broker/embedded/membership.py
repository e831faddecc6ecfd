"""One embedded consumer's membership of a classic group: Kafka's ConsumerCoordinator without the network.

The consumer joins with Kafka's ConsumerProtocol subscription (topics, owned
partitions, generation) under each of its assignors' names, so the group is
the one a Java consumer would form and `logstore groups` shows it as such.
The member the coordinator makes leader runs the chosen assignor
(`logstore.assignors`) over every member's subscription and hands the
assignments to SyncGroup.

Joins and syncs are the coordinator's futures. `step()` advances the
membership as far as it can before a deadline and never blocks past it, so
several consumers can share one thread, as long as each keeps polling.
The consumer applies what a step returns (revoke, assign, lose) with its
callbacks; heartbeats come from the node's upkeep (`heartbeat()`).
"""
from __future__ import annotations

import enum
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from logstore.assignors import CLIENT_ASSIGNORS, COOPERATIVE, MemberSubscription
from logstore.broker.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from logstore.broker.coordinator.group_results import JoinResult, SyncResult
from logstore.errors import (
    IllegalGenerationError,
    InvalidConfigError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

if TYPE_CHECKING:
    from logstore.broker.coordinator.group import GroupCoordinator

TopicPartition = tuple[str, int]
PROTOCOL_TYPE = "consumer"


class GroupMetadata(NamedTuple):
    """What `send_offsets_to_transaction` needs of the consumer (Kafka's ConsumerGroupMetadata)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


class _Phase(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"


@dataclass
class Change:
    """What a finished rebalance asks of the consumer, in this order: revoke, lose, assign."""

    revoked: frozenset[TopicPartition] = frozenset()
    lost: frozenset[TopicPartition] = frozenset()
    assigned: frozenset[TopicPartition] = frozenset()
    done: bool = False


def parse_strategies(text: str) -> list[str]:
    """`partition.assignment.strategy`: Kafka protocol names (or Java class names) in preference order."""
    names: list[str] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name = _CLASS_NAMES.get(item.rsplit(".", 1)[-1], item.lower())
        if name not in CLIENT_ASSIGNORS:
            raise InvalidConfigError(f"unknown partition.assignment.strategy {item!r}; "
                                     f"known: {sorted(CLIENT_ASSIGNORS)}")
        names.append(name)
    if not names:
        raise InvalidConfigError("partition.assignment.strategy is empty")
    return names


_CLASS_NAMES = {"RangeAssignor": "range", "RoundRobinAssignor": "roundrobin", "StickyAssignor": "sticky",
                "CooperativeStickyAssignor": "cooperative-sticky"}


class Membership:
    """A member's id, generation and owned partitions, and the join or sync under way."""

    def __init__(self, groups: GroupCoordinator, group_id: str, instance_id: str | None, client_id: str,
                 strategies: list[str], session_timeout_ms: int, rebalance_timeout_ms: int,
                 heartbeat_interval_ms: int) -> None:
        self._groups = groups
        self.group_id = group_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.strategies = strategies
        # Kafka's rule: cooperative only when every configured assignor supports it.
        self.cooperative = all(name in COOPERATIVE for name in strategies)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.lock = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self.phase = _Phase.UNJOINED
        self.owned: frozenset[TopicPartition] = frozenset()
        self.rejoin_needed = True
        # The join (JOINING) or the sync (SYNCING) under way.
        self._future: Future[JoinResult] | Future[SyncResult] | None = None
        self._topics: frozenset[str] = frozenset()
        self.next_heartbeat_ms = 0
        # What a heartbeat found lost (the coordinator forgot the member), for the next step to report.
        self._lost: frozenset[TopicPartition] = frozenset()

    @property
    def stable(self) -> bool:
        """Whether the member holds a current assignment and no rebalance is asked for."""
        return self.phase is _Phase.STABLE and not self.rejoin_needed

    @property
    def idle(self) -> bool:
        """Whether no join or sync is under way."""
        return self.phase in (_Phase.UNJOINED, _Phase.STABLE)

    def metadata(self) -> GroupMetadata:
        """The member as a transactional offset commit names it."""
        with self.lock:
            return GroupMetadata(self.group_id, self.generation, self.member_id, self.instance_id)

    def subscribe(self, topics: frozenset[str]) -> None:
        """A new subscription: rejoin with it."""
        if topics != self._topics:
            self._topics = topics
            self.rejoin_needed = True

    # -- the join --------------------------------------------------------------------------

    def step(self, counts: dict[str, int], deadline: float) -> Change | None:
        """Advance the rebalance until `deadline` (monotonic); a `Change` when it finishes, else None."""
        while True:
            with self.lock:
                if self._lost:
                    lost, self._lost = self._lost, frozenset()
                    return Change(lost=lost)
                phase = self.phase
                if phase in (_Phase.UNJOINED, _Phase.STABLE):
                    if not self.rejoin_needed:
                        return None
                    self._start_join()
                    continue
                future = self._future
            assert future is not None  # JOINING and SYNCING each set theirs
            try:
                value = future.result(max(deadline - time.monotonic(), 0))
            except FutureTimeout:
                return None
            except MemberIdRequiredError as exc:
                with self.lock:
                    self.member_id = exc.member_id
                    self.phase = _Phase.UNJOINED
                    self.rejoin_needed = True
                continue
            except UnknownMemberIdError:
                return self._reset(lost=True)
            except (RebalanceInProgressError, IllegalGenerationError):
                with self.lock:
                    self.phase = _Phase.UNJOINED
                    self.rejoin_needed = True
                continue
            if phase is _Phase.JOINING:
                assert isinstance(value, JoinResult)
                self._joined(value, counts)
            else:
                assert isinstance(value, SyncResult)
                return self._synced(value)

    def _start_join(self) -> None:
        sub = Subscription(tuple(sorted(self._topics)), None, _by_topic(self.owned), self.generation)
        metadata = encode_subscription(sub)
        self.rejoin_needed = False
        self.phase = _Phase.JOINING
        self._future = self._groups.join_group(
            self.group_id, self.member_id, self.instance_id, self.client_id, "embedded", self.session_timeout_ms,
            self.rebalance_timeout_ms, PROTOCOL_TYPE, [(name, metadata) for name in self.strategies])

    def _joined(self, result: JoinResult, counts: dict[str, int]) -> None:
        assignments: dict[str, bytes] = {}
        if result.members:
            assert result.protocol_name is not None  # the coordinator names the protocol it chose to the leader
            assignments = self._assign(result.protocol_name, result.members, counts)
        with self.lock:
            self.member_id = result.member_id
            self.generation = result.generation_id
            self.phase = _Phase.SYNCING
            self._future = self._groups.sync_group(self.group_id, result.generation_id, result.member_id,
                                                   self.instance_id, assignments, PROTOCOL_TYPE,
                                                   result.protocol_name)

    def _assign(self, protocol: str, members: Sequence[tuple[str, str | None, bytes]],
                counts: dict[str, int]) -> dict[str, bytes]:
        """The leader's job: every member's assignment, by the assignor the group chose."""
        subscriptions: dict[str, MemberSubscription] = {}
        for member_id, _, metadata in members:
            sub = decode_subscription(metadata)
            owned = frozenset((t, p) for t, ps in sub.owned_partitions for p in ps)
            subscriptions[member_id] = MemberSubscription(frozenset(sub.topics), owned, sub.generation_id)
        wanted = set().union(*(s.topics for s in subscriptions.values()))
        chosen = CLIENT_ASSIGNORS[protocol](subscriptions, {t: n for t, n in counts.items() if t in wanted})
        return {m: encode_assignment(Assignment(_by_topic(chosen.get(m, frozenset())))) for m in subscriptions}

    def _synced(self, result: SyncResult) -> Change:
        new = frozenset((t, p) for t, ps in decode_assignment(result.assignment).partitions for p in ps)
        with self.lock:
            owned = self.owned
            self.phase = _Phase.STABLE
            self.next_heartbeat_ms = 0
            if not self.cooperative:
                # Eager: everything owned was revoked before the join.
                self.owned = new
                return Change(assigned=new, done=True)
            revoked = owned - new
            self.owned = new
            if revoked:
                # Kafka's cooperative protocol: what was given up can be handed on in a second round.
                self.rejoin_needed = True
            return Change(revoked=revoked, assigned=new - owned, done=True)

    def revoke_all(self) -> frozenset[TopicPartition]:
        """Before an eager join: the member gives up everything it owns."""
        with self.lock:
            owned, self.owned = self.owned, frozenset()
            return owned

    def _reset(self, lost: bool) -> Change:
        """The coordinator forgot this member: start again under a new id; what it owned is lost."""
        with self.lock:
            owned = self.owned if lost else frozenset()
            self.member_id, self.generation = "", -1
            self.owned = frozenset()
            self.phase = _Phase.UNJOINED
            self.rejoin_needed = True
            return Change(lost=owned)

    # -- liveness ----------------------------------------------------------------------------

    def heartbeat(self, now_ms: int) -> int | None:
        """Heartbeat if one is due; the time of the next one (None while not stable)."""
        with self.lock:
            if self.phase is not _Phase.STABLE:
                return None
            if now_ms < self.next_heartbeat_ms:
                return self.next_heartbeat_ms
            generation, member_id = self.generation, self.member_id
            self.next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        try:
            self._groups.heartbeat(self.group_id, generation, member_id, self.instance_id)
        except (RebalanceInProgressError, IllegalGenerationError):
            with self.lock:
                self.rejoin_needed = True
        except UnknownMemberIdError:
            with self.lock:
                self._lost |= self.owned
                self.member_id, self.generation, self.owned = "", -1, frozenset()
                self.phase = _Phase.UNJOINED
                self.rejoin_needed = True
            return None
        return self.next_heartbeat_ms

    def leave(self, lost: bool = False) -> None:
        """Leave the group (a static member stays, as Kafka's close leaves it for its session); `lost`: the
        application stopped polling, so what it owned is reported lost and it rejoins at its next poll."""
        with self.lock:
            member_id, self.phase = self.member_id, _Phase.UNJOINED
            if lost:
                self._lost |= self.owned
                self.rejoin_needed = True
            self.member_id, self.generation, self.owned = "", -1, frozenset()
        if member_id and self.instance_id is None:
            self._groups.leave_group(self.group_id, [(member_id, None)])


def _by_topic(partitions: Iterable[TopicPartition]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return tuple((t, tuple(ps)) for t, ps in by_topic.items())
