"""Streaming reads (`spark.readStream.format("logstore")`): committed records exactly once across restarts.

The sink (`spark_stream_driver.BatchFiles`) writes each micro-batch to a file
named by its batch id, atomically, so a batch Spark replays from its checkpoint
replaces its earlier file: what the files hold together is what the stream
delivered. A batch's end offsets are read back from the checkpoint's offset log.
"""
from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import logstore
from spark_stream_driver import BatchFiles, checkpoint_offsets, start_stream
from txn_helpers import ConfluentTxnProducer, create_topic

TIMEOUT = 120.0  # s: a bound on waiting for a stream, a driver process or a producer
PARTITIONS = 3
DRIVER = Path(__file__).with_name("spark_stream_driver.py")


class TxnTraffic:
    """Transactional confluent-kafka producers on a live broker, each in a thread of its own, committing
    about 70% of their transactions and aborting the rest.

    A transaction runs only once `release` has handed it out, so a test decides how much traffic
    overlaps each phase of a stream. `committed` and `aborted` hold the (partition, offset, value) of
    every record the delivery reports gave; `finish` ends the producers and raises their first failure.
    """

    def __init__(self, bootstrap: str, topic: str, *, producers: int, seed: int):
        self.bootstrap, self.topic = bootstrap, topic
        self.committed: list[tuple[int, int, str]] = []
        self.aborted: list[tuple[int, int, str]] = []
        self._work: queue.Queue = queue.Queue()
        self._failures: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(f"streamer-{seed}-{i}", random.Random(seed * 7 + i)))
                         for i in range(producers)]
        for thread in self._threads:
            thread.start()

    def release(self, transactions: int) -> None:
        """Let the producers run `transactions` more transactions between them."""
        for _ in range(transactions):
            self._work.put(True)

    def finish(self) -> None:
        """Run what was released, stop the producers and raise the first failure."""
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join(TIMEOUT)
            assert not thread.is_alive(), "a producer did not finish"
        if self._failures:
            raise self._failures[0]

    def _run(self, transactional_id: str, rng: random.Random) -> None:
        producer = ConfluentTxnProducer(self.bootstrap, transactional_id)
        try:
            producer.init()
            txn = 0
            while self._work.get(timeout=TIMEOUT):
                producer.begin()
                for i in range(rng.randint(1, 6)):
                    producer.send(self.topic, rng.randrange(PARTITIONS), f"{transactional_id}/{txn}/{i}".encode())
                records = [(r.partition, r.offset, r.value.decode()) for r in producer.flush()]
                commit = rng.random() < 0.7
                # EndTxn is answered once the markers are on disk: the LSO has passed these records.
                producer.commit() if commit else producer.abort()
                with self._lock:
                    (self.committed if commit else self.aborted).extend(records)
                txn += 1
        except BaseException as exc:  # noqa: BLE001 - raised again by finish() on the test's thread
            self._failures.append(exc)
        finally:
            producer.close()


def assert_exactly_once(sink: BatchFiles, traffic: TxnTraffic, snapshots: list[dict[str, str]]) -> None:
    """The sink holds each committed record once, no aborted one, each partition in offset order, and
    every batch file seen earlier is unchanged (a batch replayed after a stop or a kill read the same rows)."""
    rows = sink.rows()
    duplicated = [row for row, n in Counter(rows).items() if n > 1]
    assert not duplicated, f"delivered more than once: {duplicated[:10]}"
    assert not set(rows) & set(traffic.aborted), "aborted records delivered"
    assert set(rows) == set(traffic.committed)
    for partition in range(PARTITIONS):
        offsets = [o for p, o, _ in rows if p == partition]
        assert offsets == sorted(offsets), f"partition {partition} out of offset order"
    final = sink.files()
    for snapshot in snapshots:
        for name, text in snapshot.items():
            assert final[name] == text, f"batch file {name} changed when its batch was replayed"


def finish_available_now(spark, path, topic: str, sink: BatchFiles, checkpoint: Path, **options) -> None:
    """Run the stream on `checkpoint` with Trigger.AvailableNow to its end."""
    query = start_stream(spark, path, topic, sink, checkpoint, available_now=True, **options)
    assert query.awaitTermination(TIMEOUT), "AvailableNow did not finish"


# -- restarts over a live broker's directory -----------------------------------------------------------------

def test_a_stream_stopped_and_restarted_while_transactions_commit_and_abort_delivers_each_committed_record_once(
        spark, start_broker, tmp_path):
    broker = start_broker("log.segment.bytes=2000")
    create_topic(broker.bootstrap, "orders", PARTITIONS)
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"
    traffic = TxnTraffic(broker.bootstrap, "orders", producers=2, seed=8)
    snapshots = []
    try:
        for _ in range(4):
            delivered = len(sink.rows())
            query = start_stream(spark, broker.data_dir, "orders", sink, checkpoint, available_now=False,
                                 startingOffsets="earliest", maxOffsetsPerTrigger=25)
            traffic.release(8)
            try:
                # Stopped as soon as it delivered something new, while the producers are mid-round.
                assert sink.wait_for(lambda rows: len(rows) > delivered, TIMEOUT), "the stream delivered nothing"
            finally:
                query.stop()
            snapshots.append(sink.files())
    finally:
        traffic.finish()
    finish_available_now(spark, broker.data_dir, "orders", sink, checkpoint, startingOffsets="earliest",
                         maxOffsetsPerTrigger=25)
    assert traffic.committed and traffic.aborted
    assert_exactly_once(sink, traffic, snapshots)


class Driver:
    """`spark_stream_driver.py` in a process group of its own: its JVM and Python workers die with it.

    The driver holds each batch in its sink after the batch's file is written (before Spark commits the
    batch) until `proceed`; a kill there leaves the batch planned but not committed.
    """

    def __init__(self, tmp_path: Path, spec: dict):
        self.log = tmp_path / f"driver-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, str(DRIVER), json.dumps(spec)], cwd=tmp_path,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         start_new_session=True, text=True)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.split())
        self._lines.put(None)

    def next_batch(self) -> int:
        """The id of the next batch the driver delivered (and now holds)."""
        while True:
            try:
                line = self._lines.get(timeout=TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"no batch from the driver in {TIMEOUT} s:\n{self.log.read_text()}") from None
            assert line is not None, f"the driver exited with {self.proc.wait()}:\n{self.log.read_text()}"
            if line[0] == "batch":
                return int(line[1])

    def proceed(self) -> None:
        """Let the held batch finish."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL the driver's whole process group and reap it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        self.proc.stdin.close()
        self.proc.stdout.close()


def kill_driver_mid_stream(tmp_path: Path, spec: dict, traffic: TxnTraffic, rng: random.Random) -> int | None:
    """Run a driver until it has delivered a few batches while traffic goes on, then SIGKILL it: at a held
    batch, or a moment after letting it go. Returns the id of the batch it held when killed, if it did."""
    driver = Driver(tmp_path, spec)
    try:
        for _ in range(rng.randint(1, 3)):
            driver.next_batch()
            traffic.release(4)
            driver.proceed()
        held = driver.next_batch()
        if rng.random() < 0.5:
            driver.proceed()
            held = None
            # Fault injection, not a wait for an event: the kill lands at an arbitrary point of the next trigger.
            time.sleep(rng.uniform(0.0, 1.0))
    finally:
        driver.kill()
    return held


def held_batch_is_uncommitted(checkpoint: Path, batch: int) -> bool:
    """Whether Spark planned `batch` (offset log) but never committed it (commit log)."""
    return (checkpoint / "offsets" / str(batch)).exists() and not (checkpoint / "commits" / str(batch)).exists()


def run_killed_driver(spark, start_broker, tmp_path: Path, seed: int, kills: int) -> None:
    """Stream a live broker's transactions through driver processes SIGKILLed `kills` times, then finish
    on the same checkpoint in this process's session and check the sink."""
    rng = random.Random(seed)
    broker = start_broker("log.segment.bytes=2000")
    create_topic(broker.bootstrap, "payments", PARTITIONS)
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"
    spec = {"path": str(broker.data_dir), "topic": "payments", "sink": str(sink.directory),
            "checkpoint": str(checkpoint), "options": {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 15}}
    traffic = TxnTraffic(broker.bootstrap, "payments", producers=2, seed=seed)
    snapshots = []
    try:
        traffic.release(6)
        for _ in range(kills):
            held = kill_driver_mid_stream(tmp_path, spec, traffic, rng)
            assert held is None or held_batch_is_uncommitted(checkpoint, held)
            snapshots.append(sink.files())
            traffic.release(rng.randint(0, 6))
    finally:
        traffic.finish()
    finish_available_now(spark, broker.data_dir, "payments", sink, checkpoint, **spec["options"])
    assert_exactly_once(sink, traffic, snapshots)


def test_a_stream_whose_driver_is_killed_while_holding_a_batch_delivers_each_committed_record_once(
        spark, start_broker, tmp_path):
    broker = start_broker("log.segment.bytes=2000")
    create_topic(broker.bootstrap, "payments", PARTITIONS)
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"
    spec = {"path": str(broker.data_dir), "topic": "payments", "sink": str(sink.directory),
            "checkpoint": str(checkpoint), "options": {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 15}}
    traffic = TxnTraffic(broker.bootstrap, "payments", producers=2, seed=9)
    try:
        traffic.release(6)
        driver = Driver(tmp_path, spec)
        try:
            driver.next_batch()
            traffic.release(6)
            driver.proceed()
            held = driver.next_batch()
        finally:
            driver.kill()
        snapshot = sink.files()
        traffic.release(6)
    finally:
        traffic.finish()
    assert held_batch_is_uncommitted(checkpoint, held)
    assert f"{held:06d}.json" in snapshot
    finish_available_now(spark, broker.data_dir, "payments", sink, checkpoint, **spec["options"])
    assert_exactly_once(sink, traffic, [snapshot])


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(4))
def test_soak_a_stream_whose_driver_is_killed_again_and_again_delivers_each_committed_record_once(
        spark, start_broker, tmp_path, seed):
    run_killed_driver(spark, start_broker, tmp_path, seed, kills=4)


# -- rate limits, AvailableNow, open transactions, starting offsets, new partitions ------------------------------

def test_max_offsets_per_trigger_counts_markers_and_splits_in_proportion_to_each_backlog(spark, tmp_path):
    data = tmp_path / "data"
    with logstore.open(str(data), {"segment.bytes": 1024}) as store:
        store.create_topic("t", partitions=2)
        p0, p1 = store.log("t", 0), store.log("t", 1)
        for i in range(10):
            p0.append_records([b"a%d" % o for o in range(i * 10, i * 10 + 10)])                # 0..99
        p1.append_records([b"b%d" % o for o in range(4)])                                   # 0..3
        p1.append_records([b"b%d" % o for o in range(4, 8)])                                # 4..7
        p1.append_records([b"c8", b"c9", b"c10"], producer_id=9, producer_epoch=0, base_sequence=0,
                          transactional=True)                                               # 8..10
        p1.append_records([b"x%d" % o for o in range(11, 16)], producer_id=10, producer_epoch=0,
                          base_sequence=0, transactional=True)                              # 11..15
        p1.append_records([b"c16", b"c17"], producer_id=9, producer_epoch=0, base_sequence=3,
                          transactional=True)                                               # 16..17
        p1.write_txn_marker(9, 0, 0, commit=True)                                           # 18
        p1.write_txn_marker(10, 0, 0, commit=False)                                         # 19
    committed = {0: set(range(100)), 1: set(range(11)) | {16, 17}}

    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"
    finish_available_now(spark, data, "t", sink, checkpoint, startingOffsets="earliest", maxOffsetsPerTrigger=30)
    # Backlogs of 100 and 20 offsets (markers and aborted records count): shares of 25 and 5 per batch.
    ends = checkpoint_offsets(checkpoint)
    assert ends == [{0: 25, 1: 5}, {0: 50, 1: 10}, {0: 75, 1: 15}, {0: 100, 1: 20}]
    batches = sink.batches()
    assert len(batches) == len(ends)
    for batch, start, end in zip(batches, [{0: 0, 1: 0}] + ends, ends):
        assert sorted((p, o) for p, o, _ in batch) == \
            [(p, o) for p in (0, 1) for o in sorted(committed[p]) if start[p] <= o < end[p]]
    assert {v for _, _, v in sink.rows()} == {f"a{o}" for o in range(100)} | \
        {f"b{o}" for o in range(8)} | {"c8", "c9", "c10", "c16", "c17"}


def test_available_now_stops_at_what_was_there_when_the_query_started(spark, tmp_path):
    data = tmp_path / "data"
    with logstore.open(str(data), {"segment.bytes": 1024}) as store:
        store.create_topic("t", partitions=1)
        for i in range(6):
            store.log("t", 0).append_records([b"a%d" % o for o in range(i * 10, i * 10 + 10)])  # 0..59
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"

    def sink_appending_on_the_first_batch(df, batch_id):
        sink(df, batch_id)
        if batch_id == 0:
            with logstore.open(str(data)) as store:
                store.log("t", 0).append_records([b"late%d" % o for o in range(60, 100)])      # 60..99

    finish_available_now(spark, data, "t", sink_appending_on_the_first_batch, checkpoint,
                         startingOffsets="earliest", maxOffsetsPerTrigger=20)
    assert checkpoint_offsets(checkpoint) == [{0: 20}, {0: 40}, {0: 60}]
    assert sink.rows() == [(0, o, f"a{o}") for o in range(60)]

    # The next AvailableNow run takes what was appended meanwhile.
    finish_available_now(spark, data, "t", sink, checkpoint, startingOffsets="earliest", maxOffsetsPerTrigger=20)
    assert sink.rows() == [(0, o, f"a{o}") for o in range(60)] + [(0, o, f"late{o}") for o in range(60, 100)]


def test_an_open_transaction_holds_the_stream_at_its_first_offset_until_it_commits(spark, tmp_path):
    data = tmp_path / "data"
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"

    def offsets(rows, partition):
        return [o for p, o, _ in rows if p == partition]

    with logstore.open(str(data), {"segment.bytes": 1024}) as store:
        store.create_topic("t", partitions=2)
        p0, p1 = store.log("t", 0), store.log("t", 1)
        p0.append_records([b"a%d" % o for o in range(10)])                                   # 0..9
        p1.append_records([b"b%d" % o for o in range(5)])                                    # 0..4
        p1.append_records([b"t5", b"t6"], producer_id=7, producer_epoch=0, base_sequence=0,
                          transactional=True)                                                # 5..6, open
        p1.append_records([b"b7", b"b8"])                                                    # 7..8
        query = start_stream(spark, data, "t", sink, checkpoint, available_now=False, startingOffsets="earliest")
        try:
            assert sink.wait_for(lambda rows: offsets(rows, 0) == list(range(10)) and
                                 offsets(rows, 1) == list(range(5)), TIMEOUT)
            p0.append_records([b"a%d" % o for o in range(10, 15)])                           # 10..14
            assert sink.wait_for(lambda rows: offsets(rows, 0) == list(range(15)), TIMEOUT)
            # p0 moved on; p1 stayed at the open transaction though b7 and b8 are written after it.
            assert offsets(sink.rows(), 1) == list(range(5))
            assert {end[1] for end in checkpoint_offsets(checkpoint)} == {5}

            p1.write_txn_marker(7, 0, 0, commit=True)                                        # 9
            assert sink.wait_for(lambda rows: offsets(rows, 1) == list(range(9)), TIMEOUT)
        finally:
            query.stop()
    assert [(o, v) for p, o, v in sink.rows() if p == 1] == \
        [(o, f"b{o}") for o in range(5)] + [(5, "t5"), (6, "t6"), (7, "b7"), (8, "b8")]
    assert checkpoint_offsets(checkpoint)[-1] == {0: 15, 1: 10}


def write_two_partitions(data: Path) -> None:
    """Topic t: a0..a9 in partition 0, b0..b9 in partition 1."""
    with logstore.open(str(data), {"segment.bytes": 1024}) as store:
        store.create_topic("t", partitions=2)
        store.log("t", 0).append_records([b"a%d" % o for o in range(10)])
        store.log("t", 1).append_records([b"b%d" % o for o in range(10)])


@pytest.mark.parametrize(("starting", "first"), [
    ("earliest", [(0, o, f"a{o}") for o in range(10)] + [(1, o, f"b{o}") for o in range(10)]),
    ("latest", []),
    (None, []),  # Spark's Kafka default for streams: latest
    ('{"t": {"0": 7, "1": -2}}', [(0, o, f"a{o}") for o in range(7, 10)] + [(1, o, f"b{o}") for o in range(10)]),
    ('{"t": {"0": -1, "1": 8}}', [(1, 8, "b8"), (1, 9, "b9")]),
])
def test_starting_offsets_place_a_new_query_and_only_a_new_one(spark, tmp_path, starting, first):
    data = tmp_path / "data"
    write_two_partitions(data)
    options = {} if starting is None else {"startingOffsets": starting}
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"
    finish_available_now(spark, data, "t", sink, checkpoint, **options)
    assert sorted(sink.rows()) == first

    with logstore.open(str(data)) as store:
        store.log("t", 0).append_records([b"a10"])
        store.log("t", 1).append_records([b"b10", b"b11"])
    # A restart resumes where the checkpoint ended, whatever startingOffsets says now.
    finish_available_now(spark, data, "t", sink, checkpoint, startingOffsets="earliest")
    assert sorted(sink.rows()) == sorted(first + [(0, 10, "a10"), (1, 10, "b10"), (1, 11, "b11")])


def test_a_partition_added_during_the_stream_is_read_from_its_start(spark, tmp_path):
    data = tmp_path / "data"
    write_two_partitions(data)
    sink, checkpoint = BatchFiles(tmp_path / "sink"), tmp_path / "checkpoint"

    def sink_adding_a_partition_on_the_first_batch(df, batch_id):
        sink(df, batch_id)
        if batch_id == 0:
            # The next batch is planned after this returns, so partition 2 is first seen with records in it.
            with logstore.open(str(data)) as store:
                store.create_partitions("t", 3)
                store.log("t", 2).append_records([b"c0", b"c1"])
                store.log("t", 2).append_records([b"c2"])
                store.log("t", 1).append_records([b"b10"])

    # Partition 1 starts at its end, as `latest` would; partition 0 a few records back, so there is a
    # first batch.
    query = start_stream(spark, data, "t", sink_adding_a_partition_on_the_first_batch, checkpoint,
                         available_now=False, startingOffsets='{"t": {"0": 8, "1": -1}}')
    try:
        # b10 and partition 2's records were there together when the second batch was planned.
        assert sink.wait_for(lambda rows: (1, 10, "b10") in rows, TIMEOUT)
    finally:
        query.stop()
    assert sorted(sink.rows()) == [(0, 8, "a8"), (0, 9, "a9"), (1, 10, "b10"),
                                   (2, 0, "c0"), (2, 1, "c1"), (2, 2, "c2")]
