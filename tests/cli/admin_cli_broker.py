"""What the admin CLI tests share: a real broker per module, the CLI as a real process, real clients' views.

`admin_broker` is a `logstore broker` subprocess (tests/clients' BrokerProcess:
stopped with SIGTERM at teardown, which must end it cleanly with no traceback
logged). `cli(broker, command, *args)` runs `python -m logstore COMMAND
--bootstrap-server ... ARGS` and returns the finished process; `cli_at` puts
the arguments exactly as given (for tests of where --bootstrap-server goes).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

from broker_process import BrokerProcess, finish_brokers, free_port  # noqa: E402

TIMEOUT = 60.0  # s: a bound on any one CLI run or client wait

__all__ = ["TIMEOUT", "BrokerProcess", "admin_broker", "cli", "cli_at", "free_port", "one_line_error", "table"]


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory):
    """One broker for the module (groups form at once: group.initial.rebalance.delay.ms=0)."""
    data = tmp_path_factory.mktemp("admin-cli") / "data"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data, ("group.initial.rebalance.delay.ms=0",))
    broker.start()
    yield broker
    finish_brokers([broker])


def cli_at(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m logstore ARGS`, output captured."""
    return subprocess.run([sys.executable, "-m", "logstore", *args], capture_output=True, text=True, timeout=TIMEOUT)


def cli(broker: BrokerProcess | str, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m logstore COMMAND --bootstrap-server B ARGS`, output captured."""
    address = broker if isinstance(broker, str) else broker.bootstrap
    return cli_at(command, "--bootstrap-server", address, *args)


def one_line_error(done: subprocess.CompletedProcess[str], status: int, *fragments: str) -> None:
    """The run failed with `status`, printed nothing on stdout, and one stderr line holding every fragment."""
    assert (done.returncode, done.stdout) == (status, ""), (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def table(stdout: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a table as the admin tools print them (cells padded, tab-separated)."""
    lines = stdout.splitlines()
    return [c.strip() for c in lines[0].split("\t")], [[c.strip() for c in line.split("\t")] for line in lines[1:]]
