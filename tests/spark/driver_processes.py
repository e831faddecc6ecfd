"""Spark driver processes of their own for the write tests: started in a process group, SIGKILLed whole, and a
streaming driver killed again and again once it committed a micro-batch of its own."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

TIMEOUT = 240.0  # s: a bound on a child driver's whole run (its session starts in ~15 s)


def run_driver(driver: Path, tmp_path: Path, spec: dict) -> subprocess.Popen:
    """`driver SPEC_JSON` in a process group of its own (its JVM and Python workers die with it); its stderr
    goes to a log file in `tmp_path`."""
    log = open(tmp_path / f"driver-{spec['mode']}-{time.monotonic_ns()}.log", "wb")
    return subprocess.Popen([sys.executable, str(driver), json.dumps(spec)], cwd=driver.parent,
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True, text=True)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL a driver's whole process group and reap it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()


def kill_streams(driver: Path, tmp_path: Path, spec: dict, committed_batch: Callable[[], int], kills: int) -> None:
    """Run the streaming driver `kills + 1` times, each killed once it committed a micro-batch of its own (the
    kill then lands anywhere in the next one)."""
    for _ in range(kills + 1):
        before = committed_batch()
        proc = run_driver(driver, tmp_path, spec)
        try:
            deadline = time.monotonic() + TIMEOUT
            while committed_batch() < before + 1:
                assert proc.poll() is None, "the streaming driver exited"
                assert time.monotonic() < deadline, "the streaming driver committed nothing"
                time.sleep(0.1)
        finally:
            kill(proc)
