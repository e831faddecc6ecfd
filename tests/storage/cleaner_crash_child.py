"""The cleaner run that test_cleaner_crash.py kills at a crash point: one round over `compacted-0`.

    LOGSTORE_CRASH_AT=cleaner-swap-renamed python tests/storage/cleaner_crash_child.py DIR NOW_MS

Opens the store in DIR without its background threads and cleans the
partition once at time NOW_MS. The crash switch kills it part-way; if the
switch names no point it reaches, it prints `cleaned <end offset>` and exits.
"""
from __future__ import annotations

import sys

from logstore.cleaner import Cleaner, log_to_clean
from logstore.manager import LogManager


def main(directory: str, now_ms: int) -> int:
    """Clean once; the exit status."""
    store = LogManager(directory, start_scheduler=False)
    target = store.log("compacted", 0)
    stats = Cleaner(1 << 20, clock=lambda: now_ms).clean(log_to_clean(target, None, now_ms))
    print(f"cleaned {stats.end_offset}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
