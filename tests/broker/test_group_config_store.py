"""The `group-configs` file and `GroupConfigStore`: values over the broker's settings, Kafka's checks, copies
in every log dir, a failed write that changes nothing, hand edits left out, listeners after the change."""
from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem  # noqa: E402
from logstore.broker.group_configs import GROUP_CONFIGS_FILE, GroupConfigStore, auto_offset_reset  # noqa: E402
from logstore.checkpoints import CorruptCheckpointError  # noqa: E402
from logstore.errors import InvalidConfigError, StorageError  # noqa: E402

SETTINGS = {"group.consumer.min.session.timeout.ms": 1_000, "group.consumer.min.heartbeat.interval.ms": 100,
            "group.share.record.lock.duration.ms": 20_000}


def dirs(tmp_path: Path, *names: str) -> list[str]:
    made = []
    for name in names or ("a",):
        (tmp_path / name).mkdir(exist_ok=True)
        made.append(str(tmp_path / name))
    return made


def store_of(log_dirs: list[str], settings=SETTINGS, fs=None) -> GroupConfigStore:
    current = dict(settings)
    return GroupConfigStore(log_dirs, lambda: current, fs) if fs else GroupConfigStore(log_dirs, lambda: current)


def test_values_are_typed_overrides_over_the_brokers_settings(tmp_path):
    store = store_of(dirs(tmp_path))
    assert store.value("g", "share.record.lock.duration.ms") == 20_000   # the broker's group.share.* setting
    assert store.value("g", "consumer.session.timeout.ms") == 45_000      # Kafka's default of the broker setting
    assert store.value("g", "share.isolation.level") == "read_uncommitted"   # no broker setting: GroupConfig's
    assert store.value("g", "share.renew.acknowledge.enable") is True
    store.alter("g", lambda current: {"consumer.session.timeout.ms": "2000", "consumer.heartbeat.interval.ms": "500",
                                      "share.renew.acknowledge.enable": "FALSE"})
    assert store.overrides("g") == {"consumer.session.timeout.ms": 2_000, "consumer.heartbeat.interval.ms": 500,
                                    "share.renew.acknowledge.enable": False}
    assert store.stored("g")["share.renew.acknowledge.enable"] == "false"   # Kafka's text of the value
    assert store.overrides("other") == {}


def test_a_refused_change_keeps_the_old_configs(tmp_path):
    store = store_of(dirs(tmp_path))
    store.alter("g", lambda current: {"share.delivery.count.limit": "4"})
    with pytest.raises(InvalidConfigError, match="consumer.session.timeout.ms must be greater than "
                                                 "consumer.heartbeat.interval.ms"):
        store.alter("g", lambda current: {**current, "consumer.session.timeout.ms": "2000"})
    assert store.stored("g") == {"share.delivery.count.limit": "4"}
    assert store.alter("g", lambda current: {**current, "share.isolation.level": "read_committed"},
                       validate_only=True) == {"share.delivery.count.limit": "4",
                                               "share.isolation.level": "read_committed"}
    assert store.stored("g") == {"share.delivery.count.limit": "4"}


def test_every_log_dir_holds_the_newest_generation_and_a_restart_reads_it(tmp_path):
    log_dirs = dirs(tmp_path, "a", "b")
    store = store_of(log_dirs)
    store.alter("g1", lambda current: {"share.auto.offset.reset": "by_duration:P1DT2H"})
    store.alter("g2", lambda current: {"share.delivery.count.limit": "3"})
    assert store.remove_group("g2") and not store.remove_group("g2")
    for log_dir in log_dirs:
        kept = json.loads(Path(log_dir, GROUP_CONFIGS_FILE).read_text())
        assert kept == {"version": 0, "generation": 3,
                        "groups": {"g1": {"share.auto.offset.reset": "by_duration:P1DT2H"}}}
    assert store_of(log_dirs).stored("g1") == {"share.auto.offset.reset": "by_duration:P1DT2H"}
    assert store_of(log_dirs).group_ids() == ["g1"]


def test_a_failed_write_changes_nothing_and_the_next_one_is_whole(tmp_path):
    log_dirs = dirs(tmp_path, "a", "b")
    store_of(log_dirs).alter("g", lambda current: {"share.delivery.count.limit": "4"})
    fs = FaultFileSystem()
    store = store_of(log_dirs, fs=fs)
    told: list[str] = []
    store.listen(told.append)
    fs.fail_write(f"{log_dirs[1]}/{GROUP_CONFIGS_FILE}.tmp", error=errno.EIO)
    with pytest.raises(StorageError):
        store.alter("g", lambda current: {"share.delivery.count.limit": "9"})
    assert store.stored("g") == {"share.delivery.count.limit": "4"} and told == []
    assert store_of(log_dirs).stored("g") == {"share.delivery.count.limit": "4"}   # rolled back on disk too
    store.alter("g", lambda current: {"share.delivery.count.limit": "6"})
    assert told == ["g"]
    assert store_of(log_dirs).stored("g") == {"share.delivery.count.limit": "6"}


def test_listeners_hear_a_change_once_it_is_durable(tmp_path):
    log_dirs = dirs(tmp_path)
    store = store_of(log_dirs)
    seen: list[tuple[str, dict]] = []
    store.listen(lambda group: seen.append((group, store_of(log_dirs).stored(group))))
    store.alter("g", lambda current: {"share.record.lock.duration.ms": "40000"})
    store.alter("g", lambda current: dict(current))   # no change: nothing written, nobody told
    store.remove_group("g")
    assert seen == [("g", {"share.record.lock.duration.ms": "40000"}), ("g", {})]


def test_a_stored_value_outside_narrower_bounds_runs_clamped(tmp_path):
    log_dirs = dirs(tmp_path)
    store_of(log_dirs).alter("g", lambda current: {"share.record.lock.duration.ms": "50000",
                                                   "share.delivery.count.limit": "9"})
    narrower = store_of(log_dirs, {**SETTINGS, "group.share.max.record.lock.duration.ms": 40_000,
                                   "group.share.max.delivery.count.limit": 6})
    assert narrower.value("g", "share.record.lock.duration.ms") == 40_000
    assert narrower.value("g", "share.delivery.count.limit") == 6
    assert narrower.stored("g") == {"share.record.lock.duration.ms": "50000", "share.delivery.count.limit": "9"}


def test_a_hand_edit_it_cannot_take_is_left_out_and_a_broken_copy_is_named(tmp_path, caplog):
    log_dirs = dirs(tmp_path)
    path = Path(log_dirs[0], GROUP_CONFIGS_FILE)
    path.write_text(json.dumps({"version": 0, "generation": 4, "groups": {
        "g": {"share.delivery.count.limit": "3", "share.bogus": "1", "share.isolation.level": "dirty"}}}))
    store = store_of(log_dirs)
    assert store.stored("g") == {"share.delivery.count.limit": "3"}
    assert "share.bogus=1 left out" in caplog.text and "share.isolation.level=dirty left out" in caplog.text
    store.alter("g", lambda current: {**current, "share.delivery.count.limit": "4"})
    assert json.loads(path.read_text())["generation"] == 5
    path.write_text('{"version": 0, "generation": 6, "groups": {"g": {"share.delivery.count.limit": 3}}}')
    with pytest.raises(CorruptCheckpointError, match=GROUP_CONFIGS_FILE):
        store_of(log_dirs)


@pytest.mark.parametrize(("text", "expected"), [
    ("latest", ("latest", None)), ("earliest", ("earliest", None)), ("by_duration:PT1H", ("by_duration", 3_600_000)),
    ("by_duration:P2DT3M4.5S", ("by_duration", 2 * 86_400_000 + 3 * 60_000 + 4_500)),
    ("by_duration:pt0s", ("by_duration", 0)), ("by_duration:PT1H-2M", ("by_duration", 3_480_000))])
def test_share_auto_offset_reset_reads_kafkas_strategies(text, expected):
    assert auto_offset_reset(text) == expected


@pytest.mark.parametrize("text", ["Latest", "by_duration", "by_duration:", "by_duration:PT", "by_duration:P",
                                  "by_duration:1H", "by_duration:-PT1S", "by_duration:PT-1H2M", "soon"])
def test_share_auto_offset_reset_refuses_what_kafka_refuses(text):
    with pytest.raises(ValueError, match="The value must be either 'earliest', 'latest' or of the format"):
        auto_offset_reset(text)
