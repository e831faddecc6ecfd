"""Dynamic broker configs in-process: a BrokerConfig over log dirs holding `broker-configs`, changes through
`alter_broker_configs` on a real store, and the acceptor's connection limits following them.

Kafka's precedence (dynamic per-broker > dynamic cluster default > static > default), its checks and their
messages, the store's live Logs taking new defaults where a topic has no override of its own, and nothing
applied by a change that is refused or only validated (a change whose file cannot be written, and power cuts:
tests/storage/test_power_loss_metadata.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from logstore.broker.acceptor import ConnectionQuotas
from logstore.broker.config import BrokerConfig
from logstore.broker.dynamic_config import BROKER_CONFIGS_FILE, DYNAMIC_CONFIGS, DynamicConfigs, write_dynamic_configs
from logstore.broker.reconfigure import alter_broker_configs
from logstore.errors import InvalidConfigError, InvalidRequestError
from logstore.manager import LogManager


def _config(tmp_path, **static: object) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": f"{tmp_path}/a,{tmp_path}/b", **static})


@pytest.fixture
def store(tmp_path):
    config = _config(tmp_path)
    with LogManager(config.log_dirs, config.log_config, start_scheduler=False) as opened:
        opened.create_topic("plain", 2)
        opened.create_topic("own", 1, {"retention.ms": 60_000, "max.message.bytes": 5_000})
        yield opened


def test_precedence_is_node_then_cluster_default_then_static_then_default(tmp_path):
    config = _config(tmp_path, **{"message.max.bytes": 2_000, "log.retention.ms": 9_000, "max.connections": 50})
    assert (config.log_config.max_message_bytes, config.log_config.retention_ms, config["max.connections"]) == \
        (2_000, 9_000, 50)
    write_dynamic_configs(config.log_dirs, DynamicConfigs(1, {
        "": {"message.max.bytes": "3000", "max.connections": "40", "log.segment.bytes": "70000"},
        "1": {"message.max.bytes": "4000"},
        "2": {"log.segment.bytes": "90000"},   # another node's: not this broker's
    }), make_dirs=True)
    reread = _config(tmp_path, **{"message.max.bytes": 2_000, "log.retention.ms": 9_000, "max.connections": 50})
    assert (reread.log_config.max_message_bytes, reread.log_config.retention_ms, reread["max.connections"],
            reread.log_config.segment_bytes) == (4_000, 9_000, 40, 70_000)
    # The static layer is kept apart: DescribeConfigs tells each layer.
    assert reread.static_values()["message.max.bytes"] == 2_000


def test_a_stored_config_this_broker_cannot_take_is_left_out_with_a_warning(tmp_path, caplog):
    config = _config(tmp_path)
    write_dynamic_configs(config.log_dirs, DynamicConfigs(3, {"1": {
        "num.partitions": "7", "log.retention.ms": "soon", "log.segment.bytes": "70000"}}), make_dirs=True)
    with caplog.at_level(logging.WARNING, logger="logstore.broker.config"):
        reread = _config(tmp_path)
    assert (reread["num.partitions"], reread.log_config.retention_ms, reread.log_config.segment_bytes) == \
        (1, 7 * 24 * 3_600_000, 70_000)
    warned = sorted(r.getMessage().split("=")[0] for r in caplog.records)
    assert warned == ["ignoring the dynamic config log.retention.ms", "ignoring the dynamic config num.partitions"]
    # Forgotten, as Kafka drops them: the next change of the resource is not refused for them.
    assert reread.dynamic == DynamicConfigs(3, {"1": {"log.segment.bytes": "70000"}})


def test_a_broken_file_stops_the_start_with_one_line_naming_it(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / BROKER_CONFIGS_FILE).write_text('{"version": 0, "generation": 1, "resources": {"x": {}}}')
    with pytest.raises(InvalidConfigError) as refused:
        _config(tmp_path)
    path = tmp_path / "a" / BROKER_CONFIGS_FILE
    assert str(refused.value) == (f"the dynamic broker configs cannot be read: corrupt checkpoint file {path}, "
                                  "line 1: resource 'x' is neither \"\" nor a node id")
    started = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}/a",
                              "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
                             capture_output=True, text=True, timeout=60)
    assert (started.returncode, started.stderr) == (2, f"logstore broker: {refused.value}\n")


def test_a_change_is_kept_in_every_log_dir_and_the_live_logs_take_it(tmp_path, store):
    config = _config(tmp_path)
    alter_broker_configs(config, store, "1", {"log.retention.ms": "1000", "message.max.bytes": "3000"})
    for log_dir in config.log_dirs:
        with open(os.path.join(log_dir, BROKER_CONFIGS_FILE), encoding="utf-8") as f:
            assert json.load(f) == {"version": 0, "generation": 1,
                                    "resources": {"1": {"log.retention.ms": "1000", "message.max.bytes": "3000"}}}
    assert (config.log_config.retention_ms, config.log_config.max_message_bytes) == (1000, 3000)
    # A topic's own override still wins; a topic without one runs with the new default at once.
    assert {(key, log.config.retention_ms, log.config.max_message_bytes) for key, log in store.logs().items()} == {
        (("plain", 0), 1000, 3000), (("plain", 1), 1000, 3000), (("own", 0), 60_000, 5_000)}
    # So does a topic created after the change.
    store.create_topic("later", 1)
    assert store.log("later").config.retention_ms == 1000
    # Deleting the per-broker value brings the cluster default (none here), then the static one back.
    alter_broker_configs(config, store, "", {"log.retention.ms": "2000"})
    alter_broker_configs(config, store, "1", {"message.max.bytes": "3000"})
    assert store.log("plain").config.retention_ms == 2000
    alter_broker_configs(config, store, "", {})
    assert store.log("plain").config.retention_ms == 7 * 24 * 3_600_000
    assert _config(tmp_path).dynamic.resources == {"1": {"message.max.bytes": "3000"}}


def test_producer_id_expiration_applies_to_every_partition_at_once(tmp_path, store):
    config = _config(tmp_path)
    alter_broker_configs(config, store, "", {"producer.id.expiration.ms": "5000"})
    assert {log.producers.expiration_ms for log in store.logs().values()} == {5000}


@pytest.mark.parametrize(("wanted", "message"), [
    ({"log.retention.hours": "1", "num.partitions": "3"},
     "Cannot update these configs dynamically: Set(log.retention.hours, num.partitions)"),
    ({"log.retention.msec": "1"}, "Unknown broker config name: log.retention.msec; did you mean log.retention.ms?"),
    ({"log.retention.ms": "soon"}, "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"),
    ({"max.connections.per.ip": "0"}, "Invalid value 0 for configuration max.connections.per.ip: "
                                      "max.connections.per.ip can be set to zero only if "
                                      "max.connections.per.ip.overrides property is set"),
    ({"num.io.threads": "17"}, "Invalid dynamic configuration: Dynamic thread count update validation failed for "
                               "num.io.threads=17, value should not be greater than double the current value 8"),
    ({"num.io.threads": "0"}, "Invalid dynamic configuration: Dynamic thread count update validation failed for "
                              "num.io.threads=0, value should be at least 1"),
    ({"log.cleaner.threads": "3"}, "Invalid dynamic configuration: Log cleaner threads cannot be increased to more "
                                   "than double the current value 1"),
    # A new default may conflict with a topic's own override: refused, naming the topic.
    ({"log.cleaner.max.compaction.lag.ms": "10"},
     "Invalid dynamic configuration: conflict topic config setting min.compaction.lag.ms (100) > "
     "max.compaction.lag.ms (10) (in the config of topic lagged)"),
])
def test_a_refused_change_changes_nothing(tmp_path, store, wanted, message):
    store.create_topic("lagged", 1, {"min.compaction.lag.ms": 100})
    config = _config(tmp_path)
    before = (config.settings, config.log_properties, {k: log.config for k, log in store.logs().items()})
    with pytest.raises(InvalidRequestError) as refused:
        alter_broker_configs(config, store, "1", wanted)
    assert str(refused.value) == message
    assert (config.settings, config.log_properties, {k: log.config for k, log in store.logs().items()}) == before
    assert not any(os.path.exists(os.path.join(d, BROKER_CONFIGS_FILE)) for d in config.log_dirs)


def test_validate_only_checks_and_changes_nothing(tmp_path, store):
    config = _config(tmp_path)
    alter_broker_configs(config, store, "1", {"log.retention.ms": "1000"}, validate_only=True)
    assert config.dynamic == DynamicConfigs() and store.log("plain").config.retention_ms == 7 * 24 * 3_600_000
    assert not any(os.path.exists(os.path.join(d, BROKER_CONFIGS_FILE)) for d in config.log_dirs)


def test_configs_without_effect_here_are_kept_and_shown(tmp_path, store):
    config = _config(tmp_path)
    alter_broker_configs(config, store, "", {"num.io.threads": "16", "leader.replication.throttled.rate": "100"})
    assert _config(tmp_path).dynamic.of("") == {"num.io.threads": "16", "leader.replication.throttled.rate": "100"}
    assert {"num.io.threads", "log.retention.ms", "max.connections", "message.max.bytes"} <= DYNAMIC_CONFIGS


def test_connection_limits_follow_a_change(tmp_path, store):
    config = _config(tmp_path, **{"max.connections": 2})

    async def scenario() -> list[int]:
        quotas = ConnectionQuotas.of_config(config)
        await quotas.slot()
        await quotas.slot()
        third = asyncio.ensure_future(quotas.slot())
        await asyncio.sleep(0)
        seen = [quotas.served, int(third.done())]
        # The change comes from a worker thread, as a handler's does; the loop takes it.
        await asyncio.to_thread(alter_broker_configs, config, store, "", {"max.connections": "3",
                                                                          "max.connections.per.ip": "1",
                                                                          "max.connections.per.ip.overrides":
                                                                              "127.0.0.1:2"})
        await asyncio.wait_for(third, 5)
        seen += [quotas.served, quotas.limit("10.0.0.1"), quotas.limit("127.0.0.1")]
        return seen

    assert asyncio.run(scenario()) == [2, 0, 3, 1, 2]


def test_concurrent_incremental_changes_keep_each_other(tmp_path, store):
    config = _config(tmp_path)
    wanted = {"num.io.threads": "9", "num.network.threads": "4", "background.threads": "11",
              "num.replica.fetchers": "2", "leader.replication.throttled.rate": "1",
              "follower.replication.throttled.rate": "2", "log.retention.ms": "1000", "log.segment.bytes": "70000"}

    def add(name: str) -> None:
        # As IncrementalAlterConfigs does: the operation applies to the configs current under the lock.
        alter_broker_configs(config, store, "1", lambda current: {**current, name: wanted[name]})

    with ThreadPoolExecutor(len(wanted)) as pool:
        list(pool.map(add, wanted))
    assert config.dynamic == DynamicConfigs(len(wanted), {"1": wanted}) == _config(tmp_path).dynamic
