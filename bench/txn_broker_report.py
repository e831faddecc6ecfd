"""Summarise bench/test_broker_transactions.py's pytest-benchmark JSON as Markdown tables.

    python bench/txn_broker_report.py [.benchmarks/broker_transactions.json]

txn-vs-idempotent: messages per second of the transactional producer
(committing every 100 ms) and of the idempotent one with the same settings,
for 1 and 3 partitions; their ratio from the median rounds, from the fastest
rounds, and the median of per-round ratios (each transactional round against
the idempotent round run just before it), against the issue's target (>= 0.9x).
small-txn: transactions of 10 messages per second for 1 and 16 producers,
each transaction's latency, broker and client CPU per transaction, against
issue 30's targets (>= 1,500 txn/s with 16 producers, broker CPU <= 0.4 ms a
transaction). Speed is reported, not asserted; the exit status is non-zero
only when the JSON is missing or unreadable (2) or a benchmark lacks a figure (1).
"""
from __future__ import annotations

import sys

from benchjson import finish, in_op_order, load_groups, machine_line, met, paired_ratio, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/broker_transactions.json"
OP_ORDER = ("txn-vs-idempotent", "small-txn")
# Issue 30's small-transaction targets: the rate with this many producers, and broker CPU a transaction.
RATE_TARGET_PRODUCERS, RATE_TARGET = 16, 1500.0   # txn/s
CPU_TARGET_MS = 0.4


def _rate(value: float) -> str:
    return f"{value / 1e3:,.0f} k msg/s"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _others(info: dict) -> str:
    """The other processes' CPU seconds a round: median [max]."""
    seconds = info["other_cpu_s"]
    return f"{_median(seconds):.2f} s [max {max(seconds):.2f}]"


def _ms(figures: dict) -> str:
    return f"{figures['p50']:,.1f} / {figures['p99']:,.1f} / {figures['max']:,.1f} ms"


def _ratio_row(group: str, sides: dict, summary: Summary) -> tuple:
    missing = [s for s in ("ours", "peer") if s not in sides]
    if missing:
        raise ValueError(f"group {group}: no {' or '.join(missing)} benchmark")
    ours, peer = sides["ours"]["extra_info"], sides["peer"]["extra_info"]
    ratio = ours["msg_per_s"] / peer["msg_per_s"]
    best = ours["msg_per_s_best"] / peer["msg_per_s_best"]
    paired = paired_ratio(ours)
    target = ours["target"]
    commits = ours["commits_per_round"]
    notes = (f"{_median(commits):g} commits a round ({ours['commit_interval_ms']:g} ms apart), "
             f"commit_transaction() p50/p99/max {_ms(ours['commit_ms'])}; broker CPU a round "
             f"{ours['broker_cpu_s_median']:.2f} s vs {peer['broker_cpu_s_median']:.2f} s, client "
             f"{ours['client_cpu_s_median']:.2f} s vs {peer['client_cpu_s_median']:.2f} s, "
             f"other processes {_others(ours)} vs {_others(peer)}")
    row = (group, _rate(ours["msg_per_s"]), _rate(peer["msg_per_s"]), f"{ratio:.2f}x", f"{best:.2f}x",
           "—" if paired is None else f"{paired:.2f}x", f">= {target:g}x",
           met(ratio >= target, best >= target, None if paired is None else paired >= target), notes,
           sides["ours"]["stats"]["rounds"])
    summary.row(group, ratio, verdict=row[7], target=target, ours=row[1], peer=row[2])
    return row


def _small_row(group: str, sides: dict, summary: Summary, issue30: list[tuple[str, str]]) -> tuple:
    """The row of the small-txn table; issue 30's verdicts go to `summary` and, as (line, verdict), to `issue30`."""
    bench = sides.get("ours")
    if bench is None:
        raise ValueError(f"group {group}: no benchmark")
    info = bench["extra_info"]
    rate, cpu = info["txn_per_s"], info["broker_cpu_ms_per_txn"]
    if info["producers"] == RATE_TARGET_PRODUCERS:
        verdict = met(rate >= RATE_TARGET, info["txn_per_s_best"] >= RATE_TARGET)
        summary.row(f"{group}: rate", rate, verdict=verdict, target=RATE_TARGET, unit="txn/s",
                    ours=f"{rate:,.0f} txn/s")
        issue30.append((f"{group}: {rate:,.0f} txn/s, target >= {RATE_TARGET:,.0f}", verdict))
    verdict = met(cpu <= CPU_TARGET_MS)
    summary.row(f"{group}: broker CPU a transaction", cpu, verdict=verdict, target=CPU_TARGET_MS, op="<=",
                unit="ms", ours=f"{cpu:.2f} ms")
    issue30.append((f"{group}: broker CPU {cpu:.2f} ms a transaction, target <= {CPU_TARGET_MS:g} ms", verdict))
    shape = (f"{info['txns_per_round']:,} transactions a round "
             f"({info['producers']} x {info['txns_per_round'] // info['producers']:,}), "
             f"{info['messages_per_txn']} messages each; {info['client']}; other processes' CPU a round "
             f"{_others(info)}")
    return (group, f"{info['txn_per_s']:,.0f} txn/s", f"{info['txn_per_s_best']:,.0f} txn/s",
            _ms(info["txn_ms"]), f"{info['broker_cpu_ms_per_txn']:.2f} ms", f"{info['client_cpu_ms_per_txn']:.2f} ms",
            shape, bench["stats"]["rounds"])


def main(argv: list[str]) -> int:
    """Print the report for the JSON named in argv[1] (default .benchmarks/broker_transactions.json)."""
    loaded = load_groups(argv[1] if len(argv) > 1 else DEFAULT_PATH, "txn_broker_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    ratio_rows, small_rows, issue30 = [], [], []
    summary = Summary("broker_transactions", "Transactions end to end: confluent-kafka against `logstore broker`",
                      data, argv[1] if len(argv) > 1 else DEFAULT_PATH)
    for group in in_op_order(groups, OP_ORDER):
        try:
            if group.startswith("small-txn/"):
                small_rows.append(_small_row(group, groups[group], summary, issue30))
            else:
                ratio_rows.append(_ratio_row(group, groups[group], summary))
        except (ValueError, ZeroDivisionError) as exc:
            problems.append(f"group {group}: {exc}")
        except (KeyError, TypeError) as exc:
            problems.append(f"group {group}: missing {exc}")

    print("Transactions end to end: confluent-kafka against `logstore broker` (defaults: acks=all after the "
          "group-commit fsync, coordinator records and markers fsynced) on loopback")
    print(machine_line(data))
    print()
    table(("case", "transactional", "idempotent", "txn/idem", "(min/min)", "(paired)", "target", "met", "notes",
           "rounds"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", ":---:", "---", "---:"), ratio_rows)
    print()
    table(("case", "rate", "best round", "txn latency p50/p99/max", "broker CPU/txn", "client CPU/txn", "notes",
           "rounds"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---", "---:"), small_rows)
    print()
    for line, verdict in issue30:
        print(f"issue 30: {line}: {verdict}")
    print()
    print("txn-vs-idempotent: 1,000,000 values of 100 B, produce() round-robin over the partitions, "
          "acks=all, lz4, linger.ms=10, batch.size=1 MiB (bench/test_broker.py's settings); timed to the last "
          "commit_transaction() / flush() return. Rates from each side's median round; (min/min): fastest "
          "rounds; (paired): median of per-round ratios, each transactional round against an idempotent round "
          "run just before it. met: the median against the target; (noisy): the others say otherwise.")
    print("small-txn: begin_transaction(), 10 x produce() to one partition, commit_transaction(); producers in "
          "threads of one process, all on the same partition; rate from the median round; latency = begin to "
          "commit returned, nearest rank over the timed rounds; CPU = the broker's utime+stime "
          "(/proc/<pid>/stat) and the client process's getrusage, median round / transactions. "
          "Client and broker share the machine's CPUs; 'other processes' is the machine's busy CPU time "
          "(/proc/stat) in the timed rounds less the broker's and the client's: on a shared machine, a "
          "row with much of it is noisy for reasons not its own.")
    summary.write()
    return finish([r[7] for r in ratio_rows] + [v for _, v in issue30], problems, "txn_broker_report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
