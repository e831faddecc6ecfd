"""Reading a pytest-benchmark JSON into ours/peer pairs, and the pieces every report script prints."""
from __future__ import annotations

import json
import sys
from collections import OrderedDict


def load_groups(path: str, prog: str) -> tuple[dict, dict[str, dict[str, dict]], list[str]] | int:
    """The JSON, group → {"ours": bench, "peer": bench}, and problems found; exit code 2 if unreadable."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        print(f"{prog}: {path} not found; run pytest with --benchmark-json={path} first", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"{prog}: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    benchmarks = data.get("benchmarks") or []
    if not benchmarks:
        print(f"{prog}: {path} holds no benchmarks", file=sys.stderr)
        return 2
    groups: dict[str, dict[str, dict]] = OrderedDict()
    problems = []
    for bench in benchmarks:
        group = bench.get("group") or "(no group)"
        side = (bench.get("extra_info") or {}).get("side")
        if side not in ("ours", "peer"):
            problems.append(f"{bench.get('fullname')}: extra_info.side is {side!r}")
            continue
        if side in groups.setdefault(group, {}):
            problems.append(f"group {group}: two '{side}' benchmarks")
        groups[group][side] = bench
    return data, groups, problems


def pairs(groups: dict[str, dict[str, dict]], problems: list[str]):
    """(group, ours, peer) of every group that has both sides; a group missing one goes to `problems`."""
    for group, sides in groups.items():
        if set(sides) != {"ours", "peer"}:
            problems.append(f"group {group}: sides {sorted(sides)}")
            continue
        yield group, sides["ours"], sides["peer"]


def in_op_order(groups, op_order: tuple[str, ...]) -> list[str]:
    """The group names by their operation's (before the "/") place in op_order, others last, ties in file order."""
    def rank(group: str) -> int:
        op = group.partition("/")[0]
        return op_order.index(op) if op in op_order else len(op_order)
    return sorted(groups, key=rank)


def machine_line(data: dict) -> str:
    """The CPU, CPU count, Python version, commit and date the JSON was made with, as one line."""
    machine = data.get("machine_info") or {}
    cpu = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor") or "?"
    count = (machine.get("cpu") or {}).get("count")
    commit = (data.get("commit_info") or {}).get("id") or "?"
    dirty = " (dirty)" if (data.get("commit_info") or {}).get("dirty") else ""
    return (f"{cpu}{f', {count} CPUs' if count else ''}; Python {machine.get('python_version', '?')}; "
            f"commit {commit[:12]}{dirty}; {data.get('datetime', '')}")


def met(ok: bool, *others: bool | None) -> str:
    """"yes" or "**no**" for ok, plus " (noisy)" if any other verdict given (None: not measured) says otherwise."""
    return ("yes" if ok else "**no**") + (" (noisy)" if any(o is not None and o != ok for o in others) else "")


def paired_ratio(info: dict) -> float | None:
    """Median over rounds of peer/ours time, each ours round with the peer round run just before it."""
    ours = info.get("ours_seconds") or []
    peer = info.get("paired_peer_seconds") or []
    ratios = sorted(p / o for p, o in zip(peer, ours) if o > 0)
    if not ratios or len(peer) != len(ours):
        return None
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def table(header: tuple, align: tuple, rows: list) -> None:
    """Print a Markdown table: the header, the alignment row ("---", "---:", ":---:") and one line a row."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(align) + "|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def finish(verdicts: list[str], problems: list[str], prog: str) -> int:
    """Print the targets-met tally and any problems; the exit status (1 if problems)."""
    met = sum(1 for v in verdicts if v.startswith("yes"))
    noisy = sum(1 for v in verdicts if v.endswith("(noisy)"))
    print(f"Targets met: {met}/{len(verdicts)}" + (f" ({noisy} noisy)." if noisy else "."))
    if problems:
        print(file=sys.stderr)
        for problem in problems:
            print(f"{prog}: {problem}", file=sys.stderr)
        return 1
    return 0
