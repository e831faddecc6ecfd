"""Summarise bench/test_codec.py's pytest-benchmark JSON as a Markdown table.

    python bench/report.py [.benchmarks/codec.json]

One row per group (operation/shape/codec): ours and the peer's throughput
from the median round, their ratio (and the ratio of the fastest rounds), the
issue's target and whether the median ratio meets it.
Speed is reported, not asserted: a missed target does not fail. The exit
status is non-zero only when the JSON is missing or unreadable (2) or a group
lacks ours or the peer, or has no throughput unit (1).
"""
from __future__ import annotations

import sys

from benchjson import finish, load_groups, machine_line, met, table
from summary import Summary

DEFAULT_PATH = ".benchmarks/codec.json"
OP_ORDER = ("encode-bulk", "encode-builder", "decode-objects", "decode-columnar", "validate-crc")
CODEC_ORDER = ("none", "lz4", "lz4-peer-hc9")
STAT = "median"


def _fmt_rate(value: float, unit: str) -> str:
    if unit == "records":
        if value >= 1e6:
            return f"{value / 1e6:,.2f} M rec/s"
        return f"{value / 1e3:,.1f} k rec/s"
    return f"{value / 1e6:,.0f} MB/s"


def _rate(bench: dict) -> tuple[float, str]:
    info = bench.get("extra_info") or {}
    unit = info.get("unit")
    amount = info.get("records") if unit == "records" else info.get("bytes")
    seconds = bench["stats"][STAT]
    if not amount or seconds <= 0:
        raise ValueError(f"{bench['fullname']}: no record/byte count in extra_info")
    return amount / seconds, unit


def _sort_key(group: str):
    op, _, rest = group.partition("/")
    shape, _, codec = rest.partition("/")
    name = codec.partition("/")[0]
    return (OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER), op,
            CODEC_ORDER.index(name) if name in CODEC_ORDER else len(CODEC_ORDER), shape, codec)


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else DEFAULT_PATH
    loaded = load_groups(path, "report")
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded

    rows = []
    summary = Summary("codec", "Codec: ours vs aiokafka 0.14.0's Cython codec (rates from median rounds)", data, path)
    for group in sorted(groups, key=_sort_key):
        sides = groups[group]
        missing = [s for s in ("ours", "peer") if s not in sides]
        if missing:
            problems.append(f"group {group}: no {' or '.join(missing)} benchmark")
            continue
        try:
            ours_rate, unit = _rate(sides["ours"])
            peer_rate, peer_unit = _rate(sides["peer"])
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if unit != peer_unit:
            problems.append(f"group {group}: ours in {unit}, peer in {peer_unit}")
            continue
        ratio = ours_rate / peer_rate
        # The ratio of the fastest rounds, beside the median's: on a busy machine a
        # large gap between the two says the row is noisy.
        best = sides["peer"]["stats"]["min"] / sides["ours"]["stats"]["min"]
        target = sides["ours"]["extra_info"].get("target")
        rows.append((group, _fmt_rate(ours_rate, unit), _fmt_rate(peer_rate, unit),
                     f"{ratio:.2f}x", f"{best:.2f}x",
                     "info" if target is None else f">= {target:g}x",
                     "—" if target is None else met(ratio >= target, best >= target)))
        summary.row(group, ratio, verdict=rows[-1][-1], target=target, ours=rows[-1][1], peer=rows[-1][2])

    print(f"Codec microbenchmarks: ours (logstore) vs aiokafka 0.14.0 Cython codec — "
          f"{STAT} of each benchmark's rounds")
    print(machine_line(data))
    print()
    table(("case", "ours", "peer (aiokafka)", "ours/peer", "(min/min)", "target", "met"),
          ("---", "---:", "---:", "---:", "---:", "---:", ":---:"), rows)
    print()
    print("Cases: 1,000 records, key 16 B; v100 = value 100 B, no headers; v1k = value 1 KiB, "
          "one header (8 B key, 16 B value). validate-crc: 16 batches of ~1 MiB, MB = 10^6 B.")
    print("lz4 rows: both sides at LZ4's fast level (ours by design; aiokafka's "
          "lz4_encode bound to level 0); lz4-peer-hc9 rows: each side as shipped (aiokafka "
          "compresses with LZ4-HC level 9), for information only.")
    print("decode rows: nocrc = neither side checks the batch CRC (aiokafka's reader never "
          "does while iterating); crc = both do (ours by default, aiokafka via validate_crc()).")
    print("met: the median ratio against the target; (noisy): the min/min ratio says "
          "otherwise, so rerun on a quiet machine before trusting that row.")
    summary.write()
    return finish([r[-1] for r in rows if r[-1] != "—"], problems, "report")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
