"""The cleaner run that test_cleaner_crash.py cuts the power in: one round over `compacted-0`.

    python tests/storage/cleaner_crash_child.py DIR NOW_MS [cleaner-swap-renamed[:N]]

Opens the store in DIR without its background threads, on a `FaultFileSystem`
armed at the named point (`fault_fs.NAMED_POINTS`), and cleans the partition
once at time NOW_MS. At the point the file system leaves on disk only what
was made durable and SIGKILLs the process; without a point, or if the round
never reaches it, it prints `cleaned <end offset>` and exits.
"""
from __future__ import annotations

import sys

from fault_fs import FaultFileSystem
from logstore.cleaner import Cleaner, log_to_clean
from logstore.manager import LogManager


def main(directory: str, now_ms: int, crash_at: str | None) -> int:
    """Clean once; the exit status."""
    fs = FaultFileSystem(kill_on_power_loss=True)
    if crash_at:
        fs.crash_at_named(crash_at)
    store = LogManager(directory, start_scheduler=False, fs=fs)
    target = store.log("compacted", 0)
    stats = Cleaner(1 << 20, clock=lambda: now_ms, fs=fs).clean(log_to_clean(target, None, now_ms))
    print(f"cleaned {stats.end_offset}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
