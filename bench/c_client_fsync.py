"""What fsync costs a produce spread over many partitions: one broker build with and without
`logstore.acks.all.fsync`, driven by a C client (issue 30).

    make bench-tools
    .venv/bin/python bench/c_client_fsync.py                       # 1,000 partitions, 5 rounds of 1 M
    .venv/bin/python bench/c_client_fsync.py --partitions 100,1000 --rounds 5 --count 1000000

rdkafka_performance -P (bench/c_client.py's runner and throughput settings, acks=all, 100 B) produces to
a topic of `--partitions` partitions with no partition named: librdkafka's partitioner then places each
keyless record at random, and with sticky.partitioning.linger.ms=0 it picks again for every record, so
every partition takes records in every linger window, as round-robin would (librdkafka has no round-robin
partitioner; rdkafka_performance's `-p -1` is the same unassigned partition). Each acknowledged batch then
waits for its partition to be durable: with fsync on, whatever the store's group commit does for a window
of ~1,000 dirty partitions is what is measured.

The two settings run interleaved on fresh brokers (fsync, no-fsync; then the other way round), each on a
fresh data dir under `--data-root`, which must be a real disk: on tmpfs fsync costs nothing. The table shows
the medians over rounds of msgs/s and of broker CPU per message (utime + stime of every broker thread, from
/proc), the ratio of the medians and the median of the per-round ratios. Issue 30's target: with fsync on,
>= 0.8x the rate with fsync off.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from c_client import (
    PRODUCED,
    PRODUCER_TUNING,
    ROOT,
    BrokerSpec,
    RunningBroker,
    Variant,
    create_topic,
    run_tool,
    settings,
    start_broker,
    tool_env,
)
from c_client_curves import CREATE_TIMEOUT, int_list, mount_of
from summary import Summary

TARGET = 0.8   # msgs/s with fsync on / with it off
NO_FSYNC = "logstore.acks.all.fsync=false"


def measure(broker: RunningBroker, partitions: int, count: int, size: int, env: dict[str, str]) -> tuple[float, float]:
    """Produce `count` records over a fresh topic of `partitions`: (msgs/s, broker CPU s)."""
    create_topic(broker.bootstrap, "spread", partitions, timeout=CREATE_TIMEOUT)
    tuning = {**PRODUCER_TUNING, "sticky.partitioning.linger.ms": "0"}
    before = broker.cpu()
    text, _ = run_tool(["-P", "-t", "spread", "-b", broker.bootstrap, "-s", str(size), "-c", str(count), "-a", "-1",
                        *settings(tuning)], env)
    used = broker.cpu() - before
    found = PRODUCED.findall(text)
    if not found or int(found[-1][2]) != count or int(found[-1][4]):
        raise RuntimeError(f"{broker.spec.label}: not all {count} delivered:\n{text[-3000:]}")
    return float(found[-1][6]), used


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run the rounds, print the table, write the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logstore-src", default=str(ROOT), metavar="DIR",
                        help="the logstore checkout whose .venv runs the broker (default this one)")
    parser.add_argument("--partitions", type=int_list, default=[1000], help="partition counts (default 1000)")
    # A run of 500,000 lasted about a second, so the client's start (metadata for 1,000 partitions, each
    # partition's first append) weighed on it: rounds of one quiet run read 353k to 734k msgs/s.
    parser.add_argument("--count", type=int, default=1_000_000, help="records a run (default 1,000,000)")
    parser.add_argument("--size", type=int, default=100, help="record value size in bytes (default 100)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per setting (default 5)")
    parser.add_argument("--data-root", metavar="DIR", default=tempfile.gettempdir(),
                        help="where the data dirs go: a real disk (default the temp dir)")
    parser.add_argument("--jemalloc", action=argparse.BooleanOptionalAction, default=True,
                        help="preload jemalloc into the client (default: yes)")
    args = parser.parse_args(argv)
    mount = mount_of(args.data_root)
    if mount.startswith("tmpfs") or mount.startswith("ramfs"):
        parser.error(f"{args.data_root} is on {mount}: fsync costs nothing there")
    src = Path(args.logstore_src).resolve()
    specs = [BrokerSpec("fsync", "logstore", src),
             BrokerSpec("no-fsync", "logstore", src, Variant(overrides=(NO_FSYNC,)))]
    env = tool_env(args.jemalloc)
    samples: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for partitions in args.partitions:
        for r in range(args.rounds):
            for spec in specs if r % 2 == 0 else specs[::-1]:
                broker = start_broker(spec, (), args.data_root)
                try:
                    rate, cpu = measure(broker, partitions, args.count, args.size, env)
                finally:
                    broker.stop()
                samples.setdefault((partitions, spec.label), []).append((rate, cpu))
                print(f"# {partitions:>6,} partitions round {r} {spec.label:<8} {rate:>10,.0f} msgs/s "
                      f"broker {cpu * 1e6 / args.count:5.2f} µs/msg", file=sys.stderr, flush=True)
    summary = Summary("c_client_fsync", "Produce over many partitions with a C client: fsync on vs off")
    head = (f"{'partitions':>10} {'setting':<8} {'msgs/s':>10} {'min..max msgs/s':>21} {'brk µs/msg':>10} "
            f"{'ratio':>6} {'paired':>6}")
    lines = [f"{args.count:,} records of {args.size} B, acks=all, random partition per record, median of "
             f"{args.rounds} rounds; data on {mount}; ratio = msgs/s / no-fsync's", head, "-" * len(head)]
    for partitions in args.partitions:
        on, off = samples[(partitions, "fsync")], samples[(partitions, "no-fsync")]
        rate_off = statistics.median(s[0] for s in off)
        paired = [a[0] / b[0] for a, b in zip(on, off)]
        for label, runs in (("fsync", on), ("no-fsync", off)):
            rate = statistics.median(s[0] for s in runs)
            spread = f"{min(s[0] for s in runs):,.0f}..{max(s[0] for s in runs):,.0f}"
            cpu = statistics.median(s[1] for s in runs) * 1e6 / args.count
            lines.append(f"{partitions:>10,} {label:<8} {rate:>10,.0f} {spread:>21} {cpu:>10.2f} "
                         f"{rate / rate_off:>6.2f} {statistics.median(paired) if label == 'fsync' else 1.0:>6.2f}")
        rate_on = statistics.median(s[0] for s in on)
        ratio = rate_on / rate_off
        noisy = any((x >= TARGET) != (ratio >= TARGET) for x in paired)
        cpu_on, cpu_off = (statistics.median(s[1] for s in runs) * 1e6 / args.count for runs in (on, off))
        summary.row(f"{partitions:,} partitions, acks=all: msgs/s with fsync vs without", ratio,
                    verdict=("yes" if ratio >= TARGET else "**no**") + (" (noisy)" if noisy else ""), target=TARGET,
                    ours=f"{rate_on:,.0f} msgs/s", peer=f"{rate_off:,.0f} msgs/s",
                    note="ratio per round: " + ", ".join(f"{x:.2f}" for x in paired))
        summary.row(f"{partitions:,} partitions, acks=all: broker CPU/msg with fsync vs without", cpu_on / cpu_off,
                    ours=f"{cpu_on:.2f} µs/msg", peer=f"{cpu_off:.2f} µs/msg")
    print("\n".join(lines))
    print(f"summary: {summary.write()}")


if __name__ == "__main__":
    main()
