"""Summarise bench/test_broker.py's pytest-benchmark JSON as a Markdown table.

    python bench/broker_report.py [.benchmarks/broker.json]

One row per figure the issue names: produce and consume messages per second
(median round, and the best round, against the target), the produce case's
broker CPU against the client's, the consume case's broker CPU
(information), and for the 200-connection, 1,000-partition case the partition
errors (target: none) and the p50/p99/max Produce latency (information).
CPU seconds per GB are per 10^9 bytes of uncompressed message values.
Speed is reported, not asserted; the exit status is non-zero only when the
JSON is missing or unreadable (2) or a benchmark lacks a figure (1).
"""
from __future__ import annotations

import sys

from benchjson import finish, in_op_order, load_groups, machine_line, met, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/broker.json"
OP_ORDER = ("produce", "consume", "wide")


def _rate(value: float) -> str:
    return f"{value / 1e6:,.2f} M msg/s" if value >= 1e6 else f"{value / 1e3:,.0f} k msg/s"


def _cpu(info: dict, side: str) -> str:
    return f"{info[f'{side}_cpu_s_median']:.2f} s ({info[f'{side}_cpu_s_per_gb']:.1f} s/GB)"


def _config(info: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in (info.get("config") or {}).items())


def _throughput_rows(group: str, bench: dict, summary: Summary) -> list[tuple]:
    info, rounds = bench["extra_info"], bench["stats"]["rounds"]
    rate, best, target = info["msg_per_s"], info["msg_per_s_best"], info["target_msg_per_s"]
    wall = _seconds(info["round_seconds"])
    rows = [(f"{group}: throughput", f"{_rate(rate)} (best round {_rate(best)})", f">= {_rate(target)}",
             met(rate >= target, best >= target), f"{_config(info)}; rounds took {wall} s", rounds)]
    summary.row(rows[0][0], rate, verdict=rows[0][3], target=target, unit="msg/s", ours=_rate(rate))
    broker, client = info["broker_cpu_s_median"], info["client_cpu_s_median"]
    cpu = f"broker {_cpu(info, 'broker')}, client {_cpu(info, 'client')}"
    per_round = (f"CPU s per round: broker {_seconds(info['broker_cpu_s'])}, "
                 f"client {_seconds(info['client_cpu_s'])}")
    if info.get("target_broker_below_client"):
        rows.append((f"{group}: CPU", cpu, "broker < client", met(broker < client), per_round, rounds))
    else:
        rows.append((f"{group}: CPU", cpu, "info", "—", per_round, rounds))
    summary.row(f"{group}: broker CPU / client CPU", broker / client, verdict=rows[-1][3],
                target=1.0 if info.get("target_broker_below_client") else None, op="<",
                ours=f"broker {_cpu(info, 'broker')}", peer=f"client {_cpu(info, 'client')}")
    return rows


def _seconds(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def _ms(figures: dict) -> str:
    return f"p50 {figures['p50']:,.0f} / p99 {figures['p99']:,.0f} / max {figures['max']:,.0f} ms"


def _wide_rows(group: str, bench: dict, summary: Summary) -> list[tuple]:
    info, rounds = bench["extra_info"], bench["stats"]["rounds"]
    errors = info["errors"]
    shape = (f"{info['connections']} connections, each Metadata then one Produce (acks=-1) to "
             f"{info['partitions_per_request']} of {info['partitions']} partitions, "
             f"{info['records_per_batch']} records a batch")
    broker_cpu = sorted(info["broker_cpu_s"])[len(info["broker_cpu_s"]) // 2]
    summary.row(f"{group}: errors", errors, verdict=met(errors == 0), target=0, op="<=", unit="errors",
                ours=f"{errors} in {info['partition_responses']:,} partition responses")
    for what in ("produce", "metadata"):
        summary.row(f"{group}: {what.capitalize()} latency p99", info[f"{what}_ms"]["p99"], op="<=", unit="ms",
                    ours=_ms(info[f"{what}_ms"]))
    return [
        (f"{group}: errors", f"{errors} in {info['partition_responses']:,} partition responses", "0 errors",
         met(errors == 0), shape, rounds),
        (f"{group}: Produce latency", _ms(info["produce_ms"]), "info", "—",
         f"{info['produce_ms']['count']} requests; warmup round {_ms(info['warmup_produce_ms'])}", rounds),
        (f"{group}: Metadata latency", _ms(info["metadata_ms"]), "info", "—",
         f"{info['metadata_ms']['count']} requests, all 200 at once; broker CPU {broker_cpu:.1f} s a round; "
         f"CreateTopics {info['create_topic_seconds']:.1f} s", rounds),
    ]


def main(argv: list[str]) -> int:
    """Print the report for the JSON named in argv[1] (default .benchmarks/broker.json)."""
    loaded = load_groups(argv[1] if len(argv) > 1 else DEFAULT_PATH, "broker_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    rows = []
    summary = Summary("broker", "Broker end to end: real clients against `logstore broker` on loopback", data,
                      argv[1] if len(argv) > 1 else DEFAULT_PATH)
    for group in in_op_order(groups, OP_ORDER):
        bench = groups[group].get("ours")
        try:
            if bench is None:
                raise ValueError(f"group {group}: no benchmark")
            op = bench["extra_info"]["op"]
            rows += _wide_rows(group, bench, summary) if op == "wide" else _throughput_rows(group, bench, summary)
        except ValueError as exc:
            problems.append(str(exc))
        except (KeyError, TypeError) as exc:
            problems.append(f"group {group}: missing {exc}")

    print("Broker end to end: real clients against `logstore broker` (defaults: acks=all after the "
          "group-commit fsync) on loopback")
    print(machine_line(data))
    print()
    table(("case", "result", "target", "met", "notes", "rounds"),
          ("---", "---:", "---:", ":---:", "---", "---:"), rows)
    print()
    print("produce: confluent-kafka, 1,000,000 messages of 100 B (no key), idempotent, acks=all, lz4, one "
          "partition, a fresh topic per round; timed from the first produce() to the end of flush(). "
          "consume: confluent-kafka assign() from the beginning to the 1,000,000th message, "
          "consume(num_messages=...) batches.")
    print("CPU: the broker's utime+stime from /proc/<pid>/stat and the client's getrusage(RUSAGE_SELF) "
          "(librdkafka's threads included) around each timed round, median round; "
          "GB = 10^9 B of uncompressed message values. Client and broker share the machine's CPUs.")
    print("wide: asyncio connections speaking Kafka through kio; every Produce leaves after all 200 "
          "Metadata answers are in; latency = frame written to response read, nearest rank over the "
          "timed rounds; the warmup round pays each partition's first append.")
    summary.write()
    return finish([r[3] for r in rows if r[3] != "—"], problems, "broker_report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
