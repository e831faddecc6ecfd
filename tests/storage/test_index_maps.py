"""Index maps: no descriptor held, mapped on first use (Kafka's LazyIndex), and a file cut under its map
raising a typed error instead of SIGBUS (issue 25, findings 4 and 12)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import index_damage_child
import logstore
from fault_fs import FaultFileSystem
from logstore.filesystem import OsFileSystem
from logstore.index import IndexAccessError, OffsetIndex, TimeIndex
from logstore.log import Log
from small_disk import mounted_tmpfs

CHILD_TIMEOUT = 120
TMPFS_SIZE = 256 * 1024
# How long a rename waits for the other thread it let in (see _RenameRace): it only finishes within this if
# it did not wait for the rename, which is the bug; with the index's lock every wait runs out.
RACE_WINDOW_S = 0.2


def _fds_on(path: str) -> int:
    """How many of this process's descriptors are open on `path`."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                found += 1
        except FileNotFoundError:
            pass
    return found


def _fds_under(directory: str) -> list[str]:
    """The files under `directory` this process holds descriptors on, one entry per descriptor."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith(directory + os.sep):
            found.append(os.path.relpath(target, directory))
    return sorted(found)


def _mapped_under(directory: str) -> list[str]:
    """The files under `directory` mapped into this process."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(directory + os.sep):
                found.add(os.path.relpath(fields[5].rstrip("\n"), directory))
    return sorted(found)


# -- descriptors and lazy maps ---------------------------------------------------------------------------------


def test_an_index_holds_no_descriptor_while_mapped_or_after_a_resize(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    index = OffsetIndex(path, 0, max_index_size=8000)
    for n in range(1, 100):
        index.append(n * 10, n * 100)
    assert index.lookup(505) == (500, 5000)
    assert _fds_on(path) == 0
    index.trim()
    index.make_active()
    assert index.lookup(505) == (500, 5000) and index.entries == 99
    assert _fds_on(path) == 0
    index.close()
    assert os.path.getsize(path) == 99 * 8


def test_a_time_index_holds_no_descriptor_either(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    index = TimeIndex(path, 0, max_index_size=1200)
    for n in range(1, 50):
        index.maybe_append(1_000 + n, n)
    assert index.lookup(1_010) == (1_010, 10)
    assert _fds_on(path) == 0
    index.close()


def test_a_trimmed_index_is_unmapped_until_its_next_use(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    index = OffsetIndex(path, 100, max_index_size=800)
    index.append(110, 4096)
    index.trim()
    assert not index.mapped and index.entries == 1 and os.path.getsize(path) == 8
    index.sanity_check(log_size=10_000)   # a sanity check maps the file only while it runs
    assert not index.mapped
    assert index.lookup(200) == (110, 4096) and index.mapped
    index.close()


def test_an_index_opened_from_disk_maps_nothing_until_a_lookup(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    written = OffsetIndex(path, 100, max_index_size=800)
    written.append(110, 4096)
    written.append(120, 8192)
    written.close()
    index = OffsetIndex(path, 100, max_index_size=800)
    assert not index.mapped and index.entries == 2 and not index.mapped
    index.trim()    # already whole entries: nothing to do, nothing opened
    assert not index.mapped
    assert index.lookup(115) == (110, 4096) and index.mapped
    index.close()
    read_only = OffsetIndex(path, 100, writable=False)
    assert not read_only.mapped
    assert read_only.last_entry() == (120, 8192)
    read_only.close()


def test_a_store_at_rest_holds_only_its_log_files_and_maps_only_what_it_reads(tmp_path):
    """Before: five descriptors per partition with one segment (the .log, and two per index map)."""
    directory = str(tmp_path / "store")
    partitions, segments = 12, 3
    with logstore.open(directory, start_scheduler=False) as store:
        store.create_topic("t", partitions, {"index.interval.bytes": 1})
        for p in range(partitions):
            log = store.log("t", p)
            for s in range(segments):
                log.append_records([b"a", b"b"])
                log.append_records([b"c"])
                if s + 1 < segments:
                    log.roll()
    with logstore.open(directory, start_scheduler=False) as store:
        held = _fds_under(directory)
        logs = [f for f in held if f.endswith(".log")]
        assert len(logs) == partitions * segments
        assert [f for f in held if f not in logs] == [".lock"]
        # Opening read each partition's end from its active segment's offset index, and nothing else.
        assert all(name.endswith("00000000000000000006.index") for name in _mapped_under(directory))
        for p in range(partitions):
            assert store.log("t", p).read(0) is not None
        mapped = _mapped_under(directory)
        assert sum(name.endswith("00000000000000000000.index") for name in mapped) == partitions
        assert not any(name.endswith("00000000000000000003.index") for name in mapped)
        assert [f for f in _fds_under(directory) if not f.endswith(".log")] == [".lock"]


def test_an_inactive_index_cut_while_unmapped_only_costs_a_longer_scan(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), logstore.LogConfig.from_properties({"index.interval.bytes": 1}))
    for n in range(200):
        log.append_records([b"v%d" % n])
    log.roll()
    log.append_records([b"active"])
    first = log.segments[0]
    assert not first.offset_index.mapped
    os.truncate(first.offset_index.path, 0)
    records = list(log.iter_records(150, max_offset=152))
    assert [r.value for r in records] == [b"v150", b"v151"]
    log.close()


class _RenameRace(OsFileSystem):
    """A file system that lets `during` run in another thread right after a rename moved the file, before
    the renaming caller has recorded the new name: the window a flush thread or a reader may hit."""

    def __init__(self) -> None:
        self.during: list = []
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        for action in self.during:
            done = threading.Event()

            def run(action=action, done=done) -> None:
                try:
                    action()
                except BaseException as exc:   # reported by the test, whatever it is
                    self.errors.append(exc)
                finally:
                    done.set()

            thread = threading.Thread(target=run)
            thread.start()
            self.threads.append(thread)
            done.wait(RACE_WINDOW_S)


def test_a_flush_or_first_lookup_during_a_rename_finds_the_file(tmp_path):
    """Before the index's lock: the flush thread reopened the old name a moment after the cleaner renamed
    the segment `.deleted`, failed with ENOENT, and took the partition offline."""
    fs = _RenameRace()
    path = str(tmp_path / "00000000000000000000.index")
    index = OffsetIndex(path, 0, max_index_size=800, fs=fs)
    index.append(5, 100)
    index.trim()   # unmapped, as a rolled segment's index is
    fs.during = [index.flush, lambda: index.lookup(7)]
    index.rename(path + ".deleted")
    for thread in fs.threads:
        thread.join()
    assert fs.errors == []
    assert index.lookup(7) == (5, 100)
    index.close()


# -- power loss still sees writes through the maps ---------------------------------------------------------------


def test_writes_through_a_descriptorless_map_count_only_after_an_fsync(tmp_path):
    fs = FaultFileSystem()
    directory = tmp_path / "d"
    directory.mkdir()
    fs.fsync_dir(str(directory))
    path = str(directory / "00000000000000000000.index")
    fd = fs.open(path, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fd, bytes(16), 0)
    fs.fsync(fd)
    fs.fsync_dir(str(directory))
    mapped = fs.map_file(fd, 16, writable=True)
    fs.close(fd)
    view = memoryview(mapped)
    view[0:4] = b"kept"
    fd = fs.open(path, os.O_RDONLY)
    fs.fsync(fd)
    fs.close(fd)
    view[4:8] = b"lost"
    fs.crash()
    assert Path(path).read_bytes() == b"kept" + bytes(12)
    view.release()
    mapped.close()


def test_an_index_append_is_lost_by_a_power_cut_until_the_index_is_flushed(tmp_path):
    fs = FaultFileSystem()
    directory = tmp_path / "d"
    directory.mkdir()
    fs.fsync_dir(str(directory))
    path = str(directory / "00000000000000000000.index")
    index = OffsetIndex(path, 0, max_index_size=80, fs=fs)
    index.append(1, 100)
    index.flush()
    fs.fsync_dir(str(directory))
    index.append(2, 200)
    fs.crash()
    assert Path(path).read_bytes()[:16] == bytes.fromhex("00000001 00000064") + bytes(8)


# -- a file cut under its map ------------------------------------------------------------------------------------


def _cut_under_a_live_child(tmp_path, action: str) -> dict:
    """Run the child to `ready`, cut its active segment's index files to 0 bytes, and read its outcome."""
    directory = tmp_path / "t-0"
    proc = subprocess.Popen([sys.executable, index_damage_child.__file__, str(directory), action],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n"
        for name in ("00000000000000000000.index", "00000000000000000000.timeindex"):
            os.truncate(directory / name, 0)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != -signal.SIGBUS, f"the child died of SIGBUS: {err}"
    assert proc.returncode == 0, err
    return json.loads(out)


def test_a_lookup_in_an_index_cut_under_its_map_raises_a_storage_error(tmp_path):
    """Before: the lookup's first load from the missing pages killed the process with SIGBUS."""
    outcome = _cut_under_a_live_child(tmp_path, "lookup")
    assert outcome["error"] == IndexAccessError.__name__
    assert outcome["code"] == "KAFKA_STORAGE_ERROR" and "StorageError" in outcome["bases"]
    assert "00000000000000000000.index: a page of its map faulted (the file was cut under it" in outcome["message"]


def test_a_time_lookup_in_an_index_cut_under_its_map_raises_a_storage_error(tmp_path):
    outcome = _cut_under_a_live_child(tmp_path, "time-lookup")
    assert outcome["error"] == IndexAccessError.__name__ and outcome["code"] == "KAFKA_STORAGE_ERROR"
    assert "00000000000000000000.timeindex" in outcome["message"]


def test_a_fault_outside_the_index_accessors_still_reaches_faulthandler(tmp_path):
    """The guard takes only its own accesses' faults: a read through a map's plain buffer is not one."""
    path = tmp_path / "cut"
    code = (f"import os\n"
            f"from logstore.native.file_map import FileMap\n"
            f"import logstore.native.index\n"
            f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)\n"
            f"os.ftruncate(fd, 8192)\n"
            f"mapped = FileMap(fd, 8192, False)\n"
            f"os.close(fd)\n"
            f"os.truncate({str(path)!r}, 0)\n"
            f"print(bytes(memoryview(mapped)[5000:5001]))\n")
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT)
    assert proc.returncode == -signal.SIGBUS
    assert "Fatal Python error: Bus error" in proc.stderr


def test_an_append_to_an_index_cut_under_its_map_raises_a_storage_error(tmp_path):
    """Before: the index entry's store into the missing page killed the process with SIGBUS."""
    outcome = _cut_under_a_live_child(tmp_path, "append")
    assert outcome["error"] == IndexAccessError.__name__ and outcome["code"] == "KAFKA_STORAGE_ERROR"


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of its own at `tmp_path/disk`, TMPFS_SIZE bytes."""
    with mounted_tmpfs(tmp_path / "disk", TMPFS_SIZE) as mount:
        yield mount


def test_an_index_append_on_a_full_disk_raises_a_storage_error(small_disk):
    """Before: the first entry written into a preallocated (sparse) page the full disk could not back
    killed the process with SIGBUS."""
    proc = subprocess.run([sys.executable, index_damage_child.__file__, str(small_disk), "full-disk-append"],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode != -signal.SIGBUS, f"the child died of SIGBUS: {proc.stderr}"
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["error"] == IndexAccessError.__name__ and outcome["code"] == "KAFKA_STORAGE_ERROR"
    assert "or the disk is full" in outcome["message"]
