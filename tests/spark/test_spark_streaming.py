"""Streaming reads (`spark.readStream.format("logstore")`): committed records exactly once across restarts.

The sink is foreachBatch writing each micro-batch to a file named by its batch
id (tmp + rename), so a batch Spark replays from its checkpoint replaces its
earlier file: what the files hold together is what the stream delivered.
"""
from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import logstore
from txn_helpers import ConfluentTxnProducer, create_topic

TIMEOUT = 120.0  # s: a bound on waiting for a stream to deliver
ROUNDS = 3


class BatchFiles:
    """A foreachBatch sink: one JSON file of (partition, offset, value) rows per batch id."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.delivered = threading.Event()

    def __call__(self, df, batch_id: int) -> None:
        rows = [[r.partition, r.offset, r.value.decode()] for r in df.select("partition", "offset", "value").collect()]
        tmp = self.directory / f".{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, self.directory / f"{batch_id:06d}.json")
        if rows:
            self.delivered.set()

    def batches(self) -> list[list]:
        """Every batch's rows, by batch id."""
        return [json.loads(p.read_text()) for p in sorted(self.directory.glob("*.json"))]

    def rows(self) -> list[tuple]:
        """Every delivered row."""
        return [tuple(row) for batch in self.batches() for row in batch]


def stream(spark, path, topic: str, sink: BatchFiles, checkpoint: Path, *, available_now: bool, **options):
    """Start a logstore stream of `topic` under `path` into `sink`."""
    reader = spark.readStream.format("logstore").option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    writer = reader.load(str(path)).writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    return writer.start()


def test_a_stream_restarted_from_its_checkpoint_delivers_each_committed_record_once(spark, start_broker,
                                                                                     tmp_path):
    broker = start_broker("log.segment.bytes=2000")
    create_topic(broker.bootstrap, "orders", 2)
    rng = random.Random(8)
    committed, aborted = set(), set()
    done = threading.Event()
    rounds = threading.Semaphore(0)  # each stream round lets the producer run 12 more transactions
    failures = []

    def produce():
        producer = ConfluentTxnProducer(broker.bootstrap, "streamer")
        try:
            producer.init()
            for txn in range(ROUNDS * 12):
                if txn % 12 == 0:
                    assert rounds.acquire(timeout=TIMEOUT), "no stream round started"
                producer.begin()
                values = [f"{txn}-{i}" for i in range(rng.randint(1, 8))]
                for i, value in enumerate(values):
                    producer.send("orders", i % 2, value.encode())
                producer.flush()
                if rng.random() < 0.3:
                    producer.abort()
                    aborted.update(values)
                else:
                    producer.commit()
                    committed.update(values)
        except BaseException as exc:  # surfaced by the main thread
            failures.append(exc)
        finally:
            producer.close()
            done.set()

    sink = BatchFiles(tmp_path / "sink")
    checkpoint = tmp_path / "checkpoint"
    producing = threading.Thread(target=produce)
    producing.start()
    try:
        # Stopped and restarted while transactions keep committing and aborting.
        for _ in range(ROUNDS):
            sink.delivered.clear()
            query = stream(spark, broker.data_dir, "orders", sink, checkpoint, available_now=False,
                           startingOffsets="earliest", maxOffsetsPerTrigger=20)
            rounds.release()
            try:
                assert sink.delivered.wait(TIMEOUT), "the stream delivered nothing"
            finally:
                query.stop()
    finally:
        producing.join(TIMEOUT)
    assert not failures, failures
    assert done.is_set()
    stream(spark, broker.data_dir, "orders", sink, checkpoint, available_now=True,
           startingOffsets="earliest").awaitTermination(TIMEOUT)

    rows = sink.rows()
    values = [value for _, _, value in rows]
    assert sorted(values) == sorted(committed), "each committed record exactly once, no aborted one"
    assert not set(values) & aborted
    for partition in (0, 1):
        offsets = [offset for p, offset, _ in rows if p == partition]
        assert offsets == sorted(offsets)


def test_rate_limits_open_transactions_and_new_partitions(spark, tmp_path):
    data = tmp_path / "data"
    with logstore.open(str(data), {"segment.bytes": 1024}) as store:
        store.create_topic("t", partitions=2)
        p0, p1 = store.log("t", 0), store.log("t", 1)
        for i in range(100):
            p0.append_records([b"a%d" % i])
        for i in range(10):
            p1.append_records([b"b%d" % i])
        # An open transaction at p1's offset 10 holds read_committed streams there.
        p1.append_records([b"txn"], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
        p1.append_records([b"after"])

    sink = BatchFiles(tmp_path / "sink")
    checkpoint = tmp_path / "checkpoint"
    stream(spark, data, "t", sink, checkpoint, available_now=True, startingOffsets="earliest",
           maxOffsetsPerTrigger=30).awaitTermination(TIMEOUT)
    batches = sink.batches()
    # Spark's Kafka rule: each partition's share of the limit, at least one offset for a partition with any.
    assert all(len(batch) <= 30 + 1 for batch in batches)
    assert len(batches) >= 4
    assert sorted((p, o) for p, o, _ in sink.rows()) == [(0, o) for o in range(100)] + [(1, o) for o in range(10)]

    with logstore.open(str(data)) as store:
        p1 = store.log("t", 1)
        p1.write_txn_marker(9, 0, 0, commit=True)
        store.create_partitions("t", 3)
        store.log("t", 2).append_records([b"c0", b"c1"])
    stream(spark, data, "t", sink, checkpoint, available_now=True, startingOffsets="earliest").awaitTermination(TIMEOUT)
    rows = sink.rows()
    assert [(o, v) for p, o, v in rows if p == 1] == \
        [(o, f"b{o}") for o in range(10)] + [(10, "txn"), (11, "after")]
    assert [(o, v) for p, o, v in rows if p == 2] == [(0, "c0"), (1, "c1")]
    assert len(rows) == len({(p, o) for p, o, _ in rows}) == 114
