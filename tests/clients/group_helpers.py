"""Consumer-group members of confluent-kafka, kafka-python and aiokafka behind one small synchronous
interface, each run as a subprocess of its own (group_member.py) so that a test can SIGKILL it.

A member subscribes to one topic, polls in a loop and reports on its stdout, one JSON object a line:
its assignment whenever that changes (with how many assign and revoke callbacks it has had), every
record it consumed, every offset commit that succeeded or failed, client errors, and the answers to
commands. Unless told to hold them, it commits the positions of what it consumed (synchronously)
after every poll that brought records, again a heartbeat interval after a commit the broker refused
(during a rebalance), and in its revoke callback before it gives partitions up, as an at-least-once
application does. The test side (`MemberProcess`) keeps the latest of those reports;
`wait_for` waits until a condition over the members holds, so tests await events, never sleep.

Each adapter calls only its client's public API. aiokafka's coroutines run on an event loop in a thread
of the adapter's own, so its heartbeats and fetches go on between calls, as in an application.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import aiokafka
import aiokafka.errors
import kafka
import kafka.errors
from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRange
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as AioRoundRobin
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor as AioSticky
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTP
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from txn_helpers import _LoopThread

TIMEOUT = 30.0   # s: a bound on any one wait; the tests finish far below it
POLL = 0.05      # s: how long one poll of a member waits for records before it looks at its commands
CLIENTS = ("confluent", "kafka-python", "aiokafka")
ASSIGNORS = {  # each client's assignors, by the name they put in JoinGroup (the same name means the same plan)
    "confluent": ("range", "roundrobin", "cooperative-sticky"),
    "kafka-python": ("range", "roundrobin", "sticky", "cooperative-sticky"),
    "aiokafka": ("range", "roundrobin", "sticky"),
}
MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")


class Record(NamedTuple):
    """One record as a member consumed it."""

    partition: int
    offset: int
    key: str


@dataclass(frozen=True)
class MemberConfig:
    """How a member joins: its client, group, topic, assignor and timeouts (ms)."""

    client: str
    bootstrap: str
    group: str
    topic: str
    assignor: str = "range"
    session_timeout_ms: int = 1_000
    heartbeat_interval_ms: int = 100
    rebalance_timeout_ms: int = 10_000   # max.poll.interval.ms: how long a rebalance waits for a member
    instance_id: str | None = None       # group.instance.id: a static member (KIP-345)
    commit_consumed: bool = True         # False: it commits only when told to (as if it held its commits)


def produce(bootstrap: str, topic: str, partitions: int, count: int, first: int = 0) -> list[Record]:
    """Write `count` keyed records, key `k<i>` to partition i % partitions; what the broker acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    delivered: list = []
    for i in range(first, first + count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions,
                         on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(TIMEOUT) == 0, "records still undelivered after flush"
    assert all(err is None for err, _ in delivered), [err for err, _ in delivered if err is not None]
    return [Record(m.partition(), m.offset(), m.key().decode()) for _, m in delivered]


def end_offsets(records: list[Record]) -> dict[int, int]:
    """The offset after the last of `records` in each partition."""
    ends: dict[int, int] = {}
    for r in records:
        ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
    return ends


# -- the test's side: a member subprocess and what it reported ------------------------------------------------

CHANGED = threading.Condition()   # notified whenever any member reports anything


@dataclass(eq=False)
class MemberProcess:
    """One member subprocess and the latest of what it reported (read under CHANGED)."""

    config: MemberConfig
    name: str
    log_dir: Path
    proc: subprocess.Popen | None = None
    assignment: frozenset[int] | None = None   # None until its first report
    assigns: int = 0                            # assign callbacks so far
    revokes: int = 0                            # revoke (and lost) callbacks so far
    records: list[Record] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)   # its latest successful commit per partition
    commit_failures: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)          # client errors: {"code", "fatal", "error"}
    _replies: dict[int, dict] = field(default_factory=dict)
    _next_id: int = 0
    exited: bool = False

    @property
    def stderr_path(self) -> Path:
        return self.log_dir / f"{self.name}.stderr"

    def start(self) -> MemberProcess:
        """Exec the member; it joins the group in the background."""
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(MEMBER_SCRIPT), json.dumps(asdict(self.config))],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        threading.Thread(target=self._read, name=f"reader-{self.name}", daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            with CHANGED:
                self._apply(event)
                CHANGED.notify_all()
        with CHANGED:
            self.exited = True
            CHANGED.notify_all()

    def _apply(self, event: dict) -> None:
        kind = event["ev"]
        if kind == "assignment":
            self.assignment = frozenset(event["partitions"])
            self.assigns, self.revokes = event["assigns"], event["revokes"]
        elif kind == "records":
            self.records.extend(Record(*r) for r in event["records"])
        elif kind == "committed":
            self.committed.update({int(p): o for p, o in event["offsets"].items()})
        elif kind == "commit_failed":
            self.commit_failures.append(event["error"])
        elif kind == "error":
            self.errors.append(event)
        elif kind == "reply":
            self._replies[event["id"]] = event
        else:
            raise AssertionError(f"{self.name}: unknown report {event}")

    def call(self, op: str, timeout: float = TIMEOUT, **args):
        """Send a command and wait for its answer (raises AssertionError with the member's error)."""
        with CHANGED:
            self._next_id += 1
            request_id = self._next_id
        self.proc.stdin.write(json.dumps({"id": request_id, "op": op, **args}).encode() + b"\n")
        self.proc.stdin.flush()
        wait_for(lambda: request_id in self._replies or self.exited, f"{self.name} to answer {op}", [self],
                 timeout)
        reply = self._replies.get(request_id)
        assert reply is not None, f"{self.name} exited before answering {op}:\n{self.stderr_tail()}"
        assert reply.get("error") is None, f"{self.name}: {op} failed: {reply['error']}"
        return reply.get("value")

    def commit(self, offsets: dict[int, int]) -> None:
        """A synchronous commit of exactly these offsets (partition -> next offset to read)."""
        self.call("commit", offsets={str(p): o for p, o in offsets.items()})

    def fetch_committed(self, partitions) -> dict[int, int | None]:
        """The group's committed offsets as the member's client fetches them from the broker."""
        found = self.call("committed", partitions=sorted(partitions))
        return {int(p): o for p, o in found.items()}

    def hold_commits(self) -> None:
        """From now on the member commits nothing (not even when partitions are revoked)."""
        self.call("hold")

    def close(self) -> None:
        """Close the client (it leaves the group) and wait for the process to exit 0."""
        self.call("close")
        status = self.proc.wait(TIMEOUT)
        assert status == 0, f"{self.name} exited {status}:\n{self.stderr_tail()}"
        self.proc.stdin.close()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit, nothing gets to run."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(TIMEOUT) == -signal.SIGKILL
        self.proc.stdin.close()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, chars: int = 3000) -> str:
        return self.stderr_path.read_text(errors="replace")[-chars:] if self.stderr_path.exists() else ""

    def describe(self) -> str:
        """What it reported last, for a failure message (with the end of its stderr)."""
        tail = self.stderr_tail(1500)
        return (f"{self.name}({self.config.client}): assignment {sorted(self.assignment or ())}, assigns "
                f"{self.assigns}, revokes {self.revokes}, {len(self.records)} records, committed "
                f"{dict(sorted(self.committed.items()))}, commit failures {self.commit_failures[-3:]}, "
                f"errors {self.errors[-3:]}" + (f"\n  stderr: ...{tail}" if tail else ""))


def wait_for(condition: Callable[[], bool], what: str, members: list, timeout: float = TIMEOUT) -> None:
    """Wait (under CHANGED) until `condition()` holds; fail after `timeout` s with each member's describe()."""
    deadline = time.monotonic() + timeout
    with CHANGED:
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                state = "\n".join(m.describe() for m in members)
                raise AssertionError(f"not within {timeout} s: {what}\n{state}")
            CHANGED.wait(remaining)


def wait_for_split(members: list[MemberProcess], partitions: int, timeout: float = TIMEOUT) -> list[set[int]]:
    """Wait until the members hold every partition between them, as evenly as can be; their assignments."""
    share, extra = divmod(partitions, len(members))
    sizes = sorted([share] * (len(members) - extra) + [share + 1] * extra)

    def balanced():
        held = [m.assignment or frozenset() for m in members]
        return sorted(map(len, held)) == sizes and frozenset().union(*held) == frozenset(range(partitions))
    wait_for(balanced, f"{len(members)} members to share {partitions} partitions as {sizes}", members, timeout)
    with CHANGED:
        return [set(m.assignment) for m in members]


class Members:
    """The member subprocesses a test started; all still running are killed at the end."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: list[MemberProcess] = []

    def start(self, config: MemberConfig, name: str | None = None) -> MemberProcess:
        """Start one member; its stderr goes to `<log_dir>/<name>.stderr`."""
        member = MemberProcess(config, name or f"m{len(self.started)}", self.log_dir)
        self.started.append(member)
        return member.start()

    def stop_all(self) -> None:
        """Kill whatever is left (a test that failed midway leaves members running)."""
        for m in self.started:
            if m.running:
                m.proc.kill()
                m.proc.wait(TIMEOUT)
            if not m.proc.stdin.closed:
                m.proc.stdin.close()


# -- the member's side: one client's consumer behind a common interface ---------------------------------------

class Listener:
    """What an adapter tells the member loop from its rebalance callbacks."""

    def consumed(self, records: list[Record]) -> None:
        """A poll brought these records (called before the poll returns them)."""
        raise NotImplementedError

    def revoking(self, partitions: list[int]) -> dict[int, int]:
        """Partitions are about to be revoked: the offsets to commit for them first (maybe none)."""
        raise NotImplementedError

    def lost(self, partitions: list[int]) -> None:
        """The member was dropped from the group: these partitions are gone, uncommitted or not."""
        raise NotImplementedError

    def rebalanced(self, kind: str, partitions: list[int]) -> None:
        """An assign, revoke or lost callback ran."""
        raise NotImplementedError

    def commit_done(self, offsets: dict[int, int], error: BaseException | None) -> None:
        raise NotImplementedError

    def client_error(self, code: str, fatal: bool, text: str) -> None:
        raise NotImplementedError


class GroupConsumer:
    """A subscribed consumer of one client: poll, assignment, commit, committed, close."""

    def __init__(self, config: MemberConfig, listener: Listener):
        self.config = config
        self.listener = listener

    def poll(self, timeout: float) -> list[Record]:
        raise NotImplementedError

    def assignment(self) -> list[int]:
        raise NotImplementedError

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit synchronously; raise the client's error if the broker refused."""
        raise NotImplementedError

    def committed(self, partitions: list[int]) -> dict[int, int | None]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ConfluentConsumer(GroupConsumer):
    def __init__(self, config, listener):
        super().__init__(config, listener)
        settings = {"bootstrap.servers": config.bootstrap, "group.id": config.group,
                    "partition.assignment.strategy": config.assignor,
                    "session.timeout.ms": config.session_timeout_ms,
                    "heartbeat.interval.ms": config.heartbeat_interval_ms,
                    "max.poll.interval.ms": config.rebalance_timeout_ms,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50,
                    "error_cb": self._report}
        if config.instance_id is not None:
            settings["group.instance.id"] = config.instance_id
        self._c = Consumer(settings)
        self._c.subscribe([config.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                          on_lost=self._on_lost)

    def _report(self, err):
        # A fatal error arrives as _FATAL, without the KafkaError's own fatal flag.
        self.listener.client_error(err.name(), err.fatal() or err.code() == KafkaError._FATAL, err.str())

    def _on_assign(self, consumer, partitions):
        self.listener.rebalanced("assign", [tp.partition for tp in partitions])

    def _on_revoke(self, consumer, partitions):
        offsets = self.listener.revoking([tp.partition for tp in partitions])
        if offsets:
            try:
                self.commit(offsets)
            except Exception as exc:  # noqa: BLE001 - reported; the rebalance goes on
                self.listener.commit_done(offsets, exc)
            else:
                self.listener.commit_done(offsets, None)
        self.listener.rebalanced("revoke", [tp.partition for tp in partitions])

    def _on_lost(self, consumer, partitions):
        self.listener.lost([tp.partition for tp in partitions])
        self.listener.rebalanced("lost", [tp.partition for tp in partitions])

    def poll(self, timeout):
        records = []
        for msg in self._c.consume(num_messages=500, timeout=timeout):
            if msg.error() is not None:
                self._report(msg.error())
            else:
                records.append(Record(msg.partition(), msg.offset(), msg.key().decode()))
        self.listener.consumed(records)
        return records

    def assignment(self):
        return sorted(tp.partition for tp in self._c.assignment())

    def commit(self, offsets):
        done = self._c.commit(offsets=[ConfluentTP(self.config.topic, p, o) for p, o in offsets.items()],
                              asynchronous=False)
        failed = [tp for tp in done if tp.error is not None]
        if failed:
            raise KafkaException(failed[0].error)

    def committed(self, partitions):
        found = self._c.committed([ConfluentTP(self.config.topic, p) for p in partitions], timeout=TIMEOUT)
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}

    def close(self):
        self._c.close()


class KafkaPythonConsumer(GroupConsumer):
    def __init__(self, config, listener):
        super().__init__(config, listener)
        assignors = {a.name: a for a in (RangePartitionAssignor, RoundRobinPartitionAssignor,
                                         StickyPartitionAssignor, CooperativeStickyAssignor)}
        self._c = kafka.KafkaConsumer(
            bootstrap_servers=config.bootstrap, group_id=config.group, group_instance_id=config.instance_id,
            partition_assignment_strategy=[assignors[config.assignor]],
            session_timeout_ms=config.session_timeout_ms, heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.rebalance_timeout_ms, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=50)
        adapter = self

        class _Listener(kafka.AsyncConsumerRebalanceListener):
            # Runs on kafka-python's IO thread, which a blocking commit() would deadlock: await the commit.
            async def on_partitions_revoked(self, revoked):
                offsets = listener.revoking([tp.partition for tp in revoked])
                if offsets:
                    try:
                        await adapter._c.commit_async(adapter._offsets(offsets))
                    except Exception as exc:  # noqa: BLE001 - reported; the rebalance goes on
                        listener.commit_done(offsets, exc)
                    else:
                        listener.commit_done(offsets, None)
                listener.rebalanced("revoke", [tp.partition for tp in revoked])

            async def on_partitions_assigned(self, assigned):
                listener.rebalanced("assign", [tp.partition for tp in assigned])

            async def on_partitions_lost(self, lost):
                listener.lost([tp.partition for tp in lost])
                listener.rebalanced("lost", [tp.partition for tp in lost])
        self._c.subscribe([config.topic], listener=_Listener())
        # kafka-python 3.0.12 joins before its metadata covers the subscription; its leader then rejoins
        # once the metadata comes, and that join can stall for good (need_rejoin() turns False when the
        # leader's new plan matches the metadata, so a JoinGroup still in flight when poll() times out
        # is never finished, heartbeats stay off, the session expires). Fetching the metadata right after
        # subscribing, as topics() does, lets the first join plan with it.
        assert config.topic in self._c.topics(), f"no metadata for {config.topic}"

    def _offsets(self, offsets):
        return {kafka.TopicPartition(self.config.topic, p): kafka.OffsetAndMetadata(o, "", -1)
                for p, o in offsets.items()}

    def poll(self, timeout):
        try:
            found = self._c.poll(timeout_ms=int(timeout * 1000))
        except kafka.errors.KafkaError as exc:
            self.listener.client_error(type(exc).__name__, not getattr(exc, "retriable", False), str(exc))
            return []
        records = [Record(r.partition, r.offset, r.key.decode()) for batch in found.values() for r in batch]
        self.listener.consumed(records)
        return records

    def assignment(self):
        return sorted(tp.partition for tp in self._c.assignment())

    def commit(self, offsets):
        self._c.commit(self._offsets(offsets))

    def committed(self, partitions):
        return {p: self._c.committed(kafka.TopicPartition(self.config.topic, p)) for p in partitions}

    def close(self):
        self._c.close()


class AiokafkaConsumer(GroupConsumer):
    def __init__(self, config, listener):
        super().__init__(config, listener)
        assignors = {a.name: a for a in (AioRange, AioRoundRobin, AioSticky)}
        self._loop = _LoopThread()
        adapter = self

        class _Listener(aiokafka.ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                offsets = listener.revoking([tp.partition for tp in revoked])
                if offsets:
                    try:
                        await adapter._c.commit(adapter._offsets(offsets))
                    except Exception as exc:  # noqa: BLE001 - reported; the rebalance goes on
                        listener.commit_done(offsets, exc)
                    else:
                        listener.commit_done(offsets, None)
                listener.rebalanced("revoke", [tp.partition for tp in revoked])

            async def on_partitions_assigned(self, assigned):
                listener.rebalanced("assign", [tp.partition for tp in assigned])

        async def make():
            c = aiokafka.AIOKafkaConsumer(
                bootstrap_servers=config.bootstrap, group_id=config.group, group_instance_id=config.instance_id,
                partition_assignment_strategy=(assignors[config.assignor],),
                session_timeout_ms=config.session_timeout_ms, heartbeat_interval_ms=config.heartbeat_interval_ms,
                max_poll_interval_ms=config.rebalance_timeout_ms, rebalance_timeout_ms=config.rebalance_timeout_ms,
                enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=50)
            c.subscribe([config.topic], listener=_Listener())
            await c.start()
            return c
        self._c = self._loop.run(make())

    def _offsets(self, offsets):
        return {aiokafka.TopicPartition(self.config.topic, p): o for p, o in offsets.items()}

    def poll(self, timeout):
        async def fetch():
            found = await self._c.getmany(timeout_ms=int(timeout * 1000))
            # Told on the loop, before a rebalance there can revoke (and commit) the partitions.
            records = [Record(r.partition, r.offset, r.key.decode()) for batch in found.values() for r in batch]
            self.listener.consumed(records)
            return records
        try:
            return self._loop.run(fetch())
        except aiokafka.errors.KafkaError as exc:
            self.listener.client_error(type(exc).__name__, not getattr(exc, "retriable", False), str(exc))
            return []

    def assignment(self):
        async def assigned():
            return sorted(tp.partition for tp in self._c.assignment())
        return self._loop.run(assigned())

    def commit(self, offsets):
        self._loop.run(self._c.commit(self._offsets(offsets)))

    def committed(self, partitions):
        return {p: self._loop.run(self._c.committed(aiokafka.TopicPartition(self.config.topic, p)))
                for p in partitions}

    def close(self):
        try:
            self._loop.run(self._c.stop())
        finally:
            self._loop.close()


CONSUMERS = {"confluent": ConfluentConsumer, "kafka-python": KafkaPythonConsumer, "aiokafka": AiokafkaConsumer}


def group_consumer(config: MemberConfig, listener: Listener) -> GroupConsumer:
    """A subscribed consumer of `config.client` (one of CLIENTS)."""
    return CONSUMERS[config.client](config, listener)
