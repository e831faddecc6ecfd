"""`df.write.format("logstore")` into a log dir: each job's rows exactly once, all at once or not at all.

Oracles: our Spark source at read_committed, `logstore.reader` (a read-only
view, the last stable offset and high watermark of each partition) and
kafka-python's murmur2 for where each key must land. Jobs that need a session
of their own (task retries, a driver SIGKILLed before its commit) run in
`spark_write_driver.py`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

import logstore
from driver_processes import TIMEOUT, kill, kill_streams, run_driver
from logstore.dir_transactions import JOURNAL_FILE, DirTransactions, hold_dir
from logstore.read_committed import READ_COMMITTED
from logstore.reader import StoreView
from spark_write_driver import rows_frame, small_arrow_batches

DRIVER = Path(__file__).with_name("spark_write_driver.py")


def make_topic(path: Path, topic: str, partitions: int) -> None:
    """A log dir holding `topic`."""
    with logstore.open(str(path)) as store:
        store.create_topic(topic, partitions)


def committed(path: Path, topic: str) -> dict[int, list[tuple]]:
    """Each partition's read_committed rows (key, value, headers) through `logstore.reader`."""
    view = StoreView(str(path))
    found = {}
    for p in range(view.topics()[topic]):
        with view.view(topic, p) as part:
            scan = part.scan(part.log_start_offset, part.end_offset(READ_COMMITTED), READ_COMMITTED)
            found[p] = [(r["key"], r["value"], [tuple(h.values()) for h in r["headers"]])
                        for batch in scan.read_arrow(headers=True) for r in batch.to_pylist()]
    return found


def stable(path: Path, topic: str) -> bool:
    """Whether every partition's last stable offset reached its high watermark (no transaction open)."""
    view = StoreView(str(path))
    ends = []
    for p in range(view.topics()[topic]):
        with view.view(topic, p) as part:
            ends.append((part.last_stable_offset, part.high_watermark))
    return all(lso == hw for lso, hw in ends)


def assert_each_row_once(path: Path, topic: str, rows: int, partitions: int) -> None:
    """Rows 0..rows-1 each exactly once, in the partition murmur2 of the key names, headers intact."""
    found = committed(path, topic)
    seen = []
    for p, records in found.items():
        for key, value, headers in records:
            assert key == value, (key, value)
            assert (kafka_murmur2(key) & 0x7FFFFFFF) % partitions == p, (key, p)
            assert headers == [("n", value)]
            seen.append(int(value))
    assert sorted(seen) == list(range(rows))
    assert stable(path, topic)


def test_job_in_8_tasks_lands_once_where_murmur2_says(spark, tmp_path):
    make_topic(tmp_path, "orders", 4)
    rows = 4000
    rows_frame(spark, rows, 8).write.format("logstore").option("topic", "orders").mode("append").save(str(tmp_path))
    assert_each_row_once(tmp_path, "orders", rows, 4)
    # Our Spark source reads the same rows, read_committed by default.
    df = spark.read.format("logstore").option("subscribe", "orders").option("includeHeaders", "true") \
        .load(str(tmp_path))
    got = sorted((r.partition, int(r.value), [tuple(h) for h in r.headers]) for r in df.collect())
    assert got == sorted((p, int(v), h) for p, recs in committed(tmp_path, "orders").items() for _, v, h in recs)
    with hold_dir(str(tmp_path), 10) as store:
        assert DirTransactions(store).intents(DirTransactions(store).jobs()[0]) == []


def test_unkeyed_rows_stick_to_a_partition_per_batch_and_topic_column_routes(spark, tmp_path):
    make_topic(tmp_path, "a", 3)
    make_topic(tmp_path, "b", 2)
    df = spark.range(0, 300, numPartitions=2).selectExpr(
        "IF(id % 2 = 0, 'a', 'b') AS topic", "CAST(CAST(id AS STRING) AS BINARY) AS value",
        "IF(id % 3 = 0, 1, NULL) AS partition")
    df.write.format("logstore").mode("append").save(str(tmp_path))
    a, b = committed(tmp_path, "a"), committed(tmp_path, "b")
    values = {int(v) for recs in (*a.values(), *b.values()) for _, v, _ in recs}
    assert values == set(range(300))
    assert all(int(v) % 2 == 0 for recs in a.values() for _, v, _ in recs)
    # Rows with a partition went to it; the rest of a task's batch stuck to one partition.
    for found in (a, b):
        assert all(int(v) % 3 != 0 for p, recs in found.items() if p != 1 for _, v, _ in recs)
    unkeyed_a = {p for p, recs in a.items() for _, v, _ in recs if int(v) % 3 != 0}
    assert len(unkeyed_a) <= 2   # one sticky choice per task batch, two tasks


def test_a_failing_job_leaves_nothing_visible_and_no_transaction_open(spark, tmp_path):
    make_topic(tmp_path, "t", 2)
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    where = str(tmp_path)

    def explode(value):
        if value == b"1500":
            # Fail only once rows are in the log (the writer, another worker, appends what came before), so
            # the abort has something to hide.
            from logstore.reader import StoreView
            deadline = time.monotonic() + 60
            while sum(StoreView(where).view("t", p).high_watermark for p in range(2)) == 0:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            raise RuntimeError("this job fails")
        return value

    df = rows_frame(spark, 2000, 2).withColumn("value", F.udf(explode, BinaryType())("value"))
    # Small Arrow batches and write buffer: the failing task appended rows before its failure.
    with small_arrow_batches(spark), pytest.raises(Exception, match="this job fails"):
        df.write.format("logstore").option("topic", "t").option("write.buffer.bytes", "500") \
            .mode("append").save(str(tmp_path))
    # Rows were appended before the failure (read_uncommitted sees them), read_committed sees none.
    view = StoreView(str(tmp_path))
    assert sum(view.view("t", p).high_watermark for p in range(2)) > 0
    assert committed(tmp_path, "t") == {0: [], 1: []}
    assert stable(tmp_path, "t")


def test_option_and_mode_errors_are_one_readable_line(spark, tmp_path):
    make_topic(tmp_path, "t", 1)
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    cases = [
        (df.write.format("logstore").option("topic", "t").mode("overwrite"), "save mode overwrite is not allowed"),
        (df.write.format("logstore").option("topic", "nope").mode("append"), "topic 'nope' does not exist"),
        (df.write.format("logstore").mode("append"), "topic option required when no 'topic' attribute"),
        (df.write.format("logstore").option("topic", "t").option("kafka.bootstrap.servers", "h:9092")
         .mode("append"), "options 'path' and 'kafka.bootstrap.servers' name two targets"),
        (df.write.format("logstore").option("topic", "t").option("transaction.timeout.ms", "soon").mode("append"),
         "transaction.timeout.ms must be an integer"),
        (spark.range(3).selectExpr("id AS value").write.format("logstore").option("topic", "t").mode("append"),
         "value attribute type must be a string or binary, got bigint"),
    ]
    for writer, words in cases:
        with pytest.raises(Exception) as caught:
            writer.save(str(tmp_path))
        assert words in str(caught.value), (words, str(caught.value)[:2000])
    with pytest.raises(Exception, match="does not exist"):
        df.write.format("logstore").option("topic", "t").mode("append").save(str(tmp_path / "missing"))


# -- jobs in a driver process of their own --------------------------------------------------------------------

def test_a_task_failing_halfway_is_retried_and_its_rows_land_once(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    make_topic(data, "orders", 4)
    spec = {"mode": "retry", "path": str(data), "topic": "orders", "rows": 2000, "tasks": 8}
    proc = run_driver(DRIVER, tmp_path, spec)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        kill(proc)
    assert out.split() == ["done"], (tmp_path / "driver").parent
    assert_each_row_once(data, "orders", 2000, 4)
    # The failed attempts wrote before they died: their aborted rows are in the log, beside the committed ones.
    with logstore.open(str(data)) as store:
        written = sum(1 for p in range(4) for _ in store.log("orders", p).iter_records())
    assert written > 2000


def test_driver_killed_before_commit_shows_nothing_then_a_rerun_writes_once(spark, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    make_topic(data, "orders", 4)
    signal_file = tmp_path / "committing"
    timeout_ms = 3000
    proc = run_driver(DRIVER, tmp_path, {"mode": "hold", "path": str(data), "topic": "orders", "rows": 1000, "tasks": 4,
                                 "signal": str(signal_file), "timeout_ms": timeout_ms})
    try:
        deadline = time.monotonic() + TIMEOUT
        while not signal_file.exists():
            assert proc.poll() is None, "the driver exited before its commit"
            assert time.monotonic() < deadline, "the driver never reached its commit"
            time.sleep(0.1)
    finally:
        kill(proc)
    prepared = json.loads(signal_file.read_text())
    assert len(prepared) == 4
    assert committed(data, "orders") == {p: [] for p in range(4)}
    assert not stable(data, "orders")       # the prepared transactions hold the last stable offset back
    with hold_dir(str(data), 10) as store:
        journal = DirTransactions(store)
        (job,) = journal.jobs()
        intents = journal.intents(job)
    assert sorted(i.producer_id for i in intents) == sorted(prepared)
    # Until their timeout the next writer leaves them alone; after it, it aborts them before writing.
    expires = max(i.start_ms + i.timeout_ms for i in intents) / 1000
    time.sleep(max(0.0, expires - time.time()) + 0.05)
    rows_frame(spark, 1000, 4).write.format("logstore").option("topic", "orders").mode("append").save(str(data))
    assert_each_row_once(data, "orders", 1000, 4)


def committed_batch(path: Path) -> int:
    """The last micro-batch the streaming query committed into the dir (-1 for none), read from its journal."""
    journal = path / JOURNAL_FILE
    queries = json.loads(journal.read_text())["queries"] if journal.exists() else {}
    return max(queries.values(), default=-1)


@pytest.mark.parametrize("kills", [2, pytest.param(5, marks=pytest.mark.soak)])
def test_stream_killed_and_restarted_writes_each_row_once(tmp_path, kills):
    data = tmp_path / "data"
    data.mkdir()
    make_topic(data, "ticks", 3)
    spec = {"mode": "stream", "path": str(data), "topic": "ticks", "rate": 200,
            "checkpoint": str(tmp_path / "checkpoint")}
    kill_streams(DRIVER, tmp_path, spec, lambda: committed_batch(data), kills)
    values = [int(v) for recs in committed(data, "ticks").values() for _, v, _ in recs]
    assert len(values) == len(set(values)), "a row was committed twice"
    # Micro-batches commit in order, each a range of the rate source's rows: together a prefix of them.
    assert sorted(values) == list(range(len(values)))
    assert len(values) > 0
