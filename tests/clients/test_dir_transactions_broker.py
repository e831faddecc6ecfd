"""A broker started on a log dir where Spark jobs left transactions (logstore.dir_transactions) finishes them: a
decided job's rows become visible, an undecided one whose timeout passed is aborted, and the last stable offset
is not held back by either; read with a read_committed confluent-kafka consumer."""
from __future__ import annotations

import pyarrow as pa

import logstore
from broker_process import BrokerProcess, finish_brokers, free_port
from logstore.dir_transactions import DirTransactions, hold_dir
from logstore.dir_writer import DirTaskWriter, JobTask
from txn_checker import read_until, stable_offsets

TOPIC = "spark-out"


def write(path, job: str, values: list[bytes], timeout_ms: int):
    """One task attempt's rows into partition 0, left open as a Spark task leaves them: its intent."""
    writer = DirTaskWriter(str(path), JobTask(job, 0, 0, timeout_ms))
    writer.write(TOPIC, 0, None, pa.array(values, pa.binary()))
    return writer.prepare()


def test_the_broker_finishes_decided_jobs_and_aborts_expired_ones(tmp_path):
    data = tmp_path / "data"
    with logstore.open(str(data)) as store:
        store.create_topic(TOPIC, 1)
    decided = write(data, "decided-job", [b"kept-1", b"kept-2"], 600_000)
    write(data, "dead-job", [b"dropped"], 1)
    with hold_dir(str(data), 5) as store:
        # What a driver killed right after recording its commit decision leaves: the decision, no marker.
        DirTransactions(store).decide("decided-job", [decided.producer_id])
    broker = BrokerProcess("127.0.0.1", free_port(), data)
    try:
        broker.start()
        got = read_until(broker.bootstrap, TOPIC, {0: b"kept-2"}, "read_committed")
        assert got == {0: [b"kept-1", b"kept-2"]}
        lso, high_watermark = stable_offsets(broker.bootstrap, TOPIC, [0])[0]
        assert lso == high_watermark
    finally:
        finish_brokers([broker])
