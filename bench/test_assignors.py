"""Partition assignors (logstore.assignors): sticky and uniform against range_assign on the same group.

    make bench   (or: pytest -q bench/test_assignors.py --benchmark-only --benchmark-json=.benchmarks/assignors.json
                  --benchmark-columns=min,median,iqr,ops,rounds --benchmark-group-by=group;
                  python bench/test_assignors.py .benchmarks/assignors.json)

The group (the issue's size): 10 topics of 100 partitions, 100 members m000..m099.
Shapes: "equal", every member subscribed to every topic (the measured case);
"unequal" (information), member i subscribed to topics i, i+1 and i+3 (mod 10),
30 members a topic, which takes the assignors' general path.
Operations, one rebalance each:
1. scratch: nobody owns anything, the group's first assignment.
2. leave: every member owns what `scratch` gave it (generation 1), and m042 has left.
   extra_info: `moved` (partitions whose member changed, the leaver's included),
   `leaver_share` (what m042 had) and `survivors_moved` (partitions a remaining
   member lost). With equal subscriptions only the leaver's partitions may
   move: moved == leaver_share (10) and survivors_moved == 0, checked before timing.
Each group is ours (sticky or uniform) and the peer, range_assign on the same
input (range ignores what members own; it is the floor a rebalance costs).
Each ours round is paired with a range round run just before it
(`paired_peer_seconds`), so the ratio does not see load drift between groups.
Target: a rebalance in well under 100 ms (median) in pure Python. Speed is
reported, not asserted; the results are checked once, untimed.
"""
from __future__ import annotations

import sys
import time

import pytest

from logstore.assignors import MemberSubscription, range_assign, sticky_assign, uniform_assign

TOPICS = [f"topic-{i}" for i in range(10)]
PARTITIONS = 100
MEMBERS = [f"m{i:03d}" for i in range(100)]
LEAVER = "m042"
ROUNDS = 50
TARGET_SECONDS = 0.100
ASSIGNORS = {"sticky": sticky_assign, "uniform": uniform_assign}
COUNTS = {t: PARTITIONS for t in TOPICS}


def _subscriptions(shape: str) -> dict[str, frozenset[str]]:
    if shape == "equal":
        return {m: frozenset(TOPICS) for m in MEMBERS}
    return {m: frozenset(TOPICS[(i + k) % len(TOPICS)] for k in (0, 1, 3)) for i, m in enumerate(MEMBERS)}


def _inputs(shape: str, assignor: str, op: str):
    """(members, first): the group the rebalance sees, and the scratch assignment it starts from."""
    subs = _subscriptions(shape)
    first = ASSIGNORS[assignor]({m: MemberSubscription(t) for m, t in subs.items()}, COUNTS)
    if op == "scratch":
        return {m: MemberSubscription(t) for m, t in subs.items()}, first
    return {m: MemberSubscription(t, first[m], 1) for m, t in subs.items() if m != LEAVER}, first


def _check(members, result) -> None:
    given_out = [tp for parts in result.values() for tp in parts]
    assert len(given_out) == len(set(given_out)) == sum(COUNTS.values()), "every partition once"
    for member, parts in result.items():
        assert all(t in members[member].topics for t, _ in parts), member


def _movement(first, after) -> dict:
    before = {tp: m for m, parts in first.items() for tp in parts}
    now = {tp: m for m, parts in after.items() for tp in parts}
    return {"moved": sum(1 for tp, m in before.items() if now.get(tp) != m),
            "leaver_share": len(first[LEAVER]),
            "survivors_moved": sum(len(first[m] - after[m]) for m in after)}


@pytest.mark.parametrize("side", ("ours", "peer"))
@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
@pytest.mark.parametrize("shape", ("equal", "unequal"))
@pytest.mark.parametrize("op", ("scratch", "leave"))
def test_rebalance(benchmark, op, shape, assignor, side):
    """One rebalance of the 1,000-partition group: ours, or range on the same input."""
    members, first = _inputs(shape, assignor, op)
    ours = ASSIGNORS[assignor]
    run = (lambda: ours(members, COUNTS)) if side == "ours" else (lambda: range_assign(members, COUNTS))
    result = run()
    _check(members, result)
    benchmark.group = f"{op}/{shape}/{assignor}"
    benchmark.extra_info.update({"op": op, "shape": shape, "assignor": assignor, "side": side,
                                 "api": f"{ours.__name__ if side == 'ours' else 'range_assign'}(members, counts)",
                                 "partitions": sum(COUNTS.values()), "members": len(members),
                                 "target_seconds": TARGET_SECONDS if shape == "equal" and side == "ours" else None})
    if op == "leave":
        movement = _movement(first, result)
        benchmark.extra_info.update(movement)
        if side == "ours" and shape == "equal":
            assert movement["moved"] == movement["leaver_share"] and movement["survivors_moved"] == 0, movement
        print(f"\n{benchmark.group} {side}: {movement}")
    if side == "peer":
        benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=2)
        return
    peer_seconds: list[float] = []

    def paired_peer():
        start = time.perf_counter()
        range_assign(members, COUNTS)
        peer_seconds.append(time.perf_counter() - start)
        return (), {}

    benchmark.pedantic(run, setup=paired_peer, rounds=ROUNDS, warmup_rounds=2)
    benchmark.extra_info["ours_seconds"] = list(benchmark.stats.stats.data)
    benchmark.extra_info["paired_peer_seconds"] = peer_seconds[-len(benchmark.stats.stats.data):]


def main(argv: list[str]) -> int:
    """Print the JSON's groups as a Markdown table: medians, the paired ratio, moves and the target."""
    from benchjson import finish, load_groups, machine_line, met, paired_ratio, pairs, table
    from summary import Summary

    prog = "bench/test_assignors.py"
    path = argv[1] if len(argv) > 1 else ".benchmarks/assignors.json"
    loaded = load_groups(path, prog)
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    rows, verdicts = [], []
    summary = Summary("assignors", "Assignors: ours vs the range assignor", data, path)
    for group, ours, peer in pairs(groups, problems):
        info = ours["extra_info"]
        paired = paired_ratio(info)
        target = info.get("target_seconds")
        verdict = met(ours["stats"]["median"] < target) if target else "(information)"
        if target:
            verdicts.append(verdict)
            summary.row(f"{group} median", ours["stats"]["median"], verdict=verdict, target=target, op="<", unit="s",
                        ours=f"{ours['stats']['median'] * 1e3:.2f} ms", peer=f"{peer['stats']['median'] * 1e3:.2f} ms")
        else:
            summary.row(f"{group} ours/range time", ours["stats"]["median"] / peer["stats"]["median"], op="<=",
                        ours=f"{ours['stats']['median'] * 1e3:.2f} ms", peer=f"{peer['stats']['median'] * 1e3:.2f} ms")
        moves = (f"{info['moved']} ({info['leaver_share']} the leaver's, {info['survivors_moved']} others')"
                 if "moved" in info else "")
        rows.append((group, f"{ours['stats']['median'] * 1e3:.2f} ms", f"{peer['stats']['median'] * 1e3:.2f} ms",
                     f"{ours['stats']['median'] / peer['stats']['median']:.1f}x",
                     f"{1 / paired:.1f}x" if paired else "-", moves, verdict))
    print(machine_line(data))
    print()
    table(("group", "ours median", "range median", "ours/range", "paired", "partitions moved", "< 100 ms"),
          ("---", "---:", "---:", "---:", "---:", "---", ":---:"), rows)
    summary.write()
    return finish(verdicts, problems, prog)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
