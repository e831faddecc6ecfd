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
