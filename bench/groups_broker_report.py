"""Summarise bench/test_broker_groups.py's pytest-benchmark JSON as Markdown tables.

    python bench/groups_broker_report.py [.benchmarks/broker_groups.json]

rebalance: seconds from the first subscribe() (join) or from close() (leave)
until every member holds its share, against the client's own lower bound (one
consumer alone getting every partition), as a time ratio from the median
rounds and as the median of per-round ratios (each round against the
lower-bound round run just before it). offset-commit: synchronous commits
per second from 1 and 20 consumers against one-record acks=all produces
from as many producers, their ratio, latencies and CPU per request.
coordinator-load: load() of 10,000 groups x 100 offsets in-process, a
broker's start on that directory, and the peers' reads of the same segment
bytes, with the top of load()'s profile. Issue 7 set no targets; issue 30's
are judged below the tables (broker CPU <= 80 µs an OffsetCommit, commits at
>= 1.0x the produce rate with 20 clients, load() <= 10x a read+CRC pass). The
exit status is non-zero only when the JSON is missing or unreadable (2) or a
benchmark lacks a figure or is missing (1).
"""
from __future__ import annotations

import sys

from benchjson import load_groups, machine_line, met, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/broker_groups.json"
LOAD_KINDS = ("load", "broker-start", "read-crc", "decode-aiokafka", "decode-kafka-python")
LOAD_NAMES = {"load": "GroupCoordinator.load() in-process", "broker-start": "`logstore broker` exec → listening",
              "read-crc": "peer: read + CRC32C each batch", "decode-aiokafka": "peer: aiokafka Cython decode",
              "decode-kafka-python": "peer: kafka-python decode"}
PROFILE_ROWS = 12
# Issue 30's targets: broker CPU an OffsetCommit, the commit/produce rate ratio with this many clients, and
# load() against a read+CRC pass of the same segments.
COMMIT_CPU_TARGET_US = 80.0
COMMIT_RATIO_CLIENTS, COMMIT_RATIO_TARGET = 20, 1.0
LOAD_TARGET = 10.0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _seconds(value: float) -> str:
    return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def _spread(bench: dict) -> str:
    """The median round, and the fastest and slowest."""
    stats = bench["stats"]
    return f"{_seconds(stats['median'])} [{_seconds(stats['min'])}–{_seconds(stats['max'])}]"


def _others(info: dict) -> str:
    seconds = info["other_cpu_s"]
    return f"{_median(seconds):.2f} s [max {max(seconds):.2f}]"


def _ms(figures: dict) -> str:
    return f"{figures['p50']:,.2f} / {figures['p99']:,.2f} / {figures['max']:,.1f} ms"


def _sides(group: str, sides: dict) -> tuple[dict, dict]:
    missing = [s for s in ("ours", "peer") if s not in sides]
    if missing:
        raise ValueError(f"no {' or '.join(missing)} benchmark")
    return sides["ours"], sides["peer"]


def _rebalance_row(group: str, sides: dict, summary: Summary) -> tuple:
    ours, peer = _sides(group, sides)
    info, peer_info = ours["extra_info"], peer["extra_info"]
    paired = sorted(o / p for o, p in zip(info["seconds"], info["paired_peer_seconds"]) if p > 0)
    ratio = ours["stats"]["median"] / peer["stats"]["median"]
    notes = (f"{info['measures']}; {info['assignor']}, {info['partitions']} partitions, final shares "
             f"{min(info['share_sizes'])}–{max(info['share_sizes'])}; broker CPU a round "
             f"{_median(info['broker_cpu_s']) * 1e3:,.0f} ms; other processes {_others(info)}")
    summary.row(group, ratio, op="<=", ours=_spread(ours), peer=_spread(peer), note="time ratio, information")
    return (group, f"{info['heartbeat_ms']:,} ms", _spread(ours), _spread(peer), f"{ratio:.1f}x",
            f"{_median(paired):.1f}x" if paired else "—",
            f"{_median(info['assignments']):g} (peer {_median(peer_info['assignments']):g})", notes,
            ours["stats"]["rounds"])


def _commit_row(group: str, sides: dict, summary: Summary, issue30: list[tuple[str, str]]) -> tuple:
    """The row of the offset-commit table; issue 30's verdicts go to `summary` and, as (line, verdict), to
    `issue30`."""
    ours, peer = _sides(group, sides)
    info, peer_info = ours["extra_info"], peer["extra_info"]
    paired = sorted(p / o for o, p in zip(info["seconds"], info["paired_peer_seconds"]) if o > 0)
    ratio, cpu = info["per_s"] / peer_info["per_s"], info["broker_cpu_us_per_request"]
    commits, produces = f"{info['per_s']:,.0f}/s", f"{peer_info['per_s']:,.0f}/s"
    target = COMMIT_RATIO_TARGET if info.get("clients") == COMMIT_RATIO_CLIENTS else None
    verdict = met(ratio >= COMMIT_RATIO_TARGET) if target is not None else None
    summary.row(f"{group}: commit/produce", ratio, verdict=verdict, target=target, ours=commits, peer=produces)
    if verdict is not None:
        issue30.append((f"{group}: commits at {ratio:.2f}x the produce rate, target >= {target:g}x", verdict))
    verdict = met(cpu <= COMMIT_CPU_TARGET_US)
    summary.row(f"{group}: broker CPU an OffsetCommit", cpu, verdict=verdict, target=COMMIT_CPU_TARGET_US, op="<=",
                unit="µs", ours=f"{cpu:,.0f} µs", peer=f"{peer_info['broker_cpu_us_per_request']:,.0f} µs (Produce)")
    issue30.append((f"{group}: broker CPU {cpu:,.0f} µs an OffsetCommit, target <= {COMMIT_CPU_TARGET_US:g} µs",
                    verdict))
    notes = (f"{info['requests_per_round']:,} requests a round, {info['client_threads']}; latency p50/p99/max "
             f"commit {_ms(info['latency_ms'])}, produce {_ms(peer_info['latency_ms'])}; other processes "
             f"{_others(info)} vs {_others(peer_info)}")
    return (group, f"{info['per_s']:,.0f}/s (best {info['per_s_best']:,.0f})",
            f"{peer_info['per_s']:,.0f}/s (best {peer_info['per_s_best']:,.0f})",
            f"{info['per_s'] / peer_info['per_s']:.2f}x", f"{_median(paired):.2f}x" if paired else "—",
            f"{info['broker_cpu_us_per_request']:,.0f} / {peer_info['broker_cpu_us_per_request']:,.0f} µs",
            f"{info['client_cpu_us_per_request']:,.0f} / {peer_info['client_cpu_us_per_request']:,.0f} µs",
            notes, ours["stats"]["rounds"])


def _load_rows(load: dict[tuple[str, str], dict], problems: list[str], summary: Summary,
               issue30: list[tuple[str, str]]) -> tuple[list, list]:
    """Rows of the load table, and the profile of each state's load(); issue 30's verdicts to `summary` and
    `issue30`."""
    rows, profiles = [], []
    for state in sorted({state for state, _ in load}):
        floor = load.get((state, "read-crc"))
        for kind in LOAD_KINDS:
            bench = load.get((state, kind))
            if bench is None:
                problems.append(f"coordinator-load/{kind}-{state}: no benchmark (failed or not run)")
                rows.append((state, LOAD_NAMES[kind], "—", "—", "missing", 0))
                continue
            info, median = bench["extra_info"], bench["stats"]["median"]
            ratio = f"{median / floor['stats']['median']:,.0f}x" if floor is not None else "—"
            if floor is not None and kind != "read-crc":
                times = median / floor["stats"]["median"]
                verdict = met(times <= LOAD_TARGET) if kind == "load" else None
                summary.row(f"coordinator-load/{kind}-{state} × read+CRC", times, verdict=verdict,
                            target=LOAD_TARGET if kind == "load" else None, op="<=", ours=_spread(bench),
                            peer=_spread(floor))
                if verdict is not None:
                    issue30.append((f"coordinator-load/{kind}-{state}: {times:,.1f}x a read+CRC pass, target "
                                    f"<= {LOAD_TARGET:g}x", verdict))
            notes = []
            if kind == "load":
                notes.append(f"{info['offsets']:,} offsets, {info['segment_bytes'] / 1e6:,.1f} MB in "
                             f"{info['segment_files']} segment files, built in {info['build_seconds']:,.1f} s")
                profiles.append((state, info))
            elif kind == "broker-start":
                empty = info["paired_empty_start_seconds"]
                logged = info["broker_logged_load_seconds"]
                serving = info.get("serving_seconds")
                notes.append(f"paired start on an empty dir {_seconds(_median(empty))}; the broker's own log: "
                             f"load() {_seconds(_median(logged)) if logged else '—'}"
                             + (f"; every group listed {_seconds(_median(serving))} after exec" if serving else "")
                             + f"; RSS after start {_median(info['rss_mib']):,.0f} MiB")
            else:
                notes.append(f"{info['batches']:,} batches, {info['records']:,} records")
            rows.append((state, LOAD_NAMES[kind], _spread(bench), ratio, "; ".join(notes), bench["stats"]["rounds"]))
    return rows, profiles


def _print_profile(state: str, info: dict) -> None:
    print(f"load() under cProfile, {state} groups: {_seconds(info['profiled_seconds'])} profiled "
          f"(cProfile's overhead included); top {PROFILE_ROWS} by own time:")
    print()
    table(("function", "calls", "own", "cumulative"), ("---", "---:", "---:", "---:"),
          [(f"`{r['function']}`", f"{r['calls']:,}", f"{r['tottime_s']:.2f} s", f"{r['cumtime_s']:.2f} s")
           for r in info["profile_tottime"][:PROFILE_ROWS]])
    print()


def main(argv: list[str]) -> int:
    """Print the report for the JSON named in argv[1] (default .benchmarks/broker_groups.json)."""
    loaded = load_groups(argv[1] if len(argv) > 1 else DEFAULT_PATH, "groups_broker_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    rebalance_rows, commit_rows, issue30 = [], [], []
    summary = Summary("broker_groups", "Consumer groups end to end: confluent-kafka against `logstore broker`", data,
                      argv[1] if len(argv) > 1 else DEFAULT_PATH)
    load: dict[tuple[str, str], dict] = {}
    for group, sides in groups.items():
        op = group.partition("/")[0]
        try:
            if op == "rebalance":
                rebalance_rows.append(_rebalance_row(group, sides, summary))
            elif op == "offset-commit":
                commit_rows.append(_commit_row(group, sides, summary, issue30))
            elif op == "coordinator-load":
                for bench in sides.values():
                    load[(bench["extra_info"]["state"], bench["extra_info"]["kind"])] = bench
            else:
                problems.append(f"group {group}: not a case of this suite")
        except (ValueError, ZeroDivisionError) as exc:
            problems.append(f"group {group}: {exc}")
        except (KeyError, TypeError) as exc:
            problems.append(f"group {group}: missing {exc}")
    load_rows, profiles = _load_rows(load, problems, summary, issue30) if load else ([], [])

    print("Consumer groups end to end: confluent-kafka against `logstore broker` "
          "(group.initial.rebalance.delay.ms=0, offset commits after the group-commit fsync) on loopback")
    print(machine_line(data))
    print()
    table(("case", "heartbeat", "ours", "peer: 1 consumer joins", "ours/peer", "(paired)", "assignments a round",
           "notes", "rounds"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", "---", "---:"), rebalance_rows)
    print()
    table(("case", "commits", "produces (peer)", "commit/produce", "(paired)", "broker CPU/request",
           "client CPU/request", "notes", "rounds"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", "---", "---:"), commit_rows)
    print()
    table(("groups", "what", "median [min–max]", "× read+CRC", "notes", "rounds"),
          ("---", "---", "---:", "---:", "---", "---:"), load_rows)
    print()
    for line, verdict in issue30:
        print(f"issue 30: {line}: {verdict}")
    print()
    for state, info in profiles:
        _print_profile(state, info)
    print("rebalance: join = 10 consumers of a fresh group, from the first subscribe() to all 10 holding disjoint "
          "shares of the 100 partitions; leave = close() of 1 of 10 until the other 9 hold all 100. peer = the "
          "client's lower bound: 1 consumer of a fresh group, subscribe() to holding all 100 (a time, so "
          "ours/peer > 1 is slower). (paired): median of per-round ratios, each round against a peer round "
          "run just before it. Assignments a round: on_assign calls; 10 (join) or 9 (leave) is one generation. "
          "Members of a stable group learn of a rebalance from a heartbeat response, so leave is bounded by "
          "heartbeat.interval.ms.")
    print("offset-commit: Consumer.commit(1 partition, asynchronous=False) per request, the members of one group "
          "(one __consumer_offsets partition) vs Producer.produce(1 x 100 B) + flush() per request to one "
          "partition, acks=all, linger.ms=0; both one fsynced append per request, sharing group-commit fsyncs. "
          "Rates from the median round; (paired): median of per-round ratios against a produce round run just "
          "before. CPU: the broker's utime+stime and the client process's, median round / requests.")
    print("coordinator-load: 10,000 groups x 100 committed offsets written by the coordinator itself; stable = "
          "each group's member still in it, empty = it left. × read+CRC: time against reading the same segment "
          "files and checking every batch's CRC32C (page-cached). The broker start includes the interpreter and "
          "imports (see the paired empty start).")
    summary.write()
    if problems:
        print(file=sys.stderr)
        for problem in problems:
            print(f"groups_broker_report: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
