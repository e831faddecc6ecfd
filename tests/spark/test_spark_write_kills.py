"""The executor SIGKILLed in the middle of a sink's write, for both targets: each row once, or nothing at all.

The job runs in a driver process of its own on `local-cluster[1,1,1024]`:
Spark's standalone master and one worker inside the driver, which start the
executor as a separate JVM (the pip pyspark's `bin/spark-class` and `jars`,
linked into a SPARK_HOME of the test's own). That JVM, with the Python worker
running the task under it, is the executor side of a real cluster. The task
to be killed tells the test through a file naming its executor's pid once
half its rows went through the sink (small write buffers: appended to the log
dir, or sent to the broker), and the test kills once some of them are in the
log, read_uncommitted — no sleep guesses the moment. Spark's standalone
worker then starts a new executor and the driver decides: with
`spark.task.maxFailures` > 1 it retries the task there and commits, and the
killed attempt's transaction must be aborted, not committed; with
`maxFailures=1` the job fails, Spark calls the sink's abort, and nothing of
the job may be visible to read_committed readers, nor hold the last stable
offset back; a rerun then writes every row once.

Oracles: write_readback.py's readers (`logstore.reader` on a log dir, a
confluent-kafka consumer through the broker), the last stable offsets, and
`logstore transactions list` for what stays open on the broker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import logstore
from driver_processes import TIMEOUT, kill, run_driver
from logstore.dir_transactions import DirTransactions, hold_dir
from spark_write_driver import rows_frame
from txn_checker import stable_offsets
from txn_helpers import create_topic
from write_readback import assert_each_row_once, assert_placed_by_murmur2, broker_rows, dir_rows, dir_stable

HERE = Path(__file__).parent
DIR_DRIVER = HERE / "spark_write_driver.py"
BROKER_DRIVER = HERE / "spark_broker_write_driver.py"
TWO_PHASE = "transaction.two.phase.commit.enable=true"
ROWS, TASKS, PARTITIONS = 2000, 8, 4


HELD = range(ROWS // TASKS * (TASKS // 2), ROWS // TASKS * (TASKS // 2 + 1))
"""The row numbers of the task whose first attempt is held mid-write (spark.range gives each task a run)."""


def run_with_executor_killed(driver: Path, tmp_path: Path, spec: dict,
                             uncommitted: Callable[[], dict[int, list[int]]]) -> str:
    """Run the driver's `executor` mode, SIGKILL the executor JVM once its task signals it is mid-write and
    some of its rows are in the log (`uncommitted` reads them), and return what the driver printed when it
    finished (`done`, or `failed` and Spark's reason)."""
    signal_file = tmp_path / "mid-write"
    spec = {**spec, "mode": "executor", "tasks": TASKS, "rows": ROWS, "signal": str(signal_file),
            "spark_home": str(tmp_path / "spark-home")}
    proc = run_driver(driver, tmp_path, spec)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not signal_file.exists():
            assert proc.poll() is None, "the driver exited before its task was mid-write"
            assert time.monotonic() < deadline, "no task signalled it was mid-write"
            time.sleep(0.1)
        # A dir task's appends are done when it signals; a broker task's last requests may still be in flight.
        while not any(n in HELD for numbers in uncommitted().values() for n in numbers):
            assert proc.poll() is None, "the driver exited while its task was held"
            assert time.monotonic() < deadline, "the held task's rows never reached the log"
            time.sleep(0.1)
        executor = int(signal_file.read_text())
        # The executor JVM the standalone worker in the driver started: a child of the driver's JVM, in its group.
        assert os.getpgid(executor) == proc.pid
        os.kill(executor, signal.SIGKILL)
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        kill(proc)
    return out.strip()


def make_dir_topic(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    with logstore.open(str(data)) as store:
        store.create_topic("orders", PARTITIONS)
    return data


def no_intents_left(data: Path) -> bool:
    """Whether the dir's journal holds no open transaction of any job."""
    with hold_dir(str(data), 10) as store:
        journal = DirTransactions(store)
        return all(journal.intents(job) == [] for job in journal.jobs())


def open_ids(bootstrap: str, prefix: str) -> list[str]:
    """The transactional ids of `prefix` with a transaction open, as `logstore transactions list` shows them."""
    done = subprocess.run([sys.executable, "-m", "logstore", "transactions", "--bootstrap-server", bootstrap,
                           "list", "--state", "Ongoing", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout) if done.stdout.strip() else {"transactions": []}
    return sorted(t["transactionalId"] for t in listing["transactions"] if t["transactionalId"].startswith(prefix))


def broker_stable(bootstrap: str) -> bool:
    return all(lso == hw for lso, hw in stable_offsets(bootstrap, "orders", range(PARTITIONS)).values())


@pytest.fixture
def two_phase(start_broker):
    return start_broker(TWO_PHASE)


def test_log_dir_executor_killed_mid_write_task_retried_each_row_once(tmp_path):
    data = make_dir_topic(tmp_path)
    out = run_with_executor_killed(DIR_DRIVER, tmp_path, {"path": str(data), "topic": "orders", "max_failures": 4},
                                   lambda: dir_rows(str(data), "orders", "read_uncommitted"))
    assert out == "done", out
    found = dir_rows(str(data), "orders")
    assert_each_row_once(found, ROWS)
    assert_placed_by_murmur2(found)
    assert dir_stable(str(data), "orders") and no_intents_left(data)
    # The killed attempt's rows are in the log, aborted: read_uncommitted sees them beside the committed ones.
    assert sum(len(n) for n in dir_rows(str(data), "orders", "read_uncommitted").values()) > ROWS


def test_log_dir_executor_killed_mid_write_job_fails_shows_nothing_then_a_rerun_writes_once(spark, tmp_path):
    data = make_dir_topic(tmp_path)
    out = run_with_executor_killed(DIR_DRIVER, tmp_path, {"path": str(data), "topic": "orders", "max_failures": 1},
                                   lambda: dir_rows(str(data), "orders", "read_uncommitted"))
    assert out.startswith("failed") and f"Task {TASKS // 2} in stage" in out and "ExecutorLostFailure" in out, out
    assert dir_rows(str(data), "orders") == {p: [] for p in range(PARTITIONS)}
    assert sum(len(n) for n in dir_rows(str(data), "orders", "read_uncommitted").values()) > 0
    # Spark's abort ended every transaction of the job, the killed attempt's too: nothing holds the LSO back.
    assert dir_stable(str(data), "orders") and no_intents_left(data)
    rows_frame(spark, ROWS, TASKS).write.format("logstore").option("topic", "orders").mode("append").save(str(data))
    assert_each_row_once(dir_rows(str(data), "orders"), ROWS)
    assert dir_stable(str(data), "orders")


def test_broker_executor_killed_mid_write_task_retried_each_row_once(tmp_path, two_phase):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "orders", PARTITIONS)
    out = run_with_executor_killed(BROKER_DRIVER, tmp_path, {"bootstrap": bootstrap, "topic": "orders",
                                                             "max_failures": 4, "buffer_bytes": 200},
                                   lambda: broker_rows(bootstrap, "orders", PARTITIONS, "read_uncommitted"))
    assert out == "done", out
    found = broker_rows(bootstrap, "orders", PARTITIONS)
    assert_each_row_once(found, ROWS)
    assert broker_stable(bootstrap)
    assert open_ids(bootstrap, "logstore-sink-orders-") == []
    assert sum(len(n) for n in broker_rows(bootstrap, "orders", PARTITIONS, "read_uncommitted").values()) > ROWS


def test_broker_executor_killed_mid_write_job_fails_shows_nothing_then_a_rerun_writes_once(spark, tmp_path,
                                                                                         two_phase):
    bootstrap = two_phase.bootstrap
    create_topic(bootstrap, "orders", PARTITIONS)
    out = run_with_executor_killed(BROKER_DRIVER, tmp_path, {"bootstrap": bootstrap, "topic": "orders",
                                                             "max_failures": 1, "buffer_bytes": 200},
                                   lambda: broker_rows(bootstrap, "orders", PARTITIONS, "read_uncommitted"))
    assert out.startswith("failed") and f"Task {TASKS // 2} in stage" in out and "ExecutorLostFailure" in out, out
    assert broker_rows(bootstrap, "orders", PARTITIONS) == {p: [] for p in range(PARTITIONS)}
    assert sum(len(n) for n in broker_rows(bootstrap, "orders", PARTITIONS, "read_uncommitted").values()) > 0
    # Spark's abort ended every 2PC transaction of the job, the killed attempt's too.
    assert broker_stable(bootstrap)
    assert open_ids(bootstrap, "logstore-sink-orders-") == []
    (rows_frame(spark, ROWS, TASKS).write.format("logstore").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", "orders").mode("append").save())
    assert_each_row_once(broker_rows(bootstrap, "orders", PARTITIONS), ROWS)
    assert broker_stable(bootstrap)
