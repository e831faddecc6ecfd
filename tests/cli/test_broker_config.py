"""`logstore broker` configuration, run as a real process: Kafka's stock files, Java .properties syntax,
the environment, --override, --print-config, --log-level, and the errors a person reads.

Every failure is checked as its user sees it: the exit status (2 usage or configuration, 1 the
machine: a port, a log dir), one or two lines on stderr naming the setting, the value, what is
allowed and where it came from, and no traceback.
"""
from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clients.broker_process import free_port
from logstore.broker.config_sources import environment_name, read_properties
from logstore.dir_lock import DirLock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/kafka-config"
KAFKA_4 = FIXTURES / "server-4.x.properties"
KAFKA_3_ZOOKEEPER = FIXTURES / "server-3.x-zookeeper.properties"
KAFKA_3_KRAFT = FIXTURES / "server-3.x-kraft.properties"
READY = re.compile(r"logstore broker listening on (.+):(\d+)")
LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
TIMEOUT = 30.0  # s: a bound on any one wait (a start, a stop, a client call)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without KAFKA_/LOGSTORE_ variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "LOGSTORE_"))}
    return {**env, **extra}


def broker_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "logstore", "broker", *map(str, args)]


def run_broker(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A broker run expected to end by itself (a refusal, or --print-config)."""
    return subprocess.run(broker_cmd(*args), capture_output=True, text=True, timeout=TIMEOUT,
                          env=env if env is not None else clean_env())


def said(stderr: str) -> list[str]:
    """The lines of stderr that are not log records (a record's first line has a timestamp, its others a tab)."""
    return [line for line in stderr.splitlines() if line and not LOG_RECORD.match(line) and not line.startswith("\t")]


def warnings(stderr: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in stderr.splitlines() if " WARNING " in line and LOG_RECORD.match(line)]


def properties(tmp_path: Path, text: str, name: str = "server.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


class Running:
    """A broker process started in the test, with its stderr in a file."""

    def __init__(self, tmp_path: Path, *args, env: dict[str, str]):
        self.stderr_path = tmp_path / f"broker.stderr.{time.monotonic_ns()}"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(broker_cmd(*args), stdout=subprocess.PIPE, stderr=err, env=env)
        line = self._ready_line()
        match = READY.fullmatch(line)
        if match is None:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"broker said {line!r} (status {self.proc.returncode}):\n{self.stderr}")
        self.host, self.port = match[1], int(match[2])

    def _ready_line(self) -> str:
        deadline = time.monotonic() + TIMEOUT
        data = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in data and time.monotonic() < deadline:
                if sel.select(deadline - time.monotonic()):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    data += chunk
        return data.decode().splitlines()[0] if data else ""

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> str:
        """SIGTERM: the broker must exit 0; its stderr."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
        assert status == 0, f"broker exited with {status}:\n{self.stderr}"
        return self.stderr


@pytest.fixture
def started(tmp_path):
    """`started(*args, env=...) -> Running`; every one still running is killed at teardown."""
    brokers: list[Running] = []

    def start(*args, env: dict[str, str]) -> Running:
        brokers.append(Running(tmp_path, *args, env=env))
        return brokers[-1]
    yield start
    for b in brokers:
        if b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait()
            b.proc.stdout.close()


def round_trip_confluent(bootstrap: str, topic: str) -> None:
    """Produce three records with confluent-kafka and read them back."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(3):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(TIMEOUT) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if len(got) == 3:
                    break
                continue
            got.append(msg.value())
    finally:
        c.close()
    assert got == [b"v0", b"v1", b"v2"]


def round_trip_kafka_python(bootstrap: str, topic: str) -> None:
    """Produce three records with kafka-python and read them back."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    futures = [p.send(topic, value=b"v%d" % i, partition=0) for i in range(3)]
    p.flush(timeout=TIMEOUT)
    assert [f.get(timeout=TIMEOUT).offset for f in futures] == [0, 1, 2]
    p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    got, deadline = [], time.monotonic() + TIMEOUT
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=500).values():
                got += [r.value for r in records]
    finally:
        c.close()
    assert got == [b"v0", b"v1", b"v2"]


# -- Kafka's stock files start a broker that real clients use ------------------------------------------

def test_kafka_4_stock_server_properties_starts_in_combined_mode_with_the_container_environment(tmp_path, started):
    port, controller_port = free_port(), free_port()
    # What a container user sets over the stock file: the ports and the data directory.
    env = clean_env(KAFKA_LISTENERS=f"PLAINTEXT://:{port},CONTROLLER://:{controller_port}",
                    KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}",
                    KAFKA_LOG_DIRS=str(tmp_path / "kraft-combined-logs"))
    broker = started(KAFKA_4, env=env)
    assert broker.port == port and broker.host in ("0.0.0.0", "[::]")  # an empty host: every interface
    round_trip_confluent(f"localhost:{port}", "stock-4x")
    with pytest.raises(OSError):  # the controller listener is not opened
        socket.create_connection(("127.0.0.1", controller_port), timeout=2).close()
    stderr = broker.stop()
    assert "Traceback" not in stderr
    ignored = [w for w in warnings(stderr) if w.startswith("ignoring ")]
    assert len(ignored) == 1, stderr  # one line lists them all
    for name in ("process.roles", "controller.quorum.bootstrap.servers", "inter.broker.listener.name",
                 "num.network.threads", "num.io.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
                 "offsets.topic.replication.factor", "transaction.state.log.min.isr",
                 "share.coordinator.state.topic.replication.factor"):
        assert name in ignored[0]
    assert f"not listening on CONTROLLER://:{controller_port} from listeners: a controller listener" \
        in "\n".join(warnings(stderr))
    assert "BrokerConfig values:\n\tadvertised.listeners = PLAINTEXT://localhost:" in stderr
    assert f"\tlog.dirs = {tmp_path / 'kraft-combined-logs'}\n" in stderr
    assert (tmp_path / "kraft-combined-logs" / "stock-4x-0").is_dir()


def test_kafka_3_zookeeper_server_properties_starts_with_broker_id_as_node_id(tmp_path, started):
    port = free_port()
    broker = started(KAFKA_3_ZOOKEEPER, "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     "--override", f"log.dirs={tmp_path / 'kafka-logs'}", env=clean_env())
    round_trip_kafka_python(f"127.0.0.1:{port}", "stock-3x")
    stderr = broker.stop()
    assert "Traceback" not in stderr
    [ignored] = [w for w in warnings(stderr) if w.startswith("ignoring ")]
    assert "zookeeper.connect" in ignored and "zookeeper.connection.timeout.ms" in ignored
    assert "\tnode.id = 0\n" in stderr  # broker.id=0
    assert "\tgroup.initial.rebalance.delay.ms = 0\n" in stderr


def test_kafka_3_kraft_server_properties_is_accepted():
    result = run_broker(KAFKA_3_KRAFT, "--print-config", "--override", "log.dirs=/nonexistent/kraft")
    assert result.returncode == 0, result.stderr
    [ignored] = [w for w in warnings(result.stderr) if w.startswith("ignoring ")]
    assert "controller.quorum.voters" in ignored and "process.roles" in ignored
    assert "listeners = PLAINTEXT://:9092,CONTROLLER://:9093" in result.stdout.splitlines()


# -- sources: Java syntax, the environment, precedence ---------------------------------------------

def test_properties_are_read_with_javas_syntax(tmp_path):
    path = properties(tmp_path, "\n".join([
        "# comment", "! also a comment",
        "num.partitions : 7",                                   # ':' separator
        "auto.create.topics.enable false",                      # whitespace separator
        "log.segment.bytes = 1048\\",                           # continuation
        "    576",
        "advertised.listeners = PLAINTEXT\\://localhost\\:19092",  # escaped ':'
        "listeners=PLAINTEXT://127.0.0.1:19092",
        "group.consumer.migration.policy = \\u0064isabled   ",  # \\u escape, trailing blanks
        "log.dirs=/tmp/kraft-combined-logs", ""]))
    result = run_broker("--config", path, "--print-config")
    assert result.returncode == 0, result.stderr
    values = dict(line.split(" = ", 1) for line in result.stdout.splitlines())
    assert values["num.partitions"] == "7"
    assert values["auto.create.topics.enable"] == "false"
    assert values["log.segment.bytes"] == "1048576"
    assert values["advertised.listeners"] == "PLAINTEXT://localhost:19092"
    assert values["group.consumer.migration.policy"] == "disabled"
    assert values["log.dirs"] == "/tmp/kraft-combined-logs"


def test_file_lines_are_counted_across_continuations():
    entries = read_properties("# c\na = 1\\\n  2\n\nb\tx\nc=\n", "f.properties")
    assert [(e.name, e.value, e.origin) for e in entries] == [
        ("a", "12", "f.properties line 2"), ("b", "x", "f.properties line 5"), ("c", "", "f.properties line 6")]


@pytest.mark.parametrize("variable, name", [
    ("KAFKA_LOG_DIRS", "log.dirs"),
    ("KAFKA_NUM_PARTITIONS", "num.partitions"),
    ("LOGSTORE_LOG_RETENTION_MS", "log.retention.ms"),
    ("KAFKA_A__B", "a_b"),                 # __ is _
    ("KAFKA_A___B_C", "a-b.c"),            # ___ is -
    ("KAFKA_HEAP_OPTS", None),             # Kafka's image excludes its own variables
    ("KAFKA_LOG4J_LOGGERS", None),
    ("LOGSTORE_SOAK_SEED", None),          # logstore's test switch
    ("KAFKA_", None),
    ("PATH", None),
])
def test_environment_names_follow_kafkas_container_image(variable, name):
    assert environment_name(variable) == name


def test_precedence_is_file_then_environment_then_override(tmp_path):
    path = properties(tmp_path, "num.partitions=2\nlog.dirs=/from/file\nnode.id=7\n")
    env = clean_env(KAFKA_NUM_PARTITIONS="3", LOGSTORE_NUM_PARTITIONS="4", KAFKA_LOG_DIRS="/from/env",
                    KAFKA_BROKER_ID="8")
    values = {}
    for args in ((), ("--override", "num.partitions=5")):
        result = run_broker("--config", path, "--print-config", *args, env=env)
        assert result.returncode == 0, result.stderr
        values[args] = dict(line.split(" = ", 1) for line in result.stdout.splitlines())
    assert values[()]["num.partitions"] == "4"          # LOGSTORE_ over KAFKA_ over the file
    assert values[()]["log.dirs"] == "/from/env"
    assert values[()]["node.id"] == "8"                 # broker.id is node.id
    assert values[("--override", "num.partitions=5")]["num.partitions"] == "5"
    without_env = run_broker("--config", path, "--print-config")
    assert "num.partitions = 2" in without_env.stdout.splitlines()


def test_print_config_prints_sorted_values_and_does_not_open_the_log_dir(tmp_path):
    log_dir = tmp_path / "never-made"
    result = run_broker("--print-config", "--override", f"log.dirs={log_dir}",
                        "--override", "log.retention.hours=1")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines == sorted(lines) and all(" = " in line for line in lines)
    assert f"log.dirs = {log_dir}" in lines
    assert "log.retention.hours = 1" in lines and "log.retention.ms = 3600000" in lines
    assert "listeners = PLAINTEXT://127.0.0.1:9092" in lines
    assert not log_dir.exists()


def test_a_stray_kafka_variable_is_a_warning_with_the_closest_name():
    env = clean_env(KAFKA_LOG_DIRZ="/x", KAFKA_FOO__BAR="1", KAFKA_HOME="/opt/kafka")
    result = run_broker("--print-config", env=env)
    assert result.returncode == 0, result.stderr
    [line] = warnings(result.stderr)
    assert line.startswith("ignoring environment variables that name no broker setting: ")
    assert "KAFKA_LOG_DIRZ (log.dirz; did you mean log.dirs?)" in line and "KAFKA_FOO__BAR (foo_bar)" in line
    assert "KAFKA_HOME" not in line


# -- --log-level -------------------------------------------------------------------------------------

def test_log_levels_per_logger_over_a_root_level_from_kafkas_variable(tmp_path, started):
    port = free_port()
    env = clean_env(KAFKA_LOG4J_ROOT_LOGLEVEL="WARN")
    broker = started("--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override",
                     f"log.dirs={tmp_path / 'data'}", "--log-level", "logstore.broker.config=INFO", env=env)
    stderr = broker.stop()
    records = [line for line in stderr.splitlines() if LOG_RECORD.match(line)]
    assert any(" INFO logstore.broker.config: BrokerConfig values:" in r for r in records), stderr
    assert not [r for r in records if " INFO " in r and "logstore.broker.config" not in r], stderr


def test_log_level_debug_shows_the_traceback_of_a_refusal():
    result = run_broker("--log-level", "DEBUG", "--override", "num.partitions=abc")
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert said(result.stderr)[-1].startswith("logstore broker: Invalid value abc for configuration num.partitions")


# -- errors a person reads ---------------------------------------------------------------------------

@dataclass
class Case:
    """What one error case runs: arguments, extra environment, a command prefix, and what it holds meanwhile."""

    args: list
    env: dict = field(default_factory=dict)
    prefix: list = field(default_factory=list)
    held: object = None
    scratch: Path | None = None
    """A directory outside pytest's to remove afterwards."""

    def release(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        if isinstance(self.held, socket.socket):
            self.held.close()
        elif self.held is not None:
            self.held.release()


def _listen_and_log_dir(path) -> list:
    return ["--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", "--override", f"log.dirs={path}"]


def _holding_a_port(tmp_path) -> Case:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    return Case(["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path}/d"],
                held=holder)


def _holding_the_lock(tmp_path) -> Case:
    (tmp_path / "d").mkdir()
    return Case(_listen_and_log_dir(tmp_path / "d"), held=DirLock(str(tmp_path / "d")))


def _file_in_the_way(tmp_path) -> Case:
    (tmp_path / "afile").write_text("")
    return Case(_listen_and_log_dir(tmp_path / "afile" / "logs"))


def _unwritable_dir(tmp_path) -> Case:
    """A read-only log dir; root writes anywhere, so as root the broker runs as nobody (setpriv)."""
    prefix, scratch = [], None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root and no setpriv (util-linux) to drop privileges")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        tmp_path = scratch = Path(tempfile.mkdtemp(prefix="logstore-ro-"))  # pytest's tmp is 0700 to nobody
        tmp_path.chmod(0o755)
    (tmp_path / "ro").mkdir(mode=0o555)
    return Case(_listen_and_log_dir(tmp_path / "ro"), prefix=prefix, scratch=scratch)


def _file(text):
    return lambda tmp_path: Case(["--config", properties(tmp_path, text), "--override", f"log.dirs={tmp_path}/d"])


def _args(*args, **env):
    return lambda tmp_path: Case([*args], env={k: str(v) for k, v in env.items()})


# case → (setup, exit status, what stderr must say)
ERRORS = {
    "bad-int-override": (_args("--override", "num.partitions=abc"), 2,
                         ["Invalid value abc for configuration num.partitions: Not a number of type INT "
                          "(from --override)"]),
    "below-range-in-file": (_file("# broker\nnum.partitions = -3\n"), 2,
                            ["Invalid value -3 for configuration num.partitions: Value must be at least 1",
                             "server.properties line 2)"]),
    "bad-bool-in-file": (_file("auto.create.topics.enable=yes\n"), 2,
                         ["Invalid value yes for configuration auto.create.topics.enable: Expected value to be "
                          "either true or false (from", "line 1)"]),
    "log-setting-from-env": (_args(KAFKA_LOG_SEGMENT_BYTES="1"), 2,
                             ["Invalid value 1 for configuration log.segment.bytes: Value must be at least 14 "
                              "(from environment KAFKA_LOG_SEGMENT_BYTES)"]),
    "bad-choice": (_args("--override", "log.cleanup.policy=forever"), 2,
                   ["Invalid value forever for configuration log.cleanup.policy: String must be one of: compact, "
                    "delete"]),
    "unknown-with-suggestion": (_file("log.retention.hour=5\n"), 2,
                                ["Unknown configuration 'log.retention.hour' (from", "line 1); did you mean "
                                 "'log.retention.hours'?"]),
    "unknown-override": (_args("--override", "no.such.thing=1"), 2,
                         ["Unknown configuration 'no.such.thing' (from --override)"]),
    "override-not-key-value": (_args("--override", "num.partitions"), 2,
                               ["--override 'num.partitions' is not KEY=VALUE"]),
    "missing-config-file": (_args("--config", "/nonexistent/server.properties"), 2,
                            ["cannot read config file /nonexistent/server.properties: No such file or directory"]),
    "bad-unicode-escape": (_file("a=1\nnode.id=\\u12G4\n"), 2, ["line 2: Invalid \\u escape sequence"]),
    "tls-listener-without-keys": (_args("--override", "listeners=SSL://:9093"), 2,
                                  ["listener SSL needs TLS key material: ssl.keystore.location"]),
    "sasl-listener-with-gssapi": (_args("--override", "listeners=SASL_PLAINTEXT://127.0.0.1:0"), 2,
                                  ["GSSAPI"]),
    "unknown-security-protocol": (_args("--override", "listeners=SECRET://127.0.0.1:0",
                                        "--override", "listener.security.protocol.map=SECRET:KERBEROS"), 2,
                                  ["KERBEROS is not a security protocol"]),
    "port-out-of-range": (_args("--override", "listeners=PLAINTEXT://127.0.0.1:70000"), 2,
                          ["port 70000 of PLAINTEXT://127.0.0.1:70000 is not in 0-65535"]),
    "only-a-controller-listener": (_args("--override", "listeners=CONTROLLER://:9093",
                                         "--override", "controller.listener.names=CONTROLLER"), 2,
                                   ["every entry is a controller listener"]),
    "advertised-without-the-listener": (_args("--override", "advertised.listeners=EXTERNAL://h:1"), 2,
                                        ["advertised.listeners: it has no PLAINTEXT entry"]),
    "bad-log-level": (_args("--log-level", "VERBOSE"), 2,
                      ["--log-level VERBOSE: not LEVEL or LOGGER=LEVEL; the levels are TRACE, DEBUG"]),
    "config-twice": (_args(KAFKA_4, "--config", KAFKA_4), 2, ["give the config file once"]),
    "port-in-use": (_holding_a_port, 1, ["cannot listen on 127.0.0.1:", "(listeners=PLAINTEXT://127.0.0.1:",
                                         "from --override): the port is in use"]),
    "log-dir-locked": (_holding_the_lock, 1, ["/d is in use by process", "(it holds", "/d/.lock)"]),
    "log-dir-through-a-file": (_file_in_the_way, 1, ["cannot use log dir", "afile/logs (log.dirs=",
                                                     "from --override): ", "/afile is not a directory"]),
    "log-dir-unwritable": (_unwritable_dir, 1, ["cannot use log dir", "/ro (log.dirs=", "from --override): "
                                                "Permission denied", "/ro/.lock"]),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_are_a_line_or_two_with_the_exit_status(tmp_path, case):
    setup, status, expected = ERRORS[case]
    made = setup(tmp_path)
    try:
        result = subprocess.run([*made.prefix, *broker_cmd(*made.args)], capture_output=True, text=True,
                                timeout=TIMEOUT, env=clean_env(**made.env))
    finally:
        made.release()
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr
    lines = said(result.stderr)
    assert 1 <= len(lines) <= 2 and lines[0].startswith("logstore broker: "), result.stderr
    for part in expected:
        assert part in "\n".join(lines), result.stderr
    assert result.stdout == ""
