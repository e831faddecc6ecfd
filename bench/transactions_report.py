"""Summarise bench/test_transactions.py's pytest-benchmark JSON as a Markdown table.

    python bench/transactions_report.py [.benchmarks/transactions.json]

read-committed: log bytes per second read through `iter_records` at each
isolation level (median round), their ratio, the ratio of the fastest rounds,
and the issue's target (read_committed >= 0.8x read_uncommitted).
reopen-producers: seconds to open the SIGKILLed store of 100,000 producers,
median and fastest round, with what was replayed; the target (< 1 s) is the
snapshot case's. Speed is reported, not asserted; the exit status is non-zero
only when the JSON is missing or unreadable (2) or a group lacks a number (1).
"""
from __future__ import annotations

import sys

from benchjson import finish, load_groups, met, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/transactions.json"


def _row(group: str, sides: dict, summary: Summary) -> tuple:
    ours = sides["ours"]
    info, stats = ours["extra_info"], ours["stats"]
    if info["op"] == "read-committed":
        peer = sides["peer"]
        ratio = peer["stats"]["median"] / stats["median"]
        best = peer["stats"]["min"] / stats["min"]
        target = info["target"]
        rate = info["bytes"] / stats["median"] / 1e6
        notes = (f"{rate:,.0f} MB/s vs {info['bytes'] / peer['stats']['median'] / 1e6:,.0f} MB/s; "
                 f"{info['records']:,} of {peer['extra_info']['records']:,} records kept")
        verdict = met(ratio >= target, best >= target)
        summary.row(group, ratio, verdict=verdict, target=target, ours=f"{rate:,.0f} MB/s",
                    peer=f"{info['bytes'] / peer['stats']['median'] / 1e6:,.0f} MB/s")
        return (group, f"{ratio:.2f}x", f"{best:.2f}x", f">= {target:g}x", verdict, notes, stats["rounds"])
    target = info.get("target_seconds")
    notes = (f"snapshot at {info.get('snapshot_offset')}, {info.get('replayed_batches', 0):,} producer batches "
             f"replayed, {info.get('bytes', 0) / 2**20:,.0f} MiB of {info.get('log_bytes', 0) / 2**20:,.0f} MiB "
             f"scanned, {info.get('producers', 0):,} producers")
    verdict = "—" if target is None else met(stats["median"] < target, stats["min"] < target)
    summary.row(group, stats["median"], verdict=verdict, target=target, op="<", unit="s",
                ours=f"{stats['median']:.3f} s")
    return (group, f"{stats['median']:.3f} s", f"{stats['min']:.3f} s",
            "info" if target is None else f"< {target:g} s", verdict, notes, stats["rounds"])


def main(argv: list[str]) -> int:
    """Print the report for the JSON named in argv[1]."""
    loaded = load_groups(argv[1] if len(argv) > 1 else DEFAULT_PATH, "transactions_report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    rows = []
    summary = Summary("transactions", "Transactions in the log: read_committed and reopening producers", data,
                      argv[1] if len(argv) > 1 else DEFAULT_PATH)
    for group, sides in groups.items():
        try:
            rows.append(_row(group, sides, summary))
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            problems.append(f"group {group}: missing {exc}")
    commit = (data.get("commit_info") or {}).get("id") or "?"
    print(f"Transactions in the log; commit {commit[:12]}; {data.get('datetime', '')}")
    print()
    table(("case", "ours", "best round", "target", "met", "notes", "rounds"),
          ("---", "---:", "---:", "---:", ":---:", "---", "---:"), rows)
    print()
    print("read-committed: ours = iter_records(isolation='read_committed'), the peer = read_uncommitted of the "
          "same 64 MiB log, 10% of transactions aborted; ours/peer as a rate ratio.")
    print("reopen-producers: logstore.open after SIGKILL of 1 GiB from 100,000 producers; snapshot = the roll "
          "snapshot plus a replay of the last segment, full = every .snapshot removed.")
    summary.write()
    return finish([r[4] for r in rows if r[4] != "—"], problems, "transactions_report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
