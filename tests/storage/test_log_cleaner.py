"""The LogManager's background cleaner: it picks due logs, moves the checkpoint, keeps its state file,
leaves non-compacted topics alone, and `logstore cleaner` shows what it did."""
from __future__ import annotations

import io
import json

from logstore.cleaner_report import run as report
from logstore.cli import main as cli_main
from logstore.log_cleaner import CLEANER_CHECKPOINT, CLEANER_STATE, read_cleaner_checkpoints, read_cleaner_state
from logstore.manager import LogManager

WAIT_S = 30.0
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 2048, "retention.ms": -1,
             "min.cleanable.dirty.ratio": 0.1}
# Rounds run when a test asks (await_round), not on their own.
SETTINGS = {"log.cleaner.backoff.ms": 3_600_000, "log.cleaner.dedupe.buffer.size": 1 << 20}


def _fill(store: LogManager, topic: str, n: int = 400) -> None:
    target = store.log(topic, 0)
    for i in range(n):
        target.append_records([b"value-%d" % i], keys=[b"key-%d" % (i % 10)])


def test_the_background_cleaner_compacts_due_logs_only(tmp_path):
    store = LogManager(str(tmp_path), broker_settings=SETTINGS)
    try:
        store.create_topic("table", 1, COMPACTED)
        store.create_topic("events", 1, {**COMPACTED, "cleanup.policy": "delete"})
        _fill(store, "table")
        _fill(store, "events")
        events_before = len(list(store.log("events", 0).iter_records()))
        assert store.cleaner.await_round(WAIT_S)
        table = store.log("table", 0)
        checkpoint = read_cleaner_checkpoints(str(tmp_path))
        assert checkpoint == {("table", 0): table.segments[-1].base_offset}
        below = [r.key for r in table.iter_records() if r.offset < checkpoint[("table", 0)]]
        assert len(below) == len(set(below)) <= 10
        assert len(list(store.log("events", 0).iter_records())) == events_before
        state = read_cleaner_state(str(tmp_path))["table-0"]
        assert state["rounds"] == 1 and state["bytes_reclaimed"] > 0 and state["end_offset"] == checkpoint[("table", 0)]
        # Nothing new is dirty: the next round cleans nothing and the state stays.
        assert store.cleaner.await_round(WAIT_S)
        assert read_cleaner_state(str(tmp_path))["table-0"]["rounds"] == 1
    finally:
        store.close()
    assert (tmp_path / CLEANER_CHECKPOINT).exists() and (tmp_path / CLEANER_STATE).exists()


def test_the_cleaner_takes_a_new_backoff_and_buffer_at_run_time(tmp_path):
    store = LogManager(str(tmp_path), broker_settings=SETTINGS)
    try:
        store.create_topic("table", 1, COMPACTED)
        store.reconfigure(store.default_config, {"log.cleaner.backoff.ms": 50,
                                                 "log.cleaner.dedupe.buffer.size": 2 << 20})
        _fill(store, "table")
        # Nobody wakes it: with the hour's backoff of SETTINGS it would not look again before the wait ends.
        assert store.cleaner.await_cleanings(1, WAIT_S)
        _fill(store, "table", 200)
        # Rounds go on by themselves (some while the records came): each cleaning is awaited until one has
        # cleaned up to the active segment.
        end = store.log("table", 0).segments[-1].base_offset
        while True:
            seen = store.cleaner.cleanings   # before the checkpoint: a cleaning in between is not missed
            if read_cleaner_checkpoints(str(tmp_path))[("table", 0)] >= end:
                break
            assert store.cleaner.await_cleanings(seen + 1, WAIT_S)
        assert store.cleaner.cleanings >= 2
        assert store.settings["log.cleaner.dedupe.buffer.size"] == 2 << 20
    finally:
        store.close()


def test_the_checkpoint_carries_over_a_restart(tmp_path):
    store = LogManager(str(tmp_path), broker_settings=SETTINGS)
    store.create_topic("table", 1, COMPACTED)
    _fill(store, "table")
    assert store.cleaner.await_round(WAIT_S)
    first = store.cleaner.checkpoints[("table", 0)]
    store.close()
    store = LogManager(str(tmp_path), broker_settings=SETTINGS)
    try:
        assert store.cleaner.checkpoints[("table", 0)] == first
        _fill(store, "table")
        assert store.cleaner.await_round(WAIT_S)
        assert store.cleaner.checkpoints[("table", 0)] > first
        assert read_cleaner_state(str(tmp_path))["table-0"]["rounds"] == 2
    finally:
        store.close()


def test_logstore_cleaner_shows_each_compacted_partition(tmp_path, capsys):
    store = LogManager(str(tmp_path), broker_settings=SETTINGS)
    try:
        store.create_topic("table", 2, COMPACTED)
        store.create_topic("events", 1, {"cleanup.policy": "delete"})
        _fill(store, "table")
        before = io.StringIO()
        assert report([str(tmp_path)], as_json=True, out=before) == 0
        (row, idle) = json.loads(before.getvalue())["partitions"]
        assert (row["topic"], row["partition"], row["first_dirty"], row["clean_bytes"]) == ("table", 0, 0, 0)
        assert row["dirty_ratio"] == 1.0 and row["last_clean"] is None and row["rounds"] == 0
        assert (idle["partition"], idle["dirty_bytes"]) == (1, 0)
        assert store.cleaner.await_round(WAIT_S)
    finally:
        store.close()
    assert cli_main(["cleaner", str(tmp_path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["partitions"][0]
    assert row["rounds"] == 1 and row["last_clean"] and row["bytes_reclaimed"] > 0
    assert row["first_dirty"] > 0 and row["dirty_ratio"] == 0.0
    assert cli_main(["cleaner", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["topic", "partition", "first_dirty"] and len(lines) == 3
    assert cli_main(["cleaner", str(tmp_path / "missing")]) == 2


def test_logstore_cleaner_lists_partitions_in_numeric_order(tmp_path):
    store = LogManager(str(tmp_path), broker_settings=SETTINGS)
    try:
        store.create_topic("table", 12, COMPACTED)
    finally:
        store.close()
    out = io.StringIO()
    assert report([str(tmp_path)], as_json=True, out=out) == 0
    assert [row["partition"] for row in json.loads(out.getvalue())["partitions"]] == list(range(12))
