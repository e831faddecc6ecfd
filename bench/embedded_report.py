"""Summarise bench/test_embedded.py's pytest-benchmark JSON as Markdown tables.

    python bench/embedded_report.py [.benchmarks/embedded.json]

produce / consume: records per second of the embedded clients and of
confluent-kafka through the broker with the same settings, from the median
rounds; the target is the embedded path faster (ratio > 1). Exit status: 2 if the JSON is unreadable, 1 if a figure is
missing, else 0.
"""
from __future__ import annotations

import sys

from benchjson import finish, load_groups, machine_line, met, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/embedded.json"


def _pair(groups, group: str, problems: list[str]):
    """The (ours, peer) benchmarks of `group`, or None with the problem noted."""
    sides = groups.get(group, {})
    if set(sides) != {"ours", "peer"}:
        problems.append(f"{group}: needs an ours and a peer benchmark")
        return None
    return sides["ours"], sides["peer"]


def main(argv: list[str]) -> int:
    """Print the tables; the exit status."""
    loaded = load_groups(argv[1] if len(argv) > 1 else DEFAULT_PATH, "embedded_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    print(f"Machine: {machine_line(data)}\n")
    verdicts, rows = [], []
    summary = Summary("embedded", "Embedded clients vs confluent-kafka through the broker", data,
                      argv[1] if len(argv) > 1 else DEFAULT_PATH)
    for op in ("produce", "consume"):
        pair = _pair(groups, op, problems)
        if pair is None:
            continue
        ours, peer = pair
        messages = ours["extra_info"]["messages"]
        rate, peer_rate = messages / ours["stats"]["median"], messages / peer["stats"]["median"]
        verdict = met(rate > peer_rate)
        verdicts.append(verdict)
        rows.append((op, f"{rate:,.0f}", f"{peer_rate:,.0f}", f"{rate / peer_rate:.2f}x", verdict))
        summary.row(op, rate / peer_rate, verdict=verdict, target=1.0, op=">", ours=f"{rate:,.0f} rec/s",
                    peer=f"{peer_rate:,.0f} rec/s")
    table(("case", "embedded rec/s", "broker + confluent-kafka rec/s", "ratio", "faster"),
          ("---", "---:", "---:", "---:", "---"), rows)
    print()
    summary.write()
    return finish(verdicts, problems, "embedded_report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
