"""deploy/: the systemd unit and the container file, started as far as this machine allows.

There is no systemd running here and no container runtime, so neither is started by its manager. What is:
- the unit: `systemd-analyze verify` (when installed; else it is read as an INI file), then its ExecStart
  command line run as a real process, with the paths it names moved into a temporary root and a drop-in
  override (as `systemctl edit` writes) pointing the broker's log dir and listener there, and its
  WorkingDirectory and Environment applied; a real client produces and consumes through it; its KillSignal
  must end it with status 0 and Kafka's clean-shutdown marker within its TimeoutStopSec.
- the container file: every file its COPY instructions take exists in the checkout, its EXPOSEd port is the
  config's, its VOLUME holds the config's log dir; its ENTRYPOINT and CMD run the same way (the image's
  config file is the one COPY puts there, ENV applied), and its STOPSIGNAL stops the broker cleanly within a
  container runtime's default grace period (10 s).
The unit's User= and the sandboxing lines are not applied: the test does not create users or namespaces.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
from broker_process import CLEAN_SHUTDOWN_MARKER, READY_PREFIX, START_TIMEOUT, _read_line, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT, CONTAINERFILE, CONFIG = DEPLOY / "logstore.service", DEPLOY / "Containerfile", DEPLOY / "server.properties"
LOGSTORE = Path(sys.executable).with_name("logstore")   # the console script the project installs
CLIENT_TIMEOUT = 30.0   # s: a bound on a client's produce or poll
CONTAINER_GRACE = 10.0  # s: podman's and docker's default stop timeout before SIGKILL


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit's sections, each its (key, value) lines in order (keys may repeat), as systemd reads
    them: `#` and `;` comments, backslash continuations, an empty assignment resetting the key."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"a setting outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        key, value = key.strip(), value.strip()
        if value == "":
            current[:] = [(k, v) for k, v in current if k != key]
        else:
            current.append((key, value))
    return sections


def one(section: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in section if k == key]
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def environment(section: list[tuple[str, str]]) -> dict[str, str]:
    """The variables of every Environment= line (systemd's quoting: shell-like words of NAME=value)."""
    found = {}
    for key, value in section:
        if key == "Environment":
            for word in shlex.split(value):
                name, _, setting = word.partition("=")
                found[name] = setting
    return found


def seconds(value: str) -> float:
    """A systemd time span such as `120`, `90s`, `2min` or `1min 30s`, in seconds."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for word in value.split():
        digits = word.rstrip("abcdefghijklmnopqrstuvwxyz")
        total += float(digits) * units.get(word[len(digits):] or "s", 0)
    return total


def properties(path: Path) -> dict[str, str]:
    """The settings of a server.properties (the simple `key=value` lines this one has)."""
    found = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "!")):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Containerfile's (INSTRUCTION, arguments), continuations joined, comments dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        line = pending + stripped
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        word, _, rest = line.partition(" ")
        found.append((word.upper(), rest.strip()))
    return found


def _moved(root: Path, path: str) -> Path:
    """`path` (absolute) under the temporary root."""
    return root / path.lstrip("/")


def _serve_and_stop(argv: list[str], env: dict[str, str], cwd: Path, port: int, log_dir: Path, stop: signal.Signals,
                    stop_within: float, stderr: Path) -> None:
    """Run `argv`, wait for it to listen on `port`, produce and consume through it with confluent-kafka, then
    send `stop` and check a clean shutdown (status 0, the marker) within `stop_within` s."""
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env, cwd=cwd)
    try:
        line = _read_line(proc, START_TIMEOUT)
        assert line == f"{READY_PREFIX}127.0.0.1:{port}", f"{line!r}:\n{stderr.read_text()}"
        bootstrap = f"127.0.0.1:{port}"
        topic = f"deploy-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        delivered = []
        for i in range(10):
            producer.produce(topic, value=b"record-%d" % i, on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(CLIENT_TIMEOUT) == 0 and delivered == [None] * 10, delivered
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "deploy", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got = []
        try:
            while len(got) < 10:
                msg = consumer.poll(CLIENT_TIMEOUT)
                assert msg is not None, f"only {len(got)} records came back"
                assert msg.error() is None, msg.error()
                got.append(msg.value())
        finally:
            consumer.close()
        assert sorted(got) == sorted(b"record-%d" % i for i in range(10))
        assert not (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
        proc.send_signal(stop)
        status = proc.wait(stop_within)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert status == 0, f"exit status {status} after {stop.name}:\n{stderr.read_text()[-4000:]}"
    assert (log_dir / CLEAN_SHUTDOWN_MARKER).exists(), sorted(os.listdir(log_dir))
    assert "Traceback" not in stderr.read_text(), stderr.read_text()


# -- the systemd unit ----------------------------------------------------------------------------------------

def test_the_unit_verifies_and_says_how_to_run_and_stop_the_broker(tmp_path):
    unit = parse_unit(UNIT.read_text())
    service = unit["Service"]
    assert one(service, "Type") == "exec"
    assert one(service, "Restart") == "on-failure"
    assert one(service, "KillSignal") == "SIGTERM"
    assert 30 <= seconds(one(service, "TimeoutStopSec")) <= 600
    assert int(one(service, "LimitNOFILE")) >= 100_000
    assert one(service, "User") == "logstore"
    assert shlex.split(one(service, "ExecStart"))[1:] == ["broker", "--config", "/etc/logstore/server.properties"]
    # The state directory systemd makes for the user holds the default config's log dir.
    state = Path("/var/lib") / one(service, "StateDirectory")
    assert Path(properties(CONFIG)["log.dirs"]).is_relative_to(state)
    assert one(unit["Install"], "WantedBy") == "multi-user.target"
    verify = shutil.which("systemd-analyze")
    if verify is None:
        return   # parsed above, as systemd would
    # As installed: the command the unit names is this checkout's, the rest as it is.
    installed = tmp_path / UNIT.name
    executable = shlex.split(one(service, "ExecStart"))[0]
    installed.write_text(UNIT.read_text().replace(executable, str(LOGSTORE)))
    checked = subprocess.run([verify, "verify", str(installed)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr


def test_the_units_command_serves_clients_and_its_kill_signal_stops_it_cleanly(tmp_path):
    unit = parse_unit(UNIT.read_text())
    port = free_port()
    root = tmp_path / "root"
    # A drop-in as `systemctl edit logstore` writes it: the log dir and listener moved, on this machine.
    log_dir = _moved(root, properties(CONFIG)["log.dirs"])
    dropin = tmp_path / "logstore.service.d" / "override.conf"
    dropin.parent.mkdir()
    dropin.write_text(f"[Service]\nEnvironment=LOGSTORE_LOG_DIRS={log_dir} "
                      f"LOGSTORE_LISTENERS=PLAINTEXT://127.0.0.1:{port}\n")
    service = unit["Service"] + parse_unit(dropin.read_text())["Service"]
    argv = shlex.split(one(service, "ExecStart"))
    installed = argv[argv.index("--config") + 1]
    config = _moved(root, installed)
    config.parent.mkdir(parents=True)
    shutil.copy(CONFIG, config)   # `install -D deploy/server.properties /etc/logstore/server.properties`
    argv = [str(LOGSTORE), *[str(config) if arg == installed else arg for arg in argv[1:]]]
    cwd = _moved(root, one(service, "WorkingDirectory"))
    cwd.mkdir(parents=True)   # StateDirectory=
    env = {**os.environ, **environment(service)}
    _serve_and_stop(argv, env, cwd, port, log_dir, signal.Signals[one(service, "KillSignal")],
                    seconds(one(service, "TimeoutStopSec")), tmp_path / "unit.stderr")


# -- the container file --------------------------------------------------------------------------------------

def test_the_container_file_names_files_that_exist_and_the_configs_port_and_volume():
    steps = instructions(CONTAINERFILE)
    assert steps[0] == ("FROM", "python:3.11-slim")
    copies = [shlex.split(args) for op, args in steps if op == "COPY"]
    assert copies
    for words in copies:
        assert not any(w.startswith("--from") for w in words)
        for source in words[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the checkout"
    settings = properties(CONFIG)
    exposed = [args for op, args in steps if op == "EXPOSE"]
    assert exposed == [settings["listeners"].rsplit(":", 1)[1]], exposed
    [volume] = [json.loads(args) for op, args in steps if op == "VOLUME"]
    assert any(Path(settings["log.dirs"]).is_relative_to(v) for v in volume), volume
    assert [args for op, args in steps if op == "STOPSIGNAL"] == ["SIGTERM"]
    # The broker runs as PID 1 in exec form, so the stop signal reaches it, not a shell.
    assert json.loads(dict(steps)["ENTRYPOINT"])[0] == "logstore"


def test_the_containers_command_serves_clients_and_its_stop_signal_stops_it_cleanly(tmp_path):
    steps = instructions(CONTAINERFILE)
    argv = json.loads(dict(steps)["ENTRYPOINT"]) + json.loads(dict(steps)["CMD"])
    # The image's files: what each COPY of a single file puts at its destination.
    placed = {}
    for op, args in steps:
        if op == "COPY":
            words = shlex.split(args)
            if len(words) == 2 and (ROOT / words[0]).is_file():
                placed[words[1]] = ROOT / words[0]
    config = argv[argv.index("--config") + 1]
    assert placed[config] == CONFIG
    root = tmp_path / "root"
    copied = _moved(root, config)
    copied.parent.mkdir(parents=True)
    shutil.copy(CONFIG, copied)
    env = dict(os.environ)
    for op, args in steps:
        if op == "ENV":
            name, _, value = args.partition("=")
            env[name] = value
    port = free_port()
    log_dir = _moved(root, properties(CONFIG)["log.dirs"])
    workdir = _moved(root, [args for op, args in steps if op == "WORKDIR"][-1])
    workdir.mkdir(parents=True, exist_ok=True)
    # `podman run -e ...` for this machine: the volume and the published port moved here.
    env.update(LOGSTORE_LOG_DIRS=str(log_dir), LOGSTORE_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}",
               LOGSTORE_ADVERTISED_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}")
    argv = [str(LOGSTORE), *[str(copied) if arg == config else arg for arg in argv[1:]]]
    stop = signal.Signals[[args for op, args in steps if op == "STOPSIGNAL"][0]]
    _serve_and_stop(argv, env, workdir, port, log_dir, stop, CONTAINER_GRACE, tmp_path / "container.stderr")
