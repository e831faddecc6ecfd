"""Throwaway virtual environments for the packaging tests, and commands whose output a failure shows."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT = 900  # s: a bound on one build or install (compiling on a loaded machine included)


def run(cmd, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run `cmd` and return its stdout and stderr; if it fails, fail the test with them."""
    cmd = [str(part) for part in cmd]
    proc = subprocess.run(cmd, cwd=cwd, env=env if env is not None else clean_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd)}` exited with {proc.returncode}:\n{proc.stdout[-8000:]}")
    return proc.stdout


def clean_env(python: Path | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without the marks of its venv; `python`'s bin first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    if python is not None:
        env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def new_venv(path: Path) -> Path:
    """An empty venv at `path` (no pip in it: `pip_into` installs with this venv's pip); its python."""
    run([sys.executable, "-m", "venv", "--without-pip", path])
    return path / "bin" / "python"


def pip_into(python: Path, *args, env: dict[str, str] | None = None) -> str:
    """`pip ARGS` acting on the environment of `python`."""
    return run([sys.executable, "-m", "pip", "--python", python, *args], env=env)


def site_packages(python: Path) -> Path:
    """Where `python` installs pure-Python packages."""
    return Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())
