"""End-to-end transaction benchmarks: confluent-kafka transactional producers against a `logstore broker`.

    .venv/bin/python -m pytest -q bench/test_broker_transactions.py --benchmark-only \\
        --benchmark-json=.benchmarks/broker_transactions.json
    .venv/bin/python bench/txn_broker_report.py .benchmarks/broker_transactions.json

One broker for the module, as in bench/test_broker.py: its defaults (acks=all
answered after the group-commit fsync; coordinator transitions and markers
fsynced too), a free loopback port, a temporary directory, a clean stop with
no traceback logged. Clients run in this process and share the machine's CPUs
with the broker. CPU time is read around each timed round, as there: the
broker's utime + stime from /proc/<pid>/stat (every thread), the client's
from getrusage(RUSAGE_SELF) (librdkafka's threads included); and the rest of
the machine's busy CPU time (/proc/stat) as "other", since the machine may be
shared and a round that other processes took CPU from says so.

Cases (the issue's targets):

1. txn-vs-idempotent: 1,000,000 values of 100 B (bench/test_broker.py's
   texts, lz4 about 2x) sent with produce() to a fresh topic of 1 or of 3
   partitions (message i to partition i mod P, so every transaction spans
   every partition), with bench/test_broker.py's PRODUCER_CONFIG on both
   sides (acks=all, idempotence, lz4, linger.ms=10, batch.size=1 MiB,
   batch.num.messages=100,000). The peer is the idempotent producer, timed
   from the first produce() to the end of flush(). Ours is the same producer
   with a transactional.id: begin_transaction() before the first message,
   and after every 1,000 produce() calls, if 100 ms have passed since the
   transaction began, commit_transaction() and begin_transaction() (a
   transaction's age, as Kafka's ProducerPerformance --transaction-duration-ms
   counts it, so commits are 100 ms plus a commit's time apart); timed
   from the first produce() to the return of the last commit_transaction(),
   so each side counts only data the broker acknowledged. Both loops are the
   same code; init_transactions() and the topic's metadata are set up
   untimed. Each ours round is paired with a peer round run just before it
   (in its setup), so load drift between the two benchmarks cancels in the
   paired ratio. Checked untimed: 1 M delivery reports without error; each
   partition's end offset is its message count (idempotent) or that plus one
   marker per transaction (transactional), and its read_committed end offset
   (the last stable offset) equals its end offset. Target: transactional
   >= 0.9x idempotent msg/s.
2. small-txn: transactions of 10 messages (the same 100 B values, librdkafka's
   defaults otherwise, acks=all) to a topic of one partition, each committed:
   begin_transaction(), 10 x produce(), commit_transaction(). One producer,
   then 16 concurrent producers (distinct transactional ids, all writing the
   same partition, so their appends share the partition's group-commit fsync
   while their coordinator records land on their ids' __transaction_state
   partitions). Timed: every producer's share of the round's transactions,
   from their start to the last commit_transaction()'s return; rate =
   transactions / s. The 16 producers run in threads of this process, one
   Producer each: confluent-kafka releases the GIL in commit_transaction()
   and flush(), where a producer spends nearly all its time, and the Python
   work per transaction is a dozen calls (the client's CPU per transaction is
   recorded to show it), while 16 processes would each start an interpreter
   and a librdkafka, on a machine whose CPUs the broker needs. Also recorded:
   broker and client CPU milliseconds per transaction (median round) and the
   latency of each transaction (begin to commit returned; p50/p99/max).
   Checked: every message delivered without error; the partition's end offset
   is 11 per transaction (10 records and a marker), its last stable offset
   equals it. No target: information for the closing note.

Speed is reported, not asserted; correctness is asserted.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

# bench/test_broker.py's inputs, clocks and producer settings: this suite must send what it sends.
import test_broker as base

MESSAGES = base.MESSAGES
VALUE_BYTES = base.VALUE_BYTES
PRODUCER_CONFIG = base.PRODUCER_CONFIG
TXN_TIMEOUT = 60.0  # s: init_transactions() and commit_transaction() give up after this

RATIO_TARGET = 0.9
COMMIT_INTERVAL = 0.100  # s from begin_transaction() to the commit that ends it
CHECK_EVERY = 1000       # produce() calls between the transactional side's looks at the clock
THROUGHPUT_ROUNDS = 7
THROUGHPUT_PARTITIONS = (1, 3)

SMALL_MESSAGES = 10
SMALL_CONFIG = {"acks": "all"}
SMALL_ROUNDS = 5
# producers -> transactions per producer per round (a round is about 2 s here)
SMALL_CASES = {1: 500, 16: 60}


# ---------------------------------------------------------------------------
# The broker, its admin client and the message values are bench/test_broker.py's, so both suites
# measure the same thing.
broker, admin, values = base.broker, base.admin, base.values


def check_offsets(admin: AdminClient, topic: str, expected: list[int]) -> None:
    """Each partition ends at expected[p], and its read_committed end (the LSO) is there too."""
    partitions = [TopicPartition(topic, p) for p in range(len(expected))]
    for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions}, isolation_level=isolation,
                                     request_timeout=base.ADMIN_TIMEOUT)
        found = [futures[tp].result().offset for tp in partitions]
        assert found == expected, (topic, isolation, found, expected)


def machine_busy_seconds() -> float:
    """CPU seconds every CPU of the machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat", "rb") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class _Others:
    """CPU seconds the machine spent on neither the broker nor this process during each metered round.

    The machine may be shared: a round that others took CPU from is slower
    for a reason that is not ours, and this says which rounds those were.
    """

    def __init__(self, meter):
        self.meter = meter
        self.seconds: list[float] = []

    def run(self, fn, *args):
        """meter.run(fn, *args), keeping the other processes' CPU seconds of that call."""
        busy = machine_busy_seconds()
        result = self.meter.run(fn, *args)
        busy = machine_busy_seconds() - busy
        self.seconds.append(max(0.0, busy - self.meter.broker_cpu[-1] - self.meter.client_cpu[-1]))
        return result

    def record(self, benchmark) -> None:
        """The timed rounds' figures (warmup dropped) into extra_info."""
        timed = len(benchmark.stats.stats.data)
        benchmark.extra_info["other_cpu_s"] = self.seconds[len(self.seconds) - timed:]


# ---------------------------------------------------------------------------
# 1. Transactional vs idempotent throughput


class _Sender:
    """One producer and its topic for one round; `send` is the timed part."""

    def __init__(self, broker, admin, values, topic: str, partitions: int, transactional: bool):
        base.create_topic(admin, topic, partitions)
        self.topic = topic
        self.partitions = partitions
        self.values = values
        self.transactional = transactional
        self.deliveries = base._Deliveries()
        config = {"bootstrap.servers": broker.bootstrap, **PRODUCER_CONFIG, "on_delivery": self.deliveries}
        if transactional:
            config["transactional.id"] = topic
        self.producer = Producer(config)
        self.producer.list_topics(topic, timeout=base.ADMIN_TIMEOUT)
        if transactional:
            self.producer.init_transactions(TXN_TIMEOUT)
        self.commit_seconds: list[float] = []

    def send(self) -> None:
        """MESSAGES values round-robin over the partitions; committed every COMMIT_INTERVAL or flushed."""
        producer, topic, values, partitions = self.producer, self.topic, self.values, self.partitions
        produce, mask, clock = producer.produce, len(values) - 1, time.perf_counter
        transactional = self.transactional
        if transactional:
            producer.begin_transaction()
            began = clock()
        for start in range(0, MESSAGES, CHECK_EVERY):
            for i in range(start, start + CHECK_EVERY):
                try:
                    produce(topic, values[i & mask], partition=i % partitions)
                except BufferError:
                    # Not expected with queue.buffering.max.messages above MESSAGES.
                    producer.poll(0.1)
                    produce(topic, values[i & mask], partition=i % partitions)
            # The last chunk is left to the final commit: an empty transaction writes no marker.
            if transactional and clock() - began >= COMMIT_INTERVAL and start + CHECK_EVERY < MESSAGES:
                self._commit()
                producer.begin_transaction()
                began = clock()
        if transactional:
            self._commit()
        elif producer.flush(base.FLUSH_TIMEOUT) != 0:
            raise AssertionError(f"messages still undelivered {base.FLUSH_TIMEOUT} s into flush()")

    def _commit(self) -> None:
        started = time.perf_counter()
        self.producer.commit_transaction(TXN_TIMEOUT)
        self.commit_seconds.append(time.perf_counter() - started)

    def check(self, admin: AdminClient) -> None:
        """Every message delivered once without error; end offsets and LSOs where they must be."""
        assert not self.deliveries.errors, self.deliveries.errors
        assert self.deliveries.count == MESSAGES
        # A transaction holds whole runs of CHECK_EVERY messages, so it spans every partition.
        assert CHECK_EVERY >= self.partitions
        markers = len(self.commit_seconds)
        check_offsets(admin, self.topic, [len(range(p, MESSAGES, self.partitions)) + markers
                                          for p in range(self.partitions)])


def _tag(benchmark, op: str, case: str, side: str, **info) -> None:
    benchmark.group = f"{op}/{case}"
    benchmark.extra_info.update({"op": op, "case": case, "side": side, **info})


@pytest.mark.parametrize("side", ["peer", "ours"])
@pytest.mark.parametrize("partitions", THROUGHPUT_PARTITIONS)
def test_txn_vs_idempotent(benchmark, broker, admin, values, partitions, side):
    assert len(values) & (len(values) - 1) == 0, "the value pool is cycled with a bit mask"
    transactional = side == "ours"
    meter = base._Meter(broker.proc.pid)
    others = _Others(meter)
    senders: list[_Sender] = []
    paired: list[_Sender] = []
    paired_seconds: list[float] = []

    def setup():
        name = f"{'txn' if transactional else 'idem'}-{partitions}p-{len(senders)}"
        if transactional:
            # The peer round this ours round is compared with, run just before it.
            peer = _Sender(broker, admin, values, f"paired-{name}", partitions, transactional=False)
            started = time.perf_counter()
            peer.send()
            paired_seconds.append(time.perf_counter() - started)
            paired.append(peer)
        sender = _Sender(broker, admin, values, name, partitions, transactional)
        senders.append(sender)
        return (sender,), {}

    api = "confluent-kafka Producer.produce() x1M, " + (
        f"commit_transaction() every {COMMIT_INTERVAL * 1000:.0f} ms" if transactional else "flush()")
    _tag(benchmark, "txn-vs-idempotent", f"{partitions}p", side, partitions=partitions,
         target=RATIO_TARGET if transactional else None, config=dict(PRODUCER_CONFIG),
         commit_interval_ms=COMMIT_INTERVAL * 1000 if transactional else None,
         producer="transactional" if transactional else "idempotent", api=api)
    benchmark.pedantic(lambda sender: others.run(sender.send), setup=setup, rounds=THROUGHPUT_ROUNDS,
                       warmup_rounds=1, iterations=1)

    for sender in senders + paired:
        sender.check(admin)
    meter.record(benchmark, messages=MESSAGES, payload_bytes=MESSAGES * VALUE_BYTES)
    others.record(benchmark)
    if transactional:
        timed = senders[len(senders) - THROUGHPUT_ROUNDS:]
        commits = sorted(s for sender in timed for s in sender.commit_seconds)
        benchmark.extra_info.update(
            ours_seconds=list(benchmark.stats.stats.data),
            paired_peer_seconds=paired_seconds[len(paired_seconds) - THROUGHPUT_ROUNDS:],
            commits_per_round=[len(sender.commit_seconds) for sender in timed],
            commit_ms=_milliseconds(commits))
    senders.clear()  # the producers' threads end with them
    paired.clear()


def _milliseconds(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"p50": base.nearest_rank(ordered, 50) * 1e3, "p99": base.nearest_rank(ordered, 99) * 1e3,
            "max": ordered[-1] * 1e3, "mean": sum(ordered) / len(ordered) * 1e3, "count": len(ordered)}


# ---------------------------------------------------------------------------
# 2. Small transactions, 1 and 16 producers


class _SmallTxns:
    """`producers` transactional producers of one topic, each sending `per_round` transactions a round."""

    def __init__(self, broker, admin, values, producers: int, per_round: int):
        self.topic = f"small-{producers}"
        base.create_topic(admin, self.topic, 1)
        self.per_round = per_round
        self.per_round_txns = per_round * producers
        self.values = values[:SMALL_MESSAGES]
        self.deliveries = [base._Deliveries() for _ in range(producers)]
        self.producers = []
        for number, deliveries in enumerate(self.deliveries):
            producer = Producer({"bootstrap.servers": broker.bootstrap, **SMALL_CONFIG,
                                 "transactional.id": f"{self.topic}-{number}", "on_delivery": deliveries})
            producer.list_topics(self.topic, timeout=base.ADMIN_TIMEOUT)
            producer.init_transactions(TXN_TIMEOUT)
            self.producers.append(producer)
        self.pool = ThreadPoolExecutor(producers, thread_name_prefix="bench-producer")
        self.rounds = 0
        self.latencies: list[list[float]] = []  # per round, every transaction's seconds

    def _one_producer(self, producer: Producer, latencies: list[float]) -> None:
        topic, values, clock = self.topic, self.values, time.perf_counter
        for _ in range(self.per_round):
            started = clock()
            producer.begin_transaction()
            for value in values:
                producer.produce(topic, value, partition=0)
            producer.commit_transaction(TXN_TIMEOUT)
            latencies.append(clock() - started)

    def run_round(self) -> None:
        """Every producer sends its share; returns when the last commit has returned."""
        latencies: list[float] = []
        self.latencies.append(latencies)
        for future in [self.pool.submit(self._one_producer, p, latencies) for p in self.producers]:
            future.result()
        self.rounds += 1

    def check(self, admin: AdminClient) -> None:
        """Every message delivered without error; 10 records and a marker per transaction, all committed."""
        per_producer = self.rounds * self.per_round * SMALL_MESSAGES
        for deliveries in self.deliveries:
            assert not deliveries.errors, deliveries.errors
            assert deliveries.count == per_producer
        check_offsets(admin, self.topic, [self.rounds * self.per_round_txns * (SMALL_MESSAGES + 1)])

    def close(self) -> None:
        """Stop the threads and let the producers go."""
        self.pool.shutdown()
        self.producers.clear()


@pytest.mark.parametrize("producers", list(SMALL_CASES))
def test_small_txn(benchmark, broker, admin, values, producers):
    small = _SmallTxns(broker, admin, values, producers, SMALL_CASES[producers])
    meter = base._Meter(broker.proc.pid)
    others = _Others(meter)
    _tag(benchmark, "small-txn", f"{producers}-producer{'s' if producers > 1 else ''}", "ours",
         producers=producers, txns_per_round=small.per_round_txns, messages_per_txn=SMALL_MESSAGES,
         config=dict(SMALL_CONFIG), client="threads" if producers > 1 else "one thread",
         api=f"begin_transaction(), {SMALL_MESSAGES} x produce(), commit_transaction()")
    try:
        benchmark.pedantic(lambda: others.run(small.run_round), rounds=SMALL_ROUNDS, warmup_rounds=1,
                           iterations=1)
        small.check(admin)
    finally:
        small.close()

    txns = small.per_round_txns
    meter.record(benchmark, messages=txns * SMALL_MESSAGES, payload_bytes=txns * SMALL_MESSAGES * VALUE_BYTES)
    others.record(benchmark)
    broker_cpu, client_cpu = benchmark.extra_info["broker_cpu_s"], benchmark.extra_info["client_cpu_s"]
    benchmark.extra_info.update(
        txn_per_s=txns / benchmark.stats.stats.median, txn_per_s_best=txns / benchmark.stats.stats.min,
        broker_cpu_ms_per_txn=base._median(broker_cpu) / txns * 1e3,
        client_cpu_ms_per_txn=base._median(client_cpu) / txns * 1e3,
        txn_ms=_milliseconds([s for one in small.latencies[-SMALL_ROUNDS:] for s in one]))
