"""Summarise bench/test_producer_state.py's pytest-benchmark JSON as Markdown tables.

    python bench/producer_report.py [.benchmarks/producer.json]

First table, memory: bytes per producer (5 cached batches each) for ours by
`memory_bytes()` and by RSS growth of a fresh child process, the peer's RSS
growth, the peer/ours ratio (RSS against RSS), the issue's target (<= 256 B,
met only if both of ours' counts meet it). Second table, validate+update:
batches per second for ours and the peer from the median round, their ratio,
the ratio of the fastest rounds and the paired ratio (each ours round against
the peer round run just before it), the target and whether the median ratio
meets it. Speed is reported, not asserted: a missed target does not fail. The
exit status is non-zero only when the JSON is missing or unreadable (2) or a
group lacks a side or a number (1).
"""
from __future__ import annotations

import sys

from benchjson import finish, in_op_order, load_groups, machine_line, met, paired_ratio, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/producer.json"
OP_ORDER = ("memory", "validate-update", "validate-update-staged")
STAT = "median"


def _fmt_rate(value: float) -> str:
    return f"{value / 1e6:,.2f} M/s" if value >= 1e6 else f"{value / 1e3:,.0f} k/s"


def _rate(bench: dict, stat: str = STAT) -> float:
    info = bench.get("extra_info") or {}
    ops = info.get("ops")
    seconds = bench["stats"][stat]
    if info.get("unit") != "ops" or not ops or seconds <= 0:
        raise ValueError(f"{bench['fullname']}: no op count in extra_info, or {stat} time {seconds}")
    return ops / seconds


def _memory_row(group: str, sides: dict, summary: Summary) -> tuple:
    ours, peer = sides["ours"]["extra_info"], sides["peer"]["extra_info"]
    producers = ours["producers"]
    if peer.get("producers") != producers:
        raise ValueError(f"group {group}: ours has {producers} producers, peer {peer.get('producers')}")
    by_alloc = ours["memory_bytes"] / producers
    by_rss = ours["rss_growth"] / producers
    peer_rss = peer["rss_growth"] / producers
    target = ours.get("target_bytes")
    verdict = "—" if target is None else met(by_alloc <= target and by_rss <= target)
    notes = (f"fill: ours {ours.get('fill_seconds', '?')} s, peer {peer.get('fill_seconds', '?')} s "
             f"(5 x update_batch per producer)")
    summary.row(group, max(by_alloc, by_rss), verdict=verdict, target=target, op="<=", unit="B/producer",
                ours=f"{by_alloc:,.1f} B (RSS {by_rss:,.1f} B)", peer=f"{peer_rss:,.0f} B (RSS)")
    return (group, f"{producers:,}", f"{by_alloc:,.1f} B", f"{by_rss:,.1f} B", f"{peer_rss:,.0f} B",
            f"{peer_rss / by_rss:.1f}x", "info" if target is None else f"<= {target} B", verdict, notes)


def _rate_row(group: str, sides: dict, summary: Summary) -> tuple:
    ours, peer = sides["ours"], sides["peer"]
    ours_rate, peer_rate = _rate(ours), _rate(peer)
    ratio = ours_rate / peer_rate
    best = _rate(ours, "min") / _rate(peer, "min")
    info = ours["extra_info"]
    target = info.get("target")
    paired = paired_ratio(info)
    row = (group, _fmt_rate(ours_rate), _fmt_rate(peer_rate), f"{ratio:.1f}x", f"{best:.1f}x",
           "—" if paired is None else f"{paired:.1f}x",
           "info" if target is None else f">= {target:g}x",
           "—" if target is None else met(ratio >= target, best >= target,
                                           None if paired is None else paired >= target),
           f"{1e9 / ours_rate:,.0f} ns vs {1e9 / peer_rate:,.0f} ns per batch", ours["stats"]["rounds"])
    summary.row(group, ratio, verdict=row[7], target=target, ours=row[1], peer=row[2])
    return row


def main(argv: list[str]) -> int:
    """Print the report for the JSON named in argv[1] (default .benchmarks/producer.json)."""
    path = argv[1] if len(argv) > 1 else DEFAULT_PATH
    loaded = load_groups(path, "producer_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded

    memory_rows, rate_rows = [], []
    summary = Summary("producer", "Producer state: the native ProducerTable vs a Python dict + deque map", data, path)
    for group in in_op_order(groups, OP_ORDER):
        sides = groups[group]
        try:
            missing = [s for s in ("ours", "peer") if s not in sides]
            if missing:
                raise ValueError(f"group {group}: no {' or '.join(missing)} benchmark")
            if group.startswith("memory/"):
                memory_rows.append(_memory_row(group, sides, summary))
            else:
                rate_rows.append(_rate_row(group, sides, summary))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            problems.append(str(exc) if isinstance(exc, ValueError) else f"group {group}: missing {exc}")

    print("Producer-state benchmarks: native ProducerTable vs a Python dict + deque(maxlen=5) map "
          "(tests/producer/model.py)")
    print(machine_line(data))
    print()
    table(("memory", "producers", "ours (memory_bytes)", "ours (RSS)", "peer (RSS)", "peer/ours", "target",
           "met", "notes"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", ":---:", "---"), memory_rows)
    print()
    table(("case", "ours", "peer", "ours/peer", "(min/min)", "(paired)", "target", "met", "notes", "rounds"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", ":---:", "---", "---:"), rate_rows)
    print()
    print("memory: bytes per producer with 5 cached batches each, measured once per side in a fresh child "
          "process; RSS = growth of the resident set while the table is made and filled; memory_bytes = "
          "the native table's own allocations. peer/ours compares RSS with RSS.")
    print("validate-update: per batch append_batch, the append path's one call (duplicate check, Kafka's "
          "checks, update; the peer's method makes its own three calls) (client origin, "
          "idempotent, 5 records), every producer once per round in a fixed shuffled order, 5 batches "
          "cached before timing; -staged wraps each batch in begin()/commit(). Rates are batches/s.")
    print("ours/peer: from each benchmark's median round; (min/min): fastest rounds; (paired): median of "
          "per-round ratios, each ours round against a peer round run just before it. met: the median "
          "against the target; (noisy): the fastest or paired rounds say otherwise.")
    verdicts = [r[7] for r in memory_rows if r[7] != "—"] + [r[7] for r in rate_rows if r[7] != "—"]
    summary.write()
    return finish(verdicts, problems, "producer_report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
