"""End-to-end broker benchmarks: real Kafka clients against a `logstore broker` subprocess on loopback.

    .venv/bin/python -m pytest -q bench/test_broker.py --benchmark-only \\
        --benchmark-json=.benchmarks/broker.json
    .venv/bin/python bench/broker_report.py .benchmarks/broker.json

One broker for the module, started with its defaults (so acks=all is answered
after the group-commit fsync) on a free loopback port, its data in a
temporary directory removed at the end; it must stop cleanly and log no
traceback. The clients run in this process, so client and broker share the
machine's CPUs. CPU time is read around each timed round: the broker's from
/proc/<pid>/stat (utime + stime, every thread of the process, fsyncs'
kernel time included), the client's from getrusage(RUSAGE_SELF), which
includes librdkafka's threads. "Per GB" is per 10^9 bytes of uncompressed
message payload: the values only (100 B each, no keys), not record or batch
framing, not the lz4-compressed bytes on the wire.

Messages: 1,000,000 values of 100 B drawn in turn from 4,096 texts of words
from a seeded 512-word vocabulary, so lz4 shrinks them about 2x as it would
JSON or log lines (random bytes would not compress at all).

Cases (the issue's targets):

1. produce: a confluent-kafka Producer, enable.idempotence=true, acks=all,
   compression.type=lz4, sends the 1 M messages to a topic of one partition,
   made fresh for each round. Timed: from the first produce() to the end of
   flush(), which returns after the last delivery report (one on_delivery
   callback, set in the config, counts them). Throughput settings a Kafka
   user would set for this test (`PRODUCER_TUNING`): linger.ms=10,
   batch.size=1 MiB and batch.num.messages=100,000 (librdkafka's default of
   10,000 messages would end a batch first), queue.buffering.max.messages=
   2,000,000 so that produce() never meets a full queue. The connection and
   the topic's metadata are up before timing (list_topics in setup). Checked
   untimed: 1 M delivery reports, no error, the partition's end offset 1 M.
   Targets: >= 800,000 msg/s; broker CPU < client CPU. Run twice: with
   produce() per message, and with produce_batch() of 10,000 (message lists
   built untimed), the client's bulk call, whose Python cost per message is
   lower; the broker sees the same requests either way.
2. consume: a confluent-kafka Consumer assign()s the partition the produce
   case wrote last (or a topic filled the same way, untimed, when run
   alone) from the beginning; group.id is set because librdkafka needs one,
   but assign() never joins a group, and enable.auto.commit=false. Timed:
   from assign() to the 1,000,000th message, read with
   consume(num_messages=10,000) and each message's error() looked at. Fetch
   settings (`CONSUMER_TUNING`): fetch.max.bytes=64 MiB,
   max.partition.fetch.bytes=16 MiB, queued.min.messages=1,000,000,
   queued.max.messages.kbytes=256 MiB. Checked: exactly offsets 0..999,999
   (count, first and last offset of a strictly increasing partition) and the
   last value. Target: >= 2,000,000 msg/s; broker CPU is information.
3. wide: a topic of 1,000 partitions (CreateTopics, untimed, its duration
   recorded); 200 concurrent connections, each sends a Metadata request for
   the topic, then a Produce request (acks=-1) to a slice of 5 partitions
   (connection i: partitions 5i..5i+4), so every partition gets exactly one
   batch a round (10 records of those 100 B values, lz4). All 200 Produce
   requests leave together, once every connection has its Metadata answer
   (an asyncio.Barrier), so the latency measured is the Produce's, from
   writing its frame to reading the whole response, not time spent queued
   behind other connections' 1,000-partition Metadata responses; Metadata
   latency is recorded too (information). Checked: every Metadata answer
   lists the 1,000 partitions without error, every partition response has
   error 0 and the base offset that round's batch must get. One warmup round
   (information: its latencies), since a partition's first append writes its
   leader-epoch checkpoint (with fsyncs), which a running broker paid long
   ago; then 3 timed rounds. Reported: p50/p99/max Produce latency over the
   600 timed requests (nearest rank); the issue sets no latency target.

   Client choice: asyncio connections speaking Kafka through kio (requests
   encoded with `kio.serial.entity_writer`, responses read with
   `entity_reader`), batches built by logstore's codec
   (`logstore.formats.kafka.encode_batch`). confluent-kafka was tried: 200
   Producers in one process start ~600 librdkafka threads, and it offers no
   per-request latency (only its statistics' rtt windows, which mix every
   request of a broker connection), nor a way to send exactly one Produce
   of a chosen set of partitions after one Metadata. The kio client sends
   exactly the two requests the case names and times each.

Speed is reported, not asserted; correctness is asserted.
"""
from __future__ import annotations

import asyncio
import datetime
import math
import os
import random
import resource
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta

import logstore.formats.kafka as K

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "clients"))
from broker_process import BrokerProcess, free_port  # noqa: E402
from kio_call import KioCall  # noqa: E402

SEED = 20240611
GB = 1e9  # "per GB" means per 10^9 bytes of message values
MESSAGES = 1_000_000
VALUE_BYTES = 100
VALUE_POOL = 4096
ADMIN_TIMEOUT = 120.0  # s: CreateTopics of 1,000 partitions took 4-9 s here

PRODUCE_ROUNDS = 3
PRODUCE_TARGET_MSG_S = 800_000
PRODUCER_TUNING = {
    "linger.ms": 10,
    "batch.size": 1 << 20,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
}
PRODUCER_CONFIG = {"enable.idempotence": True, "acks": "all", "compression.type": "lz4", **PRODUCER_TUNING}
FLUSH_TIMEOUT = 120.0  # s

CONSUME_ROUNDS = 3
CONSUME_TARGET_MSG_S = 2_000_000
CONSUME_BATCH = 10_000
PRODUCE_BATCH = 10_000   # messages per produce_batch() call
CONSUME_TIMEOUT = 120.0  # s, for the whole 1 M
CONSUMER_TUNING = {
    "fetch.max.bytes": 64 << 20,
    "max.partition.fetch.bytes": 16 << 20,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 256 << 10,
}
CONSUMER_CONFIG = {"group.id": "bench-assign-only", "enable.auto.commit": False, **CONSUMER_TUNING}

WIDE_TOPIC = "wide"
WIDE_PARTITIONS = 1000
WIDE_CONNECTIONS = 200
WIDE_SLICE = WIDE_PARTITIONS // WIDE_CONNECTIONS
WIDE_RECORDS = 10
WIDE_ROUNDS = 3
WIDE_WARMUP_ROUNDS = 1
WIDE_REQUEST_TIMEOUT_MS = 30_000
WIDE_ROUND_TIMEOUT = 300.0  # s
METADATA_VERSION = 12
PRODUCE_VERSION = 9


# ---------------------------------------------------------------------------
# Inputs, CPU clocks


def message_values() -> list[bytes]:
    """VALUE_POOL distinct 100-byte texts of words (lz4 about 2x), deterministic."""
    rng = random.Random(f"{SEED}/values")
    letters = b"abcdefghijklmnopqrstuvwxyz"
    words = [bytes(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(512)]
    values = []
    for _ in range(VALUE_POOL):
        text = b" ".join(rng.choice(words) for _ in range(VALUE_BYTES // 3))
        values.append(text[:VALUE_BYTES].ljust(VALUE_BYTES))
    return values


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        # Fields after the command name, which may hold spaces, closed by the last ")".
        fields = f.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process's user + system CPU seconds, librdkafka's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Meter:
    """Wall time and broker and client CPU seconds of every call of a benchmarked function."""

    def __init__(self, broker_pid: int):
        self.pid = broker_pid
        self.wall: list[float] = []
        self.broker_cpu: list[float] = []
        self.client_cpu: list[float] = []

    def run(self, fn, *args):
        """Call fn(*args) and keep its wall and CPU seconds; returns what it returned."""
        broker0, client0, wall0 = process_cpu_seconds(self.pid), own_cpu_seconds(), time.perf_counter()
        result = fn(*args)
        wall1, client1, broker1 = time.perf_counter(), own_cpu_seconds(), process_cpu_seconds(self.pid)
        self.wall.append(wall1 - wall0)
        self.broker_cpu.append(broker1 - broker0)
        self.client_cpu.append(client1 - client0)
        return result

    def record(self, benchmark, *, messages: int, payload_bytes: int) -> None:
        """Per-round and median figures of the timed rounds (warmup calls dropped) into extra_info."""
        timed = len(benchmark.stats.stats.data)
        wall, broker, client = (v[len(v) - timed:] for v in (self.wall, self.broker_cpu, self.client_cpu))
        seconds = benchmark.stats.stats.median
        benchmark.extra_info.update({
            "messages": messages,
            "payload_bytes": payload_bytes,
            "msg_per_s": messages / seconds,
            "msg_per_s_best": messages / benchmark.stats.stats.min,
            "round_seconds": wall,
            "broker_cpu_s": broker,
            "client_cpu_s": client,
            "broker_cpu_s_median": _median(broker),
            "client_cpu_s_median": _median(client),
            "broker_cpu_s_per_gb": _median(broker) / (payload_bytes / GB),
            "client_cpu_s_per_gb": _median(client) / (payload_bytes / GB),
        })


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def nearest_rank(ordered: list[float], percent: float) -> float:
    """The nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def _tag(benchmark, op: str, case: str, **info) -> None:
    benchmark.group = f"{op}/{case}"
    benchmark.extra_info.update({"op": op, "case": case, "side": "ours", **info})


# ---------------------------------------------------------------------------
# The broker and topics


@pytest.fixture(scope="module")
def broker():
    """A `logstore broker` with default settings on a free loopback port; stopped cleanly at the end."""
    yield from running_broker("logstore-bench-broker-")


def running_broker(prefix: str, overrides: tuple[str, ...] = ()):
    """A broker in a fresh temporary directory for a fixture to yield; stopped cleanly (and checked for
    tracebacks) when the fixture ends, the directory removed."""
    root = tempfile.mkdtemp(prefix=prefix)
    data_dir = Path(root) / "broker"
    data_dir.mkdir()
    process = BrokerProcess("127.0.0.1", free_port(), data_dir, overrides).start()
    try:
        yield process
        if process.running:
            process.stop()
        assert "Traceback" not in process.log_text(), f"the broker logged a traceback:\n{process.log_text()}"
    finally:
        if process.running:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def admin(broker):
    """An AdminClient of the module's broker."""
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def values():
    """The message values (VALUE_POOL of them, produced in turn)."""
    return message_values()


@pytest.fixture(scope="module")
def filled():
    """Topics known to hold the 1 M messages at offsets 0..999,999: the produce case adds its own."""
    return []


def create_topic(admin: AdminClient, name: str, partitions: int) -> float:
    """Create `name` with `partitions` partitions; the seconds it took."""
    started = time.perf_counter()
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=ADMIN_TIMEOUT,
                                      request_timeout=ADMIN_TIMEOUT).values():
        future.result()
    return time.perf_counter() - started


def end_offset(admin: AdminClient, topic: str, partition: int = 0) -> int:
    """The partition's log end offset (ListOffsets, latest)."""
    tp = TopicPartition(topic, partition)
    futures = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=ADMIN_TIMEOUT)
    return futures[tp].result().offset


# ---------------------------------------------------------------------------
# 1. Produce


class _Deliveries:
    """The producer's on_delivery callback: counts reports, keeps the first errors."""

    def __init__(self):
        self.count = 0
        self.errors: list = []

    def __call__(self, err, msg) -> None:
        self.count += 1
        if err is not None and len(self.errors) < 5:
            self.errors.append(err)


def new_producer(broker, topic: str, deliveries: _Deliveries) -> Producer:
    """An idempotent lz4 producer with PRODUCER_TUNING, connected and holding `topic`'s metadata."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER_CONFIG, "on_delivery": deliveries})
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT)
    return producer


def produce_all(producer: Producer, topic: str, values: list[bytes], count: int = MESSAGES) -> None:
    """produce() `count` values (cycling through `values`) to the topic's one partition, then flush()."""
    produce, poll, mask = producer.produce, producer.poll, len(values) - 1
    for i in range(count):
        try:
            produce(topic, values[i & mask])
        except BufferError:
            # Not expected with queue.buffering.max.messages above `count`; a user waits the same way.
            poll(0.1)
            produce(topic, values[i & mask])
    if producer.flush(FLUSH_TIMEOUT) != 0:
        raise AssertionError(f"messages still undelivered {FLUSH_TIMEOUT} s into flush()")


def batches_of(values: list[bytes], count: int = MESSAGES) -> list[list[dict]]:
    """The same `count` values as produce_all sends, as produce_batch() message lists (built untimed)."""
    mask = len(values) - 1
    return [[{"value": values[i & mask]} for i in range(start, start + PRODUCE_BATCH)]
            for start in range(0, count, PRODUCE_BATCH)]


def produce_batched(producer: Producer, topic: str, batches: list[list[dict]]) -> None:
    """produce_batch() of PRODUCE_BATCH messages at a time (the client's bulk call), then flush()."""
    produce_batch, poll = producer.produce_batch, producer.poll
    for batch in batches:
        queued = produce_batch(topic, batch)
        if queued != len(batch):
            raise AssertionError(f"produce_batch queued {queued} of {len(batch)}")
        poll(0)
    if producer.flush(FLUSH_TIMEOUT) != 0:
        raise AssertionError(f"messages still undelivered {FLUSH_TIMEOUT} s into flush()")


def check_produced(admin: AdminClient, topic: str, deliveries: _Deliveries) -> None:
    """Every message delivered once, no error, and the partition ends at MESSAGES."""
    assert not deliveries.errors, deliveries.errors
    assert deliveries.count == MESSAGES
    assert end_offset(admin, topic) == MESSAGES


@pytest.mark.parametrize("api", ["produce", "produce_batch"])
def test_produce(benchmark, broker, admin, values, filled, api):
    assert len(values) & (len(values) - 1) == 0, "the value pool is cycled with a bit mask"
    assert MESSAGES % PRODUCE_BATCH == 0
    batches = batches_of(values) if api == "produce_batch" else None
    meter = _Meter(broker.proc.pid)
    made: list[tuple[str, Producer, _Deliveries]] = []

    def setup():
        topic = f"{api}-{len(made)}"
        create_topic(admin, topic, 1)
        deliveries = _Deliveries()
        producer = new_producer(broker, topic, deliveries)
        made.append((topic, producer, deliveries))
        return (producer, topic, values if batches is None else batches), {}

    _tag(benchmark, "produce", f"1m-100b-lz4-idempotent-{api}", target_msg_per_s=PRODUCE_TARGET_MSG_S,
         target_broker_below_client=True, config=dict(PRODUCER_CONFIG),
         api=f"confluent-kafka Producer.{api}() x1M + flush()")
    send = produce_all if api == "produce" else produce_batched
    benchmark.pedantic(lambda *args: meter.run(send, *args), setup=setup,
                       rounds=PRODUCE_ROUNDS, iterations=1)

    for topic, _producer, deliveries in made:
        check_produced(admin, topic, deliveries)
    filled.append(made[-1][0])
    made.clear()  # the producers' threads end with them
    meter.record(benchmark, messages=MESSAGES, payload_bytes=MESSAGES * VALUE_BYTES)


# ---------------------------------------------------------------------------
# 2. Consume


def consume_all(consumer: Consumer, topic: str, count: int = MESSAGES) -> tuple[int, int, int, bytes]:
    """assign() the topic's partition from the beginning and read `count` messages; (read, first, last, last value)."""
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    consume = consumer.consume
    read, first, last = 0, None, None
    deadline = time.monotonic() + CONSUME_TIMEOUT
    while read < count:
        batch = consume(num_messages=CONSUME_BATCH, timeout=1.0)
        for message in batch:
            if message.error() is not None:
                raise AssertionError(f"consumer error after {read} messages: {message.error()}")
        if batch:
            read += len(batch)
            first = batch[0] if first is None else first
            last = batch[-1]
        elif time.monotonic() > deadline:
            raise AssertionError(f"{read} of {count} messages in {CONSUME_TIMEOUT} s")
    return read, first.offset(), last.offset(), last.value()


def test_consume(benchmark, broker, admin, values, filled):
    if not filled:
        topic = "consume-source"
        create_topic(admin, topic, 1)
        deliveries = _Deliveries()
        produce_all(new_producer(broker, topic, deliveries), topic, values)
        check_produced(admin, topic, deliveries)
        filled.append(topic)
    topic = filled[-1]
    meter = _Meter(broker.proc.pid)
    consumers: list[Consumer] = []
    results = []

    def setup():
        for c in consumers:
            c.close()
        consumers.clear()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, **CONSUMER_CONFIG})
        consumer.list_topics(topic, timeout=ADMIN_TIMEOUT)
        consumers.append(consumer)
        return (consumer, topic), {}

    def run(consumer, topic):
        results.append(meter.run(consume_all, consumer, topic))

    _tag(benchmark, "consume", "1m-100b-lz4", target_msg_per_s=CONSUME_TARGET_MSG_S,
         config=dict(CONSUMER_CONFIG, consume_batch=CONSUME_BATCH),
         api=f"confluent-kafka Consumer assign() + consume(num_messages={CONSUME_BATCH}) to 1M")
    try:
        benchmark.pedantic(run, setup=setup, rounds=CONSUME_ROUNDS, iterations=1)
    finally:
        for c in consumers:
            c.close()

    for read, first, last, last_value in results:
        assert (read, first, last) == (MESSAGES, 0, MESSAGES - 1)
        assert last_value == values[(MESSAGES - 1) % len(values)]
    meter.record(benchmark, messages=MESSAGES, payload_bytes=MESSAGES * VALUE_BYTES)


# ---------------------------------------------------------------------------
# 3. 200 connections x 1,000 partitions


METADATA = KioCall(3, METADATA_VERSION)
PRODUCE = KioCall(0, PRODUCE_VERSION)


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes) -> bytes:
    writer.write(frame)
    await writer.drain()
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


class _WideRound:
    """One round of the wide case: WIDE_CONNECTIONS connections, Metadata, then one Produce each."""

    def __init__(self, port: int, batch: bytes, round_number: int):
        self.port = port
        self.batch = batch
        self.base_offset = round_number * WIDE_RECORDS
        self.metadata_seconds: list[float] = []
        self.produce_seconds: list[float] = []
        self.rows: list[tuple[int, int, int]] = []  # (partition, error code, base offset) of every response

    def errors(self) -> list[tuple[int, int, int]]:
        """The partition responses with an error, or without this round's base offset, or missing."""
        answered = {row[0] for row in self.rows}
        bad = [row for row in self.rows if row[1] != ErrorCode.none or row[2] != self.base_offset]
        bad += [(p, -1, -1) for p in range(WIDE_PARTITIONS) if p not in answered]
        if len(self.rows) != len(answered):
            bad.append((-1, -1, len(self.rows) - len(answered)))  # partitions answered twice
        return bad

    def produce_request(self, connection: int) -> bytes:
        """The Produce frame of connection `connection`: one batch to each partition of its slice."""
        types = PRODUCE.types
        partitions = range(connection * WIDE_SLICE, (connection + 1) * WIDE_SLICE)
        body = types.ProduceRequest(
            transactional_id=None, acks=i16(-1),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=WIDE_REQUEST_TIMEOUT_MS)),
            topic_data=(types.TopicProduceData(name=WIDE_TOPIC, partition_data=tuple(
                types.PartitionProduceData(index=i32(p), records=self.batch) for p in partitions)),))
        return PRODUCE.frame(2, body)

    async def connection(self, number: int, barrier: asyncio.Barrier) -> None:
        """Connect, Metadata (checked), wait for every connection, Produce; time both requests."""
        types = METADATA.types
        metadata = METADATA.frame(1, types.MetadataRequest(
            topics=(types.MetadataRequestTopic(topic_id=None, name=WIDE_TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        produce = self.produce_request(number)
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            started = time.perf_counter()
            answer = METADATA.read(await _exchange(reader, writer, metadata), 1)
            self.metadata_seconds.append(time.perf_counter() - started)
            (topic,) = answer.topics
            assert topic.error_code == ErrorCode.none, topic.error_code
            assert sorted(p.partition_index for p in topic.partitions if p.error_code == ErrorCode.none) \
                == list(range(WIDE_PARTITIONS))
            await barrier.wait()

            started = time.perf_counter()
            frame = await _exchange(reader, writer, produce)
            self.produce_seconds.append(time.perf_counter() - started)
            (topic,) = PRODUCE.read(frame, 2).responses
            assert topic.name == WIDE_TOPIC, topic.name
            self.rows.extend((p.index, p.error_code, p.base_offset) for p in topic.partition_responses)
        finally:
            writer.close()
            await writer.wait_closed()

    async def run(self) -> _WideRound:
        """All connections at once; every Produce leaves after every Metadata answer is in."""
        barrier = asyncio.Barrier(WIDE_CONNECTIONS)
        async with asyncio.timeout(WIDE_ROUND_TIMEOUT):
            async with asyncio.TaskGroup() as tasks:
                for number in range(WIDE_CONNECTIONS):
                    tasks.create_task(self.connection(number, barrier))
        return self


def _milliseconds(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"p50": nearest_rank(ordered, 50) * 1e3, "p99": nearest_rank(ordered, 99) * 1e3,
            "max": ordered[-1] * 1e3, "count": len(ordered)}


def test_wide(benchmark, broker, admin, values):
    create_seconds = create_topic(admin, WIDE_TOPIC, WIDE_PARTITIONS)
    timestamp = int(time.time() * 1000)
    batch = K.encode_batch([None] * WIDE_RECORDS, values[:WIDE_RECORDS], None, timestamp, compression=K.LZ4)
    meter = _Meter(broker.proc.pid)
    rounds: list[_WideRound] = []

    def run():
        one = _WideRound(broker.port, batch, len(rounds))
        rounds.append(one)
        meter.run(asyncio.run, one.run())

    _tag(benchmark, "wide", f"{WIDE_CONNECTIONS}conn-{WIDE_PARTITIONS}part",
         api=f"asyncio + kio: Metadata v{METADATA_VERSION}, then Produce v{PRODUCE_VERSION} acks=-1 "
             f"to {WIDE_SLICE} partitions per connection",
         connections=WIDE_CONNECTIONS, partitions=WIDE_PARTITIONS, partitions_per_request=WIDE_SLICE,
         records_per_batch=WIDE_RECORDS, batch_bytes=len(batch), create_topic_seconds=create_seconds)
    benchmark.pedantic(run, rounds=WIDE_ROUNDS, warmup_rounds=WIDE_WARMUP_ROUNDS, iterations=1)

    assert len(rounds) == WIDE_WARMUP_ROUNDS + WIDE_ROUNDS
    warmup, timed = rounds[:WIDE_WARMUP_ROUNDS], rounds[WIDE_WARMUP_ROUNDS:]
    errors = [row for one in rounds for row in one.errors()]
    benchmark.extra_info.update(
         errors=len(errors), partition_responses=sum(len(one.rows) for one in timed),
         produce_ms=_milliseconds([s for one in timed for s in one.produce_seconds]),
         metadata_ms=_milliseconds([s for one in timed for s in one.metadata_seconds]),
         warmup_produce_ms=_milliseconds([s for one in warmup for s in one.produce_seconds]),
         broker_cpu_s=meter.broker_cpu[WIDE_WARMUP_ROUNDS:], client_cpu_s=meter.client_cpu[WIDE_WARMUP_ROUNDS:])
    # (partition, error code, base offset); -1: no response for that partition
    assert not errors, errors[:10]
