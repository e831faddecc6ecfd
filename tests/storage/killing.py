"""Both ends of the kill tests' pipe: a writer child printing acknowledgements, and the test killing it.

A child (crash_child.py, producer_crash_child.py) prints on stdout, flushed
line by line:

    start <log end offset> <a number of its own>   once, after the open
    <n>                                            every offset below n is durable

The test reads a chosen number of acknowledgements, each above the last,
SIGKILLs the child and reaps it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

WATCHDOG_SECONDS = 60


def run_until_acks(cmd: list[str], acks: int, err_path: Path) -> tuple[int, int, int]:
    """Run `cmd` with stderr in `err_path`, read `acks` acknowledgements, SIGKILL and reap it.

    Returns the start line's two numbers and the last acknowledgement (the
    log end offset it opened with if `acks` is 0).
    """
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    # A child that hangs without writing would block readline for ever; the watchdog ends it.
    watchdog = threading.Timer(WATCHDOG_SECONDS, proc.kill)
    watchdog.start()
    try:
        first = proc.stdout.readline().split()
        assert first[:1] == ["start"], f"child said {first!r}: {err_path.read_text()}"
        opened_at, second = int(first[1]), int(first[2])
        acked = opened_at
        for _ in range(acks):
            line = proc.stdout.readline()
            assert line, f"child exited with {proc.wait()} before it was killed: {err_path.read_text()}"
            n = int(line)
            assert n > acked, f"acknowledgement {n} does not follow {acked}"
            acked = n
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, err_path.read_text()
    return opened_at, second, acked


def print_acks(store, start: tuple[int, int], acks: Iterable[int]) -> int:
    """In the child: print the start line and each acknowledgement `acks` yields; the exit status.

    1 if stdout closes under it; 0, after closing `store`, if `acks` ends.
    """
    out = sys.stdout
    try:
        out.write(f"start {start[0]} {start[1]}\n")
        out.flush()
        for n in acks:
            out.write(f"{n}\n")
            out.flush()
    except BrokenPipeError:
        return 1
    # Only a run that outlived its deadline gets here; the crash tests never let it.
    store.close()
    return 0
