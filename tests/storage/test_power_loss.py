"""Power cuts at every fsync/rename boundary of the files the log manager, the cleaner and the epoch cache
write: each is the old version or the new one after the cut, never torn, never empty, and the new one
once its write returned.

Each case runs its write once on a `FaultFileSystem` to count the boundaries, then, from the same
starting directory, cuts the power at each boundary in turn (and once after the last) in both legal
outcomes of a cut (names dropped since the last directory fsync, or kept), and reads the result back
through the real file system.
"""
from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpoint,
    read_clean_shutdown_marker,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
    write_partition_metadata,
)
from logstore.epoch_cache import LeaderEpochCache
from logstore.index import OffsetIndex
from logstore.log_cleaner import CLEANER_CHECKPOINT, read_cleaner_checkpoints
from logstore.manager import LogManager

MODES = [False, True]   # durable_metadata: names dropped since the last directory fsync, or kept


def _offsets(version: int) -> dict[tuple[str, int], int]:
    return {("orders", p): 1000 * version + p for p in range(3 + version)}


def _sweep(tmp_path: Path, prepare: Callable[[str], None], write: Callable[[FaultFileSystem, str], None],
           read: Callable[[str], object], old: object, new: object,
           midway: Callable[[object], bool] | None = None, modes: list[bool] = MODES) -> int:
    """Cut the power at every boundary of `write` over a directory `prepare` made; the boundaries.

    After each cut `read` must find `old` or `new` (or a state `midway` accepts), and `new` once
    `write` returned.
    """
    start = tmp_path / "start"
    start.mkdir()
    prepare(str(start))
    counting = FaultFileSystem()
    shutil.copytree(start, tmp_path / "count")
    write(counting, str(tmp_path / "count"))
    total = len(counting.boundaries)
    assert total > 0
    for k in range(1, total + 2):
        for durable_metadata in modes:
            d = tmp_path / f"cut-{k}-{durable_metadata}"
            shutil.copytree(start, d)
            fs = FaultFileSystem()
            fs.crash_at(k)
            try:
                write(fs, str(d))
            except SimulatedPowerLoss:
                assert k <= total
            else:
                assert k == total + 1, f"boundary {k} of {total} did not cut the power"
            fs.crash(durable_metadata=durable_metadata)
            found = read(str(d))
            where = f"cut at boundary {k} of {total} ({'names kept' if durable_metadata else 'names dropped'})"
            assert found in (old, new) or (midway is not None and midway(found)), f"{where}: {found!r}"
            if k == total + 1:
                assert found == new, f"{where}: the finished write was lost"
    return total


@pytest.mark.parametrize("name", [RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_CHECKPOINT])
def test_an_offset_checkpoint_is_the_old_or_the_new_one_after_a_cut(tmp_path, name):
    total = _sweep(
        tmp_path,
        lambda d: OffsetCheckpoint(os.path.join(d, name)).write(_offsets(1)),
        lambda fs, d: OffsetCheckpoint(os.path.join(d, name), fs).write(_offsets(2)),
        lambda d: OffsetCheckpoint(os.path.join(d, name)).read(),
        _offsets(1), _offsets(2))
    assert total == 3   # the tmp file's fsync, the rename, the directory's fsync


def test_the_first_checkpoint_is_absent_or_whole_after_a_cut(tmp_path):
    _sweep(tmp_path, lambda d: None,
           lambda fs, d: OffsetCheckpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT), fs).write(_offsets(1)),
           lambda d: OffsetCheckpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT)).read(),
           {}, _offsets(1))


def test_the_leader_epoch_checkpoint_is_the_old_or_the_new_one_after_a_cut(tmp_path):
    def prepare(d):
        LeaderEpochCache(os.path.join(d, LEADER_EPOCH_CHECKPOINT)).assign(0, 0)

    def write(fs, d):
        LeaderEpochCache(os.path.join(d, LEADER_EPOCH_CHECKPOINT), fs=fs).assign(3, 120)

    _sweep(tmp_path, prepare, write, lambda d: read_leader_epoch_checkpoint(os.path.join(d, LEADER_EPOCH_CHECKPOINT)),
           [(0, 0)], [(0, 0), (3, 120)])


def test_partition_metadata_is_absent_or_whole_after_a_cut(tmp_path):
    topic_id = bytes(range(1, 17))

    def read(d):
        path = os.path.join(d, PARTITION_METADATA)
        return read_partition_metadata(path) if os.path.exists(path) else None

    _sweep(tmp_path, lambda d: None,
           lambda fs, d: write_partition_metadata(os.path.join(d, PARTITION_METADATA), topic_id, fs),
           read, None, topic_id)


def test_a_created_topic_survives_a_cut_once_create_returned(tmp_path):
    topic_id = bytes(range(1, 17))

    def read(d):
        with LogManager(d, start_scheduler=False) as store:
            return {t: (n, store.topic_id(t) == topic_id) for t, n in store.topics().items()}

    # Before create returns, a cut that keeps names may leave its first partitions, each perhaps
    # without partition.metadata (so with an id derived from the name), as a SIGKILL there does.
    _sweep(tmp_path, lambda d: LogManager(d, start_scheduler=False).close(),
           lambda fs, d: LogManager(d, start_scheduler=False, fs=fs).create_topic("orders", 2, topic_id=topic_id),
           read, {}, {"orders": (2, True)}, midway=lambda found: set(found) == {"orders"})


def test_a_store_reopens_after_a_cut_anywhere_in_open_and_close(tmp_path):
    def prepare(d):
        with LogManager(d, start_scheduler=False) as store:
            store.create_topic("orders", 1)

    def write(fs, d):
        store = LogManager(d, start_scheduler=False, fs=fs)
        store.checkpoint()
        store.close()

    def read(d):
        # The lock of the dead store is gone; the marker is there only if close() wrote it.
        clean = read_clean_shutdown_marker(d)
        with LogManager(d, start_scheduler=False) as store:
            assert store.topics() == {"orders": 1}
        return clean

    _sweep(tmp_path, prepare, write, read, False, True)


@pytest.mark.soak
def test_random_checkpoint_rewrites_survive_random_cuts(tmp_path):
    rng = random.Random(int(os.environ.get("LOGSTORE_SOAK_SEED", "24")))
    path = str(tmp_path / RECOVERY_POINT_CHECKPOINT)
    durable: dict = {}
    for round_ in range(400):
        fs = FaultFileSystem()
        fs.crash_at(rng.randint(1, 4 * 3 + 1))
        attempted = []
        try:
            for _ in range(4):
                offsets = {("t%d" % rng.randint(0, 9), rng.randint(0, 99)): rng.randint(0, 1 << 40)
                           for _ in range(rng.randint(0, 20))}
                attempted.append(offsets)
                OffsetCheckpoint(path, fs).write(offsets)
                durable = offsets
                attempted = []
        except SimulatedPowerLoss:
            pass
        fs.crash(durable_metadata=rng.random() < 0.5)
        found = OffsetCheckpoint(path).read()
        assert found == durable or found in attempted, f"round {round_}: {found!r}"
        durable = found


def test_index_entries_written_through_the_map_survive_a_cut_only_once_flushed(tmp_path):
    def write(fs, d):
        index = OffsetIndex(os.path.join(d, "00000000000000000100.index"), 100, 64, fs=fs)
        for i in range(3):
            index.append(101 + i, 10 * i)
        index.flush()
        for i in range(3, 6):
            index.append(101 + i, 10 * i)
        index.close()   # trims to the six entries
        index = OffsetIndex(os.path.join(d, "00000000000000000100.index"), 100, 64, fs=fs)
        index.flush()
        index.close(trim=False)
        fs.fsync_dir(d)   # the segment's owner makes the new file's name durable

    def read(d):
        path = os.path.join(d, "00000000000000000100.index")
        if not os.path.exists(path):
            return None
        index = OffsetIndex(path, 100, 64, writable=False)
        try:
            return [index.entry(i) for i in range(index.entries)]
        finally:
            index.close()

    entries = [(101 + i, 10 * i) for i in range(6)]
    _sweep(tmp_path, lambda d: None, write, read, None, entries,
           midway=lambda found: found in ([], entries[:3]))
    # Cut just before the second flush: the three entries appended through the map since the first are lost.
    cut = FaultFileSystem()
    cut.crash_at(2, "fsync")
    (tmp_path / "direct").mkdir()
    with pytest.raises(SimulatedPowerLoss):
        write(cut, str(tmp_path / "direct"))
    cut.crash(durable_metadata=True)
    assert read(str(tmp_path / "direct")) == entries[:3]


# 100 records make 4 segments cleaned into one group (71 boundaries); 400 make 17 segments (305 boundaries,
# about 3 minutes), swept in `make soak`.
@pytest.mark.parametrize("records", [100, pytest.param(400, marks=pytest.mark.soak)])
def test_the_cleaners_checkpoint_is_the_old_or_the_new_one_after_a_cut_in_a_round(tmp_path, records):
    compacted = {"cleanup.policy": "compact", "segment.bytes": 2048, "retention.ms": -1,
                 "min.cleanable.dirty.ratio": 0.1}
    settings = {"log.cleaner.dedupe.buffer.size": 1 << 20}

    def prepare(d):
        with LogManager(d, start_scheduler=False) as store:
            store.create_topic("table", 1, compacted)
            for i in range(records):
                store.log("table").append_records([b"value-%d" % i], keys=[b"key-%d" % (i % 10)])

    def write(fs, d):
        # Not closed: the cut (or, after the last boundary, `crash()`) ends this store as a power cut would.
        assert LogManager(d, start_scheduler=False, broker_settings=settings, fs=fs).cleaner.clean_filthiest()

    def read(d):
        with LogManager(d, start_scheduler=False):   # the directory opens, whatever the cut left
            return read_cleaner_checkpoints(d)

    start = tmp_path / "reference"
    start.mkdir()
    prepare(str(start))
    with LogManager(str(start), start_scheduler=False) as store:
        end = store.log("table").segments[-1].base_offset
    # Names kept only: the segments are still written around the file system (segment.py), so a
    # dropped name in their directory could not be told from one the cleaner removed itself.
    _sweep(tmp_path, prepare, write, read, {}, {("table", 0): end}, modes=[True])


def test_a_deleted_topic_is_whole_or_gone_after_a_cut(tmp_path):
    def prepare(d):
        with LogManager(d, start_scheduler=False) as store:
            store.create_topic("orders", 1)

    def write(fs, d):
        LogManager(d, start_scheduler=False, fs=fs).delete_topic("orders")

    def read(d):
        with LogManager(d, start_scheduler=False) as store:
            return store.topics()

    _sweep(tmp_path, prepare, write, read, {"orders": 1}, {})
    # Once delete_topic returned, not even a `-delete` directory is left for the next open to finish.
    assert not [n for n in os.listdir(tmp_path / "count") if n.endswith("-delete") or n.startswith("orders")]
