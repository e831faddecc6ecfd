"""A test-only crash switch: SIGKILL this process at a named step of the transaction coordinator.

`LOGSTORE_CRASH_AT=name` (or `name:N`, the N-th time the point is reached)
kills the process there with SIGKILL, as a power cut would stop it. Tests set
it on a broker subprocess to prove that a restart finishes what was decided.
Without the variable the check is one comparison.

Being retired: every point sits at an fsync or rename boundary, where a test's
fault-injecting file system (passed as `fs`) cuts the power under the same
name. The log cleaner's points have moved there already (tests/storage/
fault_fs.py's NAMED_POINTS); the coordinator's follow.
"""
from __future__ import annotations

import os
import signal
import threading

_SPEC = os.environ.get("LOGSTORE_CRASH_AT", "")
_NAME, _, _NTH = _SPEC.partition(":")
_hits = 0
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """Die here if the switch names this point (and this is its N-th hit)."""
    global _hits
    if name != _NAME:
        return
    with _lock:
        _hits += 1
        if _hits >= int(_NTH or 1):
            os.kill(os.getpid(), signal.SIGKILL)
