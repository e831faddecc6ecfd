"""A Spark driver process of its own for the sink's tests: the parts that need their own SparkSession or a kill.

`python spark_write_driver.py SPEC_JSON`, SPEC_JSON {"mode", "path", "topic", "rows", "tasks", ...}:

- `retry`: a `local[2,4]` session (4 attempts per task) writes `rows` rows in `tasks` tasks through a sink whose
  writer raises on each task's first attempt once half its rows went through (and were appended: small Arrow
  batches, a smaller write buffer). Prints `done` once the job committed.
- `hold`: writes through a sink whose driver-side commit first writes the file `signal` and then waits to be
  killed: the tasks' transactions are all prepared, none is committed.
- `stream`: a rate source (`rate` rows/s) streams into `topic` with the checkpoint `checkpoint` until killed.
"""
from __future__ import annotations

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

            def first_half():
                seen = 0
                for batch in iterator:
                    yield batch
                    seen += batch.num_rows
                    if seen >= half:
                        raise RuntimeError("injected failure halfway through the task")
            return super().write(first_half())

    return source_with("logstore_retry", HalfFailingWriter)


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


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    {"retry": retry, "hold": hold, "stream": stream}[given["mode"]](given)
