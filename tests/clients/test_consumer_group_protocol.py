"""confluent-kafka consumers with `group.protocol=consumer` (KIP-848) against the broker.

The broker assigns; members reconcile by heartbeat. Members that a test may
SIGKILL run as subprocesses of this very file (`python
test_consumer_group_protocol.py CONFIG_JSON`): each reports its rebalance
callbacks, stamped with the machine's monotonic clock, what it consumed and
what it committed, one JSON object a line. With this protocol the callbacks
are incremental (on_assign names only partitions added, on_revoke only those
taken away), so the stamped callbacks show who owned what when: a partition
is never owned by two members at once, and a member keeps every partition
that stays with it through a join, a leave and a crash.

The brokers here heartbeat members every 200 ms and expire them after 2 s of
silence (the group.consumer.* minimums lowered for that), so a rebalance
takes a few heartbeats, not Kafka's default 5 s each.
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import OffsetCommitRequest as OffsetCommitV8
from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition as CommitPartitionV8
from kio.schema.offset_commit.v8.request import OffsetCommitRequestTopic as CommitTopicV8
from kio.static.primitive import i32Timedelta

from logstore.broker.admin_client import AdminClient as WireClient

TIMEOUT = 30.0   # s: a bound on any one wait; the tests finish far below it
FAST = ("group.consumer.min.heartbeat.interval.ms=100", "group.consumer.heartbeat.interval.ms=200",
        "group.consumer.min.session.timeout.ms=1000", "group.consumer.session.timeout.ms=2000")
CHANGED = threading.Condition()   # notified whenever a member reports anything


def consumer_settings(bootstrap: str, group: str, **extra) -> dict:
    """A KIP-848 consumer that commits by hand."""
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, **extra}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})   # kept: the futures die with their client
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(TIMEOUT)


def produce(bootstrap: str, topic: str, partitions: int, count: int, first: int = 0) -> dict[int, int]:
    """`count` records spread over the partitions; the end offset of each partition afterwards."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ends: dict[int, int] = {}

    def delivered(err, msg):
        assert err is None, err
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)
    for i in range(first, first + count):
        producer.produce(topic, key=b"k%d" % i, partition=i % partitions, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return ends


def wait_for(condition, what: str, timeout: float = TIMEOUT, describe=lambda: "") -> None:
    """Wait (under CHANGED) until `condition()` holds."""
    deadline = time.monotonic() + timeout
    with CHANGED:
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"not within {timeout} s: {what}\n{describe()}")
            CHANGED.wait(remaining)


# -- a member in a subprocess ---------------------------------------------------------------------------------

@dataclass(eq=False)
class Member:
    """A member subprocess and what it reported: callbacks (stamped), consumed positions, commits."""

    name: str
    log_dir: Path
    proc: subprocess.Popen | None = None
    owned: set[int] = field(default_factory=set)
    callbacks: list[tuple[int, str, tuple[int, ...]]] = field(default_factory=list)  # (ns, kind, partitions)
    consumed: dict[int, int] = field(default_factory=dict)   # partition -> next offset to read
    committed: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    exited: bool = False
    killed_at: int | None = None   # monotonic ns: a killed member owns nothing from then on

    def start(self, bootstrap: str, group: str, topic: str) -> Member:
        config = json.dumps({"bootstrap": bootstrap, "group": group, "topic": topic})
        with open(self.log_dir / f"{self.name}.stderr", "ab") as err:
            self.proc = subprocess.Popen([sys.executable, __file__, config], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            with CHANGED:
                kind = event["ev"]
                if kind in ("assign", "revoke", "lost") and event["partitions"]:
                    partitions = tuple(event["partitions"])
                    self.callbacks.append((event["at"], kind, partitions))
                    if kind == "assign":
                        assert not self.owned & set(partitions), f"{self.name} assigned {partitions} it owns"
                        self.owned |= set(partitions)
                    else:
                        self.owned -= set(partitions)
                elif kind == "consumed":
                    self.consumed.update({int(p): o for p, o in event["positions"].items()})
                elif kind == "committed":
                    self.committed.update({int(p): o for p, o in event["offsets"].items()})
                elif kind == "error":
                    self.errors.append(event["error"])
                CHANGED.notify_all()
        with CHANGED:
            self.exited = True
            CHANGED.notify_all()

    def close(self) -> None:
        """Close the consumer (it leaves the group with epoch -1) and wait for a clean exit."""
        self.proc.stdin.write(b"close\n")
        self.proc.stdin.flush()
        assert self.proc.wait(TIMEOUT) == 0, self.stderr()
        wait_for(lambda: self.exited, f"{self.name}'s reports to end")

    def kill(self) -> None:
        """SIGKILL: no leave, nothing runs; the broker notices by the session timeout."""
        self.proc.kill()
        self.proc.wait(TIMEOUT)
        self.killed_at = time.monotonic_ns()

    def stderr(self) -> str:
        return (self.log_dir / f"{self.name}.stderr").read_text(errors="replace")[-2000:]

    def describe(self) -> str:
        return (f"{self.name}: owns {sorted(self.owned)}, callbacks {self.callbacks}, consumed {self.consumed}, "
                f"committed {self.committed}, errors {self.errors}")


@pytest.fixture
def members(tmp_path):
    started: list[Member] = []

    def start(bootstrap: str, group: str, topic: str) -> Member:
        member = Member(f"m{len(started)}", tmp_path).start(bootstrap, group, topic)
        started.append(member)
        return member
    yield start
    for m in started:
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait(TIMEOUT)


def ownership_never_overlaps(members: list[Member]) -> None:
    """From the stamped callbacks: no partition was owned by two members at any instant."""
    spans: dict[int, list[tuple[int, int, str]]] = {}
    now = time.monotonic_ns()
    for m in members:
        since: dict[int, int] = {}
        for at, kind, partitions in m.callbacks:
            for p in partitions:
                if kind == "assign":
                    since[p] = at
                else:
                    spans.setdefault(p, []).append((since.pop(p), at, m.name))
        for p, start in since.items():
            spans.setdefault(p, []).append((start, m.killed_at or now, m.name))
    for p, owners in spans.items():
        owners.sort()
        for (_, end, first), (start, _, second) in zip(owners, owners[1:]):
            assert end <= start, f"partition {p} owned by {first} and {second} at once: {owners}"


def shares(members: list[Member]) -> list[int]:
    return sorted(len(m.owned) for m in members)


def test_partitions_move_incrementally_on_join_leave_and_crash(start_broker, members):
    broker = start_broker(*FAST)
    topic, group, partitions = "cgp-moves", "cgp-moves-group", 6
    create_topic(broker.bootstrap, topic, partitions)
    ends = produce(broker.bootstrap, topic, partitions, 60)
    everyone: list[Member] = []

    def describe():
        return "\n".join(m.describe() for m in everyone)

    first = members(broker.bootstrap, group, topic)
    everyone.append(first)
    wait_for(lambda: first.owned == set(range(partitions)) and first.committed == ends,
             "the first member to own and consume every partition", describe=describe)

    # A member joins: the first gives up half, revoking exactly those; the rest never leave it.
    second = members(broker.bootstrap, group, topic)
    everyone.append(second)
    wait_for(lambda: shares([first, second]) == [3, 3] and first.owned | second.owned == set(range(partitions)),
             "two members to hold three partitions each", describe=describe)
    kept = set(first.owned)
    assert [(kind, ps) for _, kind, ps in first.callbacks] == [
        ("assign", tuple(range(partitions))), ("revoke", tuple(sorted(second.owned)))], describe()
    third = members(broker.bootstrap, group, topic)
    everyone.append(third)
    wait_for(lambda: shares(everyone) == [2, 2, 2], "three members to hold two each", describe=describe)
    assert first.owned <= kept, "a member only ever loses partitions while others join"

    # A member leaves: its two partitions go to the others, who revoke nothing for it.
    callbacks_before = {m.name: len(m.callbacks) for m in everyone}
    third.close()
    wait_for(lambda: shares([first, second]) == [3, 3], "the two left to hold three each", describe=describe)
    for m in (first, second):
        moved = m.callbacks[callbacks_before[m.name]:]
        assert [kind for _, kind, _ in moved] == ["assign"], f"{m.name} did more than take partitions: {moved}"

    # A member crashes: after its session timeout the survivor takes its partitions, keeping its own.
    callbacks_before = len(first.callbacks)
    second.kill()
    wait_for(lambda: first.owned == set(range(partitions)), "the survivor to own every partition",
             timeout=10, describe=describe)
    assert [kind for _, kind, _ in first.callbacks[callbacks_before:]] == ["assign"], describe()
    ownership_never_overlaps(everyone)

    # More records: the survivor consumes and commits them on every partition.
    ends = produce(broker.bootstrap, topic, partitions, 30, first=60)
    wait_for(lambda: first.committed == ends, "the survivor to commit the new records", describe=describe)
    first.close()
    assert not [e for m in everyone for e in m.errors], describe()


def test_a_restarted_consumer_resumes_from_the_committed_offsets(start_broker):
    broker = start_broker()
    topic, group = "cgp-resume", "cgp-resume-group"
    create_topic(broker.bootstrap, topic, 3)
    ends = produce(broker.bootstrap, topic, 3, 30)
    consumer = Consumer(consumer_settings(broker.bootstrap, group))
    consumer.subscribe([topic])
    seen = consume(consumer, 30)
    assert len(seen) == 30
    done = consumer.commit(asynchronous=False)
    assert {tp.partition: tp.offset for tp in done} == ends and all(tp.error is None for tp in done)
    consumer.close()

    more = produce(broker.bootstrap, topic, 3, 15, first=30)
    again = Consumer(consumer_settings(broker.bootstrap, group))
    again.subscribe([topic])
    resumed = consume(again, 15)
    assert sorted(resumed) == sorted((p, o) for p in range(3) for o in range(ends[p], more[p]))
    again.close()


def consume(consumer, count: int) -> list[tuple[int, int]]:
    """Poll until `count` records came; their (partition, offset)."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + TIMEOUT
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {len(seen)} of {count} records within {TIMEOUT} s"
        for msg in consumer.consume(num_messages=100, timeout=0.2):
            assert msg.error() is None, msg.error()
            seen.append((msg.partition(), msg.offset()))
    return seen


def test_classic_and_consumer_groups_consume_side_by_side_and_admin_sees_both(start_broker):
    broker = start_broker(*FAST)
    topic = "cgp-both"
    create_topic(broker.bootstrap, topic, 4)
    ends = produce(broker.bootstrap, topic, 4, 40)
    modern = Consumer(consumer_settings(broker.bootstrap, "cgp-modern"))
    classic = Consumer({**consumer_settings(broker.bootstrap, "cgp-classic"), "group.protocol": "classic",
                        "partition.assignment.strategy": "cooperative-sticky"})
    for consumer in (modern, classic):
        consumer.subscribe([topic])
    got = {"modern": [], "classic": []}
    deadline = time.monotonic() + TIMEOUT
    while len(got["modern"]) < 40 or len(got["classic"]) < 40:
        assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
        for name, consumer in (("modern", modern), ("classic", classic)):
            got[name] += [m for m in consumer.consume(100, 0.05) if m.error() is None]
    for consumer in (modern, classic):
        done = consumer.commit(asynchronous=False)
        assert {tp.partition: tp.offset for tp in done} == ends

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(TIMEOUT).valid}
    assert (listed["cgp-modern"].type, listed["cgp-classic"].type) == (ConsumerGroupType.CONSUMER,
                                                                       ConsumerGroupType.CLASSIC)
    only = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(TIMEOUT).valid
    assert [g.group_id for g in only] == ["cgp-modern"]
    described = {g: f.result(TIMEOUT) for g, f in admin.describe_consumer_groups(["cgp-modern", "cgp-classic"]).items()}
    new, old = described["cgp-modern"], described["cgp-classic"]
    assert (new.type, new.state, new.partition_assignor) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE,
                                                             "uniform")
    assert sorted(tp.partition for tp in new.members[0].assignment.topic_partitions) == [0, 1, 2, 3]
    assert (old.type, old.state, old.partition_assignor) == (ConsumerGroupType.CLASSIC, ConsumerGroupState.STABLE,
                                                             "cooperative-sticky")
    for group in ("cgp-modern", "cgp-classic"):
        request = admin.list_consumer_group_offsets([_group_partitions(group, topic, 4)])
        offsets = request[group].result(TIMEOUT).topic_partitions
        assert {tp.partition: tp.offset for tp in offsets} == ends

    # Deleting a group with members is refused for either kind; once they leave, both go.
    refused = admin.delete_consumer_groups(["cgp-modern", "cgp-classic"])
    for future in refused.values():
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            future.result(TIMEOUT)
    modern.close()
    classic.close()
    for future in admin.delete_consumer_groups(["cgp-modern", "cgp-classic"]).values():
        future.result(TIMEOUT)
    assert admin.list_consumer_groups().result(TIMEOUT).valid == []


def _group_partitions(group: str, topic: str, partitions: int):
    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])


def test_wire_errors_of_the_heartbeat_and_of_commits_as_kafka_answers_them(start_broker):
    broker = start_broker()
    create_topic(broker.bootstrap, "cgp-wire", 2)
    with WireClient(broker.bootstrap) as wire:
        def beat(**fields):
            values = dict(group_id="cgp-wire-group", member_id=str(uuid.uuid4()), member_epoch=0,
                          rebalance_timeout=i32Timedelta.parse(_ms(30_000)), subscribed_topic_names=("cgp-wire",),
                          topic_partitions=())
            return wire.request(ConsumerGroupHeartbeatRequest(**{**values, **fields}))

        assert beat(member_id="").error_code == ErrorCode.invalid_request   # v1: the client makes the id
        assert beat(server_assignor="sticky").error_code == ErrorCode.unsupported_assignor
        assert beat(topic_partitions=None).error_code == ErrorCode.invalid_request
        joined = beat()
        assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
        assert sorted(joined.assignment.topic_partitions[0].partitions) == [0, 1]

        # The assignment names the topic by id; Metadata answers that id, and answers when asked by it.
        def metadata(*topics):
            return wire.request(MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False)).topics
        [by_name] = metadata(MetadataRequestTopic(topic_id=None, name="cgp-wire"))
        assert by_name.topic_id == joined.assignment.topic_partitions[0].topic_id
        stranger = uuid.uuid4()
        found = {t.topic_id: t for t in metadata(MetadataRequestTopic(topic_id=by_name.topic_id, name=None),
                                                 MetadataRequestTopic(topic_id=stranger, name=None))}
        assert (found[by_name.topic_id].name, len(found[by_name.topic_id].partitions)) == ("cgp-wire", 2)
        assert (found[stranger].error_code, found[stranger].name) == (ErrorCode.unknown_topic_id, None)
        assert beat(member_id=joined.member_id, member_epoch=5, topic_partitions=None).error_code == \
            ErrorCode.fenced_member_epoch
        assert beat(member_id="stranger", member_epoch=1, topic_partitions=None).error_code == \
            ErrorCode.unknown_member_id

        # A KIP-848 member commits with its epoch, and with OffsetCommit v9 (librdkafka's) or above.
        def commit_v8(epoch):
            return wire.request(OffsetCommitV8(
                group_id="cgp-wire-group", generation_id_or_member_epoch=epoch, member_id=joined.member_id,
                group_instance_id=None, topics=(CommitTopicV8(name="cgp-wire", partitions=(
                    CommitPartitionV8(partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                      committed_metadata=""),)),))).topics[0].partitions[0].error_code
        assert commit_v8(1) == ErrorCode.unsupported_version

        described = wire.request(ConsumerGroupDescribeRequest(group_ids=("cgp-wire-group", "nobody"),
                                                              include_authorized_operations=False)).groups
        assert (described[0].group_state, described[0].group_epoch, described[0].assignment_epoch) == (
            "Stable", 1, 1)
        assert described[1].error_code == ErrorCode.group_id_not_found
        left = beat(member_id=joined.member_id, member_epoch=-1, topic_partitions=None)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def test_a_broker_restart_keeps_the_group_its_epochs_and_offsets(start_broker):
    broker = start_broker(*FAST)
    topic, group = "cgp-restart", "cgp-restart-group"
    create_topic(broker.bootstrap, topic, 3)
    ends = produce(broker.bootstrap, topic, 3, 30)
    callbacks: list[tuple[str, list[int]]] = []
    consumer = Consumer(consumer_settings(broker.bootstrap, group))
    def record(kind):
        return lambda c, ps: ps and callbacks.append((kind, [p.partition for p in ps]))
    consumer.subscribe([topic], on_assign=record("assign"), on_revoke=record("revoke"))
    assert len(consume(consumer, 30)) == 30
    assert {tp.partition: tp.offset for tp in consumer.commit(asynchronous=False)} == ends
    before = _describe(broker, group)

    broker.kill()
    broker.start()
    after = _describe(broker, group)
    assert (after.group_epoch, after.assignment_epoch, after.members[0].member_id,
            after.members[0].member_epoch) == (before.group_epoch, before.assignment_epoch,
                                               before.members[0].member_id, before.members[0].member_epoch)
    # The member heartbeats on in its epoch: no rebalance, and it reads what comes next.
    more = produce(broker.bootstrap, topic, 3, 9, first=30)
    assert sorted(consume(consumer, 9)) == sorted((p, o) for p in range(3) for o in range(ends[p], more[p]))
    assert callbacks == [("assign", [0, 1, 2])]
    consumer.close()
    fresh = Consumer(consumer_settings(broker.bootstrap, group))
    committed = fresh.committed([TopicPartition(topic, p) for p in range(3)], timeout=TIMEOUT)
    assert {tp.partition: tp.offset for tp in committed} == ends
    fresh.close()


def test_a_transactional_copier_commits_a_consumer_group_members_offsets_in_its_transaction(start_broker):
    broker = start_broker()
    source, sink, group = "cgp-eos-in", "cgp-eos-out", "cgp-eos-group"
    create_topic(broker.bootstrap, source, 2)
    create_topic(broker.bootstrap, sink, 1)
    ends = produce(broker.bootstrap, source, 2, 20)
    consumer = Consumer(consumer_settings(broker.bootstrap, group, **{"isolation.level": "read_committed"}))
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cgp-eos-copier"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    copied = 0
    deadline = time.monotonic() + TIMEOUT
    while copied < 20:
        assert time.monotonic() < deadline, f"copied {copied} of 20"
        for msg in consumer.consume(100, 0.2):
            assert msg.error() is None, msg.error()
            producer.produce(sink, key=msg.key(), value=b"copy")
            copied += 1
    # The consumer's group metadata names its member id and epoch: TxnOffsetCommit is checked against them.
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                                         TIMEOUT)
    producer.commit_transaction(TIMEOUT)
    committed = consumer.committed([TopicPartition(source, p) for p in range(2)], timeout=TIMEOUT)
    assert {tp.partition: tp.offset for tp in committed} == ends
    consumer.close()


def _describe(broker, group: str):
    with WireClient(broker.bootstrap) as wire:
        described = wire.request(ConsumerGroupDescribeRequest(group_ids=(group,),
                                                              include_authorized_operations=False)).groups[0]
    assert described.error_code == ErrorCode.none and described.group_state == "Stable", described
    return described


# -- the member process ----------------------------------------------------------------------------------------

def _member_main(config: dict) -> None:
    """Consume and commit what was consumed after every poll, report callbacks; stop at "close" on stdin."""
    out = threading.Lock()

    def emit(**event):
        with out:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()

    closing = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), closing.set()), daemon=True).start()
    positions: dict[int, int] = {}
    consumer = Consumer(consumer_settings(config["bootstrap"], config["group"],
                                          error_cb=lambda err: emit(ev="error", error=str(err))))

    def commit(offsets: dict[int, int]) -> None:
        if offsets:
            done = consumer.commit(offsets=[TopicPartition(config["topic"], p, o) for p, o in offsets.items()],
                                   asynchronous=False)
            failed = [str(tp.error) for tp in done if tp.error is not None]
            if failed:
                emit(ev="error", error=f"commit failed: {failed}")
            else:
                emit(ev="committed", offsets=offsets)

    def on_revoke(c, partitions):
        ps = [tp.partition for tp in partitions]
        commit({p: positions.pop(p) for p in ps if p in positions})
        emit(ev="revoke", partitions=sorted(ps), at=time.monotonic_ns())

    def on_lost(c, partitions):
        for tp in partitions:
            positions.pop(tp.partition, None)
        emit(ev="lost", partitions=sorted(tp.partition for tp in partitions), at=time.monotonic_ns())

    consumer.subscribe([config["topic"]],
                       on_assign=lambda c, ps: emit(ev="assign", partitions=sorted(tp.partition for tp in ps),
                                                    at=time.monotonic_ns()),
                       on_revoke=on_revoke, on_lost=on_lost)
    while not closing.is_set():
        batch = [m for m in consumer.consume(num_messages=500, timeout=0.05) if m.error() is None]
        if batch:
            for m in batch:
                positions[m.partition()] = m.offset() + 1
            emit(ev="consumed", positions=positions)
            commit(dict(positions))
    consumer.close()


if __name__ == "__main__":
    _member_main(json.loads(sys.argv[1]))
