"""Spark batch writes: rows/s of `df.write.format("logstore")` against Spark's Parquet write of the same DataFrame.

    .venv/bin/python bench/spark_write.py --data-root /dev/shm                  # 5,000,000 rows of 100 B
    .venv/bin/python bench/spark_write.py --data-root /dev/shm --rows 1000000 --rounds 3 --no-broker

Issue 29's target: a batch write of 5 M rows of 100 B through the logstore sink reaches ≥ 0.8× the rows/s of
Spark's Parquet write of the same DataFrame in the same session. One `local[2]` SparkSession builds the
DataFrame (`key` the row number as text, `value` `--size` bytes of SHA-512 output, so neither Parquet's
encodings nor its compression can shrink it to nothing) in `--tasks` partitions, persists and counts it, so
generating it is not timed. Each round (the order rotated every round) writes it three ways, each timed
wall-clock from the call to its return: Parquet into a fresh dir (mode overwrite); the sink into a fresh log
dir holding a 4-partition topic (`logstore.open`); the sink through a running broker
(`transaction.two.phase.commit.enable=true`, one 4-partition topic for all rounds; `--no-broker` leaves it
out). One small write of each kind first starts Spark's Python workers (untimed). After each sink write
(untimed) the read_committed rows it added are counted, so a fast wrong write cannot pass.

Each round also prints the CPU seconds each write cost, by process (Spark's JVM, its Python workers, the
broker; from /proc, Linux only): with `local[2]` on a 2-core machine every write is bound by CPU, so the ratio
follows the CPU each path spends, and these say which process to look at.

Durability differs: Spark's Parquet write through Hadoop's local file system never fsyncs, while the sink
fsyncs its segments before the commit markers and the markers after. `make bench` runs this with
`--data-root /dev/shm`, where an fsync costs next to nothing, so the ratio compares the two write paths;
without `--data-root` (the system's temp dir, usually a disk) it also charges logstore for its durability.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import logstore
from logstore.read_committed import READ_COMMITTED
from logstore.reader import StoreView

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "clients"))

from broker_process import BrokerProcess, free_port  # noqa: E402 - the tests' broker launcher
from summary import Summary  # noqa: E402

TARGET = 0.8
PARTITIONS = 4
TOPIC = "spark-write-bench"
TWO_PHASE = "transaction.two.phase.commit.enable=true"
SETTLE_TIMEOUT = 120.0   # s: how long the broker's commit markers may take to land after the job returns
KINDS = ("parquet", "dir", "broker")


def _session():
    """The bench's `local[2]` SparkSession, its Python workers running this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import logstore.spark

    spark = (SparkSession.builder.master("local[2]").appName("logstore-spark-write-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             # The persisted DataFrame (5 M rows of 100 B: ~0.6 GB) must fit in the driver's heap: local mode.
             .config("spark.driver.memory", "4g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    logstore.spark.register(spark)
    return spark


def _frame(spark, rows: int, size: int, tasks: int):
    """`rows` rows in `tasks` partitions, persisted and counted: key the row number, value `size` bytes."""
    from pyspark import StorageLevel

    # Each SHA-512 gives 64 bytes that do not compress; as many as `size` needs, cut to it.
    hashes = ", ".join(f"unhex(sha2(concat(CAST(id AS STRING), '.{i}'), 512))" for i in range(-(-size // 64)))
    frame = spark.range(0, rows, numPartitions=tasks).selectExpr(
        "CAST(id AS STRING) AS key", f"substring(concat({hashes}), 1, {size}) AS value")
    frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    assert frame.count() == rows
    return frame


def _committed_ends(log_dir: Path) -> dict[int, int]:
    """Each partition of the topic's read_committed end offset in `log_dir`."""
    view = StoreView(str(log_dir))
    ends = {}
    for p in range(PARTITIONS):
        with view.view(TOPIC, p) as part:
            ends[p] = part.end_offset(READ_COMMITTED)
    return ends


def _settled(log_dir: Path) -> bool:
    """Whether no transaction is open in the topic (last stable offset = high watermark everywhere)."""
    view = StoreView(str(log_dir))
    for p in range(PARTITIONS):
        with view.view(TOPIC, p) as part:
            if part.last_stable_offset != part.high_watermark:
                return False
    return True


def _rows_since(log_dir: Path, starts: dict[int, int]) -> int:
    """The read_committed rows of the topic in `log_dir` from `starts` on, once every transaction ended."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    # A broker writes the markers of a committed transaction after it answered EndTxn.
    while not _settled(log_dir):
        if time.monotonic() > deadline:
            raise SystemExit(f"{log_dir}: transactions still open {SETTLE_TIMEOUT:.0f} s after the job returned")
        time.sleep(0.1)
    view = StoreView(str(log_dir))
    rows = 0
    for p in range(PARTITIONS):
        with view.view(TOPIC, p) as part:
            scan = part.scan(starts.get(p, part.log_start_offset), part.end_offset(READ_COMMITTED), READ_COMMITTED)
            rows += sum(batch.num_rows for batch in scan.read_arrow())
    return rows


def _cpu(broker: BrokerProcess | None) -> dict[str, float]:
    """CPU seconds (user + system) spent so far by this process's descendants: Spark's JVM, its Python workers
    (every other process under the JVM) and the broker; {} where there is no /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, tuple[int, str, float]] = {}
    try:
        for name in os.listdir("/proc"):
            if name.isdigit():
                with open(f"/proc/{name}/stat") as stat:
                    line = stat.read()
                fields = line.rsplit(")", 1)[1].split()
                found[int(name)] = (int(fields[1]), line[line.index("(") + 1:line.rindex(")")],
                                    (int(fields[11]) + int(fields[12])) / tick)
    except OSError:   # no /proc, or a process ended while it was read: no split this time
        return {}
    mine, more = set(), {os.getpid()}
    while more:
        mine |= more
        more = {pid for pid, (parent, _, _) in found.items() if parent in more} - mine
    broker_pid = broker.proc.pid if broker is not None and broker.proc is not None else None
    spent = {"jvm": 0.0, "python": 0.0, "broker": 0.0}
    for pid in mine - {os.getpid()}:
        _, command, seconds = found[pid]
        spent["broker" if pid == broker_pid else "jvm" if command == "java" else "python"] += seconds
    return spent


def _write(kind: str, frame, work: Path, round_no: int, broker: BrokerProcess | None, rows: int
           ) -> tuple[float, dict[str, float]]:
    """One timed write of `frame` of `kind`: its rows/s and the CPU seconds it cost by process (each sink write's
    rows counted afterwards, untimed)."""
    if kind == "parquet":
        out = work / f"parquet-{round_no}"
        cpu, started = _cpu(broker), time.perf_counter()
        frame.write.mode("overwrite").parquet(str(out))
        elapsed, spent = time.perf_counter() - started, _cpu(broker)
        shutil.rmtree(out)
        return rows / elapsed, {k: spent[k] - cpu[k] for k in cpu if k in spent}
    if kind == "dir":
        log_dir = work / f"logdir-{round_no}"
        with logstore.open(str(log_dir)) as store:
            store.create_topic(TOPIC, PARTITIONS)
        cpu, started = _cpu(broker), time.perf_counter()
        frame.write.format("logstore").option("topic", TOPIC).mode("append").save(str(log_dir))
        elapsed, spent = time.perf_counter() - started, _cpu(broker)
        written = _rows_since(log_dir, {})
        shutil.rmtree(log_dir)
    else:
        assert broker is not None
        starts = _committed_ends(broker.data_dir)
        cpu, started = _cpu(broker), time.perf_counter()
        (frame.write.format("logstore").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", TOPIC).mode("append").save())
        elapsed, spent = time.perf_counter() - started, _cpu(broker)
        written = _rows_since(broker.data_dir, starts)
    if written != rows:
        raise SystemExit(f"{kind}: {written:,} rows read back at read_committed, {rows:,} written")
    return rows / elapsed, {k: spent[k] - cpu[k] for k in cpu if k in spent}


def _create_broker_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)


def main() -> None:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=100, help="bytes of each row's value")
    parser.add_argument("--tasks", type=int, default=8, help="partitions of the DataFrame (Spark tasks per write)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-broker", action="store_true", help="leave out the write through a broker")
    parser.add_argument("--data-root", default=None, help="where the dirs go (e.g. /dev/shm)")
    args = parser.parse_args()
    kinds = KINDS[:2] if args.no_broker else KINDS
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=args.data_root) as root:
        work = Path(root)
        broker = None
        if not args.no_broker:
            (work / "broker").mkdir()
            broker = BrokerProcess("127.0.0.1", free_port(), work / "broker", overrides=(TWO_PHASE,)).start()
        try:
            if broker is not None:
                _create_broker_topic(broker.bootstrap)
            spark = _session()
            try:
                # Untimed: the first write of each kind starts Spark's Python workers and loads the classes.
                warm = _frame(spark, min(args.rows, 10_000), args.size, args.tasks)
                for kind in kinds:
                    _write(kind, warm, work, -1, broker, min(args.rows, 10_000))
                warm.unpersist()
                frame = _frame(spark, args.rows, args.size, args.tasks)
                for r in range(args.rounds):
                    order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
                    written = {kind: _write(kind, frame, work, r, broker, args.rows) for kind in order}
                    result = {kind: rate for kind, (rate, _) in written.items()}
                    results.append(result)
                    cells = "  ".join(
                        f"{kind} {result[kind]:>9,.0f} rows/s"
                        + ("" if kind == "parquet" else f" ({result[kind] / result['parquet']:.2f}x)")
                        for kind in kinds)
                    print(f"round {r + 1} ({', '.join(order)}): {cells}", flush=True)
                    cpu = "  ".join(f"{kind} " + " + ".join(f"{who} {s:.2f}" for who, s in written[kind][1].items()
                                                             if s >= 0.005 or who == "jvm")
                                    for kind in kinds)
                    if cpu.strip():
                        print(f"  cpu s: {cpu}", flush=True)
            finally:
                spark.stop()
        finally:
            if broker is not None:
                broker.stop()
    summary = Summary("spark_write", "Spark batch writes: the logstore sink vs Spark's Parquet write")
    for kind in kinds[1:]:
        median = statistics.median(row[kind] / row["parquet"] for row in results)
        verdict = "meets" if median >= TARGET else "misses"
        print(f"median {kind}/parquet: {median:.2f}x ({verdict} the target of {TARGET}x)")
        summary.row(f"{kind}/parquet", median, verdict=median >= TARGET, target=TARGET,
                    ours=f"{statistics.median(row[kind] for row in results):,.0f} rows/s",
                    peer=f"{statistics.median(row['parquet'] for row in results):,.0f} rows/s",
                    note="the median of per-round ratios")
    summary.write()
    print(f"{args.rows:,} rows of {args.size} B in {args.tasks} tasks, local[2], {PARTITIONS}-partition topics, "
          f"data in {args.data_root or tempfile.gettempdir()}")


if __name__ == "__main__":
    main()
