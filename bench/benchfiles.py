"""Putting a crashed store's small files back between reopen rounds, for both reopen benchmarks."""
from __future__ import annotations

import os
from collections.abc import Callable


def small_files(directory: str) -> dict[str, bytes]:
    """Every file under `directory` but the segment .log files: path → contents."""
    found = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            if not name.endswith(".log"):
                path = os.path.join(parent, name)
                with open(path, "rb") as f:
                    found[path] = f.read()
    return found


def restore(directory: str, small: dict[str, bytes], drop: Callable[[str], bool] = lambda path: False,
            log_sizes: dict[str, int] | None = None) -> None:
    """Make the small files `small` again (those drop(path) picks: absent); .log files untouched, sizes checked."""
    for parent, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            if name.endswith(".log"):
                if log_sizes is not None:
                    assert os.path.getsize(path) == log_sizes[path], f"{path} changed size"
            elif path not in small or drop(path):
                os.unlink(path)
    for path, data in small.items():
        if not drop(path):
            with open(path, "wb") as f:
                f.write(data)
