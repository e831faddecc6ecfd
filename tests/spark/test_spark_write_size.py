"""A million rows through the sink in one `local[2]` job of 8 tasks, into a 4-partition topic: each row once.

Issue 29's size check, for both targets: a log dir no broker holds (read back
by our Spark source, by `logstore.reader`, and by a read_committed
confluent-kafka consumer through a broker started on the dir afterwards) and a
running broker through KIP-939's two-phase commit (read back by the consumer
and by our Spark source on the broker's own log dir, beside it). The readers
compare row numbers as sets and counts (write_readback.py), never a million
Python rows twice.
"""
from __future__ import annotations

import logstore
from broker_process import BrokerProcess, finish_brokers, free_port
from logstore.dir_transactions import DirTransactions, hold_dir
from spark_write_driver import rows_frame
from txn_checker import stable_offsets
from txn_helpers import create_topic
from write_readback import (
    assert_each_row_once,
    assert_placed_by_murmur2,
    assert_spark_sees_each_row_once,
    broker_rows,
    dir_rows,
    dir_stable,
    spark_summary,
)

ROWS = 1_000_000
TASKS = 8
PARTITIONS = 4
TWO_PHASE = "transaction.two.phase.commit.enable=true"


def test_a_million_rows_into_a_log_dir_land_once_for_every_reader(spark, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with logstore.open(str(data)) as store:
        store.create_topic("big", PARTITIONS)
    rows_frame(spark, ROWS, TASKS).write.format("logstore").option("topic", "big").mode("append").save(str(data))

    found = dir_rows(str(data), "big")
    assert_each_row_once(found, ROWS)
    assert_placed_by_murmur2(found)
    assert dir_stable(str(data), "big")
    with hold_dir(str(data), 10) as store:
        journal = DirTransactions(store)
        assert [journal.intents(job) for job in journal.jobs()] == [[]]   # the decision only, every intent ended
    assert_spark_sees_each_row_once(spark_summary(spark, str(data), "big"), ROWS, found)

    # A broker started on the dir serves the same rows to librdkafka at read_committed.
    broker = BrokerProcess("127.0.0.1", free_port(), data)
    try:
        broker.start()
        through_broker = broker_rows(broker.bootstrap, "big", PARTITIONS)
        assert {p: len(n) for p, n in through_broker.items()} == {p: len(n) for p, n in found.items()}
        assert_each_row_once(through_broker, ROWS)
    finally:
        finish_brokers([broker])


def test_a_million_rows_through_a_broker_land_once_for_every_reader(spark, start_broker):
    broker = start_broker(TWO_PHASE)
    create_topic(broker.bootstrap, "big", PARTITIONS)
    rows_frame(spark, ROWS, TASKS).write.format("logstore").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", "big").mode("append").save()

    found = broker_rows(broker.bootstrap, "big", PARTITIONS)
    assert_each_row_once(found, ROWS)
    assert all(lso == hw for lso, hw in stable_offsets(broker.bootstrap, "big", range(PARTITIONS)).values())
    # Our Spark source reads the broker's log dir beside it.
    assert_spark_sees_each_row_once(spark_summary(spark, str(broker.data_dir), "big"), ROWS, found)
