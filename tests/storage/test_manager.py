"""LogManager: topics, names, checkpoints, clean and unclean reopen, the embedding API."""
from __future__ import annotations

import gc
import os
import weakref

import pytest

import logstore
from logstore.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpoint, read_partition_metadata
from logstore.config import LogConfig
from logstore.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.manager import validate_topic_name


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a/b", "../x", "a b", "ü", "x\x00"])
def test_illegal_topic_names_are_refused(tmp_path, name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)
    with logstore.open(str(tmp_path)) as store:
        with pytest.raises(InvalidTopicError):
            store.create_topic(name)
    assert sorted(os.listdir(tmp_path)) == [".kafka_cleanshutdown", ".lock", "log-start-offset-checkpoint",
                                            "recovery-point-offset-checkpoint"]


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "9" * 249, "__consumer_offsets"])
def test_legal_topic_names(name):
    validate_topic_name(name)


def test_embedding_round_trip_with_checkpoints(tmp_path):
    with logstore.open(str(tmp_path), {"log.segment.bytes": 2000}) as store:
        info = store.create_topic("orders", partitions=3)
        with pytest.raises(TopicExistsError):
            store.create_topic("orders")
        with pytest.raises(InvalidPartitionsError):
            store.create_topic("none", partitions=0)
        log = store.log("orders", 1)
        for i in range(100):
            log.append_records([b"value-%d" % i], keys=[b"key"], timestamps=1_700_000_000_000 + i)
        log.delete_records(10)
        assert read_partition_metadata(tmp_path / "orders-1" / "partition.metadata") == info.topic_id
    checkpoint = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    assert checkpoint == "0\n3\norders 0 0\norders 1 100\norders 2 0\n"
    assert "orders 1 10\n" in (tmp_path / "log-start-offset-checkpoint").read_text()
    with logstore.open(str(tmp_path)) as store:
        assert store.topics() == {"orders": 3}
        log = store.log("orders", 1)
        assert log.recovery_report.clean_shutdown and log.recovery_report.recovered_segments == []
        assert (log.log_start_offset, log.log_end_offset) == (10, 100)
        assert log.read_records(42, 1)[0].value == b"value-42"
        assert log.offset_for_timestamp(1_700_000_000_050) == (50, 1_700_000_000_050)
        assert store.topic_id("orders") == info.topic_id
        assert not os.path.exists(tmp_path / ".kafka_cleanshutdown")  # a crash from here is unclean


def _checkpointed_store(directory):
    """A store of 1,500-byte segments, topic "t" holding 100 flushed records and checkpointed, left open."""
    store = logstore.open(str(directory), {"segment.bytes": 1500}, start_scheduler=False)
    store.create_topic("t")
    log = store.log("t")
    for _ in range(100):
        log.append_records([b"x" * 20])
    log.flush()
    store.checkpoint()
    return store, log


def test_unclean_reopen_scans_from_the_checkpointed_recovery_point(tmp_path):
    store, log = _checkpointed_store(tmp_path)
    for _ in range(5):
        log.append_records([b"y" * 20])
    flushed = log.recovery_point
    # Simulate a crash: drop the objects without closing (no marker, no trim); the kernel
    # would drop the dead process's lock on the directory.
    store._release_dirs()
    with logstore.open(str(tmp_path)) as reopened:
        report = reopened.log("t").recovery_report
        assert not report.clean_shutdown
        bases = [s.base_offset for s in reopened.log("t").segments]
        holding = max(b for b in bases if b <= flushed)
        assert report.recovered_segments == [b for b in bases if b >= holding]
        assert len(report.recovered_segments) < len(bases)
        assert reopened.log("t").log_end_offset == 105
    store._stop.set()


def test_truncation_rewrites_the_recovery_point_checkpoint_at_once(tmp_path):
    store, log = _checkpointed_store(tmp_path)
    assert OffsetCheckpoint(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 100}
    log.truncate_to(40)
    assert OffsetCheckpoint(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 40}
    # Unflushed appends above the truncation point, then a crash: recovery scans them.
    for _ in range(30):
        log.append_records([b"z" * 20])
    store._release_dirs()  # the crash drops the directory lock
    with logstore.open(str(tmp_path)) as reopened:
        report = reopened.log("t").recovery_report
        assert min(report.recovered_segments) <= 40
        assert reopened.log("t").log_end_offset == 70
    store._stop.set()


def test_delete_topic_and_unknown_partitions(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("gone", partitions=2)
        store.create_topic("kept")
        store.delete_topic("gone")
        assert store.topics() == {"kept": 1}
        assert not any(n.startswith("gone") for n in os.listdir(tmp_path))
        with pytest.raises(UnknownTopicOrPartitionError):
            store.log("gone", 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            store.delete_topic("gone")
    (tmp_path / "kept-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    with logstore.open(str(tmp_path)) as store:
        assert store.topics() == {"kept": 1}
    assert not (tmp_path / "kept-0.0123456789abcdef0123456789abcdef-delete").exists()


def test_a_deleted_topics_logs_are_freed_without_the_cycle_collector(tmp_path):
    # A broker freezes its long-lived objects out of the collector's passes (broker/collector.py): a log kept
    # in a reference cycle would stay in memory long after its topic is gone.
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("gone", partitions=3)
        logs = [store.log("gone", p) for p in range(3)]
        for log in logs:
            log.append_records([b"x" * 20])
            log.durable(log.log_end_offset).result(timeout=10)
        alive = [weakref.ref(log) for log in logs]
        del logs, log
        gc.disable()
        try:
            store.delete_topic("gone")
            assert [ref() for ref in alive] == [None] * 3
        finally:
            gc.enable()


@pytest.mark.parametrize("props, retention_ms", [
    ({"log.retention.hours": 1}, 3_600_000),
    ({"log.retention.minutes": 10, "log.retention.hours": 1}, 600_000),
    ({"log.retention.hours": 1, "log.retention.minutes": 10}, 600_000),
    ({"log.retention.hours": 1, "log.retention.ms": 5, "log.retention.minutes": 10}, 5),
])
def test_retention_ms_then_minutes_then_hours_as_kafka_reads_them(props, retention_ms):
    assert LogConfig.from_properties(props).retention_ms == retention_ms


def test_topic_configs_use_kafka_names(tmp_path):
    with pytest.raises(InvalidConfigError):
        logstore.open(str(tmp_path), {"segment.bites": 5})
    with logstore.open(str(tmp_path), {"log.retention.hours": 1}) as store:
        info = store.create_topic("t", config={"segment.bytes": 4096, "cleanup.policy": "compact"})
        assert info.config.segment_bytes == 4096 and info.config.retention_ms == 3_600_000
        assert not info.config.deletes
        with pytest.raises(InvalidConfigError):
            store.create_topic("u", config={"segment.bytes": -1})
        with pytest.raises(InvalidConfigError):
            store.create_topic("v", config={"message.timestamp.type": "Wall"})
