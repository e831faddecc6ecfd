"""A scan task freezes its Spark worker's heap once (spark/source.py `_freeze_worker_heap`).

pyspark.daemon collects garbage after every task of a reused worker; the source takes the worker's
long-lived objects out of those collections. Checked inside a real daemon-forked worker: a probe
source's task runs the logstore source's read of a real log dir, then reports what the collector
holds frozen. The driver (this process) keeps its collector as it was.
"""
from __future__ import annotations

import gc
import os
import sys

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

import logstore
from logstore.spark.options import parse_options
from logstore.spark.planning import Pushdown, plan_batch
from logstore.spark.source import read_range

TOPIC = "frozen"
RECORDS = 50


class ReadThenReport(DataSource):
    """`format("logstore-test-read-then-report")`: one task that reads a logstore topic through the source's
    own task code, then yields (pid, objects frozen before the read, after it, rows read)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "logstore-test-read-then-report"

    def schema(self) -> str:
        """One row per task."""
        return "pid long, frozen_before long, frozen_after long, rows long"

    def reader(self, schema) -> ReadThenReportReader:
        """A one-task scan."""
        return ReadThenReportReader(self.options["path"])


class ReadThenReportReader(DataSourceReader):
    """The topic's first partition, read in the task as a logstore scan task reads it."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir

    def partitions(self) -> list[InputPartition]:
        """One task."""
        return [InputPartition(0)]

    def read(self, partition: InputPartition):
        """(pid, frozen before, frozen after, rows)."""
        before = gc.get_freeze_count()
        options = parse_options({"path": self.log_dir, "subscribe": TOPIC}, streaming=False)
        rows = sum(batch.num_rows for task in plan_batch(options, Pushdown())
                   for batch in read_range(task, False, True))
        yield os.getpid(), before, gc.get_freeze_count(), rows


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> str:
    """A topic of one partition with RECORDS records."""
    path = str(tmp_path_factory.mktemp("frozen") / "logs")
    with logstore.open(path) as store:
        store.create_topic(TOPIC, partitions=1)
        store.log(TOPIC, 0).append_records([b"v%d" % i for i in range(RECORDS)])
    return path


def test_a_scan_task_freezes_its_workers_heap_and_the_driver_keeps_its_own(spark, log_dir):
    # The probe is defined here, in a module the workers cannot import: ship it by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(ReadThenReport)
    [row] = spark.read.format(ReadThenReport.name()).load(log_dir).collect()
    assert row.rows == RECORDS
    assert row.pid != os.getpid()
    # The worker's modules (pyspark, pyarrow, logstore) are thousands of objects; a worker that ran a
    # logstore scan task before this one froze them then, and freezes nothing twice.
    assert row.frozen_after > 1000, row
    assert row.frozen_before in (0, row.frozen_after), row

    driver_frozen = gc.get_freeze_count()
    options = parse_options({"path": log_dir, "subscribe": TOPIC}, streaming=False)
    assert sum(batch.num_rows for task in plan_batch(options, Pushdown())
               for batch in read_range(task, False, True)) == RECORDS
    assert gc.get_freeze_count() == driver_frozen
