"""A node opened on a directory laid out as Kafka leaves it: internal topic configs kept elsewhere,
some partitions of `__consumer_offsets` only, producer ids handed out by someone else, and Kafka's
edges around deleted topics."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from logstore.broker import embedded
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC
from logstore.broker.producer_ids import FILE_NAME as PRODUCER_ID_FILE
from logstore.topics import TOPIC_CONFIGS_FILE

SETTINGS = {"group.initial.rebalance.delay.ms": 0}
DAY_MS = 86_400_000
GROUPS = [f"group-{i}" for i in range(6)]


def _commit(node, group: str, offset: int, topic: str = "orders") -> None:
    errors = node.groups.commit_offsets(group, "", None, -1, {(topic, 0): (offset, -1, "")})
    assert errors == {(topic, 0): None}


def _committed(node, group: str, topic: str = "orders") -> int | None:
    found = node.groups.fetch_offsets(group, [(topic, 0)])[(topic, 0)]
    return None if found is None else found.offset


def _as_kafka_left_it(data) -> None:
    """Drop what only logstore writes: Kafka keeps topic configs and producer-id blocks in its metadata."""
    for name in (TOPIC_CONFIGS_FILE, PRODUCER_ID_FILE):
        if (data / name).exists():
            (data / name).unlink()


@pytest.fixture
def committed_dir(tmp_path):
    """A directory whose groups committed offsets 100, 101, ... to orders-0; returns (dir, group partitions)."""
    data = tmp_path / "data"
    with embedded.open(str(data), SETTINGS) as node:
        node.store.create_topic("orders", 1)
        for i, group in enumerate(GROUPS):
            _commit(node, group, 100 + i)
        holding = {node.groups.partition_of(group) for group in GROUPS}
    _as_kafka_left_it(data)
    return data, holding


def test_a_dir_with_some_offsets_partitions_opens_and_keeps_every_offset(committed_dir):
    data, holding = committed_dir
    # One broker of three holds about a third of __consumer_offsets; partition 0 is not among them.
    for path in data.glob(f"{OFFSETS_TOPIC}-*"):
        partition = int(path.name.rsplit("-", 1)[1])
        if partition not in holding or partition == 0:
            shutil.rmtree(path)
    assert not (data / f"{OFFSETS_TOPIC}-0").exists() and any(data.glob(f"{OFFSETS_TOPIC}-*"))
    with embedded.open(str(data), SETTINGS) as node:
        assert node.store.partitions(OFFSETS_TOPIC) == 50
        assert all(node.store.log(OFFSETS_TOPIC, p) is not None for p in range(50))
        for i, group in enumerate(GROUPS):
            if node.groups.partition_of(group) != 0:
                assert _committed(node, group) == 100 + i
    with embedded.open(str(data), SETTINGS) as node:
        assert sorted(int(p.name.rsplit("-", 1)[1]) for p in data.glob(f"{OFFSETS_TOPIC}-*")) == list(range(50))


def test_offsets_of_a_dir_without_topic_configs_survive_a_roll_and_a_retention_sweep(committed_dir):
    data, _ = committed_dir
    with embedded.open(str(data), SETTINGS) as node:
        config = node.store.config_for(OFFSETS_TOPIC)
        assert config.compacts and not config.deletes and config.segment_bytes == 104_857_600
        # A new commit after the old segment is rolled away, then a sweep a month on.
        for group in GROUPS:
            node.store.log(OFFSETS_TOPIC, node.groups.partition_of(group)).roll()
        _commit(node, "newcomer", 7)
        assert node.store.run_retention(int(time.time() * 1000) + 30 * DAY_MS) == 0
    with embedded.open(str(data), SETTINGS) as node:
        assert [_committed(node, group) for group in GROUPS] == [100 + i for i in range(len(GROUPS))]
        assert _committed(node, "newcomer") == 7


def test_internal_topics_get_the_brokers_segment_size_when_kafka_wrote_no_config(committed_dir):
    data, _ = committed_dir
    settings = {**SETTINGS, "offsets.topic.segment.bytes": 1_048_576}
    with embedded.open(str(data), settings) as node:
        assert node.store.config_for(OFFSETS_TOPIC).segment_bytes == 1_048_576
        assert node.store.config_for("orders").deletes


def test_producer_ids_after_opening_never_collide_with_ids_in_the_directory(tmp_path):
    data = tmp_path / "data"
    old = int(time.time() * 1000) - 30 * DAY_MS
    with embedded.open(str(data), SETTINGS) as node:
        node.store.create_topic("idempotent", 1)
        partition = node.store.log("idempotent", 0)
        # 7,000 is past anything this node handed out; 4,000 writes a month ago has long expired.
        partition.append_records([b"a"], producer_id=4_000, producer_epoch=0, base_sequence=0, timestamps=[old])
        partition.append_records([b"b"], producer_id=7_000, producer_epoch=0, base_sequence=0)
    _as_kafka_left_it(data)
    with embedded.open(str(data), SETTINGS) as node:
        assert node.producer_ids.allocate() > 7_000
    os.remove(data / PRODUCER_ID_FILE)
    with embedded.open(str(data), {**SETTINGS, "producer.id.expiration.ms": 1000}) as node:
        assert node.store.log("idempotent", 0).producers.entry(4_000) is None
        assert node.producer_ids.allocate() > 7_000


def test_transaction_state_ids_are_not_handed_out_again(tmp_path):
    data = tmp_path / "data"
    with embedded.open(str(data), SETTINGS) as node:
        first, _ = node.transactions.init_producer_id("txn-a", 60_000)
        second, _ = node.transactions.init_producer_id("txn-b", 60_000)
    _as_kafka_left_it(data)
    with embedded.open(str(data), SETTINGS) as node:
        assert node.producer_ids.allocate() > max(first, second)


def test_deleting_a_topic_removes_its_committed_offsets_from_every_group(tmp_path):
    data = tmp_path / "data"
    with embedded.open(str(data), SETTINGS) as node:
        node.store.create_topic("orders", 1)
        node.store.create_topic("kept", 1)
        for i, group in enumerate(GROUPS):
            _commit(node, group, 10 + i)
            _commit(node, group, 20 + i, topic="kept")
        node.delete_topic("orders")
        assert all(_committed(node, group) is None for group in GROUPS)
        node.store.create_topic("orders", 1)
        assert all(_committed(node, group) is None for group in GROUPS)
        assert [_committed(node, g, "kept") for g in GROUPS] == [20 + i for i in range(len(GROUPS))]
    with embedded.open(str(data), SETTINGS) as node:
        assert all(_committed(node, group) is None for group in GROUPS)
        assert [_committed(node, g, "kept") for g in GROUPS] == [20 + i for i in range(len(GROUPS))]


def test_a_group_left_with_no_offsets_by_a_deleted_topic_goes(tmp_path):
    with embedded.open(str(tmp_path / "data"), SETTINGS) as node:
        node.store.create_topic("orders", 1)
        _commit(node, "only-orders", 3)
        node.delete_topic("orders")
        assert "only-orders" not in [g for g, _, _ in node.groups.list_groups()]


def test_topics_kafkas_cleaner_compacted_stay_compacted_in_a_dir_without_configs(tmp_path):
    data = tmp_path / "data"
    with embedded.open(str(data), SETTINGS) as node:
        node.store.create_topic("changelog", 1, {"cleanup.policy": "compact"})
        node.store.create_topic("events", 1)
        node.store.log("changelog", 0).append_records([b"v"], keys=[b"k"])
    # As a ZooKeeper-era broker leaves it: configs in ZooKeeper, the cleaner's checkpoint beside the partitions.
    _as_kafka_left_it(data)
    (data / "cleaner-offset-checkpoint").write_text("0\n1\nchangelog 0 1\n")
    with embedded.open(str(data), SETTINGS) as node:
        assert node.store.config_for("changelog").compacts and not node.store.config_for("changelog").deletes
        assert node.store.config_for("events").deletes
        # A policy changed afterwards stands at the next open.
        node.store.alter_topic_config("changelog", {"cleanup.policy": "delete"})
    with embedded.open(str(data), SETTINGS) as node:
        assert node.store.config_for("changelog").deletes and not node.store.config_for("changelog").compacts
