"""Transactional producers and assigned consumers of confluent-kafka, kafka-python and aiokafka behind one
small synchronous interface, and the transactions of a partition as its segment files hold them.

Each adapter calls only its client's public API. aiokafka's coroutines run on an event loop in a thread of
the adapter's own, so its sender and fetcher keep running between calls, as in an application.

Run as a script, `python txn_helpers.py vanish CLIENT BOOTSTRAP TXN_ID TOPIC PARTITIONS COUNT TIMEOUT_MS`
is a producer that opens a transaction, writes COUNT records round-robin over the partitions, prints
their (partition, offset, value) as one JSON line once they are on the broker, and then waits to be killed.
"""
from __future__ import annotations

import asyncio
import json
import selectors
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import aiokafka
import aiokafka.errors
import kafka
import kafka.errors
from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTP
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from segment_files import batches, segment_paths

TIMEOUT = 15.0  # s: a bound on any single wait; the tests finish far below it
POLL = 0.05     # s: how long one poll waits for records before positions are checked again
CLIENTS = ("confluent", "kafka-python", "aiokafka")


class Record(NamedTuple):
    """One record as a producer's delivery report or a consumer gave it."""

    partition: int
    offset: int
    value: bytes


def by_partition(records) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of the records of each partition, in the order given."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for r in records:
        out.setdefault(r.partition, []).append((r.offset, r.value))
    return out


# -- admin, through confluent-kafka whatever the client under test ------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` with `partitions` partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT) is None


def list_offsets(bootstrap: str, topic: str, partitions: int, committed: bool) -> dict[int, int]:
    """Each partition's latest offset as ListOffsets answers: the last stable offset with read_committed,
    the high watermark without."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    asked = {ConfluentTP(topic, p): OffsetSpec.latest() for p in range(partitions)}
    found = admin.list_offsets(asked, isolation_level=level, request_timeout=TIMEOUT)
    return {tp.partition: f.result(TIMEOUT).offset for tp, f in found.items()}


# -- producers ----------------------------------------------------------------------------------------------

class _LoopThread:
    """An asyncio loop running in a daemon thread; `run` waits for one coroutine on it."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro, timeout: float = TIMEOUT):
        """The result of `coro` run on the loop (its exception raised here)."""
        async def bounded():
            return await asyncio.wait_for(coro, timeout)
        return asyncio.run_coroutine_threadsafe(bounded(), self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT)
        self.loop.close()


class TxnProducer:
    """A transactional producer of one client: init, begin, send, flush, commit, abort, close.

    `send` only queues; `flush` waits for everything sent since the last flush and returns the delivered
    records in send order, raising the first failure. `fenced(exc)` says whether `exc` is the client's
    way of reporting that a newer instance holds the transactional id.
    """

    client: str

    _closed = False

    def fenced(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def settle(self) -> None:
        """Wait for what a failed write started in the client's background (nothing, but in kafka-python)."""

    def close(self) -> None:
        """Close the client, once (later calls do nothing)."""
        if not self._closed:
            self._closed = True
            self._close()


class ConfluentTxnProducer(TxnProducer):
    client = "confluent"
    FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None = None):
        config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
        if timeout_ms is not None:
            # librdkafka lowers message.timeout.ms and socket.timeout.ms to fit under it.
            config["transaction.timeout.ms"] = timeout_ms
        self._p = Producer(config)
        self._slots: list[list] = []

    def init(self):
        self._p.init_transactions(TIMEOUT)

    def begin(self):
        self._p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes):
        slot = [None, None]

        def on_delivery(err, msg, slot=slot):
            slot[:] = [err, msg]
        self._slots.append(slot)
        self._p.produce(topic, value=value, partition=partition, on_delivery=on_delivery)

    def flush(self) -> list[Record]:
        slots, self._slots = self._slots, []
        assert self._p.flush(TIMEOUT) == 0, "messages still undelivered after flush"
        for err, _ in slots:
            if err is not None:
                raise KafkaException(err)
        return [Record(m.partition(), m.offset(), m.value()) for _, m in slots]

    def commit(self):
        self._p.commit_transaction(TIMEOUT)

    def abort(self):
        self._p.abort_transaction(TIMEOUT)

    def _close(self):
        # close() aborts an open transaction, which a fenced producer cannot: it warns or raises the fatal
        # error the test has already seen.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                self._p.close()
            except KafkaException as exc:
                if not exc.args[0].fatal():
                    raise

    def fenced(self, exc):
        return isinstance(exc, KafkaException) and exc.args[0].code() in self.FENCED


class KafkaPythonTxnProducer(TxnProducer):
    client = "kafka-python"

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None = None):
        extra = {} if timeout_ms is None else {"transaction_timeout_ms": timeout_ms}
        self._p = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5,
                                      max_block_ms=int(TIMEOUT * 1000), **extra)
        self._sent: list = []

    def init(self):
        self._p.init_transactions()

    def begin(self):
        self._p.begin_transaction()

    def send(self, topic, partition, value):
        self._sent.append((self._p.send(topic, value=value, partition=partition), value))

    def flush(self):
        sent, self._sent = self._sent, []
        self._p.flush(timeout=TIMEOUT)
        metas = [(f.get(timeout=TIMEOUT), v) for f, v in sent]
        return [Record(m.partition, m.offset, v) for m, v in metas]

    def commit(self):
        self._p.commit_transaction()

    def abort(self):
        self._p.abort_transaction()

    def _close(self):
        self._p.close(timeout=TIMEOUT)

    def fenced(self, exc):
        return isinstance(exc, (kafka.errors.ProducerFencedError, kafka.errors.InvalidProducerEpochError))

    def settle(self):
        # After INVALID_PRODUCER_EPOCH kafka-python asks for a bumped epoch in the background (KIP-360), with its
        # own (id, epoch). Kafka's coordinator checks only the id before it fences an open transaction, so that
        # request, landing in a successor's transaction, would abort it; its answer ends the zombie's attempt.
        manager = self._p._transaction_manager
        deadline = time.monotonic() + TIMEOUT
        while manager is not None and manager.is_bumping_epoch():
            assert time.monotonic() < deadline, "kafka-python's epoch bump got no answer"
            time.sleep(0.01)   # the client has no callback for it


class AiokafkaTxnProducer(TxnProducer):
    client = "aiokafka"

    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int | None = None):
        self._loop = _LoopThread()
        extra = {} if timeout_ms is None else {"transaction_timeout_ms": timeout_ms}

        async def make():
            return aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                             linger_ms=5, **extra)
        self._p = self._loop.run(make())
        self._sent: list[tuple[asyncio.Future, bytes]] = []
        self._started = False

    def init(self):
        self._loop.run(self._p.start())  # InitProducerId is part of start()
        self._started = True

    def begin(self):
        self._loop.run(self._p.begin_transaction())

    def send(self, topic, partition, value):
        self._sent.append((self._loop.run(self._p.send(topic, value=value, partition=partition)), value))

    def flush(self):
        sent, self._sent = self._sent, []

        async def delivered():
            await self._p.flush()
            return [(await f, v) for f, v in sent]
        return [Record(m.partition, m.offset, v) for m, v in self._loop.run(delivered())]

    def commit(self):
        self._loop.run(self._p.commit_transaction())

    def abort(self):
        self._loop.run(self._p.abort_transaction())

    def _close(self):
        try:
            if self._started:
                self._loop.run(self._p.stop())
        finally:
            self._loop.close()

    def fenced(self, exc):
        return isinstance(exc, (aiokafka.errors.ProducerFenced, aiokafka.errors.InvalidProducerEpoch))


PRODUCERS = {c.client: c for c in (ConfluentTxnProducer, KafkaPythonTxnProducer, AiokafkaTxnProducer)}


def txn_producer(client: str, bootstrap: str, transactional_id: str, timeout_ms: int | None = None) -> TxnProducer:
    """A transactional producer of `client` (one of CLIENTS), not yet initialised."""
    return PRODUCERS[client](bootstrap, transactional_id, timeout_ms)


# -- consumers ----------------------------------------------------------------------------------------------

class Reader:
    """A consumer assigned to partitions 0..n-1 of a topic from their start, read_committed or not, no group.

    `end_offsets` asks the broker with the consumer's own isolation level (ListOffsets: the last stable
    offset for read_committed, the high watermark otherwise); `read_until` consumes until each position
    reached its target, so a test waits for the event it expects and never counts what a timed poll found.
    """

    client: str

    def __init__(self, bootstrap: str, topic: str, partitions: int, committed: bool):
        self.topic = topic
        self.partitions = range(partitions)
        self.isolation = "read_committed" if committed else "read_uncommitted"

    def poll(self, timeout: float) -> list[Record]:
        """What one poll of at most `timeout` s brought."""
        raise NotImplementedError

    def position(self, partition: int) -> int:
        raise NotImplementedError

    def end_offsets(self) -> dict[int, int]:
        raise NotImplementedError

    def fetched_high_watermark(self, partition: int) -> int:
        """The high watermark the last Fetch response of the partition reported."""
        raise NotImplementedError

    def read_until(self, ends: dict[int, int], timeout: float = TIMEOUT) -> list[Record]:
        """Every record until each partition's position is at least `ends[partition]`."""
        got: list[Record] = []
        deadline = time.monotonic() + timeout
        while True:
            behind = {p: (self.position(p), end) for p, end in ends.items() if self.position(p) < end}
            if not behind:
                return got
            assert time.monotonic() < deadline, \
                f"after {timeout} s, (position, target) of partitions still behind: {behind}; got {got}"
            got.extend(self.poll(POLL))

    def read_to_end(self) -> list[Record]:
        """Every record up to the end offsets the consumer itself looks up now."""
        return self.read_until(self.end_offsets())

    _closed = False

    def close(self) -> None:
        """Close the client, once (later calls do nothing)."""
        if not self._closed:
            self._closed = True
            self._close()


class ConfluentReader(Reader):
    client = "confluent"

    def __init__(self, bootstrap, topic, partitions, committed):
        super().__init__(bootstrap, topic, partitions, committed)
        # librdkafka wants a group.id, but with assign() it never joins (there is no group coordinator).
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-no-coordinator",
                            "enable.auto.commit": False, "isolation.level": self.isolation,
                            "fetch.wait.max.ms": 50})
        self._c.assign([ConfluentTP(topic, p, OFFSET_BEGINNING) for p in self.partitions])

    def poll(self, timeout):
        msg = self._c.poll(timeout)
        if msg is None:
            return []
        if msg.error() is not None:
            raise KafkaException(msg.error())
        return [Record(msg.partition(), msg.offset(), msg.value())]

    def position(self, partition):
        return self._c.position([ConfluentTP(self.topic, partition)])[0].offset

    def end_offsets(self):
        # Uncached: a ListOffsets with the consumer's isolation level.
        return {p: self._c.get_watermark_offsets(ConfluentTP(self.topic, p), timeout=TIMEOUT, cached=False)[1]
                for p in self.partitions}

    def fetched_high_watermark(self, partition):
        return self._c.get_watermark_offsets(ConfluentTP(self.topic, partition), cached=True)[1]

    def _close(self):
        self._c.close()


class KafkaPythonReader(Reader):
    client = "kafka-python"

    def __init__(self, bootstrap, topic, partitions, committed):
        super().__init__(bootstrap, topic, partitions, committed)
        self._c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest", isolation_level=self.isolation,
                                      fetch_max_wait_ms=50)
        self._tps = {p: kafka.TopicPartition(topic, p) for p in self.partitions}
        self._c.assign(list(self._tps.values()))

    def poll(self, timeout):
        batches_ = self._c.poll(timeout_ms=int(timeout * 1000))
        return [Record(r.partition, r.offset, r.value) for records in batches_.values() for r in records]

    def position(self, partition):
        return self._c.position(self._tps[partition], timeout_ms=int(TIMEOUT * 1000))

    def end_offsets(self):
        found = self._c.end_offsets(list(self._tps.values()), timeout_ms=int(TIMEOUT * 1000))
        return {tp.partition: offset for tp, offset in found.items()}

    def fetched_high_watermark(self, partition):
        return self._c.highwater(self._tps[partition])

    def _close(self):
        self._c.close()


class AiokafkaReader(Reader):
    client = "aiokafka"

    def __init__(self, bootstrap, topic, partitions, committed):
        super().__init__(bootstrap, topic, partitions, committed)
        self._loop = _LoopThread()
        self._tps = {p: aiokafka.TopicPartition(topic, p) for p in self.partitions}

        async def make():
            c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                          auto_offset_reset="earliest", isolation_level=self.isolation,
                                          fetch_max_wait_ms=50)
            await c.start()
            c.assign(list(self._tps.values()))
            return c
        self._c = self._loop.run(make())

    def poll(self, timeout):
        batches_ = self._loop.run(self._c.getmany(timeout_ms=int(timeout * 1000)))
        return [Record(r.partition, r.offset, r.value) for records in batches_.values() for r in records]

    def position(self, partition):
        return self._loop.run(self._c.position(self._tps[partition]))

    def end_offsets(self):
        found = self._loop.run(self._c.end_offsets(list(self._tps.values())))
        return {tp.partition: offset for tp, offset in found.items()}

    def fetched_high_watermark(self, partition):
        return self._c.highwater(self._tps[partition])

    def _close(self):
        try:
            self._loop.run(self._c.stop())
        finally:
            self._loop.close()


READERS = {c.client: c for c in (ConfluentReader, KafkaPythonReader, AiokafkaReader)}


def reader(client: str, bootstrap: str, topic: str, partitions: int, committed: bool) -> Reader:
    """A consumer of `client` assigned to every partition of `topic` from the beginning."""
    return READERS[client](bootstrap, topic, partitions, committed)


# -- the segment files --------------------------------------------------------------------------------------

class TxnOnDisk(NamedTuple):
    """One producer's transactional records in a partition up to its marker (None: no marker yet)."""

    producer_id: int
    data_epochs: tuple[int, ...]   # the epochs of its data batches
    first_sequence: int            # the base sequence of its first data batch
    values: tuple[bytes, ...]
    outcome: str | None            # "commit" or "abort", from the control record
    marker_epoch: int | None


def transactions_on_disk(data_dir: Path, topic: str, partition: int) -> list[TxnOnDisk]:
    """The transactions of one partition in the order their markers were written, then any still open.

    Each control batch ends what its producer wrote since that producer's previous marker, so a marker
    written twice shows as a second transaction without values.
    """
    open_: dict[int, list] = {}
    ended: list[TxnOnDisk] = []
    for path in segment_paths(data_dir, topic, partition):
        for batch in batches(path, whole=False):  # the broker is running: its tail may be mid-write
            pid = batch.producer_id
            if batch.is_control_batch:
                (record,) = list(batch)
                epochs, first_sequence, values = open_.pop(pid, ([], -1, []))
                ended.append(TxnOnDisk(pid, tuple(sorted(set(epochs))), first_sequence, tuple(values),
                                       "commit" if record.commit else "abort", batch.producer_epoch))
            elif batch.is_transactional:
                epochs, first_sequence, values = open_.setdefault(pid, ([], batch.base_sequence, []))
                epochs.append(batch.producer_epoch)
                values.extend(r.value for r in batch)
    return ended + [TxnOnDisk(pid, tuple(sorted(set(epochs))), first_sequence, tuple(values), None, None)
                    for pid, (epochs, first_sequence, values) in open_.items()]


# -- a producer that vanishes ---------------------------------------------------------------------------------

def read_line(proc, timeout: float = TIMEOUT) -> str:
    """One line of a subprocess's stdout, waiting at most `timeout` s; '' if it closed first."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout), f"no line from {proc.args} within {timeout} s"
    return proc.stdout.readline()


def _vanish(client: str, bootstrap: str, transactional_id: str, topic: str, partitions: str, count: str,
            timeout_ms: str) -> None:
    p = txn_producer(client, bootstrap, transactional_id, int(timeout_ms))
    p.init()
    p.begin()
    for i in range(int(count)):
        p.send(topic, i % int(partitions), b"vanished %d" % i)
    delivered = p.flush()
    print(json.dumps([[r.partition, r.offset, r.value.decode()] for r in delivered]), flush=True)
    sys.stdin.read()  # until the test kills this process (or, if the test died, closes the pipe)


if __name__ == "__main__":
    assert sys.argv[1] == "vanish", sys.argv
    _vanish(*sys.argv[2:])
