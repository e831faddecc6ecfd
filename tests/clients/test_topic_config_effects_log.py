"""The log's topic configs take effect per topic on a real broker: set at create time, and after an
IncrementalAlterConfigs on the running topic without a restart.

message.timestamp.type, max.message.bytes and message.timestamp.before/after.max.ms
decide the next produce; flush.messages and flush.ms move the recovery point
(seen in `recovery-point-offset-checkpoint`); index.interval.bytes and
segment.index.bytes shape the segments rolled after the change (Kafka sizes a
segment's indexes when it creates it); file.delete.delay.ms keeps the files of
segments retention deletes.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from test_topic_config_effects_wire import consume_all

TIMEOUT = 15.0  # s: a bound on any single wait
HOUR_MS = 3_600_000
LONG_MAX = (1 << 63) - 1


def create_topic(broker, topic: str, config: dict[str, str] | None = None) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = client.create_topics([NewTopic(topic, 1, 1, config=config or {})], operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None


def alter_topic(broker, topic: str, changes: dict[str, str | None]) -> None:
    """One IncrementalAlterConfigs: SET each name to its value, DELETE it for None."""
    entries = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for n, v in changes.items()]
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = client.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                                 incremental_configs=entries)],
                                                 request_timeout=TIMEOUT).values()
    future.result(TIMEOUT)


def send(broker, topic: str, value: bytes, *, timestamp: int = 0, acks: str = "1") -> KafkaError | None:
    """Produce one message as a batch of its own, without retries; the broker's error, or None."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "retries": 0, "linger.ms": 0})
    errors: list = []
    p.produce(topic, value=value, partition=0, timestamp=timestamp, on_delivery=lambda err, _: errors.append(err))
    assert p.flush(TIMEOUT) == 0, "message still undelivered after flush"
    return errors[0]


def code(error: KafkaError | None) -> int | None:
    return None if error is None else error.code()


def log_end(broker, topic: str) -> tuple[int, int]:
    """(log start offset, log end offset) of partition 0."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
    finally:
        c.close()


def wait_for(what: str, check, timeout: float = TIMEOUT):
    """Poll `check()` (files the broker's scheduler rewrites; no event to await) until it is truthy."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)
    return result


# -- the produce path ----------------------------------------------------------------------------------------------

def test_log_append_time_at_create_and_after_alter(broker, topic):
    create_topic(broker, f"{topic}-a", {"message.timestamp.type": "LogAppendTime"})
    create_topic(broker, f"{topic}-b")
    old = 1_600_000_000_000
    before = int(time.time() * 1000)
    assert send(broker, f"{topic}-a", b"1", timestamp=old) is None
    assert send(broker, f"{topic}-b", b"1", timestamp=old) is None
    alter_topic(broker, f"{topic}-a", {"message.timestamp.type": "CreateTime"})
    alter_topic(broker, f"{topic}-b", {"message.timestamp.type": "LogAppendTime"})
    assert send(broker, f"{topic}-a", b"2", timestamp=old) is None
    assert send(broker, f"{topic}-b", b"2", timestamp=old) is None
    after = int(time.time() * 1000)
    a, b = consume_all(broker, f"{topic}-a", 2), consume_all(broker, f"{topic}-b", 2)
    assert [r.timestamp_type for r in a] == [1, 0] and a[1].timestamp == old
    assert before <= a[0].timestamp <= after
    assert [r.timestamp_type for r in b] == [0, 1] and b[0].timestamp == old
    assert before <= b[1].timestamp <= after


def test_max_message_bytes_at_create_and_after_alter(broker, topic):
    create_topic(broker, topic, {"max.message.bytes": "2000"})
    assert code(send(broker, topic, b"x" * 5000)) == KafkaError.MSG_SIZE_TOO_LARGE
    assert send(broker, topic, b"x" * 1000) is None
    alter_topic(broker, topic, {"max.message.bytes": "100000"})
    assert send(broker, topic, b"x" * 5000) is None
    alter_topic(broker, topic, {"max.message.bytes": "500"})
    assert code(send(broker, topic, b"x" * 1000)) == KafkaError.MSG_SIZE_TOO_LARGE
    assert log_end(broker, topic) == (0, 2)


def test_timestamp_bounds_at_create_and_after_alter(broker, topic):
    create_topic(broker, topic, {"message.timestamp.before.max.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    assert code(send(broker, topic, b"past", timestamp=now - 2 * HOUR_MS)) == KafkaError.INVALID_TIMESTAMP
    assert code(send(broker, topic, b"future", timestamp=now + 2 * HOUR_MS)) == KafkaError.INVALID_TIMESTAMP
    alter_topic(broker, topic, {"message.timestamp.before.max.ms": str(LONG_MAX),
                                "message.timestamp.after.max.ms": str(3 * HOUR_MS)})
    assert send(broker, topic, b"past", timestamp=now - 2 * HOUR_MS) is None
    assert send(broker, topic, b"future", timestamp=now + 2 * HOUR_MS) is None
    alter_topic(broker, topic, {"message.timestamp.after.max.ms": "0"})
    assert code(send(broker, topic, b"future", timestamp=now + 2 * HOUR_MS)) == KafkaError.INVALID_TIMESTAMP
    assert [r.value for r in consume_all(broker, topic, 2)] == [b"past", b"future"]


# -- flushing ------------------------------------------------------------------------------------------------------

def recovery_points(data_dir: Path) -> dict[str, int]:
    """topic-partition → recovery point, as the broker last checkpointed them."""
    path = data_dir / "recovery-point-offset-checkpoint"
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()[2:]
    return {f"{t}-{p}": int(o) for t, p, o in (line.split() for line in lines)}


def test_flush_messages_and_flush_ms_at_create_and_after_alter(start_broker):
    broker = start_broker("log.flush.offset.checkpoint.interval.ms=20", "log.flush.scheduler.interval.ms=20")
    create_topic(broker, "every", {"flush.messages": "1"})
    create_topic(broker, "timed", {"flush.ms": "0"})
    create_topic(broker, "never")
    create_topic(broker, "altered")
    for topic in ("never", "altered", "every", "timed"):
        for i in range(3):
            assert send(broker, topic, b"%d" % i) is None   # acks=1: no fsync of its own
    points = wait_for("every and timed flushed", lambda: (p := recovery_points(broker.data_dir))
                      and p.get("every-0") == 3 and p.get("timed-0") == 3 and p)
    # Appended before the others, never flushed: neither count nor time asks for it.
    assert (points["never-0"], points["altered-0"]) == (0, 0)
    alter_topic(broker, "altered", {"flush.messages": "1"})
    assert send(broker, "altered", b"3") is None
    wait_for("altered flushed by count", lambda: recovery_points(broker.data_dir).get("altered-0") == 4)
    alter_topic(broker, "never", {"flush.ms": "0"})
    wait_for("never flushed by time", lambda: recovery_points(broker.data_dir).get("never-0") == 3)


# -- indexes -------------------------------------------------------------------------------------------------------

def segments(data_dir: Path, topic: str) -> list[tuple[int, int, int]]:
    """(base offset, .log bytes, .index bytes) of each segment of partition 0."""
    directory = data_dir / f"{topic}-0"
    return [(int(log.stem), log.stat().st_size, (directory / f"{log.stem}.index").stat().st_size)
            for log in sorted(directory.glob("*.log"))]


def test_index_interval_and_segment_index_bytes_at_create_and_for_segments_rolled_after_alter(start_broker):
    broker = start_broker()
    # 85 bytes: 10 offset entries (80), 7 time entries (84); every batch indexed but the segment's first.
    small = {"segment.index.bytes": "85", "index.interval.bytes": "0"}
    create_topic(broker, "small", small)
    create_topic(broker, "plain")
    create_topic(broker, "altered")
    for topic in ("small", "plain", "altered"):
        for i in range(15):
            assert send(broker, topic, b"%02d" % i) is None
    # A full time index rolls the segment, as in Kafka; the active one's index is preallocated to its size.
    assert [(base, index) for base, _, index in segments(broker.data_dir, "small")][-1] == (14, 80)
    assert [base for base, _, _ in segments(broker.data_dir, "small")] == [0, 7, 14]
    assert [base for base, _, _ in segments(broker.data_dir, "plain")] == [0]
    # The change reaches the next segment: a roll forced by a segment.bytes just under the active one's size.
    ((_, size, _),) = segments(broker.data_dir, "altered")
    alter_topic(broker, "altered", {**small, "segment.bytes": str(size)})
    assert send(broker, "altered", b"15") is None
    alter_topic(broker, "altered", {"segment.bytes": None})
    for i in range(16, 30):
        assert send(broker, "altered", b"%02d" % i) is None
    assert [base for base, _, _ in segments(broker.data_dir, "altered")] == [0, 15, 22, 29]
    broker.stop()
    # Trimmed at the clean stop: 6 entries in each full segment of 7 batches, none at the default interval.
    assert [index for _, _, index in segments(broker.data_dir, "small")] == [48, 48, 0]
    assert [index for _, _, index in segments(broker.data_dir, "plain")] == [0]
    assert [index for _, _, index in segments(broker.data_dir, "altered")] == [0, 48, 48, 0]


# -- deleting ------------------------------------------------------------------------------------------------------

def deleted_files(data_dir: Path, topic: str) -> set[int]:
    """Base offsets of the segments of partition 0 waiting out file.delete.delay.ms (`.log.deleted`)."""
    return {int(p.name.split(".")[0]) for p in (data_dir / f"{topic}-0").glob("*.log.deleted")}


@pytest.mark.parametrize("alter", [False, True], ids=["at-create", "after-alter"])
def test_file_delete_delay_ms_keeps_the_files_of_deleted_segments(start_broker, alter):
    broker = start_broker("log.retention.check.interval.ms=20")
    # Each batch a segment of its own; retention keeps the newest only.
    rolling = {"segment.bytes": "100", "retention.bytes": "1"}
    create_topic(broker, "kept", {**rolling, "file.delete.delay.ms": str(HOUR_MS)} if not alter else rolling)
    create_topic(broker, "gone", {**rolling, "file.delete.delay.ms": "0"} if not alter else rolling)
    if alter:
        alter_topic(broker, "kept", {"file.delete.delay.ms": str(HOUR_MS)})
        alter_topic(broker, "gone", {"file.delete.delay.ms": "0"})
    for topic in ("kept", "gone"):
        for i in range(4):
            assert send(broker, topic, b"value %d" % i) is None
    for topic in ("kept", "gone"):
        wait_for(f"{topic}: retention deleted the old segments", lambda t=topic: log_end(broker, t) == (3, 4))
    wait_for("gone: the deleted segments' files removed at once",
             lambda: deleted_files(broker.data_dir, "gone") == set()
             and [base for base, _, _ in segments(broker.data_dir, "gone")] == [3])
    assert deleted_files(broker.data_dir, "kept") == {0, 1, 2}
    assert [base for base, _, _ in segments(broker.data_dir, "kept")] == [3]
