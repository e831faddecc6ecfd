"""Real Kafka log dirs opened by the store and by an embedded node: every record as kafka-python reads
it, every committed offset as the files hold it, nothing Kafka wrote changed, and a restart plus a
retention and cleaner round that delete nothing Kafka would keep."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

import logstore
from kafka_dirs import committed_offsets, committed_records, decode_partition, partition_dirs
from logstore.broker import embedded
from logstore.broker.coordinator.transaction import INTERNAL_TOPICS
from logstore.kafka_metadata import METADATA_DIR

SETTINGS = {"group.initial.rebalance.delay.ms": 0}


def _split(partition_dir: Path) -> tuple[str, int]:
    topic, _, partition = partition_dir.name.rpartition("-")
    return topic, int(partition)


def _served_partitions(log_dir: Path) -> list[Path]:
    return [p for p in partition_dirs(log_dir) if p.name != METADATA_DIR]


def _fields(record) -> tuple:
    headers = tuple((k, v) for k, v in (record.headers or ()))
    return record.offset, record.timestamp, record.key, record.value, headers


def _digests(log_dir: Path) -> dict[str, str]:
    """What Kafka wrote that must survive byte for byte: every segment, and the whole metadata log."""
    kept = [p for p in log_dir.rglob("*") if p.is_file()
            and (p.suffix == ".log" or p.parent.name == METADATA_DIR)]
    return {str(p.relative_to(log_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in kept}


def test_every_record_reads_as_kafka_python_decodes_it(kafka_dir):
    source, copy = kafka_dir
    with logstore.open(str(copy), start_scheduler=False) as store:
        for partition_dir in _served_partitions(source):
            topic, partition = _split(partition_dir)
            log = store.log(topic, partition)
            expected = [r for r in decode_partition(partition_dir) if not r.is_control]
            ours = list(log.iter_records())
            assert [_fields(r) for r in ours] == [_fields(r) for r in expected], partition_dir.name
            if expected:
                assert log.log_end_offset >= expected[-1].offset + 1
            assert [_fields(r) for r in log.iter_records(isolation="read_committed")] == \
                [_fields(r) for r in committed_records(partition_dir)]


def test_opening_and_closing_keeps_kafkas_segments_and_metadata_log_byte_for_byte(kafka_dir):
    source, copy = kafka_dir
    before = _digests(source)
    with logstore.open(str(copy), start_scheduler=False) as store:
        assert not [r.directory for r in store.reports if r.truncated], "recovery cut bytes Kafka wrote"
    assert _digests(copy) == before


def test_a_node_returns_every_committed_offset_as_the_files_hold_it_across_a_restart(kafka_dir):
    source, copy = kafka_dir
    expected = committed_offsets(source)
    for _ in range(2):
        with embedded.open(str(copy), SETTINGS) as node:
            found = {}
            for group, topic, partition in expected:
                committed = node.groups.fetch_offsets(group, [(topic, partition)])[(topic, partition)]
                found[(group, topic, partition)] = None if committed is None else committed.offset
            assert found == expected


def _latest_by_key(records) -> dict:
    latest = {}
    for record in records:
        if record.value is None:
            latest.pop(record.key, None)
        else:
            latest[record.key] = (record.offset, record.value)
    return latest


def test_a_retention_and_cleaner_round_delete_nothing_kafka_would_keep(kafka_dir):
    source, copy = kafka_dir
    expected_offsets = committed_offsets(source)
    month_later = int(time.time() * 1000) + 30 * 86_400_000
    with embedded.open(str(copy), SETTINGS) as node:
        store = node.store
        before = {p: committed_records(p) for p in _served_partitions(source)}
        store.run_retention(month_later)
        while store.cleaner.clean_filthiest():
            pass
        for partition_dir, records in before.items():
            topic, partition = _split(partition_dir)
            log = store.log(topic, partition)
            kept = [_fields(r) for r in log.iter_records(isolation="read_committed")]
            if topic in INTERNAL_TOPICS:
                continue  # the node writes there itself (group metadata); the offsets are checked below
            if log.config.compacts:
                assert _latest_by_key(log.iter_records(isolation="read_committed")) == _latest_by_key(records)
            else:
                # Retention only ever removes a log's oldest segments: what is left is a tail of what was.
                assert kept == [_fields(r) for r in records][len(records) - len(kept):]
            if records:
                assert log.log_end_offset >= records[-1].offset + 1
    with embedded.open(str(copy), SETTINGS) as node:
        for (group, topic, partition), offset in expected_offsets.items():
            assert node.groups.fetch_offsets(group, [(topic, partition)])[(topic, partition)].offset == offset


def test_producer_ids_handed_out_are_above_every_id_kafka_used(kafka_dir):
    source, copy = kafka_dir
    used = max((r.producer_id for p in _served_partitions(source) for r in decode_partition(p)), default=-1)
    with embedded.open(str(copy), SETTINGS) as node:
        handed_out = node.producer_ids.allocate()
        assert handed_out > used
        metadata = node.store.kafka_metadata
        if metadata is not None and metadata.cluster.next_producer_id is not None:
            # The controller handed blocks up to here to Kafka's brokers.
            assert handed_out >= metadata.cluster.next_producer_id
