"""Spark benchmarks: `spark.read.format("logstore")` against Spark's own Parquet scan of the same records.

    .venv/bin/python -m pytest -q bench/test_spark.py --benchmark-only \\
        --benchmark-json=.benchmarks/spark.json
    .venv/bin/python bench/spark_report.py .benchmarks/spark.json

One SparkSession for the run, `local[2]`, UI off, filter pushdown for Python
data sources on, session time zone UTC, Spark's defaults otherwise (AQE on,
spark.sql.shuffle.partitions=200, Parquet written with snappy). It starts
Python workers with this interpreter, so they import pyarrow and logstore.

The data (issue 8's performance section), built once per session under one
temporary directory (TMPDIR, removed at the end; ~1.2 GiB), build times
recorded in every benchmark's extra_info:
- a logstore dir written with the library (`logstore.open`, no broker):
  topic "spark-bench" of 4 partitions, segment.bytes=128 MiB, 5,000,000
  records in uncompressed batches of ~16 KiB (a producer's default
  batch.size), appended round-robin over the partitions. Record g
  (0-based, in append order): key b"key-%04d" of g's residue mod 4096 under
  a fixed odd multiplier (8 B, 4,096 distinct keys, each ~1,221 times),
  value 100 B cut from a seeded 4 MiB text of words at a stride (text-like,
  so snappy compresses the Parquet copy as it would real payloads; mostly
  distinct, so Parquet's dictionary encoding does not collapse the column),
  timestamp BASE_TIMESTAMP + g ms. Each partition then holds one full
  segment and part of a second: 8 planned Spark tasks.
- the same rows as Parquet, written in this session by Spark from the
  logstore source (`df.write.parquet`: key, value, topic, partition, offset,
  timestamp, timestampType; one file per source task).
Page cache warm for both (just written, far below the machine's memory).
Before any timing, the Parquet write and one untimed pass of every query on
each side warm the JVM's JIT and the Python workers.

Cases, each timed with pytest-benchmark's pedantic mode (a query takes
seconds: few rounds, one warmup round each):

1. scan (target: logstore >= 0.8x Parquet's rows/s): `count()`,
   `groupBy("key").count()` (collected: 4,096 rows, each key's count
   checked), and `agg(sum(length(value)))`. Parquet answers count() from its
   footers and reads only the key column for the groupBy, while the logstore
   source, a Python data source without column pruning, decodes every column
   for every query; the sum over value makes Parquet read the bulk of the
   bytes, the fair comparison of the three. rows/s = records in the topic /
   the query's seconds.
2. filter (target: >= 20x faster than the full scan): the last ~1% of the
   topic by `offset >= O` (O = 99% of the shortest partition's end offset)
   and by `timestamp >= T` (T = the timestamp of record 0.99 x RECORDS),
   counted, with pushdown (ours) against the same query with
   spark.sql.python.filterPushdown.enabled=false (peer): Spark then scans
   everything and filters, the full scan of the same query shape. Checked
   untimed: the ranges the source plans for the pushed filter span exactly
   the selected offsets.
3. read-task (information): one full-scan task range (the first planned:
   one 128 MiB segment) read in this process, no Spark: `PartitionScan.
   read_arrow(timestamp_types=True, timestamp_micros=True)` + `to_spark_batch`, as a Spark task
   runs it, plus one run under cProfile whose top functions go into the JSON.
   Beside it, "spark-arrow-floor": a Python data source that yields one
   batch of that range, decoded once in each Python worker and kept there,
   over and over, as many rows per task as the planned tasks hold, with
   count(): what Spark itself spends taking Arrow batches of this schema
   from Python workers, reading and decoding nothing. Its rounds are
   planned as the logstore source's: a DataFrame each, tasks that carry
   only their row counts. Each floor round's untimed setup runs one count()
   of the logstore source, so the report also has the two side by side,
   round by round.

Scan and filter groups pair rounds as bench/test_storage.py does: ours'
untimed setup runs one peer round just before each ours round, and the
report's "paired" ratio is the median of those per-round ratios.

Speed is reported, not asserted; every query's answer is asserted.
"""
from __future__ import annotations

import cProfile
import datetime as dt
import os
import random
import shutil
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

import logstore
import logstore.formats.kafka as K
from profiles import profile_rows

os.environ["PYSPARK_PYTHON"] = sys.executable  # else the workers run the system python, without pyarrow

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, GreaterThanOrEqual, InputPartition  # noqa: E402

import logstore.spark  # noqa: E402
from logstore.spark.arrow import to_spark_batch  # noqa: E402
from logstore.spark.options import parse_options  # noqa: E402
from logstore.spark.planning import Pushdown, TaskRange, plan_batch  # noqa: E402
from logstore.spark.source import BASE_SCHEMA, LogstoreBatchReader  # noqa: E402

SEED = 20240808
TOPIC = "spark-bench"
RECORDS = 5_000_000
PARTITIONS = 4
SEGMENT_BYTES = 128 << 20
BATCH_BYTES = 16 << 10          # a producer's default batch.size
KEYS = 4096
KEY_MULTIPLIER = 2654435761     # odd: a bijection on residues mod KEYS
VALUE_BYTES = 100
VALUE_STRIDE = 7919
TEXT_BYTES = 4 << 20
BASE_TIMESTAMP = 1_700_000_000_000
SELECTED = 0.01                 # the filters' share of the topic

ROUNDS = 5
WARMUP_ROUNDS = 1
TASK_ROUNDS = 7
PROFILE_TOP = 15
SIDES = ("ours", "peer")
TARGETS = {"scan": 0.8, "filter": 20.0}

SPARK_CONFIG = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}
_SESSION: dict[str, float] = {}  # what starting the session took, for the JSON


# ---------------------------------------------------------------------------
# The data: a logstore dir, and the same rows as Parquet


def _key(g: int) -> bytes:
    return b"key-%04d" % (g * KEY_MULTIPLIER % KEYS)


def expected_key_counts() -> dict[bytes, int]:
    """Records per key: record g's key depends only on g mod KEYS."""
    full, rest = divmod(RECORDS, KEYS)
    return {_key(r): full + (r < rest) for r in range(KEYS)}


def _text() -> bytes:
    rng = random.Random(f"{SEED}/text")
    letters = b"abcdefghijklmnopqrstuvwxyz"
    words = [bytes(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(512)]
    parts, size = [], 0
    while size < TEXT_BYTES:
        word = rng.choice(words)
        parts.append(word)
        size += len(word) + 1
    return b" ".join(parts)


def _records_per_batch(text: bytes) -> int:
    """How many records fill a BATCH_BYTES batch."""
    sample = K.encode_batch([_key(g) for g in range(1000)], [text[:VALUE_BYTES]] * 1000, None,
                            [BASE_TIMESTAMP] * 1000)
    return (BATCH_BYTES - K.RECORD_BATCH_OVERHEAD) * 1000 // (len(sample) - K.RECORD_BATCH_OVERHEAD)


def build_logstore(directory: str) -> dict:
    """Write the topic with the library; what was written (batches, bytes, segments, end offsets)."""
    text = _text()
    span = len(text) - VALUE_BYTES
    per_batch = _records_per_batch(text)
    store = logstore.open(directory, {"segment.bytes": SEGMENT_BYTES})
    try:
        store.create_topic(TOPIC, partitions=PARTITIONS)
        logs = [store.log(TOPIC, p) for p in range(PARTITIONS)]
        batches = 0
        for first in range(0, RECORDS, per_batch):
            records = range(first, min(first + per_batch, RECORDS))
            starts = [g * VALUE_STRIDE % span for g in records]
            logs[batches % PARTITIONS].append_records(
                [text[s:s + VALUE_BYTES] for s in starts], keys=[_key(g) for g in records],
                timestamps=[BASE_TIMESTAMP + g for g in records])
            batches += 1
        ends = [log.log_end_offset for log in logs]
    finally:
        store.close()
    segments = sorted(Path(directory).glob(f"{TOPIC}-*/*.log"))
    return {"batches": batches, "records_per_batch": per_batch, "end_offsets": ends,
            "segment_files": len(segments), "log_bytes": sum(p.stat().st_size for p in segments)}


@dataclass(frozen=True)
class SparkData:
    """The session's two copies of the records, and what building them took."""

    log_dir: str
    parquet_dir: str
    info: dict

    def logstore(self, spark):
        """The topic through the logstore source."""
        return spark.read.format("logstore").option("subscribe", TOPIC).load(self.log_dir)

    def parquet(self, spark):
        """The same rows through Spark's Parquet source."""
        return spark.read.parquet(self.parquet_dir)

    def source(self, spark, side: str):
        """ours: logstore; peer: Parquet."""
        return self.logstore(spark) if side == "ours" else self.parquet(spark)


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the run, with the logstore source registered."""
    builder = SparkSession.builder.master("local[2]").appName("logstore-bench-spark")
    for key, value in SPARK_CONFIG.items():
        builder = builder.config(key, value)
    started = time.perf_counter()
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    logstore.spark.register(session)
    # The floor source is defined here, in a module the workers cannot import: ship it by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session.dataSource.register(ArrowFloorSource)
    _SESSION["start_seconds"] = time.perf_counter() - started
    yield session
    session.stop()


@pytest.fixture(scope="session")
def data(spark):
    """The logstore dir and its Parquet copy under one temporary directory, checked and warmed."""
    root = tempfile.mkdtemp(prefix="logstore-bench-spark-")
    try:
        log_dir, parquet_dir = os.path.join(root, "logs"), os.path.join(root, "parquet")
        started = time.perf_counter()
        info = build_logstore(log_dir)
        info["build_seconds"] = time.perf_counter() - started
        assert sum(info["end_offsets"]) == RECORDS, info["end_offsets"]
        found = SparkData(log_dir, parquet_dir, info)
        started = time.perf_counter()
        found.logstore(spark).write.parquet(parquet_dir)
        info["parquet_write_seconds"] = time.perf_counter() - started
        files = list(Path(parquet_dir).glob("*.parquet"))
        info.update(parquet_files=len(files), parquet_bytes=sum(p.stat().st_size for p in files),
                    session_start_seconds=_SESSION["start_seconds"],
                    tasks=len(_plan(log_dir)), spark_version=spark.version)
        # One untimed pass of every query on both sides: JIT and Python workers warm before any round.
        warm = {}
        for side in SIDES:
            for name, query in SCAN_QUERIES.items():
                began = time.perf_counter()
                query.check(query.run(found.source(spark, side)))
                warm[f"{name}/{side}"] = time.perf_counter() - began
        info["first_pass_seconds"] = warm
        yield found
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _plan(log_dir: str, pushdown: Pushdown | None = None) -> list[TaskRange]:
    return plan_batch(parse_options({"path": log_dir, "subscribe": TOPIC}, streaming=False), pushdown or Pushdown())


# ---------------------------------------------------------------------------
# Queries


@dataclass(frozen=True)
class Query:
    """A query over a DataFrame and the check of its answer."""

    text: str
    run: object
    check: object


def _check_count(expected: int):
    def check(found: int) -> None:
        assert found == expected, (found, expected)
    return check


def _key_counts(df) -> dict[bytes, int]:
    return {bytes(row[0]): row[1] for row in df.groupBy("key").count().collect()}


def _check_key_counts(found: dict[bytes, int]) -> None:
    assert found == expected_key_counts(), (len(found), sum(found.values()))


SCAN_QUERIES = {
    "count": Query("df.count()", lambda df: df.count(), _check_count(RECORDS)),
    "group-by-key": Query('df.groupBy("key").count().collect()', _key_counts, _check_key_counts),
    "sum-length-value": Query('df.agg(sum(length("value"))).first()',
                              lambda df: df.agg(F.sum(F.length("value"))).first()[0],
                              _check_count(RECORDS * VALUE_BYTES)),
}


def _offset_bound(data: SparkData) -> int:
    return int(min(data.info["end_offsets"]) * (1 - SELECTED))


def _timestamp_bound() -> int:
    """ms: the timestamp of record 0.99 x RECORDS; records from there on pass."""
    return BASE_TIMESTAMP + int(RECORDS * (1 - SELECTED))


def filter_case(data: SparkData, name: str) -> tuple[str, object, object, int, object]:
    """(query text, DataFrame -> filtered DataFrame, the same filter as an expression Spark cannot push
    down, rows selected, the filter as Spark pushes it to the source)."""
    if name == "offset":
        bound = _offset_bound(data)
        selected = sum(end - bound for end in data.info["end_offsets"])
        return (f"df.where(offset >= {bound:,}).count()", lambda df: df.where(F.col("offset") >= bound),
                lambda df: df.where(F.col("offset") + 1 > bound), selected,
                GreaterThanOrEqual(("offset",), bound))
    bound = _timestamp_bound()
    when = dt.datetime.fromtimestamp(bound / 1000, dt.UTC)
    return (f"df.where(timestamp >= '{when.isoformat()}').count()",
            lambda df: df.where(F.col("timestamp") >= F.lit(when)),
            lambda df: df.where(F.unix_millis(F.col("timestamp")) >= bound),
            BASE_TIMESTAMP + RECORDS - bound, GreaterThanOrEqual(("timestamp",), when))


# ---------------------------------------------------------------------------
# Timing helpers


def _tag(benchmark, op: str, case: str, side: str, data: SparkData, **info) -> None:
    benchmark.group = f"{op}/{case}"
    benchmark.extra_info.update({"op": op, "case": case, "side": side, "records": RECORDS,
                                 "partitions": PARTITIONS, "segment_bytes": SEGMENT_BYTES,
                                 "target": TARGETS.get(op), **data.info, **info})


class _Paired:
    """One peer round timed in the setup just before each ours round (see bench/test_storage.py)."""

    def __init__(self, peer):
        self.peer = peer
        self.seconds: list[float] = []

    def setup(self):
        """pedantic's setup: time one peer round."""
        started = time.perf_counter()
        self.peer()
        self.seconds.append(time.perf_counter() - started)
        return (), {}

    def record(self, benchmark) -> None:
        """Store each timed ours round with the peer round run just before it."""
        ours = list(benchmark.stats.stats.data)
        benchmark.extra_info["ours_seconds"] = ours
        benchmark.extra_info["paired_peer_seconds"] = self.seconds[len(self.seconds) - len(ours):]


def _checked(run, check):
    def timed():
        check(run())
    return timed


# ---------------------------------------------------------------------------
# 1. Full scans: logstore against Parquet


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("query", SCAN_QUERIES)
def test_scan(benchmark, spark, data, query, side):
    q = SCAN_QUERIES[query]
    _tag(benchmark, "scan", query, side, data, query=q.text,
         source="logstore (Python data source)" if side == "ours" else "Parquet (Spark built-in)")
    run = _checked(lambda: q.run(data.source(spark, side)), q.check)
    if side == "peer":
        benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
        return
    paired = _Paired(_checked(lambda: q.run(data.parquet(spark)), q.check))
    benchmark.pedantic(run, setup=paired.setup, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    paired.record(benchmark)


# ---------------------------------------------------------------------------
# 2. Pushed-down filters selecting the last 1%: with pushdown against without


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("column", ("offset", "timestamp"))
def test_filter(benchmark, spark, data, column, side):
    text, narrow, opaque, selected, pushed = filter_case(data, column)
    reader = LogstoreBatchReader(parse_options({"path": data.log_dir, "subscribe": TOPIC}, streaming=False))
    remaining = reader.pushFilters([pushed])
    planned = [p.task for p in reader.partitions()]
    planned_offsets = sum(t.offsets for t in planned)
    assert planned_offsets == selected, (planned_offsets, selected)
    _tag(benchmark, "filter", f"{column}-last-1pct", side, data, query=text, selected_rows=selected,
         planned_tasks=len(planned), planned_offsets=planned_offsets,
         filter_left_to_spark=bool(list(remaining)), pushdown=side == "ours",
         peer_query=f"the same with {'offset + 1 > bound' if column == 'offset' else 'unix_millis(timestamp) >= bound'}"
                    " (not pushed down: Spark scans everything and filters)")

    def query(where):
        return _checked(lambda: where(data.logstore(spark)).count(), _check_count(selected))

    if side == "peer":
        benchmark.pedantic(query(opaque), rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
        return
    paired = _Paired(query(opaque))
    benchmark.pedantic(query(narrow), setup=paired.setup, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    paired.record(benchmark)


# ---------------------------------------------------------------------------
# 3. One read task in this process (and its profile); Spark's floor for Arrow from Python




def read_task(task: TaskRange) -> int:
    """What a Spark task of the source does with its range, minus handing the batches to Spark; rows read."""
    rows = 0
    for batch in task.scan.read_arrow(timestamp_types=True, timestamp_micros=True):
        rows += to_spark_batch(batch, task.topic, task.partition, False).num_rows
    return rows


def test_read_task_in_process(benchmark, data):
    task = _plan(data.log_dir)[0]
    _tag(benchmark, "read-task", "in-process", "ours", data, rows=task.offsets,
         task=f"{task.topic}-{task.partition} [{task.scan.start:,}, {task.scan.end:,})",
         query="PartitionScan.read_arrow(timestamp_types=True, timestamp_micros=True) + to_spark_batch, no Spark")
    counts: list[int] = []
    benchmark.pedantic(lambda: counts.append(read_task(task)), rounds=TASK_ROUNDS, warmup_rounds=1, iterations=1)
    assert set(counts) == {task.offsets}, set(counts)
    profile = cProfile.Profile()
    started = time.perf_counter()
    assert profile.runcall(read_task, task) == task.offsets
    benchmark.extra_info.update(profiled_seconds=time.perf_counter() - started,
                                profile_tottime=profile_rows(profile, "tottime", PROFILE_TOP),
                                profile_cumulative=profile_rows(profile, "cumulative", PROFILE_TOP))


class ArrowFloorSource(DataSource):
    """`format("logstore-bench-floor")`: the planned tasks' row counts, every row from one cached batch."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "logstore-bench-floor"

    def schema(self) -> str:
        """The logstore source's schema (no headers)."""
        return BASE_SCHEMA

    def reader(self, schema) -> ArrowFloorReader:
        """A batch scan."""
        return ArrowFloorReader(self.options["path"])


class ArrowFloorReader(DataSourceReader):
    """As many tasks and rows per task as the logstore source plans; each yields a batch its worker keeps."""

    def __init__(self, log_dir: str):
        self.log_dir = log_dir

    def partitions(self) -> list[InputPartition]:
        """One partition per planned logstore task, carrying only its row count."""
        return [InputPartition(t.offsets) for t in _plan(self.log_dir)]

    def read(self, partition: InputPartition):
        """The worker's batch, repeated (and cut) to the task's row count."""
        rows = partition.value
        batch = _floor_batch(self.log_dir)
        for _ in range(rows // batch.num_rows):
            yield batch
        if rows % batch.num_rows:
            yield batch.slice(0, rows % batch.num_rows)


# This module reaches the workers by value, its globals fresh in every task: a worker keeps the floor's
# batch in a module of its own, so that only its first task decodes it.
FLOOR_CACHE_MODULE = "logstore_bench_spark_floor"


def _floor_batch(log_dir: str) -> pa.RecordBatch:
    """The topic's first batch in Spark's columns, decoded once per process."""
    cache = sys.modules.setdefault(FLOOR_CACHE_MODULE, types.ModuleType(FLOOR_CACHE_MODULE)).__dict__
    batch = cache.get(log_dir)
    if batch is None:
        task = _plan(log_dir)[0]
        first = next(iter(task.scan.read_arrow(timestamp_types=True, timestamp_micros=True)))
        batch = cache[log_dir] = to_spark_batch(first, task.topic, task.partition, False)
    return batch


def test_spark_arrow_floor(benchmark, spark, data):
    _tag(benchmark, "read-task", "spark-arrow-floor", "ours", data, rows=RECORDS,
         query="df.count() over a source yielding one cached batch (no reads)")
    # A DataFrame of its own each round, as every logstore round makes one: a reused one skipped the
    # planning the logstore rounds pay.
    run = _checked(lambda: spark.read.format(ArrowFloorSource.name()).load(data.log_dir).count(),
                   _check_count(RECORDS))
    # Each floor round follows a count() of the logstore source in its setup: the report's paired ratio
    # compares rounds run side by side, as the scans compare theirs with Parquet's.
    paired = _Paired(_checked(lambda: data.logstore(spark).count(), _check_count(RECORDS)))
    benchmark.pedantic(run, setup=paired.setup, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    benchmark.extra_info["floor_seconds"] = list(benchmark.stats.stats.data)
    benchmark.extra_info["paired_logstore_seconds"] = paired.seconds[len(paired.seconds) - ROUNDS:]
