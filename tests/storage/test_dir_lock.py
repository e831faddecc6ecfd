"""One open store per data directory: the `.lock` file refuses a second one, and a killed holder leaves none."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import logstore
from logstore.dir_lock import LOCK_FILE
from logstore.errors import LogDirLockedError, StorageError

HOLDER = textwrap.dedent("""
    import sys, logstore
    store = logstore.open(sys.argv[1])
    store.create_topic("t")
    store.log("t").append_records([b"acknowledged"], durable=True)
    print("ready", flush=True)
    sys.stdin.read()  # hold the store open until killed
""")


def test_a_second_store_in_the_same_process_is_refused_until_the_first_closes(tmp_path):
    first = logstore.open(str(tmp_path))
    with pytest.raises(LogDirLockedError, match="in use by another store open in this process") as refused:
        logstore.open(str(tmp_path))
    assert isinstance(refused.value, StorageError)
    assert str(tmp_path / LOCK_FILE) in str(refused.value)
    first.close()
    with logstore.open(str(tmp_path)) as second:
        assert second.topics() == {}


def test_every_log_dir_is_locked_and_a_refused_open_holds_none(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with logstore.open([str(a), str(b)]):
        with pytest.raises(LogDirLockedError):
            logstore.open(str(b))
    holder = logstore.open(str(b))
    with pytest.raises(LogDirLockedError):
        logstore.open([str(a), str(b)])
    holder.close()
    # The refused open above must have let go of `a`, which it locked before failing on `b`.
    with logstore.open([str(a), str(b)]):
        pass


def test_another_process_is_named_and_its_sigkill_frees_the_directory(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(LogDirLockedError, match=f"in use by process {child.pid} "):
            logstore.open(str(tmp_path))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    # The kernel dropped the dead holder's lock: no stale file to clean up, and its acknowledged write is there.
    with logstore.open(str(tmp_path)) as store:
        assert [r.value for r in store.log("t").iter_records()] == [b"acknowledged"]
        assert not store.log("t").recovery_report.clean_shutdown
