"""A Spark driver process of its own for the sink's tests: the parts that need their own SparkSession or a kill.

`python spark_write_driver.py SPEC_JSON`, SPEC_JSON {"mode", "path", "topic", "rows", "tasks", ...}:

- `retry`: a `local[2,4]` session (4 attempts per task) writes `rows` rows in `tasks` tasks through a sink whose
  writer raises on each task's first attempt once half its rows went through (and were appended: small Arrow
  batches, a smaller write buffer). Prints `done` once the job committed.
- `hold`: writes through a sink whose driver-side commit first writes the file `signal` and then waits to be
  killed: the tasks' transactions are all prepared, none is committed.
- `stream`: a rate source (`rate` rows/s) streams into `topic` with the checkpoint `checkpoint` until killed.
- `executor`: a `local-cluster[1,1,1024]` session (one executor JVM of one core, started by a standalone worker
  inside this driver; `spark.task.maxFailures` = `max_failures`) writes `rows` rows in `tasks` tasks. The first
  attempt of task `tasks // 2` writes the file `signal` (the pid of its executor JVM) once half its rows went
  through the sink, and waits for that JVM to die: the test SIGKILLs it. Prints `done` once the job committed, or
  `failed` and Spark's reason.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time


def session(master: str, **conf: str):
    """A SparkSession of this process with `format("logstore")` registered."""
    # Spark starts its Python workers with PYSPARK_PYTHON, else the system python, which lacks pyarrow.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import logstore.spark

    builder = (SparkSession.builder.master(master).appName("logstore-write-driver")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    for name, value in conf.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    logstore.spark.register(spark)
    return spark


def rows_frame(spark, rows: int, tasks: int):
    """`rows` rows in `tasks` partitions: key and value the row's number as text, one header naming it."""
    return spark.range(0, rows, numPartitions=tasks).selectExpr(
        "CAST(id AS STRING) AS key", "CAST(CAST(id AS STRING) AS BINARY) AS value",
        "array(named_struct('key', 'n', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers")


@contextlib.contextmanager
def small_arrow_batches(spark, rows: int = 50):
    """Inside the block, Spark hands the sink Arrow batches of at most `rows` rows (a failing task then has
    sent some through before it fails)."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(rows))
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def source_with(name: str, writer_class):
    """A data source named `name` whose batch writes go through `writer_class` (a LogstoreBatchWriter)."""
    from logstore.spark.source import LogstoreDataSource

    class Source(LogstoreDataSource):
        @classmethod
        def name(cls):
            return name

        def writer(self, schema, overwrite):
            return writer_class(dict(self.options), schema, overwrite)

    return Source


def through_half(batches, half: int, then):
    """The Arrow batches of `batches`; once `half` rows went by and the writer asks for the next batch (so every
    row before it went through the sink), `then()`, which raises or never returns."""
    seen = 0
    for batch in batches:
        yield batch
        seen += batch.num_rows
        if seen >= half:
            then()


def half_failing_source(half: int):
    """A `logstore_retry` data source whose writer raises on each task's first attempt once `half` of its rows
    went through the sink (whose small write buffer has appended or sent them by then)."""
    from pyspark import TaskContext

    from logstore.spark.sink import LogstoreBatchWriter

    class HalfFailingWriter(LogstoreBatchWriter):
        def write(self, iterator):
            # Inside the writer itself, not in an operator before it (whose failure may come first).
            if TaskContext.get().attemptNumber() != 0:
                return super().write(iterator)

            def fail():
                raise RuntimeError("injected failure halfway through the task")
            return super().write(through_half(iterator, half, fail))

    return source_with("logstore_retry", HalfFailingWriter)


def spark_home(where: str) -> None:
    """SPARK_HOME for a local-cluster session: pyspark's own `bin`, `jars` and `python` linked into `where`, so
    that the standalone worker's work dir (executor logs, the app's files), `$SPARK_HOME/work`, lands there and
    not inside the installed pyspark."""
    import pyspark

    installed = os.path.dirname(pyspark.__file__)
    os.makedirs(where, exist_ok=True)
    for name in ("bin", "jars", "python"):
        if not os.path.exists(os.path.join(where, name)):
            os.symlink(os.path.join(installed, name), os.path.join(where, name))
    os.environ["SPARK_HOME"] = where


def _parent_and_state(pid: int) -> tuple[int, str]:
    with open(f"/proc/{pid}/stat") as stat:
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after its last ')'.
        fields = stat.read().rpartition(")")[2].split()
    return int(fields[1]), fields[0]


def executor_jvm() -> int:
    """The pid of the executor JVM this Python worker serves: its nearest `java` ancestor."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() == "java":
                return pid
        pid = _parent_and_state(pid)[0]
    raise RuntimeError("this Python worker has no java ancestor: not run by an executor JVM")


def wait_for_death(pid: int, timeout_s: float) -> None:
    """Return once process `pid` is gone (or a zombie: killed, not yet reaped); raise after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if _parent_and_state(pid)[1] == "Z":
                return
        except FileNotFoundError:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} was not killed within {timeout_s:g} s")
        time.sleep(0.05)


def executor_killing_source(name: str, task: int, half: int, signal: str):
    """A data source named `name` whose writer, in the first attempt of task `task`, once `half` of its rows
    went through the sink (whose small write buffer has appended or sent them by then), writes the pid of its
    executor JVM into the file `signal` and waits for that JVM to be SIGKILLed (then this worker goes too)."""
    from pyspark import TaskContext

    from logstore.spark.sink import LogstoreBatchWriter

    class HeldTaskWriter(LogstoreBatchWriter):
        def write(self, iterator):
            context = TaskContext.get()
            if context.partitionId() != task or context.attemptNumber() != 0:
                return super().write(iterator)

            def signal_and_wait():
                jvm = executor_jvm()
                with open(signal + ".tmp", "w") as out:
                    out.write(str(jvm))
                os.replace(signal + ".tmp", signal)
                wait_for_death(jvm, 240)
                os._exit(1)     # the executor is gone: this worker must not go on with the task
            return super().write(through_half(iterator, half, signal_and_wait))

    return source_with(name, HeldTaskWriter)


def executor_killed(spec: dict, save) -> None:
    """The `executor` mode for either target: `save(frame, fmt)` writes the rows through the sink."""
    spark_home(spec["spark_home"])
    spark = session("local-cluster[1,1,1024]", **{"spark.task.maxFailures": str(spec["max_failures"]),
                                                  "spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    # The executors' Python workers run in the worker's work dir: this module (whose classes a driver script
    # importing it pickles by reference) reaches them as Spark ships a job's Python files.
    spark.sparkContext.addPyFile(os.path.abspath(__file__))
    tasks = spec["tasks"]
    spark.dataSource.register(executor_killing_source("logstore_killed", tasks // 2, spec["rows"] // tasks // 2,
                                                      spec["signal"]))
    try:
        save(rows_frame(spark, spec["rows"], tasks), "logstore_killed")
    except Exception as exc:  # noqa: BLE001 - the test reads what failed
        # Spark's reason, on one line: which task failed how often, and why (an ExecutorLostFailure).
        reason = next((line for line in str(exc).splitlines() if "Job aborted" in line), type(exc).__name__)
        print("failed", reason.strip(), flush=True)
        return
    finally:
        spark.stop()
    print("done", flush=True)


def retry(spec: dict) -> None:
    spark = session("local[2,4]", **{"spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    spark.dataSource.register(half_failing_source(spec["rows"] // spec["tasks"] // 2))
    (rows_frame(spark, spec["rows"], spec["tasks"]).write.format("logstore_retry").option("topic", spec["topic"])
     .option("write.buffer.bytes", "200").mode("append").save(spec["path"]))
    print("done", flush=True)


def hold(spec: dict) -> None:
    from logstore.spark.sink import LogstoreBatchWriter

    signal = spec["signal"]

    class HeldWriter(LogstoreBatchWriter):
        def commit(self, messages):
            with open(signal, "w") as out:
                out.write(json.dumps([m.producer_id for m in messages]))
            time.sleep(3600)       # killed here: every task's transaction prepared, none committed

    spark = session("local[2]")
    spark.dataSource.register(source_with("logstore_hold", HeldWriter))
    (rows_frame(spark, spec["rows"], spec["tasks"]).write.format("logstore_hold").option("topic", spec["topic"])
     .option("transaction.timeout.ms", str(spec["timeout_ms"])).mode("append").save(spec["path"]))


def stream(spec: dict) -> None:
    spark = session("local[2]")
    frame = (spark.readStream.format("rate").option("rowsPerSecond", str(spec["rate"])).option("numPartitions", "2")
             .load().selectExpr("CAST(value AS STRING) AS key", "CAST(CAST(value AS STRING) AS BINARY) AS value"))
    query = (frame.writeStream.format("logstore").option("topic", spec["topic"])
             .option("checkpointLocation", spec["checkpoint"]).trigger(processingTime="200 milliseconds")
             .start(spec["path"]))
    query.awaitTermination()


def executor(spec: dict) -> None:
    executor_killed(spec, lambda frame, fmt: frame.write.format(fmt).option("topic", spec["topic"])
                    .option("write.buffer.bytes", "200").mode("append").save(spec["path"]))


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    {"retry": retry, "hold": hold, "stream": stream, "executor": executor}[given["mode"]](given)
