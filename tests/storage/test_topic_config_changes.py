"""LogManager.alter_topic_config: a topic's overrides changed while it runs, checked first, kept across reopen."""
from __future__ import annotations

import json
import threading

import pytest

import logstore
from logstore.config import LONG_MAX, LogConfig
from logstore.errors import InvalidConfigError, InvalidRecordError, InvalidTopicError, UnknownTopicOrPartitionError
from logstore.manager import TOPIC_CONFIGS_FILE

TS = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000


def fill(log, count: int, *, start: int = 0) -> None:
    """Append `count` keyed 100-byte records, one batch each."""
    for i in range(start, start + count):
        log.append_records([b"%099d" % i], keys=[b"k%d" % (i % 7)], timestamps=TS + i)


def stored(directory) -> dict:
    """The overrides per topic in a log dir's `topic-configs` file."""
    return json.loads((directory / TOPIC_CONFIGS_FILE).read_text())["topics"]


def test_a_change_reaches_every_partition_and_survives_reopen(tmp_path):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t", partitions=3, config={"retention.ms": 5000})
        config = store.alter_topic_config("t", {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.2",
                                                "delete.retention.ms": 1000, "max.compaction.lag.ms": "60000"})
        assert (config.compacts, config.deletes) == (True, True)
        assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (0.2, 1000)
        assert (config.max_compaction_lag_ms, config.retention_ms) == (60_000, 5000)  # the earlier override stays
        assert [store.log("t", p).config for p in range(3)] == [config] * 3
        assert store.config_for("t") == config
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        assert store.config_for("t") == config
        assert [store.log("t", p).config for p in range(3)] == [config] * 3
        assert store.topic_overrides("t").keys() == {"cleanup.policy", "min.cleanable.dirty.ratio",
                                                    "delete.retention.ms", "max.compaction.lag.ms", "retention.ms"}


def test_none_deletes_an_override_and_the_default_applies_again(tmp_path):
    with logstore.open(str(tmp_path), {"log.retention.hours": 2}, start_scheduler=False) as store:
        store.create_topic("t", config={"retention.ms": 5000, "segment.bytes": 4000})
        config = store.alter_topic_config("t", {"retention.ms": None, "segment.ms": None})  # the latter was never set
        assert (config.retention_ms, config.segment_bytes) == (2 * 3_600_000, 4000)
        assert stored(tmp_path) == {"t": {"segment.bytes": 4000}}
        store.alter_topic_config("t", {"segment.bytes": None})
        assert stored(tmp_path) == {}
        assert store.log("t").config == store.default_config
    with logstore.open(str(tmp_path), {"log.retention.hours": 2}, start_scheduler=False) as store:
        assert store.topic_overrides("t") == {}
        assert store.log("t").config.retention_ms == 2 * 3_600_000


@pytest.mark.parametrize("changes, message", [
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"min.cleanable.dirty.ratio": "half"},
     "Invalid value half for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ({"delete.retention.ms": -1}, "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0"),
    ({"max.compaction.lag.ms": "0"}, "Value must be at least 1"),
    ({"segment.bytes": str(1 << 31)}, "Not a number of type INT"),
    ({"cleanup.policy": "compact,shred"}, "String must be one of: compact, delete"),
    # Checked against what the topic already has: max.compaction.lag.ms=100000 is its override.
    ({"min.compaction.lag.ms": 200_000},
     "conflict topic config setting min.compaction.lag.ms (200000) > max.compaction.lag.ms (100000)"),
    ({"retention.ms": 1, "no.such.config": 1}, "Unknown topic config name: no.such.config"),
    ({"log.retention.ms": 1}, "Unknown topic config name: log.retention.ms"),  # a broker-level name
])
def test_a_bad_change_changes_nothing(tmp_path, changes, message):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t", partitions=2, config={"max.compaction.lag.ms": 100_000, "retention.ms": 7000})
        before_file = (tmp_path / TOPIC_CONFIGS_FILE).read_bytes()
        before = [store.log("t", p).config for p in range(2)]
        with pytest.raises(InvalidConfigError) as refused:
            store.alter_topic_config("t", {"retention.ms": 1, **changes})
        assert message in str(refused.value)
        assert (tmp_path / TOPIC_CONFIGS_FILE).read_bytes() == before_file
        assert [store.log("t", p).config for p in range(2)] == before
        assert before[0].retention_ms == 7000
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        assert store.log("t", 1).config == before[1]


def test_validate_only_answers_the_config_but_changes_nothing(tmp_path):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t")
        config = store.alter_topic_config("t", {"cleanup.policy": "compact"}, validate_only=True)
        assert config.compacts
        assert not store.log("t").config.compacts
        assert store.topic_overrides("t") == {}
        assert not (tmp_path / TOPIC_CONFIGS_FILE).exists()
        with pytest.raises(InvalidConfigError):
            store.alter_topic_config("t", {"cleanup.policy": "nothing"}, validate_only=True)


def test_an_unknown_topic_is_refused_before_its_values_are_checked(tmp_path):
    # Issue 27: Kafka's tools see the unknown topic first, whatever the configs asked.
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        for asked in ({"retention.ms": "soon"}, {"no.such.config": 1}, {"retention.ms": 1000}):
            with pytest.raises(UnknownTopicOrPartitionError, match="The topic 'missing' does not exist."):
                store.alter_topic_config("missing", asked)
        store.create_topic("present")
        with pytest.raises(InvalidConfigError):
            store.alter_topic_config("present", {"retention.ms": "soon"})
        with pytest.raises(InvalidTopicError):
            store.alter_topic_config("../x", {"retention.ms": 1000})
        assert not (tmp_path / TOPIC_CONFIGS_FILE).exists()


def test_a_running_log_follows_the_new_config(tmp_path):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t", config={"retention.ms": -1})
        log = store.log("t")
        fill(log, 20)
        assert len(log.segments) == 1
        store.alter_topic_config("t", {"segment.bytes": 1000})
        fill(log, 20, start=20)  # about 2 KB more: rolls at 1000 bytes now
        assert len(log.segments) >= 3
        # The records are from 2023: a day's retention removes every segment but the active one.
        assert store.run_retention() == 0
        inactive = len(log.segments) - 1
        store.alter_topic_config("t", {"retention.ms": DAY_MS})
        assert store.run_retention() == inactive
        assert [s.base_offset for s in log.segments] == [log.log_start_offset]
        # Compacted now: Kafka refuses a record without a key.
        store.alter_topic_config("t", {"cleanup.policy": "compact"})
        with pytest.raises(InvalidRecordError, match="without key"):
            log.append_records([b"no key"])
        fill(log, 1, start=40)


def test_config_changes_while_appends_run(tmp_path):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t")
        log = store.log("t")
        errors = []

        def append():
            try:
                fill(log, 400)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        writer = threading.Thread(target=append)
        writer.start()
        for i in range(200):
            store.alter_topic_config("t", {"segment.bytes": 600 + 10 * (i % 50), "index.interval.bytes": i % 3 * 100})
        writer.join()
        assert errors == []
        assert log.log_end_offset == 400
        assert [r.offset for r in log.read_records(0, 400)] == list(range(400))
        assert log.config == store.config_for("t")
        assert log.config.segment_bytes == 600 + 10 * (199 % 50)


def test_a_change_replaces_the_openers_override_for_the_run(tmp_path):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t")
    opened = logstore.open(str(tmp_path), topic_configs={"t": {"retention.ms": 1000, "segment.bytes": 3000}},
                           start_scheduler=False)
    with opened as store:
        config = store.alter_topic_config("t", {"retention.ms": 2000})
        assert (config.retention_ms, config.segment_bytes) == (2000, 3000)
        assert stored(tmp_path) == {"t": {"retention.ms": 2000}}  # the opener's value is still not written
        assert store.alter_topic_config("t", {"segment.bytes": None}).segment_bytes == LogConfig().segment_bytes
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        assert store.topic_overrides("t") == {"retention.ms": 2000}


def test_default_max_compaction_lag_is_long_max():
    config = LogConfig()
    assert (config.max_compaction_lag_ms, config.min_compaction_lag_ms) == (LONG_MAX, 0)
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms, config.compacts) == (0.5, 86_400_000, False)
    broker_named = LogConfig.from_properties({"log.cleaner.min.cleanable.ratio": "0.75",
                                              "log.cleaner.delete.retention.ms": "10",
                                              "log.cleaner.min.compaction.lag.ms": "5",
                                              "log.cleaner.max.compaction.lag.ms": "6"})
    assert (broker_named.min_cleanable_dirty_ratio, broker_named.delete_retention_ms,
            broker_named.min_compaction_lag_ms, broker_named.max_compaction_lag_ms) == (0.75, 10, 5, 6)


def test_configs_kafka_4_removed_are_taken_and_dropped(tmp_path):
    with logstore.open(str(tmp_path), start_scheduler=False) as store:
        store.create_topic("t")
        store.alter_topic_config("t", {"message.format.version": "2.8-IV1", "message.downconversion.enable": "false",
                                       "retention.ms": 1000})
        assert store.topic_overrides("t") == {"retention.ms": 1000}
        store.alter_topic_config("t", {"message.format.version": None})   # deleting one is a no-op too
        assert store.topic_overrides("t") == {"retention.ms": 1000}
