"""Topic config overrides on disk: kept across reopen, dropped with the topic, crash leftovers, corrupt files."""
from __future__ import annotations

import json
import os
import shutil

import pytest

import logstore
from logstore.checkpoints import CorruptCheckpointError
from logstore.manager import TOPIC_CONFIGS_FILE

TS = 1_700_000_000_000
DAY_MS = 24 * 3600 * 1000


def fill(log, count: int) -> None:
    """Append `count` 100-byte keyed records (compacted topics refuse unkeyed ones), one batch each."""
    for i in range(count):
        log.append_records([b"%099d" % i], keys=[b"%d" % i], timestamps=TS + i)


def test_overrides_survive_reopen_and_the_logs_run_with_them(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("plain")
        assert not (tmp_path / TOPIC_CONFIGS_FILE).exists()  # nothing to keep, nothing written
        store.create_topic("small", partitions=2,
                           config={"segment.bytes": 1000, "retention.ms": 12_345, "cleanup.policy": "compact"})
    with logstore.open(str(tmp_path)) as store:
        assert store.topic_overrides("small") == {"cleanup.policy": "compact", "retention.ms": 12_345,
                                                  "segment.bytes": 1000}
        assert store.topic_overrides("plain") == {}
        config = store.config_for("small")
        assert (config.segment_bytes, config.retention_ms, config.deletes) == (1000, 12_345, False)
        assert store.config_for("plain") == logstore.LogConfig()
        for partition in (0, 1):
            log = store.log("small", partition)
            assert log.config == config
            fill(log, 30)  # about 5 KB: rolls at 1000 bytes
            assert len(log.segments) >= 4
        fill(store.log("plain"), 30)
        assert len(store.log("plain").segments) == 1


def test_broker_level_names_are_stored_as_topic_level_values(tmp_path):
    with logstore.open(str(tmp_path), {"log.retention.hours": 2}) as store:
        info = store.create_topic("t", config={"log.retention.hours": 1, "log.segment.bytes": 5000})
        assert info.config.retention_ms == 3_600_000
    doc = json.loads((tmp_path / TOPIC_CONFIGS_FILE).read_text())
    assert doc["topics"] == {"t": {"retention.ms": 3_600_000, "segment.bytes": 5000}}
    # The broker default moved; the topic keeps its own value, a topic without one follows the default.
    with logstore.open(str(tmp_path), {"log.retention.hours": 5}) as store:
        assert store.config_for("t").retention_ms == 3_600_000
        assert store.create_topic("u").config.retention_ms == 5 * 3_600_000


def test_delete_topic_drops_its_overrides(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("gone", config={"retention.ms": 1000})
        store.create_topic("kept", config={"retention.ms": 2000})
        store.delete_topic("gone")
    with logstore.open(str(tmp_path)) as store:
        assert store.topics() == {"kept": 1}
        assert store.topic_overrides("kept") == {"retention.ms": 2000}
        assert store.create_topic("gone").config.retention_ms == 7 * DAY_MS
    assert json.loads((tmp_path / TOPIC_CONFIGS_FILE).read_text())["topics"] == {"kept": {"retention.ms": 2000}}


def test_entry_left_by_a_create_cut_short_is_ignored(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("half", config={"retention.ms": 1000})
    # A crash after the file was written and before the directories were made.
    shutil.rmtree(tmp_path / "half-0")
    with logstore.open(str(tmp_path)) as store:
        assert store.topics() == {} and store.topic_overrides("half") == {}
        assert store.create_topic("half").config.retention_ms == 7 * DAY_MS
    with logstore.open(str(tmp_path)) as store:
        assert store.config_for("half").retention_ms == 7 * DAY_MS


@pytest.mark.parametrize("stale", [0, 1], ids=["first-dir-stale", "second-dir-stale"])
def test_newest_copy_wins_across_log_dirs(tmp_path, stale):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with logstore.open(dirs) as store:
        store.create_topic("one", partitions=2, config={"retention.ms": 1000})
        old = (tmp_path / ["a", "b"][stale] / TOPIC_CONFIGS_FILE).read_bytes()
        store.create_topic("two", partitions=2, config={"retention.ms": 2000})
        assert {os.path.dirname(log.directory) for log in store.logs().values()} == set(dirs)
    # A crash between the two log dirs' writes leaves one copy a generation behind.
    (tmp_path / ["a", "b"][stale] / TOPIC_CONFIGS_FILE).write_bytes(old)
    with logstore.open(dirs) as store:
        assert store.config_for("one").retention_ms == 1000
        assert store.config_for("two").retention_ms == 2000
        assert all(log.config.retention_ms == 2000 for (t, _), log in store.logs().items() if t == "two")


def test_opener_overrides_apply_for_the_run_only(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("t", config={"retention.ms": 1000, "segment.bytes": 5000})
    with logstore.open(str(tmp_path), topic_configs={"t": {"retention.ms": 9000}}) as store:
        assert store.log("t").config.retention_ms == 9000
        assert store.log("t").config.segment_bytes == 5000
    with logstore.open(str(tmp_path)) as store:
        assert store.config_for("t").retention_ms == 1000


@pytest.mark.parametrize("text, line", [
    (b'{"version": 0, "generation": 1, "topics": {', 1),
    (b'{"version": 1, "generation": 1, "topics": {}}', 1),
    (b'{"version": 0, "generation": -1, "topics": {}}', 1),
    (b'{"version": 0, "generation": 1,\n "topics": {"t": {"segment.bytes": -5}}}', 1),
    (b'{"version": 0, "generation": 1, "topics": {"t": {"segment.bites": 5}}}', 1),
    (b'{"version": 0, "generation": 1, "topics": {"a/b": {"segment.bytes": 5000}}}', 1),
    (b'{"version": 0, "generation": 1,\n "topics": {"t": {"retention.ms": true}}}', 1),
    (b'{"version": 0,\n\n "generation": x}', 3),
    (b'\xff', 1),
], ids=["torn", "version", "generation", "range", "name", "topic", "type", "syntax", "utf8"])
def test_a_corrupt_file_refuses_to_open(tmp_path, text, line):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("t", config={"segment.bytes": 5000})
    (tmp_path / TOPIC_CONFIGS_FILE).write_bytes(text)
    # Opening with the defaults would silently change retention; the operator has to look.
    with pytest.raises(CorruptCheckpointError) as raised:
        logstore.open(str(tmp_path))
    assert raised.value.line == line and TOPIC_CONFIGS_FILE in str(raised.value)
