"""Reading a pytest-benchmark JSON into ours/peer pairs, for both report scripts."""
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
