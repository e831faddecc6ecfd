"""The metrics endpoint (`metrics.port`) against a real workload, read with prometheus_client's own parser.

A broker process serves confluent-kafka clients: an idempotent producer,
a transactional one that commits a transaction and aborts another, and a
consumer group that reads everything and commits chosen offsets; one
CreateTopics is refused. Meanwhile a thread scrapes `/metrics` over and
over (every scrape must parse, and no counter may go back). The last scrape
must then say exactly what happened: records in per topic, their bytes
(what the segment files hold, markers aside, as kafka-python decodes them),
log end offsets as the clients see them, lag equal to the log end offset
minus the committed offset, the refused request's error code, the
transactions by state and their durations, the group. `/ready` is 503 while
a store of many partitions recovers, and 200 once the broker listens.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import logstore
from broker_process import CLEAN_SHUTDOWN_MARKER, BrokerProcess, finish_brokers, free_port
from logstore.cleaner_report import partition_rows
from metrics_scrape import TIMEOUT, get, scrape, total, value
from segment_files import batches, segment_paths

RECORDS = 600     # to the plain topic, over 3 partitions
COMMITTED = 40    # records of the committed transaction
ABORTED = 25      # records of the aborted one


class Scraper(threading.Thread):
    """Scrapes until stopped: each scrape must parse, and the topic's records-in count must never go back."""

    def __init__(self, port: int, topic: str):
        super().__init__(daemon=True)
        self.port, self.topic = port, topic
        self.stop = threading.Event()
        self.scrapes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        seen = 0.0
        try:
            while not self.stop.is_set():
                now = total(scrape(self.port), "kafka_server_brokertopicmetrics_messagesin_total", topic=self.topic)
                assert now >= seen, f"records in went back from {seen} to {now}"
                seen = now
                self.scrapes += 1
                self.stop.wait(0.02)   # a scraper's pace, not a wait for an event
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            self.error = exc


@pytest.fixture
def metered(start_broker) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    yield start_broker(f"metrics.port={port}"), port


def _create(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT)


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[object] = []
    for i in range(RECORDS):
        producer.produce(topic, b"v" * (i % 97), key=b"k%d" % i,
                         on_delivery=lambda err, msg: failures.append(err) if err is not None else None)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert failures == []


def _transactions(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(TIMEOUT)
    for count, commit in ((COMMITTED, True), (ABORTED, False)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, b"t%d" % i, partition=0)
        assert producer.flush(TIMEOUT) == 0   # on the broker before the abort (librdkafka purges unsent ones)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT)


def _consume_and_commit(bootstrap: str, topic: str, group: str, committed: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    while read < RECORDS:
        message = consumer.poll(TIMEOUT)
        assert message is not None, f"only {read} of {RECORDS} records read"
        assert message.error() is None, message.error()
        read += 1
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()


def test_the_counters_say_what_the_workload_did(metered, topic):
    broker, port = metered
    plain, txn, group = f"{topic}-plain", f"{topic}-txn", f"{topic}-group"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, plain, 3)
    _create(admin, txn, 1)
    scraper = Scraper(port, plain)
    scraper.start()
    try:
        _produce(broker.bootstrap, plain)
        _transactions(broker.bootstrap, txn)
        probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{group}-probe"})
        ends = {p: probe.get_watermark_offsets(TopicPartition(plain, p), TIMEOUT)[1] for p in range(3)}
        txn_end = probe.get_watermark_offsets(TopicPartition(txn, 0), TIMEOUT)[1]
        probe.close()
        # Different distances behind the end, one of them none.
        committed = {p: max(ends[p] - 7 * p * p, 0) for p in range(3)}
        _consume_and_commit(broker.bootstrap, plain, group, committed)
        with pytest.raises(KafkaException, match="TOPIC_EXCEPTION"):
            admin.create_topics([NewTopic("not a topic name!", 1)])["not a topic name!"].result(TIMEOUT)
    finally:
        scraper.stop.set()
        scraper.join(TIMEOUT)
    assert scraper.error is None, scraper.error
    assert scraper.scrapes > 0
    m = scrape(port)

    # Records and bytes in: exactly what was appended (the markers are the coordinator's, not a Produce's).
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=plain) == RECORDS
    assert value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic=txn) == COMMITTED + ABORTED
    for name, partitions in ((plain, 3), (txn, 1)):
        on_disk = [b for p in range(partitions) for path in segment_paths(broker.data_dir, name, p)
                   for b in batches(path, whole=False)]
        produced = sum(b.size_in_bytes for b in on_disk if not b.is_control_batch)
        assert value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=name) == produced
        assert total(m, "kafka_log_log_size", topic=name) == sum(b.size_in_bytes for b in on_disk)
    assert value(m, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=plain) == 0
    # Bytes out: every batch went to the group's consumer at least once.
    assert value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=plain) >= total(
        m, "kafka_log_log_size", topic=plain)

    # Log end offsets as the clients see them, and the lag of the group's commits.
    assert {p: value(m, "kafka_log_log_logendoffset", topic=plain, partition=str(p)) for p in range(3)} == ends
    assert sum(ends.values()) == RECORDS
    assert value(m, "kafka_log_log_logendoffset", topic=txn, partition="0") == txn_end == COMMITTED + ABORTED + 2
    assert value(m, "kafka_log_log_logstartoffset", topic=plain, partition="0") == 0
    assert value(m, "kafka_log_log_numlogsegments", topic=plain, partition="0") == 1
    for p in range(3):
        labels = dict(consumergroup=group, topic=plain, partition=str(p))
        assert value(m, "kafka_consumergroup_current_offset", **labels) == committed[p]
        assert value(m, "kafka_consumergroup_lag", **labels) == ends[p] - committed[p]
    assert value(m, "kafka_consumergroup_lag_sum", consumergroup=group) == sum(ends[p] - committed[p]
                                                                                for p in range(3))
    assert value(m, "kafka_server_groupmetadatamanager_numoffsets") == 3
    assert value(m, "kafka_server_group_coordinator_metrics_group_count", protocol="classic") == 1
    assert value(m, "kafka_server_groupmetadatamanager_numgroupsempty") == 1    # its member left
    assert value(m, "kafka_server_group_coordinator_metrics_group_completed_rebalance_count") >= 1

    # Requests: counted per API, timed once each, errors by Kafka's name.
    produces = total(m, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert produces >= 1
    assert value(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == produces
    produce_errors = {dict(labels)["error"] for (name, labels), v in m.items()
                      if name == "kafka_network_requestmetrics_errors_total" and ("request", "Produce") in labels}
    assert produce_errors == {"NONE"}
    assert value(m, "kafka_network_requestmetrics_errors_total", request="CreateTopics",
                 error="INVALID_TOPIC_EXCEPTION") == 1
    assert total(m, "kafka_network_requestmetrics_requests_total", request="EndTxn") == 2
    # The natively encoded transaction answers count their codes too: one per EndTxn, one per partition added.
    assert value(m, "kafka_network_requestmetrics_errors_total", request="EndTxn", error="NONE") == 2
    assert value(m, "kafka_network_requestmetrics_errors_total", request="AddPartitionsToTxn", error="NONE") == 2

    # Transactions: the id's last one aborted; both timed. Producer ids: the idempotent producer's in three
    # partitions, the transactional one's in one.
    assert value(m, "logstore_transaction_coordinator_transactional_ids", state="CompleteAbort") == 1
    assert value(m, "logstore_transaction_coordinator_transactional_ids", state="Ongoing") == 0
    assert value(m, "logstore_transaction_duration_ms_count") == 2
    assert value(m, "kafka_server_replicamanager_produceridcount") >= 4

    # The fsyncs acks=all waited for, the listener's traffic, the process.
    assert value(m, "kafka_log_logflushstats_logflushrateandtimems_count") >= 1
    assert value(m, "logstore_log_group_commit_batch_size_sum") >= produces
    assert value(m, "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") >= 4
    assert value(m, "kafka_server_socket_server_metrics_incoming_byte_total", listener="PLAINTEXT") > total(
        m, "kafka_server_brokertopicmetrics_bytesin_total")
    assert value(m, "kafka_server_socket_server_metrics_outgoing_byte_total", listener="PLAINTEXT") > value(
        m, "kafka_server_brokertopicmetrics_bytesout_total", topic=plain)
    assert value(m, "process_cpu_seconds_total") > 0


def test_health_ready_and_other_paths(metered):
    _, port = metered
    assert get(port, "/health") == (200, b"ok\n")
    assert get(port, "/ready") == (200, b"ready\n")
    status, body = get(port, "/metrics.json")
    assert status == 404 and b"/metrics" in body


def _recovering_store(data_dir: Path, partitions: int) -> None:
    """A store of `partitions` partitions of one topic that crashed (no clean-shutdown marker, no recovery
    points): the next start scans every segment of every partition."""
    with logstore.open(str(data_dir)) as store:
        store.create_topic("big", 1)
        store.log("big", 0).append_records([b"x" * 100] * 200)
    first = data_dir / "big-0"
    for p in range(1, partitions):
        shutil.copytree(first, data_dir / f"big-{p}")   # the same topic id in each partition.metadata
    (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        (data_dir / name).unlink(missing_ok=True)


def test_ready_only_once_a_large_store_is_loaded(tmp_path):
    data_dir = tmp_path / "broker"
    data_dir.mkdir()
    _recovering_store(data_dir, 1500)
    port = free_port()
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, (f"metrics.port={port}",))
    started = threading.Thread(target=broker.start, daemon=True)
    try:
        started.start()
        # /health answers from the moment the endpoint listens, the store still loading.
        health = None
        while health is None:
            try:
                health = get(port, "/health")
            except urllib.error.URLError:
                # Not listening yet: poll again while the start goes on.
                started.join(0.01)
                assert started.is_alive(), broker.log_text()
        assert health == (200, b"ok\n")
        assert "loaded 1500/1500 partitions" not in broker.log_text()
        assert get(port, "/ready") == (503, b"loading\n")
        started.join(broker.start_timeout)
        assert broker.running, broker.log_text()
        assert "loaded 1500/1500 partitions" in broker.log_text()
        assert get(port, "/ready") == (200, b"ready\n")
    finally:
        finish_brokers([broker])


def test_the_cleaner_figures_are_what_logstore_cleaner_reads(start_broker, topic):
    port = free_port()
    broker = start_broker(f"metrics.port={port}", "log.cleaner.backoff.ms=50")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "batch.num.messages": 20})
    for i in range(2000):
        producer.produce(topic, b"value-%d" % i, key=b"key-%d" % (i % 20))
    assert producer.flush(TIMEOUT) == 0
    # Until the cleaner caught up: a round done and nothing left dirty (no further round then starts).
    deadline = time.monotonic() + TIMEOUT
    while True:
        m = scrape(port)
        if (value(m, "logstore_log_cleaner_rounds_total") >= 1
                and value(m, "logstore_log_cleaner_dirty_ratio", topic=topic, partition="0") == 0):
            break
        assert time.monotonic() < deadline, "the cleaner did not catch up"
        time.sleep(0.05)   # the cleaner runs in the broker's process: no event reaches this one
    rows = [row for row in partition_rows(str(broker.data_dir)) if row["rounds"]]
    assert value(m, "logstore_log_cleaner_rounds_total") == sum(row["rounds"] for row in rows)
    reclaimed = value(m, "logstore_log_cleaner_bytes_reclaimed_total")
    assert reclaimed == sum(row["bytes_reclaimed_total"] for row in rows) > 0
    mine = next(row for row in partition_rows(str(broker.data_dir)) if row["topic"] == topic)
    assert mine["dirty_ratio"] == 0.0
    assert value(m, "kafka_log_logcleanermanager_uncleanable_partitions_count",
                 logDirectory=str(broker.data_dir)) == 0


@pytest.mark.parametrize("case", ["in use", "out of range"])
def test_a_metrics_port_that_cannot_serve_is_one_line(tmp_path, case):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] if case == "in use" else 70000
        result = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}",
                                 "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override",
                                 f"metrics.port={port}"], capture_output=True, text=True, timeout=TIMEOUT)
    last = result.stderr.strip().splitlines()[-1]
    if case == "in use":
        assert result.returncode == 1
        assert last == (f"logstore broker: cannot serve metrics on 127.0.0.1:{port} (metrics.port={port}, from "
                        "--override): the port is in use")
    else:
        assert result.returncode == 2
        assert last == ("logstore broker: Invalid value 70000 for configuration metrics.port: a port (1-65535), "
                        "or 0 for no metrics endpoint")
    assert not (tmp_path / ".lock").exists()   # refused before the store opened


def test_a_consumer_protocol_group_is_counted_with_its_lag(start_broker, topic):
    port = free_port()
    broker = start_broker(f"metrics.port={port}")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        producer.produce(topic, b"r%d" % i, partition=i % 2)
    assert producer.flush(TIMEOUT) == 0
    group = f"{topic}-kip848"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        read = []
        while len(read) < 100:
            message = consumer.poll(TIMEOUT)
            assert message is not None and message.error() is None, message and message.error()
            read.append(message)
        consumer.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 50)], asynchronous=False)
        m = scrape(port)
        assert value(m, "kafka_server_group_coordinator_metrics_group_count", protocol="consumer") == 1
        assert value(m, "kafka_server_group_coordinator_metrics_consumer_group_count", state="stable") == 1
        # The group's creation bumped its epoch once; the member took both partitions in that epoch.
        assert value(m, "kafka_server_group_coordinator_metrics_consumer_group_rebalance_count") == 1
        assert value(m, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 50 - 30
        assert value(m, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="1") == 50 - 50
    finally:
        consumer.close()
