"""Group coordinator benchmarks: confluent-kafka consumer groups against a `logstore broker`, and the
coordinator's load of `__consumer_offsets` on start.

    .venv/bin/python -m pytest -q bench/test_broker_groups.py --benchmark-only \\
        --benchmark-json=.benchmarks/broker_groups.json
    .venv/bin/python bench/groups_broker_report.py .benchmarks/broker_groups.json

One broker for cases 1 and 2, as in bench/test_broker.py (a free loopback
port, a temporary directory, a clean stop with no traceback logged), with
group.initial.rebalance.delay.ms=0 so that a rebalance is not padded by
the 3 s Kafka waits for more members of a new group; otherwise its
defaults (offset commits are answered after the group-commit fsync, as
acks=all produces are). Clients run in this process and share the
machine's CPUs with the broker; broker and client CPU and the rest of the
machine's busy CPU ("other") are read around each timed round as in
bench/test_broker_transactions.py.

Cases (issue 7's performance section):

1. rebalance: a topic of 100 partitions, confluent-kafka Consumers with
   partition.assignment.strategy=range (eager: a rebalance revokes every
   partition, then assigns), enable.auto.commit=false, each polled by a
   thread of its own so that its rebalance callbacks run as soon as
   librdkafka queues them. "join": 10 consumers of a fresh group (created,
   connected and holding the topic's metadata untimed), timed from the
   first subscribe() to the moment every one of them holds its share: all
   10 hold partitions, no partition twice, all 100 held. "leave": a
   group of 10 that holds its shares (set up untimed); timed from close()
   of one member (LeaveGroup) to the other 9 holding all 100 between them.
   The peer is the client's own lower bound, the same consumer alone in a
   fresh group: subscribe() to holding all 100 partitions (one JoinGroup
   with MEMBER_ID_REQUIRED, one JoinGroup, one SyncGroup; a rebalance of
   10 takes at least those). Each ours round is paired with a peer round
   run just before it (in its setup), and the peer is also benchmarked on
   its own. Run with librdkafka's default heartbeat.interval.ms=3000 and
   with 100 ms: members of a stable group hear of a rebalance only in a
   heartbeat response, so with the default the leave case is bounded by
   the heartbeat interval (a client constant Kafka's broker shares), and
   the 100 ms runs show the broker's own share. Recorded: assignments
   delivered per round (10, resp. 9, when the group got there in one
   generation).
2. offset-commit: synchronous commits, Consumer.commit(offsets=[one
   partition], asynchronous=False), from 1 consumer and from 20 consumers
   committing concurrently (threads of this process, one Consumer each:
   confluent-kafka releases the GIL in commit(), where a committer spends
   its time). The committers are members of one group subscribed to a topic
   of 20 partitions (range: each holds at least one, set up untimed), each
   committing an increasing offset of a partition it holds, so every
   commit carries its member id and generation and all land in the group's
   one `__consumer_offsets` partition. The peer, side by side in the same
   run: as many producers (acks=all, linger.ms=0), each sending one 100 B
   record to one partition of a topic and flush()ing before the next, so
   on the broker both sides are one fsynced append per request to one
   partition, shared by whichever requests wait for the same fsync. Each
   ours round is paired with a peer round run just before it. Recorded:
   each request's latency (p50/p99/max), broker and client CPU per
   request. Checked: every commit answered without error and the offsets
   read back (committed()) are the last ones committed; every record
   delivered and the peer topic's end offset is their count.
3. coordinator-load: `__consumer_offsets` holding 10,000 groups x 100
   partitions of committed offsets (1,000,000), built untimed in-process by
   the GroupCoordinator itself over a LogManager (fsync off): per group
   one member joins (JoinGroup, range, its subscription), syncs its
   assignment of the 100 partitions (one GroupMetadata record) and commits
   all 100 offsets in one OffsetCommit (one batch of 100 records). Two
   directories, one after the other: "stable", where every member is
   still in its group, as consumers running while their broker restarts
   leave it (the load then restores each member and starts its session),
   and "empty", where each member then left (LeaveGroup: one more
   GroupMetadata record, of the Empty group), as after consumers that
   stopped first. Timed, "ours": GroupCoordinator.load() in this process over a
   LogManager opened untimed on that directory (the previous round's
   coordinator collected before, untimed), and a `logstore broker`'s start
   on that directory, from exec to its "listening" line (paired with a start
   on an empty directory run just before, the interpreter's and imports'
   share); the broker listens while it loads its groups, as Kafka's does, so
   the time from exec to ListGroups listing every group is recorded too
   (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS until then). Peers,
   over the same segment files: raw file reads and each batch's CRC32C
   checked (the crc32c package; the I/O and checksum floor of any load);
   decoding every record with aiokafka's Cython reader;
   with kafka-python's pure-Python reader. Every run reads a page-cached
   directory (it was just written). Checked: load() finds the 10,000
   groups, each Stable with its one member and exactly its 100 offsets;
   the started broker lists 10,000 groups; the peers count the same
   records. One extra load() under cProfile, untimed: its top functions go
   into the JSON for the report.

Speed is reported, not asserted; correctness is asserted.
"""
from __future__ import annotations

import cProfile
import gc
import itertools
import re
import shutil
import struct
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from crc32c import crc32c

# bench/test_broker.py's clocks, topic helpers and admin fixture, bench/test_broker_transactions.py's
# "other processes" meter: this suite measures the way those do.
import test_broker as base
from broker_process import BrokerProcess, free_port
from logstore.broker.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC, TransactionCoordinator, TxnConfig
from logstore.manager import LogManager
from profiles import profile_rows
from test_broker_transactions import _Others

BROKER_OVERRIDES = ("group.initial.rebalance.delay.ms=0",)
CLIENT = f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
WAIT_TIMEOUT = 60.0  # s: a rebalance or a group's formation that takes longer fails the benchmark
POLL_SECONDS = 0.1   # a poll thread's poll() timeout: how long stopping it may take, not a latency

REBALANCE_TOPIC = "rebalance-100"
REBALANCE_PARTITIONS = 100
REBALANCE_CONSUMERS = 10
ASSIGNOR = "range"
HEARTBEATS_MS = (3000, 100)  # librdkafka's default heartbeat.interval.ms, and a short one
REBALANCE_ROUNDS = 7

COMMIT_PARTITIONS = 20
# clients -> requests per client per round (a round is about 1 s here)
COMMIT_CASES = {1: 1500, 20: 100}
COMMIT_ROUNDS = 5
PEER_PRODUCER_CONFIG = {"acks": "all", "linger.ms": 0}
PEER_VALUE = b"v" * 100

LOAD_GROUPS = 10_000
LOAD_PARTITIONS = 100
LOAD_TOPICS = 100       # group g consumes all partitions of topic g mod LOAD_TOPICS
LOAD_STATES = ("empty", "stable")
LOAD_ROUNDS = 5
START_ROUNDS = 3
PEER_ROUNDS = {"read-crc": 7, "decode-aiokafka": 5, "decode-kafka-python": 3}
PROFILE_TOP = 20
SESSION_TIMEOUT_MS = 45_000     # librdkafka's session.timeout.ms default, for the built groups
REBALANCE_TIMEOUT_MS = 300_000  # librdkafka's max.poll.interval.ms default (its JoinGroup rebalance timeout)


# ---------------------------------------------------------------------------
# The broker (group.initial.rebalance.delay.ms=0), its admin client


@pytest.fixture(scope="module")
def broker():
    """A `logstore broker` with BROKER_OVERRIDES on a free loopback port; stopped cleanly at the end."""
    yield from base.running_broker("logstore-bench-groups-", BROKER_OVERRIDES)


admin = base.admin


def _tag(benchmark, op: str, case: str, side: str, **info) -> None:
    benchmark.group = f"{op}/{case}"
    benchmark.extra_info.update({"op": op, "case": case, "side": side, "client": CLIENT, **info})


def _milliseconds(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"p50": base.nearest_rank(ordered, 50) * 1e3, "p99": base.nearest_rank(ordered, 99) * 1e3,
            "max": ordered[-1] * 1e3, "count": len(ordered)}


def _timed(values: list, benchmark) -> list:
    """The entries of a per-call list that belong to the timed rounds (warmup calls come first)."""
    return values[len(values) - len(benchmark.stats.stats.data):]


# ---------------------------------------------------------------------------
# Consumers of one group, each polled by a thread of its own


class _Holdings:
    """The partitions each consumer of a group holds, as its rebalance callbacks report them."""

    def __init__(self):
        self.changed = threading.Condition()
        self.held: dict[int, frozenset[int]] = {}
        self.assignments = 0
        self.errors: list = []

    def callbacks(self, member: int) -> dict:
        """subscribe()'s on_assign and on_revoke for consumer `member`."""
        def on_assign(consumer, partitions):
            with self.changed:
                self.held[member] = frozenset(p.partition for p in partitions)
                self.assignments += 1
                self.changed.notify_all()

        def on_revoke(consumer, partitions):
            with self.changed:
                self.held[member] = frozenset()
                self.changed.notify_all()
        return {"on_assign": on_assign, "on_revoke": on_revoke}

    def wait_shares(self, members: range | list[int], partitions: int) -> dict[int, frozenset[int]]:
        """Wait until each of `members` holds a non-empty share, no partition twice, all held; the shares."""
        def shared():
            shares = [self.held.get(m, frozenset()) for m in members]
            return all(shares) and sum(map(len, shares)) == partitions \
                and len(frozenset().union(*shares)) == partitions
        with self.changed:
            if not self.changed.wait_for(shared, WAIT_TIMEOUT):
                raise AssertionError(f"no complete assignment within {WAIT_TIMEOUT} s: "
                                     f"{ {m: sorted(self.held.get(m, ())) for m in members} }")
            return {m: self.held[m] for m in members}


class _Group:
    """`size` consumers of one group (connected, holding the topic's metadata), each with a poll thread."""

    def __init__(self, broker, topic: str, group_id: str, size: int, heartbeat_ms: int | None = None):
        self.topic = topic
        self.holdings = _Holdings()
        config = {"bootstrap.servers": broker.bootstrap, "group.id": group_id, "enable.auto.commit": False,
                  "partition.assignment.strategy": ASSIGNOR}
        if heartbeat_ms is not None:
            config["heartbeat.interval.ms"] = heartbeat_ms
        self.consumers = [Consumer(config) for _ in range(size)]
        for consumer in self.consumers:
            consumer.list_topics(topic, timeout=base.ADMIN_TIMEOUT)
        self._stops: dict[int, threading.Event] = {}
        self._threads: dict[int, threading.Thread] = {}
        self.polling = threading.Event()
        self.closed: set[int] = set()

    def _poll(self, consumer: Consumer, stop: threading.Event) -> None:
        while not stop.is_set():
            # subscribe() holding the GIL while its consumer sits in poll() deadlocks librdkafka's
            # callbacks, so polling starts only once `polling` is set, after the subscribes.
            if not self.polling.wait(POLL_SECONDS):
                continue
            message = consumer.poll(POLL_SECONDS)
            if message is not None and message.error() is not None:
                self.holdings.errors.append(message.error())

    def start_polling(self) -> None:
        """A poll thread for every open consumer that has none; they poll once `polling` is set."""
        for member, consumer in enumerate(self.consumers):
            if member not in self._threads and member not in self.closed:
                stop = self._stops[member] = threading.Event()
                thread = self._threads[member] = threading.Thread(target=self._poll, args=(consumer, stop),
                                                                  name=f"bench-poll-{member}", daemon=True)
                thread.start()

    def stop_polling(self, members=None) -> None:
        """End the poll threads of `members` (default all): a consumer may then be used from this thread."""
        for member in list(self._threads) if members is None else members:
            self._stops.pop(member).set()
            self._threads.pop(member).join()

    def subscribe(self) -> None:
        """Every consumer subscribes to the topic (librdkafka then joins in its own threads), then polls."""
        for member, consumer in enumerate(self.consumers):
            consumer.subscribe([self.topic], **self.holdings.callbacks(member))
        self.polling.set()

    def form(self, partitions: int) -> dict[int, frozenset[int]]:
        """Poll, subscribe every consumer, and wait for each to hold its share; the shares."""
        self.start_polling()
        self.subscribe()
        return self.holdings.wait_shares(range(len(self.consumers)), partitions)

    def close_member(self, member: int) -> None:
        """close() one consumer (it leaves the group); its poll thread must have stopped."""
        self.consumers[member].close()
        self.closed.add(member)

    def close(self) -> None:
        """Stop polling and close every consumer still open; no consumer may have reported an error."""
        self.stop_polling()
        for member, consumer in enumerate(self.consumers):
            if member not in self.closed:
                consumer.close()
                self.closed.add(member)
        assert not self.holdings.errors, self.holdings.errors[:5]


# ---------------------------------------------------------------------------
# 1. Rebalance time


@pytest.fixture(scope="module")
def rebalance_topic(admin):
    """The topic of REBALANCE_PARTITIONS partitions every rebalance case subscribes to."""
    base.create_topic(admin, REBALANCE_TOPIC, REBALANCE_PARTITIONS)
    return REBALANCE_TOPIC


class _Rebalances:
    """Rounds of one rebalance case: each round a fresh group, made in setup and closed in teardown."""

    def __init__(self, broker, topic: str, case: str, side: str, heartbeat_ms: int):
        self.broker, self.topic, self.case, self.side, self.heartbeat_ms = broker, topic, case, side, heartbeat_ms
        self.numbers = itertools.count()
        self.paired_peer_seconds: list[float] = []
        self.assignments: list[int] = []
        self.shares: list[dict[int, frozenset[int]]] = []

    def _group(self, size: int) -> _Group:
        group_id = f"rebalance-{self.case}-{self.side}-hb{self.heartbeat_ms}-{next(self.numbers)}"
        return _Group(self.broker, self.topic, group_id, size, self.heartbeat_ms)

    def peer_round(self) -> float:
        """The lower bound, untimed by the benchmark: one consumer of a fresh group gets every partition."""
        group = self._group(1)
        try:
            group.start_polling()
            started = time.perf_counter()
            group.subscribe()
            group.holdings.wait_shares([0], REBALANCE_PARTITIONS)
            return time.perf_counter() - started
        finally:
            group.close()

    def setup(self):
        """A fresh group for the next round (and, for ours, the paired peer round before it)."""
        if self.side == "ours":
            self.paired_peer_seconds.append(self.peer_round())
        size = 1 if self.side == "peer" else REBALANCE_CONSUMERS
        group = self._group(size)
        if self.case == "leave" and self.side == "ours":
            group.form(REBALANCE_PARTITIONS)
            group.stop_polling([0])
            group.holdings.assignments = 0
        else:
            group.start_polling()
        return (group,), {}

    def run(self, group: _Group) -> None:
        """The timed part: join (subscribe every consumer) or leave (close consumer 0), until the shares hold."""
        if self.case == "leave" and self.side == "ours":
            group.close_member(0)
            self.shares.append(group.holdings.wait_shares(range(1, len(group.consumers)), REBALANCE_PARTITIONS))
        else:
            group.subscribe()
            self.shares.append(group.holdings.wait_shares(range(len(group.consumers)), REBALANCE_PARTITIONS))
        self.assignments.append(group.holdings.assignments)

    def teardown(self, group: _Group) -> None:
        """Close the round's group (untimed)."""
        group.close()


@pytest.mark.parametrize("heartbeat_ms", HEARTBEATS_MS, ids=lambda ms: f"hb{ms}")
@pytest.mark.parametrize("side", ["peer", "ours"])
@pytest.mark.parametrize("case", ["join", "leave"])
def test_rebalance(benchmark, broker, rebalance_topic, case, side, heartbeat_ms):
    rounds = _Rebalances(broker, rebalance_topic, case, side, heartbeat_ms)
    meter = base._Meter(broker.proc.pid)
    others = _Others(meter)
    members = 1 if side == "peer" else REBALANCE_CONSUMERS
    what = {"join": f"{REBALANCE_CONSUMERS} consumers join", "leave": f"1 of {REBALANCE_CONSUMERS} leaves"}[case]
    _tag(benchmark, "rebalance", f"{case}-hb{heartbeat_ms}", side, consumers=members, heartbeat_ms=heartbeat_ms,
         partitions=REBALANCE_PARTITIONS, assignor=ASSIGNOR,
         measures=what if side == "ours" else "1 consumer joins (the client's lower bound)")
    benchmark.pedantic(lambda group: others.run(rounds.run, group), setup=rounds.setup, teardown=rounds.teardown,
                       rounds=REBALANCE_ROUNDS, warmup_rounds=1, iterations=1)

    holders = members - 1 if (case, side) == ("leave", "ours") else members
    for shares in rounds.shares:
        assert len(shares) == holders and sum(map(len, shares.values())) == REBALANCE_PARTITIONS
    others.record(benchmark)
    benchmark.extra_info.update(
        seconds=list(benchmark.stats.stats.data), assignments=_timed(rounds.assignments, benchmark),
        broker_cpu_s=_timed(meter.broker_cpu, benchmark), client_cpu_s=_timed(meter.client_cpu, benchmark),
        holders=holders, share_sizes=sorted(len(s) for s in rounds.shares[-1].values()))
    if side == "ours":
        benchmark.extra_info["paired_peer_seconds"] = _timed(rounds.paired_peer_seconds, benchmark)


# ---------------------------------------------------------------------------
# 2. OffsetCommit rate, against one-record acks=all produces


class _Committers:
    """`clients` members of one group, each committing offsets of a partition it holds, in threads."""

    def __init__(self, broker, admin, clients: int, per_round: int):
        self.topic = f"commit-{clients}"
        base.create_topic(admin, self.topic, COMMIT_PARTITIONS)
        self.per_round = per_round
        self.group = _Group(broker, self.topic, f"committers-{clients}", clients)
        shares = self.group.form(COMMIT_PARTITIONS)
        # Commits are made from the pool's threads; librdkafka's heartbeats keep the members in the group.
        self.group.stop_polling()
        self.partitions = [TopicPartition(self.topic, min(shares[m])) for m in range(clients)]
        self.committed = [0] * clients
        self.pool = ThreadPoolExecutor(clients, thread_name_prefix="bench-committer")
        self.latencies: list[list[float]] = []

    def _one(self, member: int, latencies: list[float]) -> None:
        consumer, partition, clock = self.group.consumers[member], self.partitions[member], time.perf_counter
        offset = self.committed[member]
        for _ in range(self.per_round):
            offset += 1
            started = clock()
            (answer,) = consumer.commit(offsets=[TopicPartition(partition.topic, partition.partition, offset)],
                                        asynchronous=False)
            latencies.append(clock() - started)
            if answer.error is not None:
                raise AssertionError(f"commit of {partition} at {offset}: {answer.error}")
        self.committed[member] = offset

    def run_round(self) -> None:
        """Every client commits `per_round` times; returns when the last commit has been answered."""
        latencies: list[float] = []
        self.latencies.append(latencies)
        for future in [self.pool.submit(self._one, m, latencies) for m in range(len(self.partitions))]:
            future.result()

    def check(self) -> None:
        """The group's committed offsets are the last ones each client committed."""
        for member, consumer in enumerate(self.group.consumers):
            (found,) = consumer.committed([self.partitions[member]], timeout=base.ADMIN_TIMEOUT)
            assert (found.error, found.offset) == (None, self.committed[member]), (member, found)

    def close(self) -> None:
        """Stop the threads and close the consumers."""
        self.pool.shutdown()
        self.group.close()


class _Producers:
    """`clients` producers, each sending one record and flushing before the next, in threads."""

    def __init__(self, broker, admin, clients: int, per_round: int, side: str):
        self.topic = f"commit-peer-{clients}-{side}"
        base.create_topic(admin, self.topic, 1)
        self.per_round = per_round
        self.deliveries = [base._Deliveries() for _ in range(clients)]
        self.producers = []
        for deliveries in self.deliveries:
            producer = Producer({"bootstrap.servers": broker.bootstrap, **PEER_PRODUCER_CONFIG,
                                 "on_delivery": deliveries})
            producer.list_topics(self.topic, timeout=base.ADMIN_TIMEOUT)
            self.producers.append(producer)
        self.pool = ThreadPoolExecutor(clients, thread_name_prefix="bench-producer")
        self.sent = 0
        self.latencies: list[list[float]] = []

    def _one(self, producer: Producer, latencies: list[float]) -> None:
        produce, flush, topic, clock = producer.produce, producer.flush, self.topic, time.perf_counter
        for _ in range(self.per_round):
            started = clock()
            produce(topic, PEER_VALUE, partition=0)
            if flush(base.FLUSH_TIMEOUT) != 0:
                raise AssertionError(f"a record still undelivered {base.FLUSH_TIMEOUT} s into flush()")
            latencies.append(clock() - started)

    def run_round(self) -> None:
        """Every producer sends `per_round` records, one request each; returns when the last is acknowledged."""
        latencies: list[float] = []
        self.latencies.append(latencies)
        for future in [self.pool.submit(self._one, p, latencies) for p in self.producers]:
            future.result()
        self.sent += self.per_round * len(self.producers)

    def timed_round(self) -> float:
        """run_round(), returning its seconds."""
        started = time.perf_counter()
        self.run_round()
        return time.perf_counter() - started

    def check(self, admin) -> None:
        """Every record delivered once without error; the partition ends at their count."""
        for deliveries in self.deliveries:
            assert not deliveries.errors, deliveries.errors
        assert sum(d.count for d in self.deliveries) == self.sent
        assert base.end_offset(admin, self.topic) == self.sent

    def close(self) -> None:
        """Stop the threads and let the producers go."""
        self.pool.shutdown()
        self.producers.clear()


@pytest.mark.parametrize("side", ["peer", "ours"])
@pytest.mark.parametrize("clients", list(COMMIT_CASES))
def test_offset_commit(benchmark, broker, admin, clients, side):
    per_round = COMMIT_CASES[clients]
    producers = _Producers(broker, admin, clients, per_round, side)
    committers = _Committers(broker, admin, clients, per_round) if side == "ours" else None
    meter = base._Meter(broker.proc.pid)
    others = _Others(meter)
    paired_seconds: list[float] = []

    def setup():
        if committers is not None:
            paired_seconds.append(producers.timed_round())
        return (), {}

    timed = committers or producers
    requests = clients * per_round
    _tag(benchmark, "offset-commit", f"{clients}-client{'s' if clients > 1 else ''}", side, clients=clients,
         requests_per_round=requests, client_threads="threads" if clients > 1 else "one thread",
         api=(f"Consumer.commit(offsets=[1 partition], asynchronous=False), group of {clients} on "
              f"{COMMIT_PARTITIONS} partitions" if side == "ours" else
              f"Producer.produce(1 x {len(PEER_VALUE)} B) + flush(), {PEER_PRODUCER_CONFIG}"))
    try:
        benchmark.pedantic(lambda: others.run(timed.run_round), setup=setup, rounds=COMMIT_ROUNDS,
                           warmup_rounds=1, iterations=1)
        producers.check(admin)
        if committers is not None:
            committers.check()
    finally:
        producers.close()
        if committers is not None:
            committers.close()

    others.record(benchmark)
    broker_cpu, client_cpu = _timed(meter.broker_cpu, benchmark), _timed(meter.client_cpu, benchmark)
    benchmark.extra_info.update(
        per_s=requests / benchmark.stats.stats.median, per_s_best=requests / benchmark.stats.stats.min,
        seconds=list(benchmark.stats.stats.data), broker_cpu_s=broker_cpu, client_cpu_s=client_cpu,
        broker_cpu_us_per_request=base._median(broker_cpu) / requests * 1e6,
        client_cpu_us_per_request=base._median(client_cpu) / requests * 1e6,
        latency_ms=_milliseconds([s for one in _timed(timed.latencies, benchmark) for s in one]))
    if committers is not None:
        benchmark.extra_info.update(
            paired_peer_seconds=_timed(paired_seconds, benchmark),
            paired_peer_latency_ms=_milliseconds([s for one in _timed(producers.latencies, benchmark)
                                                  for s in one]))


# ---------------------------------------------------------------------------
# 3. Coordinator load time on start


def _group_name(number: int) -> str:
    return f"load-group-{number:05d}"


def _topic_name(number: int) -> str:
    return f"load-topic-{number % LOAD_TOPICS:03d}"


def _offset(number: int, partition: int) -> int:
    """The offset the built group `number` committed for `partition` (distinct per group and partition)."""
    return number * 1_000 + partition


@dataclass(frozen=True)
class _OffsetsDir:
    """A log directory whose `__consumer_offsets` holds LOAD_GROUPS groups' metadata and offsets."""

    state: str  # "stable": each group's member is still in it; "empty": it left after committing
    path: Path
    build_seconds: float
    segment_files: tuple[Path, ...]
    segment_bytes: int


def _build_group(coordinator: GroupCoordinator, number: int, leave: bool) -> None:
    """One consumer joins group `number`, syncs its assignment of every partition, commits them all,
    and if `leave`, leaves."""
    group_id, topic = _group_name(number), _topic_name(number)
    subscription = encode_subscription(Subscription((topic,)))
    joined = coordinator.join_group(group_id, "", None, "consumer-1", "/127.0.0.1", SESSION_TIMEOUT_MS,
                                    REBALANCE_TIMEOUT_MS, "consumer", [(ASSIGNOR, subscription)],
                                    require_known_member_id=False).result(timeout=0)
    member = joined.member_id
    assignment = encode_assignment(Assignment(((topic, tuple(range(LOAD_PARTITIONS))),)))
    coordinator.sync_group(group_id, joined.generation_id, member, None, {member: assignment}).result(timeout=0)
    errors = coordinator.commit_offsets(group_id, member, None, joined.generation_id,
                                        {(topic, p): (_offset(number, p), 0, "") for p in range(LOAD_PARTITIONS)})
    assert not any(errors.values()), errors
    if leave:
        assert coordinator.leave_group(group_id, [(member, None)]) == [None]


def _coordinator(store: LogManager) -> GroupCoordinator:
    """A group coordinator over `store` with fsync off (its records reach the disk at close)."""
    ids = itertools.count(1)
    transactions = TransactionCoordinator(store, lambda: next(ids), TxnConfig(fsync=False))
    return GroupCoordinator(store, transactions, GroupConfig(initial_rebalance_delay_ms=0, fsync=False))


@pytest.fixture(scope="module", params=LOAD_STATES)
def offsets_dir(request):
    """LOAD_GROUPS groups x LOAD_PARTITIONS offsets in `__consumer_offsets`, written by the coordinator."""
    state = request.param
    root = Path(tempfile.mkdtemp(prefix="logstore-bench-offsets-"))
    path = root / "broker"
    try:
        started = time.perf_counter()
        store = LogManager([str(path)], start_scheduler=False)
        try:
            coordinator = _coordinator(store)
            for number in range(LOAD_GROUPS):
                _build_group(coordinator, number, leave=state == "empty")
        finally:
            store.close()
        seconds = time.perf_counter() - started
        files = tuple(sorted(path.glob(f"{OFFSETS_TOPIC}-*/*.log")))
        yield _OffsetsDir(state, path, seconds, files, sum(f.stat().st_size for f in files))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _check_loaded(coordinator: GroupCoordinator, loaded: int, state: str) -> None:
    """Every built group is back: Stable with its one member or Empty, and exactly its offsets."""
    assert loaded == LOAD_GROUPS, loaded
    expected = ("Stable", 1) if state == "stable" else ("Empty", 0)
    for number in range(LOAD_GROUPS):
        group_id, topic = _group_name(number), _topic_name(number)
        description = coordinator.describe(group_id)
        assert (description.state, len(description.members)) == expected, (group_id, description)
        found = {tp: c.offset for tp, c in coordinator.fetch_offsets(group_id, None).items()}
        assert found == {(topic, p): _offset(number, p) for p in range(LOAD_PARTITIONS)}, group_id




def test_coordinator_load(benchmark, offsets_dir):
    store = LogManager([str(offsets_dir.path)], start_scheduler=False)
    coordinators: list[GroupCoordinator] = []
    counts: list[int] = []

    def setup():
        coordinators.clear()  # the previous round's 1 M offsets go before the next load
        gc.collect()  # and its cycles (the coordinator's parts): not in the next load's time
        coordinators.append(_coordinator(store))
        return (coordinators[0],), {}

    _tag(benchmark, "coordinator-load", f"load-{offsets_dir.state}", "ours", kind="load", state=offsets_dir.state,
         groups=LOAD_GROUPS, partitions_per_group=LOAD_PARTITIONS,
         offsets=LOAD_GROUPS * LOAD_PARTITIONS, segment_bytes=offsets_dir.segment_bytes,
         segment_files=len(offsets_dir.segment_files), build_seconds=offsets_dir.build_seconds,
         measures="GroupCoordinator.load() in-process")
    try:
        benchmark.pedantic(lambda coordinator: counts.append(coordinator.load()), setup=setup,
                           rounds=LOAD_ROUNDS, warmup_rounds=1, iterations=1)
        _check_loaded(coordinators[0], counts[-1], offsets_dir.state)
        coordinators.clear()
        profile = cProfile.Profile()
        coordinator = _coordinator(store)
        started = time.perf_counter()
        profile.runcall(coordinator.load)
        benchmark.extra_info.update(profiled_seconds=time.perf_counter() - started,
                                    profile_tottime=profile_rows(profile, "tottime", PROFILE_TOP),
                                    profile_cumulative=profile_rows(profile, "cumulative", PROFILE_TOP))
    finally:
        store.close()
    benchmark.extra_info["seconds"] = list(benchmark.stats.stats.data)


_LOADED_LINE = re.compile(r"group coordinator loaded (\d+) groups in ([\d.]+) s")


def test_broker_start(benchmark, offsets_dir):
    root = Path(tempfile.mkdtemp(prefix="logstore-bench-start-"))
    started: list[BrokerProcess] = []
    empty_seconds: list[float] = []
    exec_at: list[float] = []
    serving_seconds: list[float] = []
    rss_kib: list[int] = []

    def start(data_dir: Path) -> BrokerProcess:
        process = BrokerProcess("127.0.0.1", free_port(), data_dir, BROKER_OVERRIDES)
        started.append(process)
        try:
            return process.start()
        except pytest.fail.Exception as exc:
            # pytest.fail is a BaseException, which pytest-benchmark does not mark as this benchmark's
            # error: its empty figures would then abort writing the JSON of every other benchmark.
            raise AssertionError(str(exc)) from None

    def setup():
        empty = root / f"empty-{len(empty_seconds)}"
        empty.mkdir()
        began = time.perf_counter()
        process = start(empty)
        empty_seconds.append(time.perf_counter() - began)
        process.stop()
        return (), {}

    def run():
        exec_at.append(time.perf_counter())
        start(offsets_dir.path)

    def teardown():
        process = started[-1]
        client = AdminClient({"bootstrap.servers": process.bootstrap})  # held until the answer is in
        # The broker listens before its groups are loaded; ListGroups answers COORDINATOR_LOAD_IN_PROGRESS
        # (an error of the listing) until every partition is.
        deadline = time.monotonic() + WAIT_TIMEOUT
        while (groups := client.list_consumer_groups(request_timeout=base.ADMIN_TIMEOUT).result()).errors:
            assert time.monotonic() < deadline, groups.errors[:5]
        serving_seconds.append(time.perf_counter() - exec_at[-1])
        rss_kib.append(process.memory_kib("VmRSS"))
        assert len(groups.valid) == LOAD_GROUPS, len(groups.valid)
        process.stop()

    _tag(benchmark, "coordinator-load", f"broker-start-{offsets_dir.state}", "ours", kind="broker-start",
         state=offsets_dir.state, groups=LOAD_GROUPS,
         partitions_per_group=LOAD_PARTITIONS, offsets=LOAD_GROUPS * LOAD_PARTITIONS,
         measures="`logstore broker` exec to its listening line, on the loaded directory")
    try:
        benchmark.pedantic(run, setup=setup, teardown=teardown, rounds=START_ROUNDS, iterations=1)
    finally:
        for process in started:
            if process.running:
                process.kill()
        logs = "".join(p.log_text() for p in started)
        shutil.rmtree(root, ignore_errors=True)
    assert "Traceback" not in logs, logs[-4000:]
    loads = [(int(n), float(s)) for n, s in _LOADED_LINE.findall(logs)]
    benchmark.extra_info.update(
        seconds=list(benchmark.stats.stats.data), rss_mib=[kib / 1024 for kib in rss_kib],
        paired_empty_start_seconds=_timed(empty_seconds, benchmark), serving_seconds=serving_seconds,
        broker_logged_load_seconds=[s for n, s in loads if n == LOAD_GROUPS])


def _read_crc(files: tuple[Path, ...]) -> tuple[int, int]:
    """Read every segment file whole and check each batch's CRC32C; (batches, records)."""
    batches = records = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        view, size, pos = memoryview(data), len(data), 0
        # A v2 batch: baseOffset int64, batchLength int32, leaderEpoch int32, magic int8, crc uint32 (over
        # attributes.. end), attributes int16, lastOffsetDelta int32, 2 x int64, producerId int64,
        # producerEpoch int16, baseSequence int32, recordCount int32 at 57.
        while pos + 61 <= size:
            (length,) = struct.unpack_from(">i", data, pos + 8)
            end = pos + 12 + length
            (crc,) = struct.unpack_from(">I", data, pos + 17)
            if crc32c(view[pos + 21:end]) != crc:
                raise AssertionError(f"{path}: CRC mismatch in the batch at byte {pos}")
            records += struct.unpack_from(">i", data, pos + 57)[0]
            batches += 1
            pos = end
        assert pos == size, (path, pos, size)
    return batches, records


def _decode_with(memory_records):
    def decode(files: tuple[Path, ...]) -> tuple[int, int]:
        """Every batch's CRC checked and every record's key and value taken; (batches, records)."""
        batches = records = 0
        for path in files:
            with open(path, "rb") as f:
                reader = memory_records(f.read())
            while (batch := reader.next_batch()) is not None:
                if not batch.validate_crc():
                    raise AssertionError(f"{path}: CRC mismatch")
                batches += 1
                for record in batch:
                    _ = (record.key, record.value)
                    records += 1
        return batches, records
    return decode


def _peer_reader(name: str):
    if name == "read-crc":
        return _read_crc, "raw file reads + crc32c package per batch"
    if name == "decode-aiokafka":
        # The compiled reader, never aiokafka's pure-Python fallback.
        from aiokafka.record._crecords.memory_records import MemoryRecords
        return _decode_with(MemoryRecords), "aiokafka's Cython MemoryRecords: CRC + every record's key/value"
    from kafka.record.memory_records import MemoryRecords
    return _decode_with(MemoryRecords), "kafka-python's MemoryRecords (pure Python): CRC + every record's key/value"


@pytest.mark.parametrize("peer", list(PEER_ROUNDS))
def test_coordinator_load_peer(benchmark, offsets_dir, peer):
    read, how = _peer_reader(peer)
    counts = []
    _tag(benchmark, "coordinator-load", f"{peer}-{offsets_dir.state}", "peer", kind=peer, state=offsets_dir.state,
         offsets=LOAD_GROUPS * LOAD_PARTITIONS,
         segment_bytes=offsets_dir.segment_bytes, segment_files=len(offsets_dir.segment_files), measures=how)
    benchmark.pedantic(lambda: counts.append(read(offsets_dir.segment_files)), rounds=PEER_ROUNDS[peer],
                       warmup_rounds=1, iterations=1)
    batches, records = counts[-1]
    assert set(counts) == {(batches, records)}
    # Each group: its metadata record, its offsets, and the metadata of its leaving (if the coordinator
    # writes more, more).
    assert records >= LOAD_GROUPS * (LOAD_PARTITIONS + (1 if offsets_dir.state == "stable" else 2)), records
    benchmark.extra_info.update(seconds=list(benchmark.stats.stats.data), batches=batches, records=records)
