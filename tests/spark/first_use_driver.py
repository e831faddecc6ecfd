"""A new user's first Spark script, run as a process of its own: a fresh session, nothing registered.

`python first_use_driver.py SPEC_JSON` builds a `local[2]` session the way the
README's first example does (no `register` call, no Spark settings beyond
quieting the UI, Python filter pushdown left at Spark's default), reads the log
dir with `spark.read.format("logstore")` and `spark.readStream`, and prints
what it saw as one JSON line prefixed `RESULT `. It imports nothing of
logstore: Spark has to find the source by itself.

SPEC_JSON is {"path", "work", "full", "set_pyspark_python"}: `work` a scratch
directory for checkpoints; `full` false reads all rows only;
`set_pyspark_python` sets PYSPARK_PYTHON to this interpreter before the
session starts, as the README tells a user whose `python3` is another Python.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
ORDERS_PAST_THE_END = json.dumps({"orders": {"0": 5000, "1": 5000}})
ORDERS_AT_THE_END = json.dumps({"orders": {"0": 1200, "1": 1200}})

# Scans that plan no task range: (subscription and offset options, a filter or None).
EMPTY_BATCH = {
    "unknown-topic": ({"subscribe": "no-such-topic"}, None),
    "empty-topic": ({"subscribe": "empty"}, None),
    "filter-past-the-end": ({"subscribe": "short"}, "offset >= 1000"),
    "starting-at-the-end": ({"subscribe": "orders", "startingOffsets": ORDERS_AT_THE_END}, None),
    "starting-past-the-end": ({"subscribe": "orders", "startingOffsets": ORDERS_PAST_THE_END,
                               "failOnDataLoss": "false"}, None),
}
EMPTY_STREAM = {
    "unknown-topic": {"subscribe": "no-such-topic", "startingOffsets": "earliest"},
    "empty-topic": {"subscribe": "empty", "startingOffsets": "earliest"},
    "starting-past-the-end": {"subscribe": "orders", "startingOffsets": ORDERS_PAST_THE_END,
                              "failOnDataLoss": "false"},
}


def rows(df) -> list[list]:
    """Kafka-source rows as [topic, partition, offset, key hex, value hex, timestamp ms, timestampType]."""
    from pyspark.sql import functions as F
    picked = df.select("topic", "partition", "offset", F.hex("key"), F.hex("value"),
                       F.unix_millis("timestamp"), "timestampType")
    return sorted([list(r) for r in picked.collect()], key=lambda r: (r[0], r[1], r[2]))


def batch(spark, path: str, options: dict, where: str | None):
    reader = spark.read.format("logstore")
    for name, value in options.items():
        reader = reader.option(name, value)
    df = reader.load(path)
    return df if where is None else df.where(where)


def scans(spark, path: str) -> dict:
    """Rows and task counts of a filtered scan, and the empty scans, at the session's pushdown setting."""
    filtered = batch(spark, path, {"subscribe": "orders"}, "offset >= 1000")
    empty = {}
    for case, (options, where) in EMPTY_BATCH.items():
        df = batch(spark, path, options, where)
        empty[case] = {"rows": len(df.collect()), "schema": df.schema.simpleString()}
    return {"filtered": {"rows": rows(filtered), "tasks": filtered.rdd.getNumPartitions()}, "empty": empty}


def stream(spark, path: str, checkpoint: Path, name: str, options: dict) -> dict:
    """What a Trigger.AvailableNow stream of `options` delivered into a memory table."""
    reader = spark.readStream.format("logstore")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load(path)
    query = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    table = spark.table(name)
    return {"rows": table.count(), "schema": table.schema.simpleString()}


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    if spec["set_pyspark_python"]:
        # Before the first session: Spark reads it when it starts its JVM and Python workers.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("logstore-first-use")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    path, work = spec["path"], Path(spec["work"])
    result = {"pushdown_setting": spark.conf.get(PUSHDOWN, None),
              "rows": rows(batch(spark, path, {"subscribe": "orders"}, None))}
    if spec["full"]:
        result["pushdown_off"] = scans(spark, path)
        try:
            batch(spark, path, {"subscribe": "orders", "startingOffsets": ORDERS_PAST_THE_END}, None).collect()
            result["past_the_end_error"] = None
        except Exception as e:  # noqa: BLE001 - the message is the result
            result["past_the_end_error"] = str(e)
        result["stream"] = {case: stream(spark, path, work / case, case.replace("-", "_"), options)
                            for case, options in EMPTY_STREAM.items()}
        result["stream"]["orders"] = stream(spark, path, work / "orders", "orders",
                                            {"subscribe": "orders", "startingOffsets": "earliest"})
        spark.conf.set(PUSHDOWN, "true")
        result["pushdown_on"] = scans(spark, path)
    spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
