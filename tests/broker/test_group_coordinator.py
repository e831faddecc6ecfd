"""The group coordinator without a network: a real store in a temporary directory, a clock we move.

Every answer asserted here is the one Kafka's classic group coordinator gives
(GroupMetadataManager, ClassicGroup, OffsetMetadataManager); where a test
checks a point logstore got wrong, its assertion message says what Kafka
does. Deadlines fire only when a test moves the clock, and then each at its
own time (`run_until` polls at every deadline on the way), so "not yet" and
"now" are exact. Persistence is checked on a second coordinator over the reopened store,
as a restarted broker sees it.
"""
from __future__ import annotations

import itertools
from concurrent.futures import Future
from dataclasses import dataclass, replace

import pytest

from logstore.broker.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator, JoinResult, SyncResult
from logstore.broker.coordinator.group_log import (
    GroupKey,
    GroupValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC, TransactionCoordinator, TxnConfig
from logstore.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    InvalidTxnStateError,
    LogStoreError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from logstore.manager import LogManager

GROUP = "group-a"
TXN = "copier"
SESSION = 10_000
REBALANCE = 30_000
RETENTION = 60_000
CONFIG = GroupConfig(min_session_timeout_ms=6_000, max_session_timeout_ms=300_000, initial_rebalance_delay_ms=0,
                     offset_metadata_max_bytes=16, offsets_retention_ms=RETENTION, fsync=False)
TXN_CONFIG = TxnConfig(state_partitions=3, offsets_partitions=3, fsync=False)


def subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """A consumer's ConsumerProtocolSubscription, as the Java client sends it."""
    return encode_subscription(Subscription(tuple(topics), user_data))


def assignment(*partitions: int, topic: str = "t") -> bytes:
    """A ConsumerProtocolAssignment of partitions of one topic."""
    return encode_assignment(Assignment(((topic, tuple(partitions)),)))


RANGE = [("range", subscription("t"))]


class Clock:
    """Milliseconds that move only when a test says so."""

    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Env:
    """A store, a transaction coordinator and a group coordinator wired as the broker wires them."""

    def __init__(self, path, clock: Clock, config: GroupConfig = CONFIG, ids=None):
        self.path, self.clock, self.config = path, clock, config
        self.ids = ids if ids is not None else itertools.count(1000)
        self.store = LogManager([str(path)])
        if "t" not in self.store.topics():
            self.store.create_topic("t", 3)
        self.txn = TransactionCoordinator(self.store, lambda: next(self.ids), TXN_CONFIG, clock=clock)
        self.groups = GroupCoordinator(self.store, self.txn, config, clock=clock)
        self.txn.on_offsets_marker = self.groups.complete_txn_offsets

    def reopen(self, config: GroupConfig | None = None) -> Env:
        """Close the store and start over from its files, as a restarted broker does."""
        self.store.close()
        env = Env(self.path, self.clock, config or self.config, self.ids)
        env.txn.load()
        env.groups.load()
        return env

    def advance(self, ms: int) -> None:
        """Move the clock, running every deadline it passes at its time."""
        run_until(self.groups, self.clock, self.clock.now + ms)

    # -- the calls a client makes --------------------------------------------------------------

    def join(self, member_id: str = "", *, instance: str | None = None, protocols=RANGE, session: int = SESSION,
             rebalance: int = REBALANCE, group: str = GROUP, protocol_type: str = "consumer",
             require_known: bool = False, client: str = "client") -> Future:
        return self.groups.join_group(group, member_id, instance, client, "/10.0.0.1", session, rebalance,
                                      protocol_type, protocols, require_known)

    def sync(self, result: JoinResult, assignments: dict[str, bytes] | None = None, *,
             instance: str | None = None, group: str = GROUP) -> Future:
        return self.groups.sync_group(group, result.generation_id, result.member_id, instance, assignments or {})

    def state(self, group: str = GROUP) -> str:
        return self.groups.describe(group).state

    def member_ids(self, group: str = GROUP) -> set[str]:
        return {m.member_id for m in self.groups.describe(group).members}

    def commit(self, offsets: dict, *, member: str = "", generation: int = -1, instance: str | None = None,
               group: str = GROUP):
        return self.groups.commit_offsets(group, member, instance, generation,
                                          {tp: (o, -1, "") if isinstance(o, int) else o for tp, o in offsets.items()})

    def fetched(self, partitions=None, group: str = GROUP, require_stable: bool = False) -> dict:
        """The committed offsets as plain numbers (None where there is none)."""
        found = self.groups.fetch_offsets(group, partitions, require_stable)
        return {tp: c if c is None or isinstance(c, Exception) else c.offset for tp, c in found.items()}

    # -- what was written ----------------------------------------------------------------------

    def records(self, group: str = GROUP) -> list:
        """(key, value) of every record of `group` in `__consumer_offsets`; value None for a tombstone."""
        log_ = self.store.log(OFFSETS_TOPIC, self.groups.partition_of(group))
        found = []
        for record in log_.iter_records():
            key = decode_key(record.key)
            if key.group != group:
                continue
            if record.value is None:
                found.append((key, None))
            elif isinstance(key, GroupKey):
                found.append((key, decode_group_value(record.value)))
            else:
                found.append((key, decode_offset_value(record.value)))
        return found

    def group_value(self, group: str = GROUP) -> GroupValue | None:
        """The last GroupMetadataValue written for `group`."""
        values = [v for k, v in self.records(group) if isinstance(k, GroupKey)]
        assert values, f"no group metadata written for {group!r}"
        return values[-1]


def run_until(groups: GroupCoordinator, clock: Clock, target: int) -> None:
    """Move the clock to `target`, stopping at each deadline on the way, as the broker's timer task does."""
    wake = groups.poll(clock.now)
    while wake is not None and wake <= target:
        clock.now = wake
        wake = groups.poll(wake)
    clock.now = target
    groups.poll(target)


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path, Clock())
    yield env
    env.store.close()


def error_of(call) -> Exception | None:
    """What a call that answers at once raised (None if it returned)."""
    try:
        call()
    except LogStoreError as exc:
        return exc
    return None


def joined(future: Future) -> JoinResult:
    """The answer of a JoinGroup that must have been answered by now."""
    assert future.done(), "the JoinGroup is still held"
    return future.result(timeout=0)


def failed(future: Future, error_type: type) -> Exception:
    """The error of a call that must have failed by now with `error_type`."""
    assert future.done(), f"the call is still held; expected {error_type.__name__}"
    error = future.exception(timeout=0)
    assert isinstance(error, error_type), f"expected {error_type.__name__}, got {error!r}"
    return error


@dataclass
class Formed:
    """A Stable group made by `form_group`: member ids (the leader first), their instance ids and assignments."""

    members: list[str]
    instances: list[str | None]
    generation: int
    assignments: dict[str, bytes]

    @property
    def leader(self) -> str:
        return self.members[0]

    def result(self, i: int) -> JoinResult:
        """What member `i` knows after its JoinGroup."""
        return JoinResult(self.members[i], self.generation, "consumer", "range", self.leader)


def form_group(env: Env, n: int, *, instances: list[str | None] | None = None, group: str = GROUP,
               session: int = SESSION) -> Formed:
    """A Stable group of `n` members, the way clients make one: the first joins alone, the others join and
    the first rejoins, the leader assigns partition i to member i."""
    instances = instances or [None] * n
    first = joined(env.join(instance=instances[0], group=group, session=session))
    if n == 1:
        results = [first]
    else:
        futures = [env.join(instance=instance, group=group, session=session) for instance in instances[1:]]
        assert not any(f.done() for f in futures), "the join phase must wait for the first member to rejoin"
        futures.insert(0, env.join(first.member_id, instance=instances[0], group=group, session=session))
        results = [joined(f) for f in futures]
    leader = results[0]
    assert leader.leader_id == leader.member_id
    members = [r.member_id for r in results]
    chosen = {m: assignment(i) for i, m in enumerate(members)}
    syncs = [env.sync(r, instance=instance, group=group) for r, instance in zip(results[1:], instances[1:])]
    syncs.insert(0, env.sync(leader, chosen, instance=instances[0], group=group))
    assert [s.result(timeout=0).assignment for s in syncs] == [chosen[m] for m in members]
    assert env.state(group) == "Stable"
    return Formed(members, instances, leader.generation_id, chosen)


# -- JoinGroup: checks ---------------------------------------------------------------------------

def test_an_empty_group_id_is_invalid_group_id(env):
    failed(env.join(group=""), InvalidGroupIdError)
    assert env.groups.list_groups() == []


@pytest.mark.parametrize("session", [CONFIG.min_session_timeout_ms - 1, CONFIG.max_session_timeout_ms + 1])
def test_a_session_timeout_outside_min_and_max_is_invalid_session_timeout(env, session):
    failed(env.join(session=session), InvalidSessionTimeoutError)
    assert env.groups.list_groups() == []


@pytest.mark.parametrize("session", [CONFIG.min_session_timeout_ms, CONFIG.max_session_timeout_ms])
def test_the_session_timeout_bounds_themselves_are_accepted(env, session):
    assert joined(env.join(session=session)).generation_id == 1


def test_a_new_member_gets_member_id_required_with_an_id_and_joins_with_it(env):
    error = failed(env.join(require_known=True, client="consumer-7"), MemberIdRequiredError)
    assert error.member_id.startswith("consumer-7-")
    # Only a member id to come back with: nobody is in the group yet.
    assert env.member_ids() == set()
    result = joined(env.join(error.member_id, require_known=True))
    assert (result.member_id, result.generation_id, result.leader_id) == (error.member_id, 1, error.member_id)
    assert env.member_ids() == {error.member_id}


def test_a_static_member_joins_at_once_without_member_id_required(env):
    result = joined(env.join(instance="host-1", require_known=True))
    assert result.member_id.startswith("host-1-")
    assert result.generation_id == 1


def test_an_unused_member_id_is_forgotten_after_the_session_timeout(env):
    member_id = failed(env.join(require_known=True), MemberIdRequiredError).member_id
    env.advance(SESSION - 1)
    env.advance(1)
    failed(env.join(member_id, require_known=True), UnknownMemberIdError)


def test_a_member_id_handed_out_holds_the_rebalance_until_it_is_used_or_forgotten(env):
    formed = form_group(env, 1)
    failed(env.join(require_known=True), MemberIdRequiredError)
    # Only a JoinGroup with a member changes the group: handing out an id does not rebalance it.
    assert env.state() == "Stable"
    rejoin = env.join(formed.leader)
    assert not rejoin.done(), "Kafka's join phase waits for the member id it handed out (hasAllMembersJoined)"
    env.advance(SESSION)
    result = joined(rejoin)
    assert (result.generation_id, result.members) == (formed.generation + 1, ((formed.leader, None, RANGE[0][1]),))


def test_a_new_member_past_group_max_size_is_refused_but_members_may_rejoin(env):
    groups = GroupCoordinator(env.store, env.txn, replace(CONFIG, max_size=2), clock=env.clock)
    env.groups = groups
    formed = form_group(env, 2)
    failed(env.join(), GroupMaxSizeReachedError)
    failed(env.join(require_known=True), GroupMaxSizeReachedError)
    assert env.member_ids() == set(formed.members)
    rejoins = [env.join(m) for m in formed.members]
    assert {joined(f).generation_id for f in rejoins} == {formed.generation + 1}


def test_joining_with_an_unknown_member_id_is_unknown_member_id(env):
    failed(env.join("nobody"), UnknownMemberIdError)
    form_group(env, 1)
    failed(env.join("nobody"), UnknownMemberIdError)


@pytest.mark.parametrize("protocol_type, protocols", [
    ("connect", RANGE),
    ("consumer", [("roundrobin", subscription("t"))]),
    ("consumer", []),
])
def test_a_member_with_nothing_in_common_with_the_group_is_inconsistent_group_protocol(env, protocol_type,
                                                                                         protocols):
    formed = form_group(env, 1)
    failed(env.join(protocol_type=protocol_type, protocols=protocols), InconsistentGroupProtocolError)
    assert env.member_ids() == {formed.leader}
    assert env.state() == "Stable"


@pytest.mark.parametrize("protocol_type, protocols", [("", RANGE), ("consumer", [])])
def test_the_first_member_needs_a_protocol_type_and_a_protocol(env, protocol_type, protocols):
    failed(env.join(protocol_type=protocol_type, protocols=protocols), InconsistentGroupProtocolError)


# -- JoinGroup: the rebalance --------------------------------------------------------------------

def test_the_protocol_is_chosen_by_vote_among_those_every_member_supports(env):
    sub = subscription("t")
    leader = joined(env.join(protocols=[("range", sub), ("roundrobin", sub), ("sticky", sub)]))
    futures = [env.join(protocols=[("cooperative", sub), ("roundrobin", sub), ("range", sub)]),
               env.join(protocols=[("roundrobin", sub), ("range", sub)]),
               env.join(leader.member_id, protocols=[("range", sub), ("roundrobin", sub), ("sticky", sub)])]
    results = [joined(f) for f in futures]
    # "sticky" and "cooperative" are not supported by all; of range and roundrobin, roundrobin is the
    # first choice of two members, range of only one (the leader's preference does not decide).
    assert {r.protocol_name for r in results} == {"roundrobin"}
    assert env.groups.describe(GROUP).state == "CompletingRebalance"


def test_only_the_leaders_answer_lists_the_members_with_their_metadata(env):
    first = joined(env.join(protocols=[("range", subscription("t"))]))
    follower = env.join(instance="host-2", protocols=[("range", subscription("t", "u"))])
    leader = env.join(first.member_id, protocols=[("range", subscription("t"))])
    leader, follower = joined(leader), joined(follower)
    assert leader.leader_id == follower.leader_id == leader.member_id
    assert leader.generation_id == follower.generation_id == 2
    assert follower.members == ()
    assert sorted(leader.members) == sorted([(leader.member_id, None, subscription("t")),
                                             (follower.member_id, "host-2", subscription("t", "u"))])


def test_every_rebalance_starts_the_next_generation(env):
    formed = form_group(env, 2)
    assert formed.generation == 2
    newcomer = env.join()
    rejoins = [env.join(m) for m in formed.members]
    generations = {joined(f).generation_id for f in [newcomer, *rejoins]}
    assert generations == {3}
    assert env.group_value().generation == 2, "the generation is persisted by the leader's SyncGroup"


def test_the_initial_rebalance_delay_holds_the_first_join(env):
    groups = GroupCoordinator(env.store, env.txn, replace(CONFIG, initial_rebalance_delay_ms=3_000),
                              clock=env.clock)
    first = groups.join_group(GROUP, "", None, "c", "/h", SESSION, REBALANCE, "consumer", RANGE, False)
    assert not first.done()
    run_until(groups, env.clock, env.clock.now + 2_999)
    assert not first.done()
    run_until(groups, env.clock, env.clock.now + 1)
    assert joined(first).generation_id == 1


def test_the_initial_rebalance_delay_extends_while_members_arrive_up_to_the_rebalance_timeout(env):
    delay, rebalance = 3_000, 10_000
    groups = GroupCoordinator(env.store, env.txn, replace(CONFIG, initial_rebalance_delay_ms=delay),
                              clock=env.clock)
    start = env.clock.now
    futures = []

    def at(ms: int) -> None:
        run_until(groups, env.clock, start + ms)

    # A member arrives in every delay window: each window is followed by another, until the
    # rebalance timeout is used up (3 + 3 + 3 + 1 s, Kafka's InitialDelayedJoin arithmetic).
    for arrival in (0, 2_000, 5_000, 8_000, 9_500):
        at(arrival)
        futures.append(groups.join_group(GROUP, "", None, "c", "/h", SESSION, rebalance, "consumer", RANGE,
                                         False))
    at(9_999)
    assert not any(f.done() for f in futures)
    at(10_000)
    results = [joined(f) for f in futures]
    assert {r.generation_id for r in results} == {1}
    assert len(next(r for r in results if r.members).members) == 5


def test_the_initial_rebalance_delay_ends_after_a_window_with_no_newcomer(env):
    groups = GroupCoordinator(env.store, env.txn, replace(CONFIG, initial_rebalance_delay_ms=3_000),
                              clock=env.clock)
    start = env.clock.now
    a = groups.join_group(GROUP, "", None, "c", "/h", SESSION, REBALANCE, "consumer", RANGE, False)
    env.clock.now = start + 1_000
    b = groups.join_group(GROUP, "", None, "c", "/h", SESSION, REBALANCE, "consumer", RANGE, False)
    run_until(groups, env.clock, start + 3_000)
    assert not a.done(), "a member arrived in the first window: Kafka waits another one"
    run_until(groups, env.clock, start + 5_999)
    assert not a.done()
    run_until(groups, env.clock, start + 6_000)
    assert {joined(a).generation_id, joined(b).generation_id} == {1}


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(env):
    formed = form_group(env, 2)
    leader, follower = formed.members
    rejoin = env.join(leader)
    assert env.state() == "PreparingRebalance"
    for _ in range(REBALANCE // 5_000 - 1):
        env.advance(5_000)
        with pytest.raises(RebalanceInProgressError):
            env.groups.heartbeat(GROUP, formed.generation, follower)   # alive, but it does not rejoin
    env.advance(5_000 - 1)
    assert not rejoin.done()
    env.advance(1)
    result = joined(rejoin)
    assert (result.generation_id, result.members) == (formed.generation + 1, ((leader, None, RANGE[0][1]),))
    assert env.member_ids() == {leader}
    with pytest.raises(UnknownMemberIdError):
        env.groups.heartbeat(GROUP, result.generation_id, follower)


def test_a_follower_rejoining_a_stable_group_with_the_same_metadata_gets_the_current_generation(env):
    formed = form_group(env, 2)
    result = joined(env.join(formed.members[1]))
    assert result == JoinResult(formed.members[1], formed.generation, "consumer", "range", formed.leader, ())
    assert env.state() == "Stable"


def test_a_follower_rejoining_with_new_metadata_starts_a_rebalance(env):
    formed = form_group(env, 2)
    rejoin = env.join(formed.members[1], protocols=[("range", subscription("t", "u"))])
    assert not rejoin.done()
    assert env.state() == "PreparingRebalance"
    env.join(formed.leader)
    assert joined(rejoin).generation_id == formed.generation + 1


def test_the_leader_rejoining_a_stable_group_starts_a_rebalance(env):
    formed = form_group(env, 2)
    rejoin = env.join(formed.leader)
    assert not rejoin.done()
    assert env.state() == "PreparingRebalance"
    with pytest.raises(RebalanceInProgressError):
        env.groups.heartbeat(GROUP, formed.generation, formed.members[1])
    follower = env.join(formed.members[1])
    assert joined(rejoin).generation_id == joined(follower).generation_id == formed.generation + 1


def test_a_rejoin_while_completing_with_the_same_metadata_is_answered_again(env):
    first = joined(env.join())
    second = env.join()
    leader = joined(env.join(first.member_id))
    follower = joined(second)
    assert env.state() == "CompletingRebalance"
    # The answers were lost: the same requests get the same answers, the leader's with the members.
    assert joined(env.join(leader.member_id)) == leader
    assert joined(env.join(follower.member_id)) == follower
    assert env.state() == "CompletingRebalance"


# -- SyncGroup -----------------------------------------------------------------------------------

def test_sync_group_with_a_wrong_generation_is_illegal_generation(env):
    formed = form_group(env, 1)
    failed(env.sync(replace(formed.result(0), generation_id=formed.generation + 1)), IllegalGenerationError)
    failed(env.sync(replace(formed.result(0), generation_id=formed.generation - 1)), IllegalGenerationError)


def test_sync_group_from_an_unknown_member_is_unknown_member_id(env):
    formed = form_group(env, 1)
    failed(env.sync(replace(formed.result(0), member_id="nobody")), UnknownMemberIdError)
    failed(env.sync(formed.result(0), group="no-such-group"), UnknownMemberIdError)


def test_sync_group_during_a_rebalance_is_rebalance_in_progress(env):
    formed = form_group(env, 2)
    env.join(formed.leader)
    failed(env.sync(formed.result(1)), RebalanceInProgressError)


def test_sync_group_with_another_protocol_is_inconsistent_group_protocol(env):
    formed = form_group(env, 1)
    result = formed.result(0)
    for kwargs in ({"protocol_type": "connect"}, {"protocol_name": "roundrobin"}):
        failed(env.groups.sync_group(GROUP, result.generation_id, result.member_id, None, {}, **kwargs),
               InconsistentGroupProtocolError)


def test_followers_wait_for_the_leaders_assignment_and_each_gets_its_own(env):
    first = joined(env.join())
    futures = [env.join(), env.join(), env.join(first.member_id)]
    b, c, a = [joined(f) for f in futures]
    assert a.leader_id == a.member_id
    sync_b, sync_c = env.sync(b), env.sync(c)
    assert not sync_b.done() and not sync_c.done(), "followers wait for the leader's SyncGroup"
    # The leader leaves c out of its assignment: c gets empty bytes, as Kafka answers.
    sync_a = env.sync(a, {a.member_id: assignment(0, 1), b.member_id: assignment(2)})
    assert sync_a.result(timeout=0) == SyncResult("consumer", "range", assignment(0, 1))
    assert sync_b.result(timeout=0).assignment == assignment(2)
    assert sync_c.result(timeout=0).assignment == b""
    assert decode_assignment(sync_c.result(timeout=0).assignment).partitions == ()
    assert env.state() == "Stable"
    stored = env.group_value()
    assert stored.generation == a.generation_id and stored.leader == a.member_id
    assert {m.member_id: m.assignment for m in stored.members} == {
        a.member_id: assignment(0, 1), b.member_id: assignment(2), c.member_id: b""}
    # A SyncGroup retried in Stable gets the stored assignment again.
    assert env.sync(b).result(timeout=0).assignment == assignment(2)


def test_a_rebalance_while_followers_wait_for_their_assignment_answers_them_rebalance_in_progress(env):
    first = joined(env.join())
    second = env.join()
    leader = joined(env.join(first.member_id))
    waiting = env.sync(joined(second))
    newcomer = env.join()
    failed(waiting, RebalanceInProgressError)
    assert not newcomer.done()
    failed(env.sync(leader, {leader.member_id: assignment(0)}), RebalanceInProgressError)


def test_a_member_that_never_sends_sync_group_is_removed_after_the_rebalance_timeout(env):
    first = joined(env.join())
    second = env.join()
    leader = joined(env.join(first.member_id))
    follower = joined(second)
    env.sync(leader, {leader.member_id: assignment(0), follower.member_id: assignment(1)})
    for _ in range(REBALANCE // 5_000 + 1):
        env.advance(5_000)
        for member in (leader, follower):
            error_of(lambda: env.groups.heartbeat(GROUP, member.generation_id, member.member_id))
    assert follower.member_id not in env.member_ids(), (
        "Kafka removes a member that has not sent SyncGroup within the rebalance timeout after the join "
        "phase (GroupMetadataManager.expirePendingSync) and rebalances; logstore keeps it as long as it "
        "heartbeats")


# -- Heartbeat -----------------------------------------------------------------------------------

def test_heartbeat_answers_by_group_state(env):
    first = joined(env.join())
    second = env.join()
    leader = joined(env.join(first.member_id))
    follower = joined(second)
    # CompletingRebalance and Stable: no error.
    assert env.groups.heartbeat(GROUP, follower.generation_id, follower.member_id) is None
    env.sync(follower)
    env.sync(leader, {})
    assert env.groups.heartbeat(GROUP, leader.generation_id, leader.member_id) is None
    with pytest.raises(IllegalGenerationError):
        env.groups.heartbeat(GROUP, leader.generation_id - 1, leader.member_id)
    with pytest.raises(UnknownMemberIdError):
        env.groups.heartbeat(GROUP, leader.generation_id, "nobody")
    with pytest.raises(UnknownMemberIdError):
        env.groups.heartbeat("no-such-group", 1, leader.member_id)
    env.join(leader.member_id)
    with pytest.raises(RebalanceInProgressError):
        env.groups.heartbeat(GROUP, follower.generation_id, follower.member_id)


def test_a_heartbeat_naming_an_instance_id_the_group_does_not_know_is_unknown_member_id(env):
    formed = form_group(env, 1)
    error = error_of(lambda: env.groups.heartbeat(GROUP, formed.generation, formed.leader, "no-such-instance"))
    assert isinstance(error, UnknownMemberIdError), (
        "Kafka's ClassicGroup.validateMember answers UNKNOWN_MEMBER_ID when a request names a group.instance.id "
        f"the group does not know, whatever the member id; logstore answered {error!r}")


def test_a_member_without_heartbeats_is_removed_after_its_session_timeout_and_the_group_rebalances(env):
    formed = form_group(env, 2)
    leader, follower = formed.members
    env.advance(SESSION // 2)
    env.groups.heartbeat(GROUP, formed.generation, follower)
    env.advance(SESSION // 2)
    assert env.member_ids() == {follower}
    assert env.state() == "PreparingRebalance"
    with pytest.raises(UnknownMemberIdError):
        env.groups.heartbeat(GROUP, formed.generation, leader)
    with pytest.raises(RebalanceInProgressError):
        env.groups.heartbeat(GROUP, formed.generation, follower)
    result = joined(env.join(follower))
    assert (result.generation_id, result.leader_id) == (formed.generation + 1, follower)


def test_the_session_expires_exactly_a_session_after_the_last_heartbeat(env):
    formed = form_group(env, 1)
    env.advance(SESSION // 2)
    env.groups.heartbeat(GROUP, formed.generation, formed.leader)
    env.advance(SESSION - 1)
    assert env.member_ids() == {formed.leader}
    env.advance(1)
    assert env.member_ids() == set()


@pytest.mark.parametrize("instance", [None, "host-1"])
def test_heartbeats_keep_a_member_alive_for_many_sessions(env, instance):
    formed = form_group(env, 1, instances=[instance])
    for _ in range(10):
        env.advance(SESSION - 1)
        env.groups.heartbeat(GROUP, formed.generation, formed.leader, instance)
    assert env.member_ids() == {formed.leader}
    assert env.state() == "Stable"


@pytest.mark.parametrize("instance", [None, "host-1"])
def test_a_member_that_joined_without_member_id_required_expires_after_its_session_timeout(env, instance):
    # Static members and JoinGroup v0-3 skip MEMBER_ID_REQUIRED; their sessions time out all the same.
    formed = form_group(env, 1, instances=[instance])
    env.advance(SESSION - 1)
    assert env.member_ids() == {formed.leader}
    env.advance(1)
    assert env.member_ids() == set(), "Kafka removes a member a session timeout after its last heartbeat"


# -- LeaveGroup ----------------------------------------------------------------------------------

def test_leave_group_takes_a_batch_and_answers_each_member(env):
    formed = form_group(env, 3)
    a, b, c = formed.members
    errors = env.groups.leave_group(GROUP, [(b, None), ("nobody", None), (c, None)])
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], UnknownMemberIdError)
    assert env.member_ids() == {a}
    assert env.state() == "PreparingRebalance"
    assert joined(env.join(a)).generation_id == formed.generation + 1


def test_leave_group_by_instance_id_and_a_mismatched_pair_is_fenced(env):
    formed = form_group(env, 3, instances=["host-1", "host-2", "host-3"])
    errors = env.groups.leave_group(GROUP, [("", "host-2"), ("stale-id", "host-3"), ("", "host-9"),
                                            (formed.members[0], "host-1")])
    assert errors[0] is None and errors[3] is None
    assert isinstance(errors[1], FencedInstanceIdError)
    assert isinstance(errors[2], UnknownMemberIdError)
    assert env.member_ids() == {formed.members[2]}


def test_leaving_a_group_that_does_not_exist_is_unknown_member_id_for_the_request(env):
    error = error_of(lambda: env.groups.leave_group("no-such-group", [("a", None), ("b", None)]))
    assert isinstance(error, UnknownMemberIdError), (
        "Kafka's classicGroupLeave answers a LeaveGroup for an unknown group with a request-level "
        f"UNKNOWN_MEMBER_ID (v3+: top-level error, no member results); logstore answered {error!r} and "
        "per-member errors")


def test_a_member_leaving_while_the_others_wait_in_the_join_phase_completes_it(env):
    formed = form_group(env, 2)
    rejoin = env.join(formed.leader)
    assert env.groups.leave_group(GROUP, [(formed.members[1], None)]) == [None]
    result = joined(rejoin)
    assert (result.generation_id, [m[0] for m in result.members]) == (formed.generation + 1, [formed.leader])


def test_the_last_member_leaving_empties_the_group_at_once(env):
    formed = form_group(env, 1)
    assert env.groups.leave_group(GROUP, [(formed.leader, None)]) == [None]
    assert env.state() == "Empty", (
        "Kafka's prepareRebalance completes the join phase at once when every remaining member has joined "
        "(none left): the group is Empty with the next generation right after the LeaveGroup, not when a "
        "later poll runs")
    assert env.groups.delete_groups([GROUP]) == {GROUP: None}


def test_a_leave_with_a_handed_out_member_id_forgets_it(env):
    formed = form_group(env, 1)
    pending = failed(env.join(require_known=True), MemberIdRequiredError).member_id
    rejoin = env.join(formed.leader)
    assert not rejoin.done()
    assert env.groups.leave_group(GROUP, [(pending, None)]) == [None]
    assert joined(rejoin).generation_id == formed.generation + 1


# -- static membership ---------------------------------------------------------------------------

def test_a_restarted_static_member_takes_the_old_ones_place_without_a_rebalance(env):
    formed = form_group(env, 2, instances=["host-1", "host-2"])
    old = formed.members[1]
    result = joined(env.join(instance="host-2"))
    assert result.member_id != old and result.member_id.startswith("host-2-")
    assert (result.generation_id, result.leader_id, result.protocol_name) == (formed.generation, formed.leader,
                                                                              "range")
    assert env.state() == "Stable"
    assert env.member_ids() == {formed.leader, result.member_id}
    # The new member inherits the assignment; the old member id is fenced everywhere.
    assert env.sync(result, instance="host-2").result(timeout=0).assignment == formed.assignments[old]
    with pytest.raises(FencedInstanceIdError):
        env.groups.heartbeat(GROUP, formed.generation, old, "host-2")
    failed(env.sync(formed.result(1), instance="host-2"), FencedInstanceIdError)
    with pytest.raises(FencedInstanceIdError):
        env.commit({("t", 1): 5}, member=old, generation=formed.generation, instance="host-2")
    assert env.groups.heartbeat(GROUP, formed.generation, result.member_id, "host-2") is None
    # Persisted, so the old instance stays fenced after a restart.
    assert {m.member_id for m in env.group_value().members} == {formed.leader, result.member_id}


def test_a_replaced_static_member_stays_replaced_after_a_restart(env):
    formed = form_group(env, 2, instances=["host-1", "host-2"])
    new = joined(env.join(instance="host-2")).member_id
    env = env.reopen()
    try:
        assert env.state() == "Stable"
        assert env.member_ids() == {formed.leader, new}
        with pytest.raises(FencedInstanceIdError):
            env.groups.heartbeat(GROUP, formed.generation, formed.members[1], "host-2")
        assert env.groups.heartbeat(GROUP, formed.generation, new, "host-2") is None
    finally:
        env.store.close()


def test_a_static_member_restarting_during_the_join_phase_fences_the_old_join(env):
    formed = form_group(env, 3, instances=["host-1", "host-2", "host-3"])
    leader_join = env.join(formed.leader, instance="host-1")
    old_join = env.join(formed.members[1], instance="host-2")
    assert not old_join.done(), "the join phase waits for host-3"
    new_join = env.join(instance="host-2")
    failed(old_join, FencedInstanceIdError)
    env.join(formed.members[2], instance="host-3")
    leader, new = joined(leader_join), joined(new_join)
    assert new.generation_id == leader.generation_id == formed.generation + 1
    assert {m[0] for m in leader.members} == {formed.leader, new.member_id, formed.members[2]}


def test_a_static_member_restarting_while_completing_fences_the_old_sync_and_rebalances(env):
    first = joined(env.join(instance="host-1"))
    second = env.join(instance="host-2")
    leader = joined(env.join(first.member_id, instance="host-1"))
    old_sync = env.sync(joined(second), instance="host-2")
    env.join(instance="host-2")
    failed(old_sync, FencedInstanceIdError)
    # The leader may already be assigning to the old member id: Kafka starts over.
    assert env.state() == "PreparingRebalance"
    assert joined(env.join(leader.member_id, instance="host-1")).generation_id == leader.generation_id + 1


def test_a_static_member_that_does_not_rejoin_is_kept_through_the_rebalance(env):
    formed = form_group(env, 2, instances=[None, "host-2"])
    rejoin = env.join(formed.leader)
    for _ in range(REBALANCE // 5_000):
        env.advance(5_000)
        if not rejoin.done():
            with pytest.raises(RebalanceInProgressError):
                env.groups.heartbeat(GROUP, formed.generation, formed.members[1], "host-2")
    result = joined(rejoin)
    # Kafka removes only the dynamic members that did not rejoin; the leader assigns to the static one too.
    assert result.generation_id == formed.generation + 1
    assert {m[0] for m in result.members} == set(formed.members)
    assert env.member_ids() == set(formed.members)


# -- OffsetCommit validation (ClassicGroup.validateOffsetCommit) ---------------------------------

def test_a_commit_with_generation_minus_1_to_an_unknown_group_makes_a_simple_group(env):
    assert env.commit({("t", 0): 10, ("t", 1): 11}) == {("t", 0): None, ("t", 1): None}
    assert env.fetched() == {("t", 0): 10, ("t", 1): 11}
    assert env.groups.list_groups() == [(GROUP, "", "Empty")]
    # A simple group takes commits from anyone while it is empty.
    assert env.commit({("t", 0): 12}, member="whoever") == {("t", 0): None}
    assert env.fetched([("t", 0), ("t", 2)]) == {("t", 0): 12, ("t", 2): None}


def test_a_commit_with_a_generation_to_an_unknown_group_is_illegal_generation(env):
    with pytest.raises(IllegalGenerationError):
        env.commit({("t", 0): 10}, member="m", generation=1)
    assert env.groups.list_groups() == []
    assert env.records() == []


def test_commit_validation_against_a_stable_group(env):
    formed = form_group(env, 2)
    leader, follower = formed.members
    with pytest.raises(UnknownMemberIdError):
        env.commit({("t", 0): 1}, member="nobody", generation=formed.generation)
    with pytest.raises(IllegalGenerationError):
        env.commit({("t", 0): 1}, member=leader, generation=formed.generation - 1)
    with pytest.raises(UnknownMemberIdError):
        env.commit({("t", 0): 1})   # no member, no generation: only an empty group takes that
    assert env.commit({("t", 1): 7}, member=follower, generation=formed.generation) == {("t", 1): None}
    assert env.fetched() == {("t", 1): 7}


def test_a_commit_while_completing_is_rebalance_in_progress_but_allowed_while_preparing(env):
    first = joined(env.join())
    second = env.join()
    leader = joined(env.join(first.member_id))
    with pytest.raises(RebalanceInProgressError):
        env.commit({("t", 0): 1}, member=leader.member_id, generation=leader.generation_id)
    env.sync(joined(second))
    env.sync(leader, {})
    env.join(leader.member_id)
    assert env.state() == "PreparingRebalance"
    # Members still at the current generation may commit what they consumed before rejoining.
    assert env.commit({("t", 0): 3}, member=second.result().member_id,
                      generation=leader.generation_id) == {("t", 0): None}


def test_a_commit_to_an_emptied_group_needs_no_member(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): 4}, member=formed.leader, generation=formed.generation)
    env.advance(SESSION)
    assert env.state() == "Empty"
    assert env.commit({("t", 0): 5}) == {("t", 0): None}
    with pytest.raises(UnknownMemberIdError):
        env.commit({("t", 0): 6}, member=formed.leader, generation=formed.generation + 1)
    assert env.fetched() == {("t", 0): 5}


def test_metadata_over_the_limit_is_offset_metadata_too_large_for_that_partition_only(env):
    limit = CONFIG.offset_metadata_max_bytes
    errors = env.commit({("t", 0): (1, 3, "x" * limit), ("t", 1): (2, 3, "x" * (limit + 1)),
                         ("t", 2): (3, -1, "é" * (limit // 2 + 1))})
    assert errors[("t", 0)] is None
    assert isinstance(errors[("t", 1)], OffsetMetadataTooLargeError)
    assert isinstance(errors[("t", 2)], OffsetMetadataTooLargeError), "the limit counts UTF-8 bytes"
    committed = env.groups.fetch_offsets(GROUP, None)
    assert list(committed) == [("t", 0)]
    assert (committed[("t", 0)].offset, committed[("t", 0)].leader_epoch,
            committed[("t", 0)].metadata) == (1, 3, "x" * limit)
    assert [k.partition for k, _ in env.records() if isinstance(k, OffsetKey)] == [0]


def test_committed_offsets_are_records_read_back_after_a_restart(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): (41, 2, "m0")}, member=formed.leader, generation=formed.generation)
    env.clock.now += 5
    env.commit({("t", 0): (42, 2, "m1"), ("u", 0): 7}, member=formed.leader, generation=formed.generation)
    offset_values = [(k.topic, k.partition, v.offset) for k, v in env.records() if isinstance(k, OffsetKey)]
    assert offset_values == [("t", 0, 41), ("t", 0, 42), ("u", 0, 7)]
    env = env.reopen()
    try:
        committed = env.groups.fetch_offsets(GROUP, None)
        assert {tp: (c.offset, c.leader_epoch, c.metadata) for tp, c in committed.items()} == {
            ("t", 0): (42, 2, "m1"), ("u", 0): (7, -1, "")}
        assert committed[("t", 0)].commit_timestamp == env.clock.now
    finally:
        env.store.close()


# -- TxnOffsetCommit -----------------------------------------------------------------------------

def begin(env: Env) -> tuple[int, int]:
    """A transactional producer with the group's offsets partition in its transaction."""
    pid, epoch = env.txn.init_producer_id(TXN, 60_000)
    env.txn.add_offsets(TXN, pid, epoch, GROUP)
    return pid, epoch


def txn_commit(env: Env, pid: int, epoch: int, offsets: dict, *, member: str = "", generation: int = -1,
               instance: str | None = None):
    return env.groups.commit_txn_offsets(TXN, GROUP, pid, epoch, member, instance, generation,
                                         {tp: (o, -1, "") for tp, o in offsets.items()})


def test_transactional_offsets_are_invisible_until_the_commit_marker(env):
    env.commit({("t", 0): 5})
    pid, epoch = begin(env)
    assert txn_commit(env, pid, epoch, {("t", 0): 9, ("t", 1): 3}) == {("t", 0): None, ("t", 1): None}
    assert env.fetched([("t", 0), ("t", 1)]) == {("t", 0): 5, ("t", 1): None}
    stable = env.fetched([("t", 0), ("t", 1), ("t", 2)], require_stable=True)
    assert isinstance(stable[("t", 0)], UnstableOffsetCommitError)
    assert isinstance(stable[("t", 1)], UnstableOffsetCommitError)
    assert stable[("t", 2)] is None
    env.txn.end_transaction(TXN, pid, epoch, True)
    assert env.fetched([("t", 0), ("t", 1)], require_stable=True) == {("t", 0): 9, ("t", 1): 3}


def test_fetching_all_offsets_with_require_stable_flags_those_with_a_pending_commit(env):
    env.commit({("t", 0): 5, ("t", 1): 6})
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9})
    found = env.fetched(None, require_stable=True)
    assert found[("t", 1)] == 6
    assert isinstance(found[("t", 0)], UnstableOffsetCommitError), (
        "Kafka's OffsetMetadataManager.fetchAllOffsets answers UNSTABLE_OFFSET_COMMIT for a partition with a "
        f"pending transactional commit when require_stable is set; logstore answered {found[('t', 0)]!r}")


def test_an_aborted_transaction_drops_its_offsets(env):
    env.commit({("t", 0): 5})
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9, ("t", 1): 3})
    env.txn.end_transaction(TXN, pid, epoch, False)
    assert env.fetched([("t", 0), ("t", 1)], require_stable=True) == {("t", 0): 5, ("t", 1): None}


def test_a_plain_commit_written_after_a_pending_transactional_one_wins_when_the_transaction_commits(env):
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9, ("t", 1): 9})
    env.commit({("t", 0): 20})
    env.txn.end_transaction(TXN, pid, epoch, True)
    # The record later in the log wins (Kafka's OffsetMetadataManager.replayEndTransactionMarker).
    assert env.fetched([("t", 0), ("t", 1)]) == {("t", 0): 20, ("t", 1): 9}
    env = env.reopen()
    try:
        assert env.fetched([("t", 0), ("t", 1)]) == {("t", 0): 20, ("t", 1): 9}
    finally:
        env.store.close()


def test_a_transactional_commit_written_after_a_plain_one_wins_when_the_transaction_commits(env):
    env.commit({("t", 0): 20})
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9})
    env.txn.end_transaction(TXN, pid, epoch, True)
    assert env.fetched([("t", 0)]) == {("t", 0): 9}


def test_a_transactional_commit_without_add_offsets_is_invalid_txn_state(env):
    pid, epoch = env.txn.init_producer_id(TXN, 60_000)
    env.txn.add_partitions(TXN, pid, epoch, [("t", 0)])
    with pytest.raises(InvalidTxnStateError):
        txn_commit(env, pid, epoch, {("t", 0): 9})
    assert env.records() == []
    env.txn.end_transaction(TXN, pid, epoch, True)
    assert env.fetched([("t", 0)]) == {("t", 0): None}


def test_transactional_commits_check_the_member_but_not_the_rebalance(env):
    first = joined(env.join())
    second = env.join()
    leader = joined(env.join(first.member_id))
    joined(second)
    pid, epoch = begin(env)
    with pytest.raises(IllegalGenerationError):
        txn_commit(env, pid, epoch, {("t", 0): 1}, member=leader.member_id, generation=leader.generation_id - 1)
    with pytest.raises(UnknownMemberIdError):
        txn_commit(env, pid, epoch, {("t", 0): 1}, member="nobody", generation=leader.generation_id)
    # CompletingRebalance, which refuses a plain commit, takes a transactional one (KIP-447),
    # and so do v0-2 requests that carry no member at all.
    assert txn_commit(env, pid, epoch, {("t", 0): 1}, member=leader.member_id,
                      generation=leader.generation_id) == {("t", 0): None}
    assert txn_commit(env, pid, epoch, {("t", 1): 2}) == {("t", 1): None}
    env.txn.end_transaction(TXN, pid, epoch, True)
    assert env.fetched([("t", 0), ("t", 1)]) == {("t", 0): 1, ("t", 1): 2}


def test_a_transactional_commit_with_a_generation_to_an_unknown_group_is_illegal_generation(env):
    pid, epoch = begin(env)
    with pytest.raises(IllegalGenerationError):
        txn_commit(env, pid, epoch, {("t", 0): 1}, member="m", generation=3)


# -- load() --------------------------------------------------------------------------------------

def test_a_restart_rebuilds_a_stable_group_as_it_was(env):
    formed = form_group(env, 3, instances=[None, "host-2", None])
    env.commit({("t", 0): 10, ("t", 1): 11}, member=formed.leader, generation=formed.generation)
    before = env.groups.describe(GROUP)
    env = env.reopen()
    try:
        after = env.groups.describe(GROUP)
        assert after == before
        assert after.state == "Stable" and after.protocol_name == "range"
        assert {m.member_id: m.assignment for m in after.members} == formed.assignments
        assert env.fetched() == {("t", 0): 10, ("t", 1): 11}
        # The members carry on where they were: same generation, same leader, same assignment.
        follower = formed.result(1)
        assert env.sync(follower, instance="host-2").result(timeout=0).assignment == formed.assignments[
            follower.member_id]
        rejoin = env.join(formed.leader)
        env.join(formed.members[1], instance="host-2")
        assert not rejoin.done()
        env.join(formed.members[2])
        result = joined(rejoin)
        assert (result.generation_id, result.leader_id) == (formed.generation + 1, formed.leader)
    finally:
        env.store.close()


def test_members_loaded_on_restart_still_time_out(env):
    formed = form_group(env, 2)
    env = env.reopen()
    try:
        env.advance(SESSION // 2)
        env.groups.heartbeat(GROUP, formed.generation, formed.members[1])
        env.advance(SESSION // 2)
        assert env.member_ids() == {formed.members[1]}
    finally:
        env.store.close()


def test_an_empty_group_is_loaded_empty_at_its_generation(env):
    formed = form_group(env, 1)
    env.advance(SESSION)
    assert env.state() == "Empty"
    env = env.reopen()
    try:
        assert env.state() == "Empty"
        assert joined(env.join()).generation_id == formed.generation + 2
    finally:
        env.store.close()


def test_deleted_groups_and_offsets_stay_deleted_after_a_restart(env):
    env.commit({("t", 0): 1}, group="gone")
    env.commit({("t", 0): 2, ("t", 1): 3, ("u", 0): 4}, group="kept")
    assert env.groups.delete_groups(["gone"]) == {"gone": None}
    assert env.groups.delete_offsets("kept", [("t", 0), ("t", 1)]) == {("t", 0): None, ("t", 1): None}
    env = env.reopen()
    try:
        assert env.groups.describe("gone").state == "Dead"
        assert [g for g, _, _ in env.groups.list_groups()] == ["kept"]
        assert env.fetched(group="kept") == {("u", 0): 4}
        assert env.fetched([("t", 0)], group="gone") == {("t", 0): None}
    finally:
        env.store.close()


def test_a_restart_applies_committed_transactional_offsets_and_drops_aborted_ones(env):
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9})
    env.txn.end_transaction(TXN, pid, epoch, True)
    pid, epoch = env.txn.init_producer_id(TXN, 60_000)
    env.txn.add_offsets(TXN, pid, epoch, GROUP)
    txn_commit(env, pid, epoch, {("t", 0): 50, ("t", 1): 50})
    env.txn.end_transaction(TXN, pid, epoch, False)
    env = env.reopen()
    try:
        assert env.fetched([("t", 0), ("t", 1)], require_stable=True) == {("t", 0): 9, ("t", 1): None}
    finally:
        env.store.close()


def test_transactional_offsets_still_open_at_a_restart_stay_pending_until_their_marker(env):
    env.commit({("t", 0): 1})
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9})
    env = env.reopen()
    try:
        assert env.fetched([("t", 0)]) == {("t", 0): 1}
        assert isinstance(env.fetched([("t", 0)], require_stable=True)[("t", 0)], UnstableOffsetCommitError)
        env.txn.end_transaction(TXN, pid, epoch, True)
        assert env.fetched([("t", 0)], require_stable=True) == {("t", 0): 9}
    finally:
        env.store.close()


# -- offset expiration (KIP-211) -----------------------------------------------------------------

def test_an_empty_group_left_without_offsets_is_removed_and_stays_removed(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): 1}, member=formed.leader, generation=formed.generation)
    env.advance(SESSION)
    assert env.state() == "Empty"
    assert env.groups.expire_offsets(env.clock.now + RETENTION - 1) == 0
    assert env.groups.expire_offsets(env.clock.now + RETENTION) == 1
    # An empty group with no offsets left is removed, and stays removed.
    assert env.groups.describe(GROUP).state == "Dead"
    assert env.records()[-2:] == [(OffsetKey(GROUP, "t", 0), None), (GroupKey(GROUP), None)]
    env = env.reopen()
    try:
        assert env.groups.list_groups() == []
    finally:
        env.store.close()


def test_an_empty_consumer_groups_offsets_are_kept_for_a_retention_after_the_group_emptied(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): 1}, member=formed.leader, generation=formed.generation)
    for _ in range(RETENTION // (SESSION // 2)):
        env.advance(SESSION // 2)
        env.groups.heartbeat(GROUP, formed.generation, formed.leader)
    env.advance(SESSION)
    assert env.state() == "Empty"
    emptied = env.clock.now
    # The commit is older than the retention, but the group emptied only just now.
    assert env.groups.expire_offsets(emptied + RETENTION - 1) == 0
    assert env.fetched() == {("t", 0): 1}
    assert env.groups.expire_offsets(emptied + RETENTION) == 1
    assert env.fetched() == {}


def test_a_stable_consumer_group_keeps_the_offsets_of_its_topics_and_expires_the_others(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): 1, ("old-topic", 0): 2}, member=formed.leader, generation=formed.generation)
    env.groups.heartbeat(GROUP, formed.generation, formed.leader)
    start = env.clock.now
    assert env.groups.expire_offsets(start + RETENTION - 1) == 0
    assert env.groups.expire_offsets(start + RETENTION) == 1
    assert env.fetched() == {("t", 0): 1}
    assert env.state() == "Stable"


def test_a_simple_groups_offset_expires_a_retention_after_its_last_commit(env):
    env.commit({("t", 0): 1})
    env.clock.now += RETENTION - 10
    env.commit({("t", 0): 2})
    assert env.groups.expire_offsets(env.clock.now + 10) == 0, (
        "Kafka expires a simple group's offset (no protocol type) a retention after that offset's last "
        "commit (ClassicGroup.offsetExpirationCondition); logstore counted from when the group was created")
    assert env.fetched() == {("t", 0): 2}
    assert env.groups.expire_offsets(env.clock.now + RETENTION) == 1


def test_an_offset_with_a_pending_transactional_commit_does_not_expire(env):
    env.commit({("t", 0): 1})
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9})
    assert env.groups.expire_offsets(env.clock.now + RETENTION) == 0
    assert env.groups.describe(GROUP).state == "Empty"
    env.txn.end_transaction(TXN, pid, epoch, True)
    assert env.fetched() == {("t", 0): 9}


def test_offsets_do_not_expire_while_the_group_rebalances(env):
    formed = form_group(env, 2)
    env.commit({("old-topic", 0): 2}, member=formed.leader, generation=formed.generation)
    rejoin = env.join(formed.leader)
    assert env.state() == "PreparingRebalance"
    assert env.groups.expire_offsets(env.clock.now + RETENTION) == 0
    env.join(formed.members[1])
    joined(rejoin)
    assert env.state() == "CompletingRebalance"
    assert env.groups.expire_offsets(env.clock.now + RETENTION) == 0
    assert env.fetched() == {("old-topic", 0): 2}


def test_an_explicit_expire_timestamp_is_honoured(env):
    env.groups.commit_offsets(GROUP, "", None, -1, {("t", 0): (1, -1, "")}, expire_timestamp=env.clock.now + 100)
    assert env.groups.expire_offsets(env.clock.now + 99) == 0
    assert env.groups.expire_offsets(env.clock.now + 100) == 1


# -- DeleteGroups / OffsetDelete -----------------------------------------------------------------

def test_delete_groups_answers_each_group(env):
    form_group(env, 1, group="busy")
    env.commit({("t", 0): 1}, group="idle")
    errors = env.groups.delete_groups(["idle", "busy", "unknown", ""])
    assert errors["idle"] is None
    assert isinstance(errors["busy"], NonEmptyGroupError)
    assert isinstance(errors["unknown"], GroupIdNotFoundError)
    # Kafka takes the empty group id in DeleteGroups (only null is INVALID_GROUP_ID): no such group.
    assert isinstance(errors[""], GroupIdNotFoundError)
    assert env.groups.describe("idle").state == "Dead"
    assert env.fetched(group="idle") == {}
    assert isinstance(env.groups.delete_groups(["idle"])["idle"], GroupIdNotFoundError)


def test_delete_offsets_of_an_unknown_group_is_group_id_not_found(env):
    with pytest.raises(GroupIdNotFoundError):
        env.groups.delete_offsets("unknown", [("t", 0)])


def test_delete_offsets_refuses_the_topics_a_stable_consumer_group_subscribes_to(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): 1, ("old-topic", 0): 2}, member=formed.leader, generation=formed.generation)
    errors = env.groups.delete_offsets(GROUP, [("t", 0), ("old-topic", 0), ("old-topic", 5)])
    assert isinstance(errors[("t", 0)], GroupSubscribedToTopicError)
    assert errors[("old-topic", 0)] is None and errors[("old-topic", 5)] is None
    assert env.fetched() == {("t", 0): 1}
    assert env.records()[-1] == (OffsetKey(GROUP, "old-topic", 0), None)


def test_delete_offsets_of_a_non_consumer_group_with_members_is_non_empty_group(env):
    first = joined(env.join(protocol_type="connect", protocols=[("default", b"worker")]))
    env.sync(first, {first.member_id: b"tasks"})
    env.commit({("t", 0): 1}, member=first.member_id, generation=first.generation_id)
    with pytest.raises(NonEmptyGroupError):
        env.groups.delete_offsets(GROUP, [("t", 0)])


def test_delete_offsets_of_an_empty_group_deletes_any_topic(env):
    env.commit({("t", 0): 1, ("t", 1): 2})
    assert env.groups.delete_offsets(GROUP, [("t", 0)]) == {("t", 0): None}
    assert env.fetched() == {("t", 1): 2}
