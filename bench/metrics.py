"""What the metrics endpoint costs the broker: produce (and consume) with `metrics.port` on against off.

    .venv/bin/python bench/metrics.py --data-root /dev/shm                     # 1,000,000 records, 3 rounds
    .venv/bin/python bench/metrics.py --data-root /dev/shm --count 300000 --rounds 5 --modes produce,consume

Issue 27's target: produce throughput with metrics on at ≥ 0.97× the throughput with them off. The pair
compares two variants of this checkout's build, driven by rdkafka_performance exactly as bench/c_client.py
drives it (a fresh broker per (case, round), variants interleaved and their order reversed every other
round, the medians and paired ratios of its table, broker CPU from /proc; read its docstring):

- `metrics-off`: no `metrics.port` (nothing counted: the per-request hook is one `is None` test);
- `metrics-on`: `metrics.port` set, every request counted and timed, every Produce's records and bytes
  added per topic, and a scraper thread in this process fetching `/metrics` every `--scrape-every` s
  (default 15, Prometheus's default interval) for as long as the broker runs, so the scrapes' own cost, on
  the broker's metrics thread, is in the figures. A scrape formats every partition's series in Python
  (prometheus_client): about 10 ms per 100 partitions here, so `--scrape-every 1` on a short run shows
  what an eager scraper costs rather than what counting does.

A target line under the table compares the paired ratio (the median of the per-round ratios) with the
target. The brokers' CPU per 1M messages is the column that shows what the counting itself costs.
"""
from __future__ import annotations

import argparse
import threading
import urllib.request

from c_client import (
    ROOT,
    BrokerSpec,
    RunningBroker,
    Variant,
    add_case_arguments,
    case_arguments,
    free_port,
    report,
    run,
)
from security import target_lines

TARGET = 0.97          # issue 27: metrics-on throughput / metrics-off
SCRAPE_EVERY = 15.0    # s between two scrapes (Prometheus's default scrape_interval)
SCRAPE_TIMEOUT = 10.0  # s: one scrape


class Scraper:
    """A `setup` step: scrape the broker's /metrics every `every` s from a daemon thread until a scrape
    fails (the broker stopped); counts what it fetched."""

    def __init__(self, port: int, every: float = SCRAPE_EVERY):
        self.port = port
        self.every = every
        self.scrapes = 0
        self.bytes = 0

    def __call__(self, broker: RunningBroker) -> None:
        threading.Thread(target=self._run, daemon=True, name="bench-scraper").start()

    def _run(self) -> None:
        stopped = threading.Event()
        while not stopped.wait(self.every):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=SCRAPE_TIMEOUT) as got:
                    self.bytes += len(got.read())
            except OSError:
                return   # the broker stopped: the next one has its own scraper
            self.scrapes += 1


def metrics_pair(scrape_every: float = SCRAPE_EVERY) -> tuple[list[Variant], Scraper]:
    """`metrics-off` and `metrics-on` (one port for every metrics-on broker: they run one at a time)."""
    port = free_port()
    scraper = Scraper(port, scrape_every)
    return [Variant(), Variant(overrides=(f"metrics.port={port}",), setup=scraper)], scraper


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run the rounds, print the table and the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_arguments(parser)
    parser.add_argument("--scrape-every", type=float, default=SCRAPE_EVERY,
                        help=f"seconds between two scrapes of a metrics-on broker (default {SCRAPE_EVERY:g})")
    parser.set_defaults(modes="produce")
    args = parser.parse_args(argv)
    modes, cases = case_arguments(parser, args)
    variants, scraper = metrics_pair(args.scrape_every)
    specs = [BrokerSpec(label, "logstore", ROOT, variant)
             for label, variant in zip(("metrics-off", "metrics-on"), variants)]
    results = run(specs, cases, modes, args.rounds, args.jemalloc, (), args.data_root)
    table = report(results, specs, cases, modes, args.rounds)
    print(f"\n== metrics: metrics-off vs metrics-on\n{table}\n{target_lines(results, specs, cases, modes, TARGET)}\n"
          f"scrapes of metrics-on brokers: {scraper.scrapes} ({scraper.bytes / max(scraper.scrapes, 1):,.0f} "
          "bytes each)", flush=True)


if __name__ == "__main__":
    main()
