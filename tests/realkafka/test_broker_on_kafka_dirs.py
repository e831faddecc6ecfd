"""A real broker process started on a copy of each real Kafka log dir: it logs no error, kafka-python reads
every topic's committed records as kafka-python decodes the files, every group's committed offsets are
answered as the files hold them, and all of it again after a restart."""
from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from broker_process import BrokerProcess, free_port
from kafka_dirs import committed_offsets, committed_records, partition_dirs
from logstore.broker.coordinator.transaction import INTERNAL_TOPICS
from logstore.kafka_metadata import METADATA_TOPIC

READ_TIMEOUT_S = 60


def _user_partitions(log_dir) -> dict[TopicPartition, list]:
    """Each partition of a user topic in the fixture with what a read_committed consumer must see."""
    found = {}
    for path in partition_dirs(log_dir):
        topic, _, partition = path.name.rpartition("-")
        if topic not in INTERNAL_TOPICS and topic != METADATA_TOPIC:
            found[TopicPartition(topic, int(partition))] = committed_records(path)
    return found


def _consume_all(bootstrap: str, partitions: list[TopicPartition]) -> dict[TopicPartition, list]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        got: dict[TopicPartition, list] = {tp: [] for tp in partitions}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, {tp: (consumer.position(tp), ends[tp]) for tp in partitions}
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp].extend(records)
        return got
    finally:
        consumer.close()


def _fields(record) -> tuple:
    return record.offset, record.timestamp, record.key, record.value, tuple(record.headers or ())


def _group_offsets(bootstrap: str, groups: set[str]) -> dict[tuple[str, str, int], int]:
    if not groups:
        return {}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {(group, tp.topic, tp.partition): committed.offset
                for group, offsets in admin.list_group_offsets(sorted(groups)).items()
                for tp, committed in offsets.items()}
    finally:
        admin.close()


def test_the_broker_serves_a_kafka_dir_as_the_files_hold_it(kafka_dir, tmp_path):
    source, copy = kafka_dir
    expected_records = _user_partitions(source)
    expected_offsets = committed_offsets(source)
    broker = BrokerProcess("127.0.0.1", free_port(), copy)
    try:
        for _ in range(2):
            broker.start()
            if expected_records:
                got = _consume_all(broker.bootstrap, sorted(expected_records))
                for tp, records in expected_records.items():
                    assert [_fields(r) for r in got[tp]] == \
                        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records], tp
            found = _group_offsets(broker.bootstrap, {group for group, _, _ in expected_offsets})
            assert {k: v for k, v in found.items() if k in expected_offsets} == expected_offsets
            broker.stop()
    finally:
        if broker.running:
            broker.kill()
    log = broker.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-4000:]
