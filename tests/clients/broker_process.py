"""A `logstore broker` subprocess on a free loopback port: start, stop cleanly (checked), SIGKILL."""
from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

READY_PREFIX = "logstore broker listening on "
START_TIMEOUT = 30.0   # s, from exec to the ready line (imports included)
STOP_TIMEOUT = 30.0    # s, from SIGTERM to exit
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port the kernel just handed out (bound to port 0, then released), never one this process
    was handed before: two calls in a row can get the same port back, and a broker's listener and its
    metrics.port then collided."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """One line of `proc`'s stdout, waiting at most `timeout` s; '' if it closed first."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    data = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line on stdout within {timeout} s (so far {data!r})")
            if not sel.select(remaining):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                return ""
            data += chunk
    return data.decode("utf-8").splitlines()[0]


@dataclass
class BrokerProcess:
    """One broker subprocess: where it listens, its log dir, and how to stop or kill it."""

    host: str
    port: int
    data_dir: Path
    overrides: tuple[str, ...] = ()
    proc: subprocess.Popen | None = None
    starts: int = 0
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the next start."""
    start_timeout: float = START_TIMEOUT
    """How long a start may take to its ready line (a store of many partitions to recover takes longer)."""
    launcher: tuple[str, ...] = ()
    """Instead of `logstore broker`, the next start runs this script and its arguments, which take the
    overrides as KEY=VALUE (e.g. crashing_broker.py and its crash point)."""

    def __iter__(self):
        """`host, port, data_dir = broker`."""
        return iter((self.host, self.port, self.data_dir))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def stderr_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.stderr.{self.starts}"

    def log_text(self) -> str:
        """Everything every run of this broker wrote on stderr (its log)."""
        return "".join(p.read_text(errors="replace")
                       for p in sorted(self.data_dir.parent.glob(f"{self.data_dir.name}.stderr.*")))

    def start(self) -> BrokerProcess:
        """Exec the broker and wait for its ready line."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        overrides = (f"listeners=PLAINTEXT://{self.host}:{self.port}", f"log.dirs={self.data_dir}", *self.overrides)
        if self.launcher:
            cmd = [sys.executable, *self.launcher, *overrides]
        else:
            cmd = [sys.executable, "-m", "logstore", "broker"]
            for item in overrides:
                cmd += ["--override", item]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **self.env})
        try:
            line = _read_line(self.proc, self.start_timeout)
        except TimeoutError as exc:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"{exc}:\n{self.log_text()}")
        if line != f"{READY_PREFIX}{self.host}:{self.port}":
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"broker said {line!r} (status {self.proc.returncode}):\n{self.log_text()}")
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM; the broker must exit 0 and leave the clean-shutdown marker."""
        assert self.running, f"broker already exited with {self.proc.returncode}:\n{self.log_text()}"
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"broker did not exit within {STOP_TIMEOUT} s of SIGTERM:\n{self.log_text()}")
        finally:
            self.proc.stdout.close()
        assert status == 0, f"broker exited with {status}:\n{self.log_text()}"
        assert (self.data_dir / CLEAN_SHUTDOWN_MARKER).exists(), \
            f"no {CLEAN_SHUTDOWN_MARKER} after a clean stop: {sorted(os.listdir(self.data_dir))}"

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing gets to run."""
        assert self.running
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(STOP_TIMEOUT) == -signal.SIGKILL
        self.proc.stdout.close()

    def wait_killed(self, timeout: float) -> None:
        """Wait up to `timeout` s for the broker to die of SIGKILL at its crash point, as it must."""
        assert self.proc is not None
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the broker is still running {timeout} s later:\n{self.log_text()[-4000:]}")
        self.proc.stdout.close()
        assert status == -signal.SIGKILL, f"the broker exited with {status}:\n{self.log_text()[-4000:]}"

    def memory_kib(self, field: str = "VmPeak") -> int:
        """A `/proc/<pid>/status` memory figure of the running broker, in KiB."""
        assert self.running, f"the broker died: status {self.proc.returncode}\n{self.log_text()[-4000:]}"
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)



def finish_brokers(brokers: list[BrokerProcess]) -> None:
    """Stop every broker still running (cleanly, checked) and check no run logged a traceback."""
    errors = []
    for b in brokers:
        if b.running:
            try:
                b.stop()
            except BaseException as exc:  # noqa: BLE001 - stop the others, then report
                errors.append(exc)
        elif b.proc is not None and b.proc.returncode not in (0, -signal.SIGKILL):
            errors.append(AssertionError(f"broker exited with {b.proc.returncode}:\n{b.log_text()}"))
    for b in brokers:
        assert "Traceback" not in b.log_text(), f"the broker logged a traceback:\n{b.log_text()}"
    if errors:
        raise errors[0]
