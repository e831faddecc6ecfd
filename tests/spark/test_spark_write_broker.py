"""`df.write.format("logstore")` through a running broker (KIP-939 two-phase commit): each row exactly once.

Oracles: confluent-kafka consumers at read_committed and read_uncommitted
(each partition read to its end, which librdkafka reports as EOF), ListOffsets
through librdkafka for the last stable offset and high watermark, kafka-python's
murmur2 for where each key must land, `logstore transactions list --json` for
what is left open. Jobs that need a session of their own (task retries, a
driver SIGKILLed before or in its commit, a streaming query killed) run in
`spark_broker_write_driver.py`. The wire producer's sequence and retry logic is
tested against the same real broker.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka.partitioner.default import murmur2 as kafka_murmur2

from driver_processes import TIMEOUT, kill, kill_streams, run_driver
from logstore.broker.admin_client import AdminClient
from logstore.broker.txn_wire_producer import TxnProducerError, TxnWireProducer
from logstore.formats.kafka_arrow import encode_arrow
from logstore.spark.sink_broker import COMMITTED, read_decisions
from spark_write_driver import rows_frame, small_arrow_batches
from txn_checker import stable_offsets
from txn_helpers import create_topic

DRIVER = Path(__file__).with_name("spark_broker_write_driver.py")
TWO_PHASE = "transaction.two.phase.commit.enable=true"


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed"
             ) -> dict[int, list[tuple[bytes, bytes, list]]]:
    """Each partition's (key, value, headers) from offset 0 to its end at `isolation`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-sink-check", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list] = {p: [] for p in range(partitions)}
        waiting = set(range(partitions))
        deadline = time.monotonic() + 60
        while waiting:
            assert time.monotonic() < deadline, f"partitions {sorted(waiting)} of {topic} never reached their end"
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                waiting.discard(m.partition())
                continue
            got[m.partition()].append((m.key(), m.value(), list(m.headers() or [])))
        return got
    finally:
        c.close()


def all_stable(bootstrap: str, topic: str, partitions: int) -> bool:
    """Whether every partition's last stable offset reached its high watermark (no transaction open)."""
    return all(lso == hw for lso, hw in stable_offsets(bootstrap, topic, range(partitions)).values())


def assert_each_row_once(bootstrap: str, topic: str, rows: int, partitions: int) -> None:
    """Rows 0..rows-1 each exactly once to read_committed, where murmur2 of the key says; nothing left open."""
    seen = []
    for p, records in read_all(bootstrap, topic, partitions).items():
        for key, value, headers in records:
            assert key == value, (key, value)
            assert (kafka_murmur2(key) & 0x7FFFFFFF) % partitions == p, (key, p)
            assert headers == [("n", value)]
            seen.append(int(value))
    assert sorted(seen) == list(range(rows))
    assert all_stable(bootstrap, topic, partitions)


def transactions(broker, *args: str) -> dict:
    """`logstore transactions ARGS --json` as a process: its JSON answer."""
    done = subprocess.run([sys.executable, "-m", "logstore", "transactions", "--bootstrap-server", broker.bootstrap,
                           *args, "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else {}


def open_ids(broker, prefix: str) -> list[str]:
    """The transactional ids of `prefix` with a transaction open, as `logstore transactions list` shows them."""
    listing = transactions(broker, "list", "--state", "Ongoing")
    return sorted(t["transactionalId"] for t in listing["transactions"] if t["transactionalId"].startswith(prefix))


@pytest.fixture
def two_phase(start_broker):
    return start_broker(TWO_PHASE)


def test_job_in_8_tasks_lands_once_where_murmur2_says(spark, two_phase):
    create_topic(two_phase.bootstrap, "orders", 4)
    rows = 4000
    (rows_frame(spark, rows, 8).write.format("logstore").option("kafka.bootstrap.servers", two_phase.bootstrap)
     .option("topic", "orders").mode("append").save())
    assert_each_row_once(two_phase.bootstrap, "orders", rows, 4)
    assert open_ids(two_phase, "logstore-sink-orders-") == []
    with AdminClient(two_phase.bootstrap) as client:
        assert read_decisions(client) == {}    # a finished batch job leaves a tombstone only


def test_a_failing_job_leaves_nothing_visible_and_no_transaction_open(spark, two_phase):
    create_topic(two_phase.bootstrap, "t", 2)
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    bootstrap = two_phase.bootstrap

    def explode(value):
        if value == b"1500":
            # Fail once the other task's rows (or this one's first ones) are in the log, so the abort hides some.
            from logstore.broker.admin_client import AdminClient
            from logstore.broker.admin_queries import LATEST, list_offsets
            deadline = time.monotonic() + 60
            with AdminClient(bootstrap) as client:
                while sum(list_offsets(client, [("t", 0), ("t", 1)], LATEST).values()) == 0 and \
                        time.monotonic() < deadline:
                    time.sleep(0.05)
            raise RuntimeError("this job fails")
        return value

    df = rows_frame(spark, 2000, 2).withColumn("value", F.udf(explode, BinaryType())("value"))
    with small_arrow_batches(spark), pytest.raises(Exception, match="this job fails"):
        (df.write.format("logstore").option("kafka.bootstrap.servers", bootstrap).option("topic", "t")
         .mode("append").save())
    assert sum(len(r) for r in read_all(bootstrap, "t", 2, "read_uncommitted").values()) > 0
    assert read_all(bootstrap, "t", 2) == {0: [], 1: []}
    assert all_stable(bootstrap, "t", 2)
    assert open_ids(two_phase, "logstore-sink-t-") == []


def test_without_two_phase_commit_on_the_broker_the_error_names_the_setting(spark, start_broker):
    broker = start_broker()
    create_topic(broker.bootstrap, "t", 1)
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as caught:
        df.write.format("logstore").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "t") \
            .mode("append").save()
    line = next(x for x in str(caught.value).splitlines() if "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in x)
    assert "transaction.two.phase.commit.enable=true" in line
    enabled = start_broker(TWO_PHASE)
    with pytest.raises(Exception, match="topic 'nope' does not exist in broker"):
        df.write.format("logstore").option("kafka.bootstrap.servers", enabled.bootstrap).option("topic", "nope") \
            .mode("append").save()


# -- the wire producer ---------------------------------------------------------------------------------------

def batch_for(producer: TxnWireProducer, topic: str, partition: int, *values: bytes) -> bytes:
    import pyarrow as pa
    return encode_arrow(None, pa.array(values, pa.binary()), None, 0, len(values), int(time.time() * 1000),
                        producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                        base_sequence=producer.sequence(topic, partition), transactional=True)


def test_wire_producer_sequences_retries_and_completion_by_a_new_instance(two_phase):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "w", 2)
    with TxnWireProducer(bootstrap) as first:
        first.init("w-id", 60000)
        b0 = batch_for(first, "w", 0, b"a", b"b")
        first.send("w", 0, b0)
        assert first.sequence("w", 0) == 2 and first.sequence("w", 1) == 0
        # The same batch again (a retry whose answer was lost): the broker keeps it once.
        first.sequences[("w", 0)] = 0
        first.send("w", 0, b0)
        first.send("w", 0, batch_for(first, "w", 0, b"c"))
        first.send("w", 1, batch_for(first, "w", 1, b"d"))
        with pytest.raises(ValueError, match="not this producer's next"):
            first.send("w", 1, b0)
        # A closed connection is opened again for the next batch.
        first.client.close()
        first.send("w", 1, batch_for(first, "w", 1, b"e"))
        prepared = first.prepare_transaction()
    assert read_all(bootstrap, "w", 2) == {0: [], 1: []}
    with TxnWireProducer(bootstrap) as other:
        # Not the prepared state: refused, and the transaction stays open (kept: at the next epoch).
        wrong = type(prepared)(prepared.transactional_id, prepared.producer_id + 1, prepared.producer_epoch)
        with pytest.raises(TxnProducerError, match="not the prepared"):
            other.complete_transaction(wrong, True, 60000)
        assert other.ongoing == (prepared.producer_id, prepared.producer_epoch)
    with TxnWireProducer(bootstrap) as second:
        # Another instance kept it since: only a completer that knows nothing else began may go on.
        with pytest.raises(TxnProducerError, match="open transaction"):
            second.complete_transaction(prepared, True, 60000)
        second.complete_transaction(prepared, True, 60000, kept_since=True)
    got = read_all(bootstrap, "w", 2)
    assert [v for _, v, _ in got[0]] == [b"a", b"b", b"c"] and [v for _, v, _ in got[1]] == [b"d", b"e"]
    assert all_stable(bootstrap, "w", 2)
    # The first instance is fenced, with Kafka's error and a plain hint.
    with TxnWireProducer(bootstrap) as first_again:
        first_again.transactional_id, first_again.producer_id, first_again.producer_epoch = \
            "w-id", prepared.producer_id, prepared.producer_epoch
        with pytest.raises(TxnProducerError, match="PRODUCER_FENCED|INVALID_PRODUCER_EPOCH"):
            first_again.send("w", 0, batch_for(first_again, "w", 0, b"zombie"))


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    ends = stable_offsets(bootstrap, topic, range(partitions))
    return [ends[p][1] for p in range(partitions)]


def produce_pipelined(producer: TxnWireProducer, topic: str, requests: int, first: int) -> list[bytes]:
    """`requests` Produce requests sent without waiting, each a batch of two values for partitions 0 and 1;
    the values, numbered from `first`."""
    values = []
    for r in range(requests):
        batches = []
        for p in (0, 1):
            pair = [b"%d" % (first + 4 * r + 2 * p + i) for i in (0, 1)]
            values += pair
            batches.append((topic, p, batch_for(producer, topic, p, *pair)))
        producer.produce(batches)
    return values


def test_wire_producer_pipelined_requests_resent_after_lost_answers_land_once_in_order(two_phase):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "pipe", 2)
    with TxnWireProducer(bootstrap, max_in_flight=5) as producer:
        producer.init("pipe-id", 60000)
        # Seven requests: the sixth waits for the first's answer (at most 5 unanswered).
        sent = produce_pipelined(producer, "pipe", 7, 0)
        assert len(producer.in_flight) == 5
        # Appended, and the answers lost with the connection: every unanswered request is sent again, in order,
        # and the broker knows each batch (its last 5 of each partition) and appends nothing twice.
        deadline = time.monotonic() + 60
        while (ends := high_watermarks(bootstrap, "pipe", 2)) != [14, 14]:
            assert time.monotonic() < deadline, f"the broker appended up to {ends}, not [14, 14]"
            time.sleep(0.05)
        producer.client.close()
        producer.flush()
        assert not producer.in_flight and producer.records == 28
        assert high_watermarks(bootstrap, "pipe", 2) == [14, 14]
        assert producer.sequence("pipe", 0) == producer.sequence("pipe", 1) == 14
        # Cut while the broker may still be reading them: whatever it had appended is known, the rest lands now.
        sent += produce_pipelined(producer, "pipe", 5, len(sent))
        producer.client.close()
        producer.flush()
        assert producer.records == 48
        sent += produce_pipelined(producer, "pipe", 1, len(sent))
        prepared = producer.prepare_transaction()
        assert high_watermarks(bootstrap, "pipe", 2) == [26, 26]
    with TxnWireProducer(bootstrap) as completer:
        completer.complete_transaction(prepared, True, 60000)
    got = read_all(bootstrap, "pipe", 2)
    # Each partition holds its values once, in the order sent.
    for p in (0, 1):
        assert [v for _, v, _ in got[p]] == [v for i, v in enumerate(sent) if (i // 2) % 2 == p]


def test_wire_producer_without_two_phase_commit_names_the_setting(start_broker):
    broker = start_broker()
    with TxnWireProducer(broker.bootstrap) as producer:
        with pytest.raises(TxnProducerError, match=r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED.*"
                                                   r"transaction\.two\.phase\.commit\.enable=true"):
            producer.init("x", 60000)


# -- jobs in a driver process of their own --------------------------------------------------------------------

def wait_for(proc: subprocess.Popen, path: Path) -> list[str]:
    """The driver's signal file once written (the driver still running): the transactional ids it names."""
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert proc.poll() is None, "the driver exited before its commit"
        assert time.monotonic() < deadline, "the driver never reached its commit"
        time.sleep(0.1)
    return json.loads(path.read_text())


def test_a_task_failing_halfway_is_retried_and_its_rows_land_once(tmp_path, two_phase):
    create_topic(two_phase.bootstrap, "orders", 4)
    # A small write buffer: each attempt sends requests as it goes, so the failed ones leave rows behind.
    spec = {"mode": "retry", "bootstrap": two_phase.bootstrap, "topic": "orders", "rows": 2000, "tasks": 8,
            "buffer_bytes": 1000}
    proc = run_driver(DRIVER, tmp_path, spec)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        kill(proc)
    assert out.split() == ["done"], tmp_path
    assert_each_row_once(two_phase.bootstrap, "orders", 2000, 4)
    assert open_ids(two_phase, "logstore-sink-orders-") == []
    # The failed attempts wrote before they died: their aborted rows are in the log, beside the committed ones.
    assert sum(len(rows) for rows in read_all(two_phase.bootstrap, "orders", 4, "read_uncommitted").values()) > 2000


def test_driver_killed_before_commit_shows_nothing_then_a_rerun_writes_once(spark, tmp_path, two_phase):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "orders", 4)
    timeout_ms = 3000
    proc = run_driver(DRIVER, tmp_path, {"mode": "hold", "bootstrap": bootstrap, "topic": "orders", "rows": 1000,
                                 "tasks": 4, "signal": str(tmp_path / "committing"), "timeout_ms": timeout_ms})
    try:
        prepared = wait_for(proc, tmp_path / "committing")
    finally:
        kill(proc)
    held_at = time.monotonic()
    assert len(prepared) == 4
    assert read_all(bootstrap, "orders", 4) == {p: [] for p in range(4)}
    assert not all_stable(bootstrap, "orders", 4)    # the prepared transactions hold the last stable offset back
    assert open_ids(two_phase, "logstore-sink-orders-") == prepared
    # An operator ends one at once; the next job aborts the others once they are older than its timeout.
    transactions(two_phase, "force-terminate", "--transactional-id", prepared[0])
    assert open_ids(two_phase, "logstore-sink-orders-") == prepared[1:]
    time.sleep(max(0.0, held_at + timeout_ms / 1000 - time.monotonic()) + 0.1)
    (rows_frame(spark, 1000, 4).write.format("logstore").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", "orders").option("transaction.timeout.ms", str(timeout_ms)).mode("append").save())
    assert_each_row_once(bootstrap, "orders", 1000, 4)
    assert open_ids(two_phase, "logstore-sink-orders-") == []


def test_driver_killed_after_its_decision_is_finished_by_the_next_run(spark, tmp_path, two_phase):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "orders", 4)
    proc = run_driver(DRIVER, tmp_path, {"mode": "decided", "bootstrap": bootstrap, "topic": "orders", "rows": 1000,
                                 "tasks": 4, "signal": str(tmp_path / "decided")})
    try:
        prepared = wait_for(proc, tmp_path / "decided")
    finally:
        kill(proc)
    # The first task's transaction was committed, the other three are still open.
    assert open_ids(two_phase, "logstore-sink-orders-") == prepared[1:]
    # read_committed stops at the last stable offset, which the open ones hold back: not all rows show.
    assert sum(len(r) for r in read_all(bootstrap, "orders", 4).values()) < 1000
    assert not all_stable(bootstrap, "orders", 4)
    # The next job of the prefix (writing nothing) finishes the decided one first.
    spark.range(0).selectExpr("CAST(id AS STRING) AS value").write.format("logstore") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", "orders").mode("append").save()
    assert_each_row_once(bootstrap, "orders", 1000, 4)
    assert open_ids(two_phase, "logstore-sink-orders-") == []


def committed_batch(bootstrap: str) -> int:
    """The last micro-batch the streaming query committed through the broker (-1 for none)."""
    with AdminClient(bootstrap) as client:
        try:
            decisions = read_decisions(client)
        except TxnProducerError:
            return -1     # the sink has not created its topic yet
        return max((d.batch for d in decisions.values() if d.state == COMMITTED and d.batch is not None), default=-1)


@pytest.mark.parametrize("kills", [2, pytest.param(5, marks=pytest.mark.soak)])
def test_stream_killed_and_restarted_writes_each_row_once(tmp_path, two_phase, kills):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "ticks", 3)
    spec = {"mode": "stream", "bootstrap": bootstrap, "topic": "ticks", "rate": 200,
            "checkpoint": str(tmp_path / "checkpoint")}
    kill_streams(DRIVER, tmp_path, spec, lambda: committed_batch(bootstrap), kills)
    values = [int(v) for recs in read_all(bootstrap, "ticks", 3).values() for _, v, _ in recs]
    assert len(values) == len(set(values)), "a row was committed twice"
    assert sorted(values) == list(range(len(values)))
    assert len(values) > 0
