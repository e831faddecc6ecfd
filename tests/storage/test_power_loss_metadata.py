"""Power cuts at every fsync/rename boundary of the small files beside the partitions: the producer-id block,
Kafka's `meta.properties`, `topic-configs`, `kafka-metadata-applied` and `broker-configs`. Each is absent,
the old version or the new one after a cut, never torn, and the new one once its write returned; no
producer id handed out before a cut is handed out again after it.

Each case runs its workload once on a `FaultFileSystem` to count the boundaries, then, from the same
starting directory, cuts the power at each boundary in turn (and once after the last) in both legal
outcomes of a cut (names dropped since the last directory fsync, or kept), and reopens the directory
through the real file system.
"""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.broker.config import BrokerConfig
from logstore.broker.dynamic_config import BROKER_CONFIGS_FILE, DynamicConfigs, read_dynamic_configs
from logstore.broker.node import META_PROPERTIES, Node
from logstore.broker.producer_ids import BLOCK_SIZE, FILE_NAME, ProducerIdAllocator
from logstore.broker.reconfigure import alter_broker_configs
from logstore.cluster_metadata import ClusterMetadata
from logstore.config import LogConfig
from logstore.errors import StorageError
from logstore.kafka_metadata import APPLIED_FILE, KafkaMetadata, applied_state, record_applied
from logstore.manager import LogManager
from logstore.topics import TOPIC_CONFIGS_FILE, read_topic_configs

MODES = [False, True]   # durable_metadata: names dropped since the last directory fsync, or kept
LOG_DIRS = ("a", "b")


def _sweep(tmp_path: Path, prepare: Callable[[str], None], run: Callable[[FaultFileSystem, str, dict], None],
           check: Callable[[str, dict, bool, str], None]) -> int:
    """Cut the power at every boundary of `run` over a directory `prepare` made; the boundaries.

    `run` notes in its journal (a dict that outlives the cut) what it handed out or saw returned;
    `check(directory, journal, finished, where)` judges the directory after each cut.
    """
    start = tmp_path / "start"
    start.mkdir()
    prepare(str(start))

    def attempt(name: str, fs: FaultFileSystem) -> tuple[str, dict, bool]:
        directory = tmp_path / name
        shutil.copytree(start, directory)
        journal: dict = {}
        try:
            run(fs, str(directory), journal)
        except SimulatedPowerLoss:
            return str(directory), journal, False
        return str(directory), journal, True

    counting = FaultFileSystem()
    assert attempt("count", counting)[2]
    total = len(counting.boundaries)
    assert total > 0
    counting.crash()
    for k in range(1, total + 2):
        for durable_metadata in MODES:
            fs = FaultFileSystem()
            fs.crash_at(k)
            directory, journal, finished = attempt(f"cut-{k}-{durable_metadata}", fs)
            assert finished == (k > total), f"boundary {k} of {total}: finished={finished}"
            fs.crash(durable_metadata=durable_metadata)
            where = f"cut at boundary {k} of {total} ({'names kept' if durable_metadata else 'names dropped'})"
            check(directory, journal, finished, where)
    return total


# -- producer-id blocks -----------------------------------------------------------------------

# Ids a Kafka-written directory already holds: the node reserves through the highest before handing any out.
FLOOR = 1500


def test_no_producer_id_is_handed_out_twice_after_a_cut(tmp_path):
    def prepare(d):
        earlier = ProducerIdAllocator(d)
        for _ in range(3):
            earlier.allocate()   # ids 0-2, from a block ending at 1000

    def run(fs, d, journal):
        allocator = ProducerIdAllocator(d, fs)
        assert allocator.persisted
        allocator.reserve_through(FLOOR)
        for _ in range(BLOCK_SIZE + 1):   # across a block's end: two blocks started
            journal["highest"] = allocator.allocate()

    def check(d, journal, finished, where):
        path = os.path.join(d, FILE_NAME)
        text = Path(path).read_text(encoding="ascii")
        assert re.fullmatch(r"[0-9]+\n", text), f"{where}: torn block file {text!r}"
        reopened = ProducerIdAllocator(d)
        reopened.reserve_through(FLOOR)   # as the node does from the ids it finds in the directory
        handed_out = max(2, journal.get("highest", -1))
        first = reopened.allocate()
        assert first > handed_out, f"{where}: {first} was handed out before the cut"
        if finished:
            # A restart continues after the last block ever started.
            assert first == FLOOR + 1 + 2 * BLOCK_SIZE, where

    assert _sweep(tmp_path, prepare, run, check) == 9   # the floor and two blocks, 3 boundaries each


# -- meta.properties ---------------------------------------------------------------------------

def _config(d: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": d})


def test_a_nodes_cluster_id_is_made_once_and_never_torn_by_a_cut(tmp_path):
    def run(fs, d, journal):
        node = Node(_config(d), fs=fs)
        try:
            journal["cluster_id"] = node.cluster_id
            journal["producer_ids"] = handed_out = []
            for _ in range(3):
                handed_out.append(node.producer_ids.allocate())
        finally:
            node.close()   # after a cut: stops the store's threads; nothing reaches the disk

    def check(d, journal, finished, where):
        path = os.path.join(d, META_PROPERTIES)
        node_id = _config(d)["node.id"]
        made = None
        if os.path.exists(path):
            text = Path(path).read_text(encoding="utf-8")
            found = re.fullmatch(rf"version=1\ncluster\.id=([A-Za-z0-9_-]{{22}})\nnode\.id={node_id}\n", text)
            assert found, f"{where}: torn {META_PROPERTIES}: {text!r}"
            made = found[1]
        if "cluster_id" in journal:   # Node() returned: its id was durable
            assert made == journal["cluster_id"], f"{where}: the cluster id changed"
        with Node(_config(d)) as node:
            assert made is None or node.cluster_id == made, where
            again = node.cluster_id
            assert node.producer_ids.allocate() > max(journal.get("producer_ids", []), default=-1), where
        with Node(_config(d)) as node:
            assert node.cluster_id == again, f"{where}: a second cluster id was made"

    _sweep(tmp_path, lambda d: None, run, check)


# -- topic-configs -----------------------------------------------------------------------------

# What `topics` holds after the prepare step and after each alter of the workload.
STATES = [
    {"orders": {"retention.ms": 1000}, "audit": {}},
    {"orders": {"retention.ms": 2000, "cleanup.policy": "compact"}, "audit": {}},
    {"orders": {"retention.ms": 2000, "cleanup.policy": "compact"}, "audit": {"retention.bytes": 4096}},
    {"orders": {"cleanup.policy": "compact"}, "audit": {"retention.bytes": 4096}},
]
ALTERS = [("orders", {"retention.ms": 2000, "cleanup.policy": "compact"}), ("audit", {"retention.bytes": 4096}),
          ("orders", {"retention.ms": None})]


def _dirs(d: str) -> list[str]:
    return [os.path.join(d, name) for name in LOG_DIRS]


def test_topic_configs_are_the_old_or_the_new_ones_after_a_cut(tmp_path):
    def prepare(d):
        with LogManager(_dirs(d), start_scheduler=False) as store:
            store.create_topic("orders", 1, {"retention.ms": 1000})
            store.create_topic("audit", 1)

    def run(fs, d, journal):
        store = LogManager(_dirs(d), start_scheduler=False, fs=fs)
        journal["returned"] = 0
        for topic, overrides in ALTERS:
            store.alter_topic_config(topic, overrides)
            journal["returned"] += 1

    def check(d, journal, finished, where):
        returned = journal.get("returned", 0)
        copies = []
        for log_dir in _dirs(d):
            generation, topics = read_topic_configs(os.path.join(log_dir, TOPIC_CONFIGS_FILE))   # whole, or raises
            copies.append((generation, {t: topics.get(t, {}) for t in STATES[0]}))
        first = copies[0][0] - STATES.index(copies[0][1])
        for generation, topics in copies:
            assert topics == STATES[generation - first], f"{where}: generation {generation} holds {topics}"
        with LogManager(_dirs(d), start_scheduler=False) as store:
            found = {topic: store.topic_overrides(topic) for topic in STATES[0]}
        assert found in STATES[returned:returned + 2], f"{where}: {returned} alters returned, found {found}"
        if finished:
            assert found == STATES[-1], where

    # The open removes each log dir's clean-shutdown marker (a directory fsync); each alter then replaces
    # the file in both log dirs: tmp fsync, rename, directory fsync each.
    assert _sweep(tmp_path, prepare, run, check) == len(LOG_DIRS) + len(ALTERS) * len(LOG_DIRS) * 3


# -- kafka-metadata-applied --------------------------------------------------------------------

def _metadata(end_offset: int, snapshot: str | None) -> KafkaMetadata:
    return KafkaMetadata(ClusterMetadata({}, {}, None, {}, end_offset, snapshot), {})


OLD = _metadata(120, None)
NEW = _metadata(4000, "00000000000000003990-0000000002.checkpoint")


@pytest.mark.parametrize("before", [None, OLD], ids=["first", "replaced"])
def test_the_applied_metadata_state_is_the_old_or_the_new_one_after_a_cut(tmp_path, before):
    def prepare(d):
        for log_dir in _dirs(d):
            os.mkdir(log_dir)
        if before is not None:
            record_applied(_dirs(d), before)

    def check(d, journal, finished, where):
        old: dict[str, Any] | None = None if before is None else before.state
        for log_dir in _dirs(d):
            found = applied_state(log_dir)   # a torn file would raise StorageError
            assert found in (old, NEW.state), f"{where}: {os.path.basename(log_dir)}/{APPLIED_FILE} holds {found}"
            if finished:
                assert found == NEW.state, f"{where}: the finished write was lost"

    total = _sweep(tmp_path, prepare, lambda fs, d, journal: record_applied(_dirs(d), NEW, fs), check)
    assert total == len(LOG_DIRS) * 3


# -- broker-configs ----------------------------------------------------------------------------

# What `broker-configs` holds (by generation) after each dynamic change of the workload.
BROKER_STATES = [
    {},
    {"": {"log.retention.ms": "1000"}},
    {"": {"log.retention.ms": "1000"}, "1": {"message.max.bytes": "3000"}},
    {"1": {"message.max.bytes": "3000"}},
]
CHANGES = [("", {"log.retention.ms": "1000"}), ("1", {"message.max.bytes": "3000"}), ("", {})]


def _broker_config(d: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": ",".join(_dirs(d))})


def test_dynamic_broker_configs_are_the_old_or_the_new_ones_after_a_cut(tmp_path):
    def prepare(d):
        with LogManager(_dirs(d), start_scheduler=False) as store:
            store.create_topic("plain", 1)

    def run(fs, d, journal):
        config = _broker_config(d)
        store = LogManager(config.log_dirs, config.log_config, start_scheduler=False, fs=fs)
        journal["returned"] = 0
        for resource, wanted in CHANGES:
            alter_broker_configs(config, store, resource, wanted)
            journal["returned"] += 1

    def check(d, journal, finished, where):
        returned = journal.get("returned", 0)
        for log_dir in _dirs(d):
            copy = read_dynamic_configs([log_dir])   # whole, or raises
            assert copy.resources == BROKER_STATES[copy.generation], f"{where}: {copy} in {log_dir}"
        config = _broker_config(d)
        assert config.dynamic.resources in BROKER_STATES[returned:returned + 2], \
            f"{where}: {returned} changes returned, found {config.dynamic.resources}"
        if finished:
            assert config.dynamic.resources == BROKER_STATES[-1], where
        # The store a restarted broker opens runs with what the file says.
        with LogManager(config.log_dirs, config.log_config, start_scheduler=False) as store:
            expected = LogConfig.from_properties({"log.retention.ms": 1000} if "" in config.dynamic.resources
                                                 else {}).retention_ms
            assert store.log("plain").config.retention_ms == expected, where

    # The open removes each log dir's clean-shutdown marker; each change replaces both copies (tmp fsync,
    # rename, directory fsync each).
    assert _sweep(tmp_path, prepare, run, check) == len(LOG_DIRS) + len(CHANGES) * len(LOG_DIRS) * 3


def test_a_dynamic_change_whose_file_fails_applies_nothing_and_its_generation_is_not_reused(tmp_path):
    config = _broker_config(str(tmp_path))
    fs = FaultFileSystem()
    with LogManager(config.log_dirs, config.log_config, start_scheduler=False, fs=fs) as store:
        store.create_topic("plain", 1)
        # The second log dir's copy cannot be written: the first already holds generation 1.
        fs.fail_write(os.path.join(config.log_dirs[1], BROKER_CONFIGS_FILE) + "*")
        with pytest.raises(StorageError):
            alter_broker_configs(config, store, "1", {"log.retention.ms": "1000"})
        assert (config.dynamic.resources, store.log("plain").config.retention_ms) == ({}, 7 * 24 * 3_600_000)
        alter_broker_configs(config, store, "1", {"log.retention.ms": "2000"})
        assert store.log("plain").config.retention_ms == 2000
    assert _broker_config(str(tmp_path)).dynamic == DynamicConfigs(2, {"1": {"log.retention.ms": "2000"}})
