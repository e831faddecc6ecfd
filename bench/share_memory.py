"""What a share-partition's in-flight state costs: bytes per in-flight record, and acquire+accept records/s.

    .venv/bin/python bench/share_memory.py                              # limits 2,000 and 10,000
    .venv/bin/python bench/share_memory.py --limits 2000 --partitions 500 --records 2000000

Issue 28's targets: at most 64 B of broker memory per in-flight record at the partition limit
(`group.share.partition.max.record.locks`, 2,000 by default, up to 10,000), RSS growth reported per 1,000
in-flight records; and share consumption at 0.5x or more of a classic group's records/s, of which this is
the share-partition's part (the broker's whole path is measured against real clients elsewhere).

Memory: for each limit, `--partitions` share-partitions are filled to the limit by `--members` members
taking batches of `--batch` records in turn, then brought to a mix: half the window held (ACQUIRED), a
quarter released (AVAILABLE, delivery count 1) and a quarter accepted (ACKNOWLEDGED) behind a held first
batch, so SPSO stays put and every record stays in flight. Reported per in-flight record: the bytes
tracemalloc sees allocated by building them (everything Python allocates for them, the partition objects
included), and the process's RSS growth over the same build, measured in a fresh child process per limit
so one build's freed memory cannot hide the next one's (also per 1,000 records).

Throughput: one share-partition at the limit 2,000 with `--members` members, each fetch one log batch of
`--batch` records acquired by the next member and accepted with one ACCEPT for its range, the oldest
holder first (so the window stays near full, as with consumers that acknowledge on their next poll); and
the same with one acknowledgement type per offset (a client that acknowledges record by record). Last,
what one state() costs at each limit with the memory mix, since the manager persists after every change.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logstore.broker.share.partition import SharePartition  # noqa: E402
from logstore.broker.share.types import AckType, ShareState  # noqa: E402

LOCK_MS = 30_000
ACCEPT, RELEASE = int(AckType.ACCEPT), int(AckType.RELEASE)
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def at_limit(limit: int, members: int, batch: int) -> SharePartition:
    """A share-partition whose window is full: half held, a quarter released, a quarter accepted."""
    sp = SharePartition(ShareState(0, 0, 0, ()), max_in_flight=limit, delivery_limit=5)
    taken: list[tuple[str, int, int]] = []
    offset = 0
    while offset < limit:
        member = f"member-{len(taken) % members}"
        last = min(offset + batch, limit) - 1
        for got in sp.acquire(member, [(offset, last, True)], batch, LOCK_MS, 0):
            taken.append((member, got.first_offset, got.last_offset))
        offset = last + 1
    for index, (member, first, last) in enumerate(taken[1:], 1):
        if index % 4 == 1:
            sp.acknowledge(member, first, last, [RELEASE], 1, LOCK_MS)
        elif index % 4 == 3:
            sp.acknowledge(member, first, last, [ACCEPT], 1, LOCK_MS)
    assert sp.in_flight() == limit, (sp.in_flight(), limit)
    return sp


def memory(limit: int, partitions: int, members: int, batch: int) -> dict[str, float]:
    """Bytes per in-flight record of `partitions` share-partitions at `limit`: tracemalloc and RSS."""
    at_limit(limit, members, batch)                     # warm: imports, regex caches, free lists
    rss_before = rss_bytes()
    built = [at_limit(limit, members, batch) for _ in range(partitions)]
    rss_grown = rss_bytes() - rss_before
    del built
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [at_limit(limit, members, batch) for _ in range(partitions)]
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    records = limit * partitions
    assert sum(sp.in_flight() for sp in kept) == records
    return {"traced": traced / records, "rss": rss_grown / records}


def throughput(records: int, members: int, batch: int, per_offset: bool) -> float:
    """Records/s through acquire + accept at the limit 2,000."""
    sp = SharePartition(ShareState(0, 0, 0, ()), max_in_flight=2000, delivery_limit=5)
    held: deque[tuple[str, int, int]] = deque()
    offset = fetches = 0
    types = [ACCEPT] * batch if per_offset else [ACCEPT]
    started = time.perf_counter()
    while offset < records:
        member = f"member-{fetches % members}"
        fetches += 1
        if not sp.can_acquire() or sp.in_flight() + batch > 2000:
            holder, first, last = held.popleft()
            code = sp.acknowledge(holder, first, last, types if per_offset else [ACCEPT], fetches, LOCK_MS)
            assert code == 0
        read = [(sp.next_fetch_offset(), sp.next_fetch_offset() + batch - 1, True)]
        for got in sp.acquire(member, read, batch, LOCK_MS, fetches):
            held.append((member, got.first_offset, got.last_offset))
            offset = max(offset, got.last_offset + 1)
        sp.expire(fetches)
    while held:
        holder, first, last = held.popleft()
        assert sp.acknowledge(holder, first, last, [ACCEPT] * (last - first + 1) if per_offset else [ACCEPT],
                              fetches, LOCK_MS) == 0
    elapsed = time.perf_counter() - started
    assert sp.in_flight() == 0
    return offset / elapsed


def state_cost(limit: int, members: int, batch: int) -> float:
    """Microseconds per state() of a share-partition at `limit` (the manager persists after every change)."""
    sp = at_limit(limit, members, batch)
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        sp.state()
    return (time.perf_counter() - started) / rounds * 1e6


def child(args: argparse.Namespace) -> None:
    """One limit's memory figures, as JSON on stdout (run in its own process)."""
    print(json.dumps(memory(args.child, args.partitions, args.members, args.batch)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limits", default="2000,10000",
                        help="group.share.partition.max.record.locks values, comma-separated")
    parser.add_argument("--partitions", type=int, default=200, help="share-partitions built per limit")
    parser.add_argument("--members", type=int, default=4, help="members taking batches in turn")
    parser.add_argument("--batch", type=int, default=500, help="records per log batch (and acquisition)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records through the throughput loop")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    print(f"share-partition memory: {args.partitions} partitions per limit, {args.members} members, "
          f"batches of {args.batch}; half held, a quarter released, a quarter accepted")
    print(f"{'limit':>8} {'traced B/record':>16} {'RSS B/record':>13} {'RSS KiB/1,000':>14}  target <= 64 B")
    for limit in (int(x) for x in args.limits.split(",")):
        out = subprocess.run([sys.executable, __file__, "--child", str(limit), "--partitions", str(args.partitions),
                              "--members", str(args.members), "--batch", str(args.batch)],
                             check=True, capture_output=True, text=True).stdout
        figures = json.loads(out)
        verdict = "ok" if max(figures["traced"], figures["rss"]) <= 64 else "OVER"
        print(f"{limit:>8} {figures['traced']:>16.1f} {figures['rss']:>13.1f} "
              f"{figures['rss'] * 1000 / 1024:>14.1f}  {verdict}")
    print(f"\nacquire + accept, limit 2,000, {args.members} members, batches of {args.batch}, "
          f"{args.records:,} records")
    for per_offset in (False, True):
        rate = throughput(args.records, args.members, args.batch, per_offset)
        label = "one type per offset" if per_offset else "one type per range"
        print(f"  {label:<22} {rate:>14,.0f} records/s")
    print("\nstate() (the persisted form), at the limit with the mix above")
    for limit in (int(x) for x in args.limits.split(",")):
        print(f"  {limit:>8} {state_cost(limit, args.members, args.batch):>10,.0f} us per call")


if __name__ == "__main__":
    main()
