"""A cProfile's top functions as JSON rows, for the benches that put a profile beside their numbers."""
from __future__ import annotations

import cProfile
import io
import os
import pstats
from pathlib import Path

_REPO = str(Path(__file__).resolve().parent.parent) + os.sep


def profile_rows(profile: cProfile.Profile, key: str, top: int) -> list[dict]:
    """The `top` functions by `key` ("tottime" or "cumulative"): calls, own and cumulative seconds."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    stats.sort_stats(key)
    rows = []
    for func in stats.fcn_list[:top]:
        _, calls, own, cumulative, _ = stats.stats[func]
        filename, line, name = func
        where = f"{os.path.relpath(filename, _REPO)}:{line}" if filename.startswith(_REPO) else \
            f"{os.path.basename(filename)}:{line}" if line else "~"
        rows.append({"function": f"{where}({name})", "calls": calls, "tottime_s": own, "cumtime_s": cumulative})
    return rows
