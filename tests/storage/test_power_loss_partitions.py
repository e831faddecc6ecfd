"""Power cuts at every fsync/rename boundary of growing a topic (CreatePartitions): the store reopens with
the topic at its old count, its new count once the call returned, or a count between them, and every
partition it has is whole: its directory, its `partition.metadata` with the topic's id, a log that takes
appends. No partition is missing below the count, and none is left without its topic id.

The sweep is `test_power_loss._sweep`: each boundary in turn, in both outcomes a journaling file system
allows (names dropped since the last directory fsync, or kept).
"""
from __future__ import annotations

import errno
import os

import pytest

from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.checkpoints import PARTITION_METADATA, read_partition_metadata
from logstore.errors import InvalidPartitionsError, StorageIOError
from logstore.manager import LogManager
from test_power_loss import _sweep

TOPIC_ID = bytes(range(1, 17))
OLD, NEW = 2, 5


def _prepare(d: str) -> None:
    with LogManager(d, start_scheduler=False) as store:
        store.create_topic("orders", OLD, topic_id=TOPIC_ID)
        store.log("orders", 0).append_records([b"before"])


def _grow(fs: FaultFileSystem, d: str) -> None:
    LogManager(d, start_scheduler=False, fs=fs).create_partitions("orders", NEW)


def _read(d: str) -> int:
    """The topic's partition count after the cut, once every partition it has is checked whole."""
    with LogManager(d, start_scheduler=False) as store:
        count = store.partitions("orders")
        assert {p for t, p in store.logs() if t == "orders"} == set(range(count)), "a partition is missing"
        assert store.topic_id("orders") == TOPIC_ID
        for p in range(count):
            directory = store.log("orders", p).directory
            assert read_partition_metadata(os.path.join(directory, PARTITION_METADATA)) == TOPIC_ID, directory
            store.log("orders", p).append_records([b"after"])
        return count


def test_a_grown_topic_is_old_new_or_a_whole_prefix_after_a_cut(tmp_path):
    total = _sweep(tmp_path, _prepare, _grow, _read, OLD, NEW, midway=lambda found: OLD < found < NEW)
    # Per partition: its partition.metadata (tmp fsync, rename, directory fsync); then the log dir's fsync.
    assert total >= 3 * (NEW - OLD) + 1


def test_growth_that_fails_part_way_leaves_the_topic_as_it_was(tmp_path):
    d = str(tmp_path / "store")
    _prepare(d)
    fs = FaultFileSystem()
    # The partition.metadata of the third new partition cannot be put in place: the two before it must go too.
    fs.fail_at(1, "rename", "*/orders-4/partition.metadata.tmp -> *")
    with LogManager(d, start_scheduler=False, fs=fs) as store:
        with pytest.raises(StorageIOError, match="what was made is removed"):
            store.create_partitions("orders", NEW)
        assert store.partitions("orders") == OLD
        assert not store.offline_dirs
        assert not [n for n in os.listdir(d) if n.startswith("orders-") and int(n.rpartition("-")[2]) >= OLD]
        # The same growth asked again succeeds.
        assert store.create_partitions("orders", NEW) == [2, 3, 4]
    assert _read(d) == NEW


def test_growth_refuses_a_count_that_is_not_an_increase(tmp_path):
    d = str(tmp_path / "store")
    _prepare(d)
    with LogManager(d, start_scheduler=False) as store:
        with pytest.raises(InvalidPartitionsError, match=r"^Topic already has 2 partition\(s\)\.$"):
            store.create_partitions("orders", OLD)
        with pytest.raises(InvalidPartitionsError,
                           match=r"^The topic orders currently has 2 partition\(s\); 1 would not be an increase\.$"):
            store.create_partitions("orders", 1)


def test_growth_after_a_sigkill_mid_way_reopens(tmp_path):
    """A SIGKILL keeps every name made (the `names kept` outcome): swept above; here the power is cut right
    after a second partition.metadata.tmp is synced. Every directory is made before any partition.metadata
    (those are written side by side), so all the new partitions stay; at least the one whose sync was cut
    has no partition.metadata, and gets its topic id at the reopen."""
    d = str(tmp_path / "store")
    _prepare(d)
    fs = FaultFileSystem()
    fs.crash_at(2, "fsync", "*/" + PARTITION_METADATA + "*", after=True)
    store = LogManager(d, start_scheduler=False, fs=fs)
    with pytest.raises(SimulatedPowerLoss):
        store.create_partitions("orders", NEW)
    fs.crash(durable_metadata=True)
    missing = [p for p in range(OLD, NEW) if not os.path.exists(os.path.join(d, f"orders-{p}", PARTITION_METADATA))]
    assert missing
    assert _read(d) == NEW


def test_a_missing_partition_metadata_waits_for_space_without_stopping_the_open(tmp_path):
    d = str(tmp_path / "store")
    _prepare(d)
    fs = FaultFileSystem()
    fs.crash_at(1, "fsync", "*/orders-2/" + PARTITION_METADATA + "*", after=True)
    with pytest.raises(SimulatedPowerLoss):
        LogManager(d, start_scheduler=False, fs=fs).create_partitions("orders", NEW)
    fs.crash(durable_metadata=True)
    missing = os.path.join(d, "orders-2", PARTITION_METADATA)
    full = FaultFileSystem()
    full.fail_write("*/orders-2/" + PARTITION_METADATA + ".tmp", error=errno.ENOSPC)
    with LogManager(d, start_scheduler=False, fs=full) as store:
        assert store.partitions("orders") == NEW and store.topic_id("orders") == TOPIC_ID
        assert not os.path.exists(missing)
    assert _read(d) == NEW
    assert read_partition_metadata(missing) == TOPIC_ID
