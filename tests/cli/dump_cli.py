"""`logstore dump` run as a real process, and what the dump tests check of every run."""
from __future__ import annotations

import json
import subprocess
import sys


def run_dump(*args, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m logstore dump ARGS`, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "logstore", "dump", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def ok(result: subprocess.CompletedProcess) -> list[str]:
    """The stdout lines of a run that exited 0 and said nothing on stderr."""
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()


def no_traceback(result: subprocess.CompletedProcess) -> None:
    """A run that printed no traceback, whatever its status."""
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr


def json_docs(result: subprocess.CompletedProcess) -> list[dict]:
    """The JSON documents of a `--json` run, one per line."""
    no_traceback(result)
    return [json.loads(line) for line in result.stdout.splitlines()]
