"""A Spark driver process of its own for the broker target's tests: the jobs that need their own session or a kill.

`python spark_broker_write_driver.py SPEC_JSON`, SPEC_JSON {"mode", "bootstrap", "topic", "rows", "tasks", ...}:

- `retry`: a `local[2,4]` session writes `rows` rows in `tasks` tasks through the broker; each task's first
  attempt's writer raises once half its rows were sent and acknowledged. Prints `done` once committed.
- `hold`: the driver's commit writes the file `signal` (the tasks' transactional ids) and waits to be killed:
  every task's transaction prepared, no decision recorded.
- `decided`: the driver records its decision, commits the first task's transaction only, writes `signal` and
  waits to be killed.
- `stream`: a rate source (`rate` rows/s) streams through the broker into `topic` with the checkpoint
  `checkpoint` until killed.
- `executor`: as spark_write_driver.py's `executor` mode (an executor JVM SIGKILLed while a task is writing),
  through the broker.
Options every mode adds: `transaction.timeout.ms` = `timeout_ms`, `write.buffer.bytes` = `buffer_bytes` (if
given).
"""
from __future__ import annotations

import json
import sys
import time

from spark_write_driver import executor_killed, half_failing_source, rows_frame, session, source_with


def writer(frame, spec: dict, fmt: str = "logstore"):
    out = frame.write.format(fmt).option("kafka.bootstrap.servers", spec["bootstrap"]).option("topic", spec["topic"])
    if "timeout_ms" in spec:
        out = out.option("transaction.timeout.ms", str(spec["timeout_ms"]))
    if "buffer_bytes" in spec:
        out = out.option("write.buffer.bytes", str(spec["buffer_bytes"]))
    return out.mode("append")


def retry(spec: dict) -> None:
    spark = session("local[2,4]", **{"spark.sql.execution.arrow.maxRecordsPerBatch": "50"})
    spark.dataSource.register(half_failing_source(spec["rows"] // spec["tasks"] // 2))
    writer(rows_frame(spark, spec["rows"], spec["tasks"]), spec, "logstore_retry").save()
    print("done", flush=True)


def held(spec: dict, decided: bool) -> None:
    from logstore.broker.txn_wire_producer import PreparedTxnState, TxnWireProducer
    from logstore.spark.sink import LogstoreBatchWriter
    from logstore.spark.sink_broker import COMMITTING, BrokerTarget, Decision, write_decision

    signal = spec["signal"]

    def stop_here(ids: list[str]) -> None:
        with open(signal + ".tmp", "w") as out:
            out.write(json.dumps(ids))
        import os
        os.replace(signal + ".tmp", signal)
        time.sleep(3600)       # killed here

    class HeldWriter(LogstoreBatchWriter):
        def commit(self, messages):
            ids = sorted(m.transactional_id for m in messages if m.producer_id is not None)
            if not decided:
                stop_here(ids)
            target: BrokerTarget = self.target
            prepared = tuple(PreparedTxnState(m.transactional_id, m.producer_id, m.producer_epoch)
                             for m in sorted(messages, key=lambda m: m.transactional_id) if m.producer_id is not None)
            with target._client() as client:
                write_decision(client, Decision(target.prefix, self.job.job, COMMITTING, prepared))
                with TxnWireProducer(target.bootstrap, client=client) as producer:
                    producer.complete_transaction(prepared[0], True, target.timeout_ms)
            stop_here(ids)

    spark = session("local[2]")
    spark.dataSource.register(source_with("logstore_hold", HeldWriter))
    writer(rows_frame(spark, spec["rows"], spec["tasks"]), spec, "logstore_hold").save()


def stream(spec: dict) -> None:
    spark = session("local[2]")
    frame = (spark.readStream.format("rate").option("rowsPerSecond", str(spec["rate"])).option("numPartitions", "2")
             .load().selectExpr("CAST(value AS STRING) AS key", "CAST(CAST(value AS STRING) AS BINARY) AS value"))
    query = (frame.writeStream.format("logstore").option("kafka.bootstrap.servers", spec["bootstrap"])
             .option("topic", spec["topic"]).option("checkpointLocation", spec["checkpoint"])
             .trigger(processingTime="200 milliseconds").start())
    query.awaitTermination()


def executor(spec: dict) -> None:
    executor_killed(spec, lambda frame, fmt: writer(frame, spec, fmt).save())


if __name__ == "__main__":
    given = json.loads(sys.argv[1])
    if given["mode"] in ("hold", "decided"):
        held(given, given["mode"] == "decided")
    else:
        {"retry": retry, "stream": stream, "executor": executor}[given["mode"]](given)
