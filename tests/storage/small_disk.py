"""A real small disk for full-disk tests: a tmpfs of its own (we run as root), and a way to fill it."""
from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(mount: Path, size: str | int) -> Iterator[Path]:
    """A tmpfs of `size` bytes (or `16m`) at `mount`, created here and lazily unmounted on exit."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"this test needs to mount a tmpfs (as root): mount said {done.stderr.strip()!r}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: str | Path) -> Path:
    """A file of zeros in `directory` grown until the file system refuses: the disk is full."""
    filler = Path(directory) / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (b"\0" * 65536, b"\0" * 4096, b"\0"):
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler
