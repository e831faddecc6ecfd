"""Consumer groups with real clients: confluent-kafka, kafka-python, aiokafka and kcat as group members.

Every member is a process of its own (group_member.py, driven through group_helpers), so a test can
close it (LeaveGroup) or SIGKILL it (no LeaveGroup, no commit) and watch the others take over. Tests
assert on what the clients report (assignments, records, commits) and wait for it with a deadline.

The brokers run with group.initial.rebalance.delay.ms=0 and a low group.min.session.timeout.ms, so a
killed member is gone a second after its last heartbeat.
"""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import threading
from collections import Counter

import pytest

from group_helpers import (
    ASSIGNORS,
    CHANGED,
    CLIENTS,
    MemberConfig,
    Members,
    end_offsets,
    produce,
    wait_for,
    wait_for_split,
)
from txn_helpers import create_topic

OVERRIDES = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500")
PARTITIONS = 6
BATCH = 300  # records produced at a time, spread over every partition


@pytest.fixture
def group_broker(start_broker):
    """A broker with no initial rebalance delay and short session timeouts allowed."""
    return start_broker(*OVERRIDES)


@pytest.fixture
def members(tmp_path):
    """Starts member subprocesses; any left running at the end are killed."""
    started = Members(tmp_path)
    yield started
    started.stop_all()


def config(client: str, bootstrap: str, topic: str, **kwargs) -> MemberConfig:
    """A member of the group named after the test's topic."""
    return MemberConfig(client, bootstrap, group=topic, topic=topic, **kwargs)


def assert_plan_shape(assignor: str, assignments: list[set[int]]) -> None:
    """The plan is the one the assignor makes (so the broker relayed the leader's plan to each member):
    range gives runs of consecutive partitions, roundrobin deals them out in turn."""
    if assignor == "range":
        assert all(held == set(range(min(held), max(held) + 1)) for held in assignments), assignments
    elif assignor == "roundrobin":
        assert all(len({p % len(assignments) for p in held}) == 1 for held in assignments), assignments


# -- 1, 2: sharing the partitions, and taking over from a member that leaves or dies ------------------------

GROUPS = ([((client,) * 3, assignor) for client in CLIENTS for assignor in ASSIGNORS[client]]
          + [(("confluent", "kafka-python", "aiokafka"), assignor) for assignor in ("range", "roundrobin")])


@pytest.mark.parametrize("clients, assignor", GROUPS,
                         ids=["-".join(dict.fromkeys(clients)) + "-" + assignor for clients, assignor in GROUPS])
def test_members_share_partitions_and_take_over_from_one_that_leaves_or_is_killed(
        group_broker, members, topic, clients, assignor):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    first = [members.start(config(client, bootstrap, topic, assignor=assignor)) for client in clients]
    split = wait_for_split(first, PARTITIONS)
    assert sorted(map(len, split)) == [2, 2, 2] and set().union(*split) == set(range(PARTITIONS))
    assert_plan_shape(assignor, split)

    leaver = first[1]
    leaver.close()
    stayers = [first[0], first[2]]
    split = wait_for_split(stayers, PARTITIONS)
    assert sorted(map(len, split)) == [3, 3]
    assert_plan_shape(assignor, split)

    # The same again with a member that dies: only its session timeout tells the group.
    newcomer = members.start(config(clients[1], bootstrap, topic, assignor=assignor))
    wait_for_split(stayers + [newcomer], PARTITIONS)
    victim = stayers[1]
    victim.kill()
    split = wait_for_split([stayers[0], newcomer], PARTITIONS)
    assert sorted(map(len, split)) == [3, 3]
    assert_plan_shape(assignor, split)


# -- 3: each record once, but for what a killed member consumed after its last commit --------------------------

def wait_for_group_commits(committers, ends: dict[int, int], what: str, watched) -> None:
    """Wait until, for every partition, the latest commit any of `committers` reported is its end offset."""
    def done():
        return all(max((m.committed.get(p, 0) for m in committers), default=0) == end for p, end in ends.items())
    wait_for(done, what, watched)


@pytest.mark.parametrize("client", CLIENTS)
def test_each_record_is_consumed_once_but_what_a_killed_member_had_not_committed(
        group_broker, members, topic, client):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    # A longer session than elsewhere: a member dropped for a late heartbeat would read records twice too.
    keeper, leaver, victim = group = [members.start(config(client, bootstrap, topic, session_timeout_ms=2_000))
                                      for _ in range(3)]
    wait_for_split(group, PARTITIONS)
    produced = produce(bootstrap, topic, PARTITIONS, BATCH)
    wait_for_group_commits(group, end_offsets(produced), "all of the first batch committed", group)

    # The victim goes on consuming but stops committing, then dies: the others read its uncommitted records again.
    victim.hold_commits()
    produced += produce(bootstrap, topic, PARTITIONS, BATCH, first=BATCH)
    ends = end_offsets(produced)
    with CHANGED:
        victims_partitions = set(victim.assignment)

    def read_to_end():
        last = {}
        for r in victim.records:
            last[r.partition] = r.offset
        return (all(last.get(p) == ends[p] - 1 for p in victims_partitions)
                and all(max(keeper.committed.get(p, 0), leaver.committed.get(p, 0)) == ends[p]
                        for p in set(ends) - victims_partitions))
    wait_for(read_to_end, "the second batch read (and committed but by the victim)", group)
    victim.kill()
    wait_for_split([keeper, leaver], PARTITIONS)
    wait_for_group_commits([keeper, leaver], ends, "the survivors to commit all the victim left", group)

    # A member that leaves commits what it consumed first: nothing is read twice.
    produced += produce(bootstrap, topic, PARTITIONS, BATCH, first=2 * BATCH)
    ends = end_offsets(produced)
    leaver.close()
    wait_for_split([keeper], PARTITIONS)
    wait_for_group_commits([keeper, leaver], ends, "the keeper to commit all the leaver left", group)

    keys = {(r.partition, r.offset): r.key for r in produced}
    consumed = Counter()
    for m in group:
        for r in m.records:
            assert keys.get((r.partition, r.offset)) == r.key, f"{m.name} read {r}, not what was written there"
            consumed[r.partition, r.offset] += 1
    assert set(consumed) == set(keys), f"never consumed: {sorted(set(keys) - set(consumed))[:20]}"
    uncommitted = {(r.partition, r.offset) for r in victim.records if r.offset >= victim.committed.get(r.partition, 0)}
    assert len(uncommitted) >= BATCH // 3, "the victim held back less than a third of a batch uncommitted"
    twice = {rp: n for rp, n in consumed.items() if n > 1}
    unexpected = {rp: [m.name for m in group for r in m.records if (r.partition, r.offset) == rp]
                  for rp in set(twice) ^ uncommitted}
    rebalances = [line for line in group_broker.log_text().splitlines() if "coordinator.group" in line]
    assert twice == {rp: 2 for rp in uncommitted}, \
        f"read twice or not, against expectation: {unexpected}\n" + "\n".join(m.describe() for m in group) \
        + "\n" + "\n".join(rebalances)
    assert keeper.fetch_committed(range(PARTITIONS)) == ends


# -- 4: committed offsets are durable ---------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_committed_offsets_survive_a_broker_sigkill(start_broker, members, topic, client):
    broker = start_broker(*OVERRIDES)
    partitions = 3
    create_topic(broker.bootstrap, topic, partitions)
    produce(broker.bootstrap, topic, partitions, 30)  # offsets 0..9 in each partition
    wanted = {0: 3, 1: 7, 2: 1}
    committer = members.start(config(client, broker.bootstrap, topic, commit_consumed=False))
    wait_for_split([committer], partitions)
    committer.commit(wanted)
    committer.close()

    broker.kill()
    broker.start()
    resumer = members.start(config(client, broker.bootstrap, topic, commit_consumed=False))
    wait_for(lambda: {r.partition for r in resumer.records} == set(range(partitions)),
             "a record from every partition after the restart", [resumer])
    first = {}
    for r in resumer.records:
        first.setdefault(r.partition, r.offset)
    assert first == wanted
    assert resumer.fetch_committed(range(partitions)) == wanted


# -- 5: static membership (KIP-345) ----------------------------------------------------------------------------

def test_static_member_restarted_in_its_session_gets_its_partitions_back_without_a_rebalance(
        group_broker, members, topic):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)

    def static(instance_id):
        # The session has to outlast a restart of the process.
        return config("confluent", bootstrap, topic, instance_id=instance_id, session_timeout_ms=10_000)
    group = [members.start(static(name), name=name) for name in ("a", "b", "c")]
    split = dict(zip(group, wait_for_split(group, PARTITIONS)))
    a, b, c = group

    def callbacks(member):
        member.call("ping")  # a rebalance callback it ran before this answer has been reported
        with CHANGED:
            return member.assigns, member.revokes, set(member.assignment)
    before = {m: callbacks(m) for m in (a, c)}

    b.kill()
    b_again = members.start(static("b"), name="b-restarted")
    wait_for(lambda: b_again.assignment == split[b], "the restarted member to get its partitions back",
             group + [b_again])
    assert {m: callbacks(m) for m in (a, c)} == before, "the other members went through a rebalance"
    assert b_again.assigns == 1 and b_again.revokes == 0

    # A second live instance of "c" takes its place; the first is fenced for good.
    c_twin = members.start(static("c"), name="c-twin")
    wait_for(lambda: c_twin.assignment == split[c], "the twin to get c's partitions", group + [c_twin])
    wait_for(lambda: any(e["fatal"] for e in c.errors), "a fatal error on the fenced instance", group + [c_twin])
    fatal = next(e for e in c.errors if e["fatal"])
    # librdkafka's words for FENCED_INSTANCE_ID, under its _FATAL code.
    assert fatal["code"] == "_FATAL" and "Static consumer fenced by other consumer" in fatal["error"], fatal
    assert callbacks(a) == before[a]


# -- 6: kcat as a balanced consumer -------------------------------------------------------------------------------

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
REBALANCED = re.compile(r"% Group \S+ rebalanced \(memberid [^)]*\): (assigned|revoked): (.*)")


class KcatMember:
    """`kcat -G`: its assignment (from its rebalance lines on stderr) and the records it printed."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.assignment: set[int] = set()
        self.records: list[tuple[int, int]] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            # Not -o: kcat would start every assigned partition there, ignoring the committed offsets.
            [KCAT, "-b", bootstrap, "-G", group, "-u", "-f", r"%p %o\n", "-X", "auto.offset.reset=earliest",
             "-X", "session.timeout.ms=1000", "-X", "heartbeat.interval.ms=100", topic],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            partition, offset = map(int, line.split())
            with CHANGED:
                self.records.append((partition, offset))
                CHANGED.notify_all()

    def _read_stderr(self):
        for line in self.proc.stderr:
            with CHANGED:
                self.stderr.append(line)
                found = REBALANCED.match(line)
                if found:
                    partitions = {int(p) for p in re.findall(r"\[(\d+)\]", found.group(2))}
                    self.assignment = partitions if found.group(1) == "assigned" else self.assignment - partitions
                CHANGED.notify_all()

    def describe(self) -> str:
        return f"kcat: assignment {sorted(self.assignment)}, {len(self.records)} records, stderr {self.stderr[-5:]}"

    def stop(self) -> None:
        """SIGTERM: kcat closes its consumer (leaving the group) and exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.describe()


@pytest.fixture
def kcats():
    started: list[KcatMember] = []
    yield started
    for k in started:
        if k.proc.poll() is None:
            k.proc.kill()
            k.proc.wait()


def test_two_kcat_balanced_consumers_split_the_partitions(group_broker, kcats, topic):
    if KCAT is None:
        pytest.fail("neither kcat nor kafkacat is on PATH; `make kcat` installs it")
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    kcats += [KcatMember(bootstrap, topic, topic) for _ in range(2)]
    first, second = kcats

    def split():
        return (len(first.assignment) == len(second.assignment) == PARTITIONS // 2
                and first.assignment | second.assignment == set(range(PARTITIONS)))
    wait_for(split, "two kcats to hold 3 partitions each", kcats)
    produced = produce(bootstrap, topic, PARTITIONS, 60)
    wait_for(lambda: len(first.records) + len(second.records) >= len(produced), "kcat to print every record", kcats)
    assert sorted(first.records + second.records) == sorted((r.partition, r.offset) for r in produced)
    assert {p for p, _ in first.records} <= first.assignment and {p for p, _ in second.records} <= second.assignment

    first.stop()
    wait_for(lambda: second.assignment == set(range(PARTITIONS)), "the other kcat to take every partition", kcats)
    more = produce(bootstrap, topic, PARTITIONS, 60, first=60)
    wait_for(lambda: len(second.records) >= 30 + len(more), "the remaining kcat to print the new records", kcats)
    assert sorted(second.records[30:]) == sorted((r.partition, r.offset) for r in more)
