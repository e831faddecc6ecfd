"""The streaming tests' sink and query, and a Spark driver process of its own to SIGKILL.

The sink is foreachBatch writing each micro-batch's rows to a file named by the
batch id (tmp + rename), so a batch Spark replays from its checkpoint replaces
the file it wrote before: together the files hold what the stream delivered.

Run as a script, `python spark_stream_driver.py SPEC_JSON` starts a SparkSession
of its own and streams as `start_stream` does (processing-time trigger) into a
`BatchFiles` sink, printing `batch ID ROWS` once each batch's file is in place
and then holding the batch (uncommitted) until it reads a line on stdin, until
it is killed. SPEC_JSON is {"path", "topic", "sink", "checkpoint", "options"}.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path


class BatchFiles:
    """A foreachBatch sink: one JSON file of [partition, offset, value] rows per batch id.

    Called on Spark's driver thread; `wait_for` lets another thread of the same
    process wait for what has been delivered.
    """

    def __init__(self, directory: Path, *, announce: bool = False):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.announce = announce
        self._delivered = threading.Condition()

    def __call__(self, df, batch_id: int) -> None:
        rows = [[r.partition, r.offset, r.value.decode()]
                for r in df.select("partition", "offset", "value").collect()]
        tmp = self.directory / f".{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, self.directory / f"{batch_id:06d}.json")
        if self.announce:
            print(f"batch {batch_id} {len(rows)}", flush=True)
        with self._delivered:
            self._delivered.notify_all()

    def files(self) -> dict[str, str]:
        """Each batch file's name and text, as they are now."""
        return {p.name: p.read_text() for p in sorted(self.directory.glob("*.json"))}

    def batches(self) -> list[list[tuple]]:
        """Every batch's rows, in batch id order."""
        return [[tuple(row) for row in json.loads(text)] for text in self.files().values()]

    def rows(self) -> list[tuple]:
        """Every delivered row, in batch id order."""
        return [row for batch in self.batches() for row in batch]

    def wait_for(self, predicate, timeout: float) -> bool:
        """Whether `predicate(rows)` came true within `timeout` s of batches delivered in this process."""
        with self._delivered:
            return self._delivered.wait_for(lambda: predicate(self.rows()), timeout)


def start_stream(spark, path, topic: str, sink, checkpoint, *, available_now: bool, **options):
    """A started logstore stream of `topic` under `path` into `sink` (foreachBatch)."""
    reader = spark.readStream.format("logstore").option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    writer = (reader.load(str(path)).writeStream.foreachBatch(sink)
              .option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    return writer.start()


def checkpoint_offsets(checkpoint) -> list[dict[int, int]]:
    """Each planned batch's end offset per partition, in batch order, from the checkpoint's offset log.

    The log's files are Spark's: a version line, the batch metadata, then one line
    per source with the offset that source reported (one source here).
    """
    files = sorted(Path(checkpoint, "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    ends = []
    for path in files:
        (nested,) = [json.loads(line) for line in path.read_text().splitlines()[2:]]
        ends.append({int(p): o for parts in nested.values() for p, o in parts.items()})
    return ends


def main(argv: list[str]) -> None:
    """Stream until killed, announcing each batch on stdout."""
    spec = json.loads(argv[0])
    # Spark starts its Python workers with PYSPARK_PYTHON, else the system python, which lacks pyarrow.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import logstore.spark

    spark = (SparkSession.builder.master("local[2]").appName("logstore-stream-driver")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    logstore.spark.register(spark)
    files = BatchFiles(Path(spec["sink"]), announce=True)

    def sink(df, batch_id):
        files(df, batch_id)
        # Spark commits the batch only when this returns: a kill until then leaves it to be replayed.
        if not sys.stdin.readline():
            raise SystemExit("stdin closed")

    query = start_stream(spark, spec["path"], spec["topic"], sink, spec["checkpoint"], available_now=False,
                         **spec["options"])
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
