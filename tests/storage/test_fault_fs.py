"""The fault-injecting file system itself: what a simulated power cut keeps and drops, on real files."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.broker.coordinator.txn_log import TxnLogValue, TxnState, decode_value, encode_key, encode_value
from logstore.formats import DEFAULT_FORMAT
from logstore.log import Log
from txn_points import markers

HERE = Path(__file__).parent
FLAGS = os.O_RDWR | os.O_CREAT


def _synced_dir(fs: FaultFileSystem, path: Path) -> str:
    """A directory whose own creation is durable (it existed before the file system touched it)."""
    path.mkdir(exist_ok=True)
    return str(path)


def _create_synced(fs: FaultFileSystem, path: str, data: bytes) -> int:
    fd = fs.open(path, FLAGS)
    fs.pwrite(fd, data, 0)
    fs.fsync(fd)
    fs.fsync_dir(os.path.dirname(path))
    return fd


def test_unsynced_appends_vanish_at_a_crash_and_synced_ones_stay(tmp_path):
    fs = FaultFileSystem()
    path = os.path.join(_synced_dir(fs, tmp_path / "d"), "00000000000000000000.log")
    fd = _create_synced(fs, path, b"synced|")
    fs.pwrite(fd, b"unsynced", 7)
    assert Path(path).read_bytes() == b"synced|unsynced"
    fs.crash()
    assert Path(path).read_bytes() == b"synced|"


def test_an_overwrite_below_the_synced_length_is_undone(tmp_path):
    fs = FaultFileSystem()
    path = os.path.join(_synced_dir(fs, tmp_path / "d"), "f")
    fd = _create_synced(fs, path, b"abcdef")
    fs.pwrite(fd, b"XY", 2)
    fs.truncate(fd, 3)
    fs.crash()
    assert Path(path).read_bytes() == b"abcdef"


def test_writes_through_a_map_count_only_after_fsync(tmp_path):
    fs = FaultFileSystem()
    path = os.path.join(_synced_dir(fs, tmp_path / "d"), "00000000000000000000.index")
    fd = _create_synced(fs, path, bytes(16))
    mapped = fs.mmap(fd, 16, writable=True)
    mapped[0:4] = b"kept"
    mapped.flush()
    fs.fsync(fd)
    mapped[4:8] = b"lost"
    fs.crash()
    assert Path(path).read_bytes() == b"kept" + bytes(12)
    mapped.close()   # the dead store's map still reads the old inode: no SIGBUS


def test_a_rename_without_a_directory_fsync_is_undone(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    old = _create_synced(fs, os.path.join(d, "checkpoint"), b"old")
    fs.close(old)
    tmp = fs.open(os.path.join(d, "checkpoint.tmp"), FLAGS)
    fs.pwrite(tmp, b"new", 0)
    fs.fsync(tmp)
    fs.rename(os.path.join(d, "checkpoint.tmp"), os.path.join(d, "checkpoint"))
    fs.crash()
    assert sorted(os.listdir(d)) == ["checkpoint"]
    assert Path(d, "checkpoint").read_bytes() == b"old"


def test_a_rename_made_durable_by_a_directory_fsync_stays(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fs.close(_create_synced(fs, os.path.join(d, "a"), b"data"))
    fs.rename(os.path.join(d, "a"), os.path.join(d, "b"))
    fs.fsync_dir(d)
    fs.crash()
    assert os.listdir(d) == ["b"] and Path(d, "b").read_bytes() == b"data"


def test_a_file_created_and_fsynced_but_never_dir_synced_vanishes(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fd = fs.open(os.path.join(d, "new"), FLAGS)
    fs.pwrite(fd, b"data", 0)
    fs.fsync(fd)
    fs.crash()
    assert os.listdir(d) == []


def test_an_unlink_without_a_directory_fsync_comes_back_with_its_synced_content(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fd = _create_synced(fs, os.path.join(d, "f"), b"synced")
    fs.pwrite(fd, b"+unsynced", 6)
    fs.close(fd)
    fs.unlink(os.path.join(d, "f"))
    fs.crash()
    assert Path(d, "f").read_bytes() == b"synced"


def test_durable_metadata_keeps_every_name_change_but_only_synced_data(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fd = fs.open(os.path.join(d, "tmp"), FLAGS)
    fs.pwrite(fd, b"never synced", 0)
    fs.rename(os.path.join(d, "tmp"), os.path.join(d, "checkpoint"))
    fs.crash(durable_metadata=True)
    # The classic lost-fsync result: the new name, no data.
    assert os.listdir(d) == ["checkpoint"] and Path(d, "checkpoint").read_bytes() == b""


def test_a_new_directory_is_unnamed_until_its_parent_is_fsynced(tmp_path):
    fs = FaultFileSystem()
    root = _synced_dir(fs, tmp_path / "root")
    fs.makedirs(os.path.join(root, "kept"))
    fs.fsync_dir(root)
    fs.makedirs(os.path.join(root, "lost"))
    fs.close(_create_synced(fs, os.path.join(root, "lost", "f"), b"x"))
    fs.crash()
    assert os.listdir(root) == ["kept"]


def test_a_renamed_directory_goes_back_without_a_parent_fsync(tmp_path):
    fs = FaultFileSystem()
    root = _synced_dir(fs, tmp_path / "root")
    (tmp_path / "root" / "orders-0").mkdir()
    (tmp_path / "root" / "orders-0" / "f").write_bytes(b"x")
    fs.rename(os.path.join(root, "orders-0"), os.path.join(root, "orders-0.abc-delete"))
    fs.crash()
    assert os.listdir(root) == ["orders-0"] and (tmp_path / "root" / "orders-0" / "f").read_bytes() == b"x"


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC])
def test_injected_fsync_and_rename_failures_raise_and_change_nothing(tmp_path, error):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fs.fail_at(1, "fsync", error=error)
    fs.fail_at(1, "rename", "*/a -> *", error=error)
    fd = fs.open(os.path.join(d, "a"), FLAGS)
    fs.pwrite(fd, b"data", 0)
    with pytest.raises(OSError) as failed:
        fs.fsync(fd)
    assert failed.value.errno == error
    with pytest.raises(OSError) as failed:
        fs.rename(os.path.join(d, "a"), os.path.join(d, "b"))
    assert failed.value.errno == error and os.listdir(d) == ["a"]
    fs.fsync(fd)   # one failure each: the next call goes through
    fs.rename(os.path.join(d, "a"), os.path.join(d, "b"))
    assert os.listdir(d) == ["b"]


def _workload(fs: FaultFileSystem, d: str) -> None:
    for i in range(3):
        fd = fs.open(os.path.join(d, f"f{i}.tmp"), FLAGS)
        fs.pwrite(fd, b"%d" % i, 0)
        fs.fsync(fd)
        fs.close(fd)
        fs.rename(os.path.join(d, f"f{i}.tmp"), os.path.join(d, f"f{i}"))
        fs.fsync_dir(d)


def test_boundary_counting_is_deterministic(tmp_path):
    runs = []
    for run in range(2):
        fs = FaultFileSystem()
        d = _synced_dir(fs, tmp_path / f"run{run}")
        _workload(fs, d)
        runs.append([(b.number, b.op, os.path.relpath(b.path, d), b.dst and os.path.relpath(b.dst, d))
                     for b in fs.boundaries])
    assert runs[0] == runs[1]
    assert [op for _, op, _, _ in runs[0]] == ["fsync", "rename", "fsync_dir"] * 3


def test_a_crash_point_stops_the_operation_and_every_later_one(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fs.crash_at(2, "rename")
    with pytest.raises(SimulatedPowerLoss):
        _workload(fs, d)
    assert len(fs.boundaries) == 5 and fs.boundaries[-1].subject.endswith("f1.tmp -> " + os.path.join(d, "f1"))
    with pytest.raises(SimulatedPowerLoss):
        fs.listdir(d)
    fs.crash()
    assert sorted(os.listdir(d)) == ["f0"]


def test_a_crash_after_a_boundary_keeps_what_it_made_durable(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    fs.crash_at(1, "rename", "*f1.tmp -> *", after=True, then="fsync_dir")
    with pytest.raises(SimulatedPowerLoss):
        _workload(fs, d)
    fs.crash()
    assert sorted(os.listdir(d)) == ["f0", "f1"]


def test_a_crash_releases_the_locks_of_the_dead_process(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    held = fs.open(os.path.join(d, ".lock"), FLAGS)
    fs.flock(held)
    fs.crash()
    again = os.open(os.path.join(d, ".lock"), FLAGS)
    try:
        fs_after = FaultFileSystem()
        fs_after.flock(again)
    finally:
        os.close(again)
    fs.close(held)   # what the dead store's object does later: harmless


def test_a_child_killed_at_a_crash_point_leaves_what_a_power_cut_leaves(tmp_path):
    d = _synced_dir(FaultFileSystem(), tmp_path / "d")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import fault_fs, test_fault_fs as t\n"
            "fs = fault_fs.FaultFileSystem(kill_on_power_loss=True); fs.crash_at(3, 'rename')\n"
            "t._workload(fs, sys.argv[2])\n")
    done = subprocess.run([sys.executable, "-c", code, str(HERE), d], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    assert sorted(os.listdir(d)) == ["f0", "f1"]


def _replace_segments(fs: FaultFileSystem, d: str) -> None:
    """Log.replace_segments' renames and directory fsyncs for cleaned segment 0 replacing segments 0 and 5."""
    def rename(base, old, new):
        for kind in (".log", ".index", ".timeindex"):
            fs.rename(os.path.join(d, f"{base:020d}{kind}{old}"), os.path.join(d, f"{base:020d}{kind}{new}"))
    rename(0, ".cleaned", ".swap")
    fs.fsync_dir(d)
    for base in (0, 5):
        rename(base, "", ".deleted")
    fs.fsync_dir(d)
    rename(0, ".swap", "")
    fs.fsync_dir(d)


def _suffixes(d: str) -> list[str]:
    return sorted(name[20:] if name.startswith("00000000000000000000") else "5" + name[20:]
                  for name in os.listdir(d) if name.endswith((".log", ".log.cleaned", ".log.swap", ".log.deleted")))


@pytest.mark.parametrize("point, durable_metadata, left", [
    ("cleaner-cleaned-written", False, [".log", ".log.cleaned", "5.log"]),
    ("cleaner-swap-renamed", False, [".log", ".log.swap", "5.log"]),
    ("cleaner-old-renamed:1", True, [".log.deleted", ".log.swap", "5.log"]),
    ("cleaner-old-renamed:2", True, [".log.deleted", ".log.swap", "5.log.deleted"]),
    ("cleaner-swapped", False, [".log", ".log.deleted", "5.log.deleted"]),
])
def test_the_named_crash_points_stop_a_segment_swap_where_the_old_switch_did(tmp_path, point, durable_metadata,
                                                                              left):
    d = _synced_dir(FaultFileSystem(), tmp_path / "orders-0")
    for name in ("00000000000000000000.%s.cleaned", "00000000000000000000.%s", "00000000000000000005.%s"):
        for kind in ("log", "index", "timeindex"):
            Path(d, name % kind).write_bytes(b"x")
    fs = FaultFileSystem()
    fs.crash_at_named(point)
    with pytest.raises(SimulatedPowerLoss):
        _replace_segments(fs, d)
    fs.crash(durable_metadata=durable_metadata)
    assert _suffixes(d) == left


def test_a_new_file_on_a_reused_inode_number_is_not_taken_for_the_unlinked_one(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    for version in range(20):   # each rewrite frees an inode the next tmp file may get
        fd = fs.open(os.path.join(d, "c.tmp"), FLAGS | os.O_TRUNC)
        fs.pwrite(fd, b"v%d" % version, 0)
        fs.fsync(fd)
        fs.close(fd)
        fs.rename(os.path.join(d, "c.tmp"), os.path.join(d, "c"))
        if version == 10:
            fs.fsync_dir(d)
    fs.crash()
    assert os.listdir(d) == ["c"] and Path(d, "c").read_bytes() == b"v10"


def test_a_crash_rule_can_look_at_the_bytes_an_fsync_makes_durable(tmp_path):
    fs = FaultFileSystem()
    d = _synced_dir(fs, tmp_path / "d")
    path = os.path.join(d, "00000000000000000000.log")
    fd = _create_synced(fs, path, b"")

    def covers_marker(b):
        return b.synced_to > b.synced_from and b"MARKER" in Path(b.path).read_bytes()[b.synced_from:b.synced_to]

    fs.crash_at(1, "fsync", where=covers_marker)
    written = 0
    with pytest.raises(SimulatedPowerLoss):
        for chunk in (b"data1|", b"data2|", b"MARKER|", b"data3|"):
            written += fs.pwrite(fd, chunk, written)
            fs.fsync(fd)
    fs.crash()
    assert Path(path).read_bytes() == b"data1|data2|"


def _end_a_transaction(fs: FaultFileSystem, d: Path) -> None:
    """The coordinator's writes for one committed transaction over orders-0 and orders-1 (producer 9), then
    the next thing made durable: another producer's record."""
    names = ("__transaction_state-0", "orders-0", "orders-1")
    for name in names:
        (d / name).mkdir(exist_ok=True)   # as the store makes them: durable before any segment
    logs = {name: Log.open(str(d / name), fs=fs) for name in names}
    partitions = frozenset({("orders", 0), ("orders", 1)})

    def transition(state: TxnState, durable: bool = True) -> None:
        value = TxnLogValue(9, 0, 60_000, state, frozenset() if state == TxnState.COMPLETE_COMMIT else partitions)
        logs["__transaction_state-0"].append_records([encode_value(value)], keys=[encode_key("tx")],
                                                     durable=durable)

    transition(TxnState.ONGOING)
    for name in ("orders-0", "orders-1"):
        logs[name].append_records([b"v"], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True,
                                  durable=True)
    transition(TxnState.PREPARE_COMMIT)
    for name in ("orders-0", "orders-1"):
        logs[name].write_txn_marker(9, 0, 0, commit=True, durable=True)
    transition(TxnState.COMPLETE_COMMIT, durable=False)
    logs["orders-1"].append_records([b"later"], durable=True)


def _what_survived(d: Path) -> tuple[list[str], list[str], list[str]]:
    """The states in __transaction_state-0, and each batch of orders-0 and orders-1 (`data`/`COMMIT`/`plain`)."""
    found = []
    for name in ("__transaction_state-0", "orders-0", "orders-1"):
        opened = Log.open(str(d / name))
        try:
            if name.startswith("__"):
                found.append([decode_value(r.value).state.kafka_name for r in opened.iter_records()])
                continue
            found.append([DEFAULT_FORMAT.read_marker(opened.read(e.base_offset).read(), 0).type_name
                          if e.is_control else "data" if e.is_transactional else "plain"
                          for e, _ in opened.iter_batches(0)])
        finally:
            opened.close()
    return found[0], found[1], found[2]


@pytest.mark.parametrize("point, cut, states, orders0, orders1", [
    # cut: the partition of the last boundary and the markers it made durable (or would have)
    ("txn-prepared", ("__transaction_state-0", 0), ["Ongoing", "PrepareCommit"], ["data"], ["data"]),
    ("txn-marker:1", ("orders-0", 1), ["Ongoing", "PrepareCommit"], ["data"], ["data"]),
    ("txn-marker:2", ("orders-1", 1), ["Ongoing", "PrepareCommit"], ["data", "COMMIT"], ["data"]),
    ("txn-markers-written", ("orders-1", 1), ["Ongoing", "PrepareCommit"], ["data", "COMMIT"], ["data", "COMMIT"]),
    # Complete reached the page cache only: the cut at the next boundary (the later record's fsync) loses it.
    ("txn-completed", ("orders-1", 0), ["Ongoing", "PrepareCommit"], ["data", "COMMIT"], ["data", "COMMIT"]),
])
@pytest.mark.parametrize("durable_metadata", [False, True])
def test_the_transaction_points_cut_where_the_coordinators_steps_were(tmp_path, point, cut, states, orders0, orders1,
                                                                      durable_metadata):
    fs = FaultFileSystem()
    fs.crash_at_named(point)
    with pytest.raises(SimulatedPowerLoss):
        _end_a_transaction(fs, tmp_path)
    last = fs.boundaries[-1]
    assert (Path(last.path).parent.name, sum(1 for _ in markers(last.path, last.synced_from, last.synced_to))) == cut
    fs.crash(durable_metadata=durable_metadata)
    assert _what_survived(tmp_path) == (states, orders0, orders1)


def test_without_a_cut_the_transaction_points_leave_everything(tmp_path):
    fs = FaultFileSystem()
    fs.crash_at_named("txn-marker:3")
    _end_a_transaction(fs, tmp_path)
    fs.crash()
    # Complete is never fsynced here: any power cut loses it (a restart redoes the markers, then writes it).
    assert _what_survived(tmp_path) == (["Ongoing", "PrepareCommit"], ["data", "COMMIT"], ["data", "COMMIT", "plain"])
