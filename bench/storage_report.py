"""Summarise bench/test_storage.py's pytest-benchmark JSON as Markdown tables.

    python bench/storage_report.py [.benchmarks/storage.json]

First table, one row per ours-vs-peer group: both throughputs from the median
round, their ratio, the ratio of the fastest rounds and the paired ratio
(each ours round against a peer round run just before it, when the JSON has
them), the issue's target and whether the median ratio meets it. Second table, the cases with an
absolute target and no peer: offset-index lookups per second (higher is
better) and reopen-after-SIGKILL seconds (lower is better).
Speed is reported, not asserted: a missed target does not fail. The exit
status is non-zero only when the JSON is missing or unreadable (2) or a group
lacks a side, a count, or a unit (1).
"""
from __future__ import annotations

import sys

from benchjson import finish, in_op_order, load_groups, machine_line, met, paired_ratio, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/storage.json"
OP_ORDER = ("append-1mib", "append-group-commit", "read-sequential", "index-lookup", "reopen", "partitions")
STAT = "median"


def _fmt_rate(value: float, unit: str) -> str:
    if unit == "ops":
        return f"{value / 1e6:,.2f} M/s" if value >= 1e6 else f"{value / 1e3:,.1f} k/s"
    return f"{value / 1e6:,.0f} MB/s"


def _amount(bench: dict) -> tuple[float, str]:
    info = bench.get("extra_info") or {}
    unit = info.get("unit")
    amount = info.get("ops") if unit == "ops" else info.get("bytes")
    if unit not in ("ops", "bytes") or not amount:
        raise ValueError(f"{bench['fullname']}: no byte or op count in extra_info")
    return amount, unit


def _rate(bench: dict, stat: str = STAT) -> tuple[float, str]:
    amount, unit = _amount(bench)
    seconds = bench["stats"][stat]
    if seconds <= 0:
        raise ValueError(f"{bench['fullname']}: {stat} time is {seconds}")
    return amount / seconds, unit


def _ratio_row(group: str, sides: dict, summary: Summary) -> tuple:
    ours, peer = sides["ours"], sides["peer"]
    ours_rate, unit = _rate(ours)
    peer_rate, peer_unit = _rate(peer)
    if unit != peer_unit:
        raise ValueError(f"group {group}: ours in {unit}, peer in {peer_unit}")
    ratio = ours_rate / peer_rate
    best = peer["stats"]["min"] / ours["stats"]["min"]
    info = ours["extra_info"]
    target = info.get("target")
    paired = paired_ratio(info)
    notes = []
    if "fsyncs_per_round" in info:
        low, high = info.get("fsyncs_per_round_range") or (None, None)
        spread = f" ({low}-{high})" if low is not None else ""
        notes.append(f"fsyncs/round: ours {info['fsyncs_per_round']}{spread}, "
                     f"peer {peer['extra_info'].get('fsyncs_per_round', '?')}")
    row = (group, _fmt_rate(ours_rate, unit), _fmt_rate(peer_rate, unit), f"{ratio:.2f}x", f"{best:.2f}x",
           "—" if paired is None else f"{paired:.2f}x",
           "info" if target is None else f">= {target:g}x",
           "—" if target is None else met(ratio >= target, best >= target,
                                           None if paired is None else paired >= target),
           "; ".join(notes), ours["stats"]["rounds"])
    summary.row(group, ratio, verdict=row[7], target=target, ours=row[1], peer=row[2])
    return row


def _absolute_row(group: str, bench: dict, summary: Summary) -> tuple:
    info = bench["extra_info"]
    stats = bench["stats"]
    notes = []
    if info.get("op") == "reopen":
        median, fastest = stats[STAT], stats["min"]
        target = info.get("target_seconds")
        scanned = info.get("bytes") or 0
        log_bytes = info.get("log_bytes")
        segments = info.get("scanned_segments") or []
        notes.append(f"scanned {scanned / 2**20:,.0f} MiB of {log_bytes / 2**20:,.0f} MiB "
                     f"({scanned / median / 1e9:,.1f} GB/s), segment scans {segments}")
        if info.get("rebuilt_indexes"):
            notes.append(f"indexes rebuilt first for {[b for b, _ in info['rebuilt_indexes']]}")
        value, best = f"{median:.3f} s", f"{fastest:.3f} s"
        verdict = "—" if target is None else met(median < target, fastest < target)
        target_text = "info" if target is None else f"< {target:g} s"
        summary.row(group, median, verdict=verdict, target=target, op="<", unit="s", ours=value)
    elif info.get("op") == "partitions":
        median, fastest = stats[STAT], stats["min"]
        target = info["target_seconds"]
        notes.append(f"{median / info['ops'] * 1e3:.2f} ms a partition")
        value, best = f"{median:.3f} s", f"{fastest:.3f} s"
        verdict = met(median <= target, fastest <= target)
        target_text = f"<= {target:g} s"
        summary.row(group, median, verdict=verdict, target=target, op="<=", unit="s", ours=value)
    else:
        rate, unit = _rate(bench)
        fastest, _ = _rate(bench, "min")
        target = info.get("target_ops_per_s")
        value, best = _fmt_rate(rate, unit), _fmt_rate(fastest, unit)
        verdict = "—" if target is None else met(rate >= target, fastest >= target)
        target_text = "info" if target is None else f">= {_fmt_rate(target, unit)}"
        summary.row(group, rate, verdict=verdict, target=target, unit=f"{unit}/s", ours=value)
        if info.get("index_entries"):
            notes.append(f"{info['index_entries']:,} entries over {info['segment_bytes'] / 2**30:.2f} GiB "
                         f"(built in {info.get('build_seconds', '?')} s)")
    return (group, value, best, target_text, verdict, "; ".join(notes), stats["rounds"])


def main(argv: list[str]) -> int:
    """Print the report for the JSON named in argv[1] (default .benchmarks/storage.json)."""
    path = argv[1] if len(argv) > 1 else DEFAULT_PATH
    loaded = load_groups(path, "storage_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded

    ratio_rows, absolute_rows = [], []
    summary = Summary("storage", "Storage: logstore Log vs raw os file I/O of the same bytes", data, path)
    for group in in_op_order(groups, OP_ORDER):
        sides = groups[group]
        try:
            if "peer" in sides:
                if "ours" not in sides:
                    raise ValueError(f"group {group}: no ours benchmark")
                ratio_rows.append(_ratio_row(group, sides, summary))
            else:
                absolute_rows.append(_absolute_row(group, sides["ours"], summary))
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(str(exc) if isinstance(exc, ValueError) else f"group {group}: missing {exc}")

    print(f"Storage benchmarks: logstore Log vs raw os file I/O of the same bytes — "
          f"{STAT} of each benchmark's rounds")
    print(machine_line(data))
    print()
    table(("case", "ours", "peer (os)", "ours/peer", "(min/min)", "(paired)", "target", "met", "notes", "rounds"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", ":---:", "---", "---:"), ratio_rows)
    print()
    table(("case (ours only)", STAT, "best round", "target", "met", "notes", "rounds"),
          ("---", "---:", "---:", "---:", ":---:", "---", "---:"), absolute_rows)
    print()
    print("append-1mib: 64 x 1 MiB batches (1,000 records, 16 B keys, ~1 KiB random values, uncompressed) "
          "into a fresh log (peer: fresh file) per round, no fsync; bytes = append copies the input; "
          "primed = the log already holds two small batches, so its index maps are faulted in before timing.")
    print("append-group-commit: 4 threads x 64 x 256 KiB appends; pipelined = append + Log.durable() "
          "future, <= 5 outstanding per thread; blocking = append(durable=True), so >= 64 fsyncs a round "
          "by construction; peer: one thread writes the same 64 MiB, then one fsync. "
          "read-sequential: 256 MiB log read in 1 MiB ranges "
          "(4 whole batches each) into one buffer, page cache warm. MB = 10^6 B.")
    print("index-lookup: random offsets on a 1 GiB segment's offset index; translate_offset adds the "
          "scan of the .log from the indexed position. reopen: a store killed with SIGKILL "
          "(1 GiB in 4 x 256 MiB segments, recovery point at 992 MiB), page cache warm; tail = from "
          "the recovery point, full = recovery-point checkpoint removed.")
    print("ours/peer: from each benchmark's median round; (min/min): from the fastest rounds; (paired): "
          "median of per-round ratios, each ours round against a peer round run just before it.")
    print("met: the median against the target; (noisy): the best or paired rounds say otherwise, so "
          "rerun on a quiet machine before trusting that row.")
    verdicts = [r[7] for r in ratio_rows if r[7] != "—"] + [r[4] for r in absolute_rows if r[4] != "—"]
    summary.write()
    return finish(verdicts, problems, "storage_report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
