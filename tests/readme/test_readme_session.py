"""README.md, pasted top to bottom, does what it says: one session, as a new user runs it.

The session runs in a fresh temporary directory holding a copy of the working
tree's README.md and a `.venv` symlink to this checkout's virtualenv. Nothing
else is needed there: every block works on files it makes itself, and the
virtualenv's `logstore` is this checkout's, installed in editable mode, so the
session exercises the code and the README as they are now, committed or not
(a `git clone` would leave out uncommitted work in either).

Terminal 1 is the broker as `make run` starts it: `.venv/bin/logstore broker
--override metrics.port=9404` in that directory, with the default settings
otherwise (127.0.0.1:9092, `./data`). Ports 9092 and 9404 must be free.
Terminal 2 is one `bash` process: shell blocks are
sourced into it, in README order, and Python blocks are fed to `python -` in
it, so `cd` and the README's `. .venv/bin/activate` carry over and `python`
is whatever that leaves on PATH. `set -eo pipefail` ends the session at the
first command that fails. The environment is this process's, less any
virtualenv and PYSPARK_* / PYTHONPATH settings, as in a new terminal. Each
block's standard output is compared with the README's (`readme_session`
describes the conventions); blocks marked `not run` are skipped.
"""
from __future__ import annotations

import difflib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from readme_session import Block, matches, normalize, parse

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
VENV = REPO / ".venv"
PORT = 9092
METRICS_PORT = 9404   # `make run`'s metrics.port
BROKER_READY = f"logstore broker listening on 127.0.0.1:{PORT}"
BROKER_START_TIMEOUT = 60.0   # s
BROKER_STOP_TIMEOUT = 30.0    # s
BLOCK_TIMEOUT = 300.0         # s, one block (a Spark one starts a JVM and Python workers)
DONE = "__readme_block_done__"


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the brokers' servers bind: a closed connection's TIME_WAIT on the port does not hold it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _new_terminal_env() -> dict[str, str]:
    """This process's environment as a new terminal would have it: no virtualenv, no Spark or path settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
           and not k.startswith("PYSPARK_")}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not (Path(p).parent / "pyvenv.cfg").exists()]
    env["PATH"] = os.pathsep.join(path)
    env.pop("PS1", None)
    return env


def _read_line(stream, timeout: float) -> str | None:
    """One line from `stream` (bytes), or None if it closed; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    data = b""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while not data.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(data.decode(errors="replace"))
            if not sel.select(remaining):
                continue
            byte = os.read(stream.fileno(), 1)
            if not byte:
                return None
            data += byte
    return data.decode()


class Broker:
    """Terminal 1: `make run`'s broker, in the session directory."""

    def __init__(self, cwd: Path, env: dict[str, str], log: Path):
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen([str(cwd / ".venv" / "bin" / "logstore"), "broker", "--override",
                                          f"metrics.port={METRICS_PORT}"], cwd=cwd, env=env,
                                         stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        try:
            line = _read_line(self.proc.stdout, BROKER_START_TIMEOUT)
        except TimeoutError:
            line = None
        if line is None or line.strip() != BROKER_READY:
            self.kill()
            pytest.fail(f"`make run`'s broker did not start (said {line!r}):\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C on `make run` would be; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(BROKER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()
        return self.proc.returncode


class Terminal:
    """Terminal 2: one bash process fed the README's blocks; each block's stdout and stderr to files."""

    def __init__(self, cwd: Path, env: dict[str, str], scratch: Path):
        self.scratch = scratch
        with open(scratch / "bash.stderr", "wb") as err:
            self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        self._send("set -eo pipefail\n")

    def _send(self, text: str) -> None:
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def run(self, n: int, block: Block) -> tuple[str, str, float]:
        """Run block `n`; (stdout, stderr, seconds). Fails the test if it fails, ends the shell or hangs."""
        script = self.scratch / f"block-{n:02d}.{'py' if block.language == 'python' else 'sh'}"
        script.write_text(block.code)
        out, err = self.scratch / f"block-{n:02d}.stdout", self.scratch / f"block-{n:02d}.stderr"
        # A Python block is pasted into `python -`; a shell block reads no input from the session.
        command = f"python - < '{script}'" if block.language == "python" else f"source '{script}' < /dev/null"
        started = time.monotonic()
        self._send(f"{{ {command}\n}} > '{out}' 2> '{err}'\necho {DONE}\n")
        try:
            line = _read_line(self.proc.stdout, BLOCK_TIMEOUT)
        except TimeoutError:
            self.kill()
            pytest.fail(f"README line {block.line}: the {block.language} block did not finish within "
                        f"{BLOCK_TIMEOUT:.0f} s\n{self._report(block, out, err)}")
        if line is None:
            status = self.proc.wait()
            pytest.fail(f"README line {block.line}: the {block.language} block failed (the session's bash "
                        f"exited with {status} under set -e)\n{self._report(block, out, err)}")
        assert line.strip() == DONE, f"unexpected line on the session's stdout: {line!r}"
        return _text(out), _text(err), time.monotonic() - started

    def _report(self, block: Block, out: Path, err: Path) -> str:
        return f"--- block:\n{block.code}--- stdout:\n{_text(out)}--- stderr:\n{_tail(_text(err))}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def _mismatch(block: Block, stdout: str, stderr: str) -> str:
    expected = normalize(block.expected or "")
    diff = "\n".join(difflib.unified_diff(expected, normalize(stdout), "README", "printed", lineterm=""))
    return (f"README line {block.line}: the {block.language} block printed something else than the README "
            f"shows{'' if block.expected is not None else ' (nothing)'}:\n{diff}\n--- block:\n{block.code}"
            f"--- stderr:\n{_tail(stderr)}")


def test_the_readme_runs_as_one_session(tmp_path):
    blocks = parse(README.read_text())
    if not (VENV / "bin" / "logstore").exists():
        pytest.fail(f"no {VENV}/bin/logstore: run `make build` (or `make run` once) first")
    for tool, why in (("java", "the Spark blocks (Java 17)"), ("kcat", "the kcat blocks (`make kcat`)")):
        if shutil.which(tool, path=_new_terminal_env()["PATH"]) is None:
            pytest.fail(f"{tool} is not on PATH: the README needs it for {why}")
    for port in (PORT, METRICS_PORT):
        if _port_in_use(port):
            pytest.fail(f"port {port} is taken (a `make run` broker, or another program): the README's session "
                        f"needs it, as `make run` does; stop that first")

    session = tmp_path / "clone"        # the user's clone: the README, and the virtualenv `make` built
    scratch = tmp_path / "session"      # the block files and their output, outside the clone
    session.mkdir()
    scratch.mkdir()
    shutil.copy(README, session / "README.md")
    (session / ".venv").symlink_to(VENV, target_is_directory=True)
    env = _new_terminal_env()

    timings = []
    broker = Broker(session, env, scratch / "broker.log")
    terminal = Terminal(session, env, scratch)
    try:
        for n, block in enumerate(blocks):
            if block.not_run is not None:
                continue
            stdout, stderr, seconds = terminal.run(n, block)
            timings.append(f"line {block.line}: {seconds:.1f} s")
            assert matches(block.expected, stdout), _mismatch(block, stdout, stderr)
    finally:
        terminal.close()
        status = broker.stop()
    assert status == 0, f"the broker exited with {status} on SIGTERM:\n{_tail(broker.log_text())}"
    assert "Traceback" not in broker.log_text(), f"the broker logged a traceback:\n{broker.log_text()}"
    print("block timings:", ", ".join(timings))


def test_the_readme_marks_what_it_does_not_run():
    """Only set-up commands and alternatives are skipped: `make run` and `make test`, the spelt-out broker."""
    skipped = [block.code for block in parse(README.read_text()) if block.not_run is not None]
    assert len(skipped) == 2, skipped
    assert skipped[0].split()[:2] == ["make", "run"] and "make test" in skipped[0]
    assert skipped[1].startswith("logstore broker ")


def test_the_comparison_conventions():
    assert matches(None, "") and matches(None, "\n\n") and not matches(None, "x\n")
    assert matches("a  b\tc\n", "a b c\n\n")
    assert matches("x ... z\n", "x 123 456 z\n") and not matches("x ... z\n", "x 1\nz\n")
    assert matches("first\n...\nlast\n", "first\nlast\n") and matches("first\n...\nlast\n", "first\n1\n2\nlast\n")
    assert not matches("first\nlast\n", "first\nmiddle\nlast\n")
    with pytest.raises(ValueError, match="not the output"):
        parse("Prose.\n\n```text\nhello\n```\n")
    with pytest.raises(ValueError, match="neither run"):
        parse("```console\n$ ls\n```\n")
    blocks = parse("<!-- not run: set-up -->\n```sh\nmake\n```\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n")
    assert [(b.language, b.not_run, b.expected) for b in blocks] == [("sh", "set-up", None), ("python", None, "1\n")]


def test_terminal_one_runs_the_broker_as_make_run_does():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile[makefile.index("\nrun:"):].splitlines()[2].strip()
    assert recipe == f"$(BIN)/logstore broker --override metrics.port={METRICS_PORT}"
