"""Index files made by a segment's first append (Kafka's LazyIndex, issue 30): creating or restarting a
partition makes, grows, maps and trims no `.index` or `.timeindex`, and a clean restart lists each
partition directory once. A power cut anywhere from a topic's creation through its first appends leaves
partitions that open, hold what was acknowledged and take appends."""
from __future__ import annotations

import os

import logstore
from logstore.filesystem import OsFileSystem
from logstore.index import DEFAULT_MAX_INDEX_SIZE
from logstore.manager import LogManager
from logstore.reader import StoreView
from test_power_loss import _sweep

PARTITIONS = 3
TOPIC_ID = bytes(range(1, 17))
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


def _index_files(directory: str) -> dict[str, int]:
    """Size by suffix of the index files of segment 0 in a partition directory."""
    found = {}
    for suffix in INDEX_SUFFIXES:
        path = os.path.join(directory, f"{0:020d}{suffix}")
        if os.path.exists(path):
            found[suffix] = os.path.getsize(path)
    return found


class _Counting(OsFileSystem):
    """The real file system, recording each listing, open and existence check with its path."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def listdir(self, path: str) -> list[str]:
        self.calls.append(("listdir", path))
        return super().listdir(path)

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        self.calls.append(("open", path))
        return super().open(path, flags, mode)

    def exists(self, path: str) -> bool:
        self.calls.append(("exists", path))
        return super().exists(path)


def test_a_partition_makes_its_index_files_at_its_first_append(tmp_path):
    d = str(tmp_path / "store")
    with logstore.open(d, start_scheduler=False) as store:
        store.create_topic("t", 2)
        appended, idle = store.log("t", 0).directory, store.log("t", 1).directory
        assert _index_files(appended) == _index_files(idle) == {}
    with logstore.open(d, start_scheduler=False) as store:
        log = store.log("t", 0)
        # Lookups of an empty partition need no file either.
        assert log.read(0).size == 0 and log.offset_for_timestamp(0) is None
        assert _index_files(appended) == {}
        log.append_records([b"first"], timestamps=1_000)
        # Kafka's active segment: both made at segment.index.bytes, in whole entries.
        assert _index_files(appended) == {".index": DEFAULT_MAX_INDEX_SIZE,
                                          ".timeindex": DEFAULT_MAX_INDEX_SIZE // 12 * 12}
    # Closed: trimmed to their entries (no offset entry below index.interval.bytes, the closing time entry).
    assert _index_files(appended) == {".index": 0, ".timeindex": 12}
    assert _index_files(idle) == {}
    with logstore.open(d, start_scheduler=False) as store:
        assert [r.value for r in store.log("t", 0).read_records(0)] == [b"first"]
        assert store.log("t", 0).offset_for_timestamp(1_000) == (0, 1_000)
        assert not any(report.rebuilt_indexes for report in store.reports if report is not None)


def test_a_clean_restart_lists_each_partition_once_and_opens_no_index_file(tmp_path):
    d = str(tmp_path / "store")
    with logstore.open(d, start_scheduler=False) as store:
        store.create_topic("t", 20)
    fs = _Counting()
    with logstore.open(d, start_scheduler=False, fs=fs) as store:
        directories = [store.log("t", p).directory for p in range(20)]
        assert all(fs.calls.count(("listdir", directory)) == 1 for directory in directories)
        # Past its listing, a partition's open touches its `.log`, its producer snapshot, the leader-epoch
        # checkpoint its creation wrote and (once per topic) its `partition.metadata`: nothing asked of a
        # file the listing did not show.
        touched = {os.path.basename(path) for _, path in fs.calls if os.path.dirname(path) in directories}
        assert touched == {f"{0:020d}.log", f"{0:020d}.snapshot", "leader-epoch-checkpoint", "partition.metadata"}
    assert not any(_index_files(directory) for directory in directories)


def test_index_files_an_empty_partition_already_has_are_kept_as_they_are(tmp_path):
    """As Kafka leaves an empty partition after a clean shutdown, and logstore did before (0-byte files)."""
    d = str(tmp_path / "store")
    with logstore.open(d, start_scheduler=False) as store:
        store.create_topic("t", 1)
        directory = store.log("t", 0).directory
    for suffix in (".index", ".timeindex"):
        open(os.path.join(directory, f"{0:020d}{suffix}"), "wb").close()
    with logstore.open(d, start_scheduler=False) as store:
        assert not store.reports[0].rebuilt_indexes
    assert _index_files(directory) == {".index": 0, ".timeindex": 0}
    with logstore.open(d, start_scheduler=False) as store:
        store.log("t", 0).append_records([b"x"], timestamps=5)
    assert _index_files(directory) == {".index": 0, ".timeindex": 12}


def test_a_read_only_view_of_empty_partitions_builds_no_index(tmp_path):
    """A partition with no index files and nothing to index is viewed without any, where the missing
    indexes of a segment with batches are built in memory (an anonymous file each)."""
    d = str(tmp_path / "store")
    with logstore.open(d, start_scheduler=False) as writer:
        writer.create_topic("t", 2)
        writer.log("t", 1).append_records([b"x"])
    store = StoreView(d)
    for suffix in (".index", ".timeindex"):
        os.unlink(os.path.join(store.directory("t", 1), f"{0:020d}{suffix}"))
    with store.view("t", 0) as empty:
        assert empty.high_watermark == 0 and _memory_indexes() == 0
    with store.view("t", 1) as appended:
        assert appended.high_watermark == 1 and _memory_indexes() == 2
    assert _index_files(store.directory("t", 0)) == {}


def _memory_indexes() -> int:
    """How many in-memory (anonymous) index files this process holds."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:logstore-")
        except FileNotFoundError:
            pass
    return found


# -- power cuts ------------------------------------------------------------------------------------------------


def _prepare(d: str) -> None:
    LogManager(d, start_scheduler=False).close()


def _create_and_append(fs: OsFileSystem, d: str) -> None:
    """Create the topic, then one acknowledged (fsynced) append to each partition in turn."""
    store = LogManager(d, start_scheduler=False, fs=fs)
    store.create_topic("t", PARTITIONS, topic_id=TOPIC_ID)
    for p in range(PARTITIONS):
        store.log("t", p).append_records([b"p%d" % p], durable=True)


def _read(d: str) -> tuple[int, tuple[int, ...]]:
    """(partitions, records in each) after the cut, once every partition is checked to take appends."""
    with LogManager(d, start_scheduler=False) as store:
        count = store.partitions("t") if "t" in store.topics() else 0
        held = []
        for p in range(count):
            log = store.log("t", p)
            values = [r.value for r in log.read_records(0)]
            assert values in ([], [b"p%d" % p]), values
            held.append(len(values))
            log.append_records([b"after"], timestamps=7)
            assert [r.value for r in log.read_records(0)] == values + [b"after"]
            assert set(_index_files(log.directory)) >= {".index", ".timeindex"}
        return count, tuple(held)


def _acked_in_order(found: object) -> bool:
    """A prefix of the creation, or all of it with a prefix of the appends acknowledged."""
    count, held = found  # type: ignore[misc]
    if count < PARTITIONS:
        return not any(held)
    return list(held) == sorted(held, reverse=True)


def test_a_cut_between_creation_and_the_first_appends_leaves_partitions_that_take_appends(tmp_path):
    total = _sweep(tmp_path, _prepare, _create_and_append, _read, (0, ()), (PARTITIONS, (1,) * PARTITIONS),
                   midway=_acked_in_order)
    assert total > PARTITIONS * 3


def test_a_new_partition_holds_kafkas_epoch_checkpoint_and_its_first_append_rewrites_nothing(tmp_path):
    """Kafka's leader writes `0 0` on taking a new partition (the real-kafka fixtures' empty partitions hold it);
    written at creation, it costs the first append, on the broker's event loop, no checkpoint write."""
    d = str(tmp_path / "store")
    fs = _Counting()
    with logstore.open(d, start_scheduler=False, fs=fs) as store:
        store.create_topic("t", 3)
        directories = [store.log("t", p).directory for p in range(3)]
        for directory in directories:
            with open(os.path.join(directory, "leader-epoch-checkpoint")) as checkpoint:
                assert checkpoint.read() == "0\n1\n0 0\n"
        before = len(fs.calls)
        for p in range(3):
            store.log("t", p).append_records([b"first"])
        opened = {os.path.basename(path) for op, path in fs.calls[before:] if op == "open"}
        assert not any(name.startswith("leader-epoch-checkpoint") for name in opened), opened
        assert all(store.log("t", p).epoch_cache.entries == [(0, 0)] for p in range(3))
