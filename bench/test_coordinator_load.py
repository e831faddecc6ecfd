"""A restarted group coordinator over `__consumer_offsets`: a million commits against a thousand.

    .venv/bin/python -m pytest -q bench/test_coordinator_load.py --benchmark-only \\
        --benchmark-json=.benchmarks/coordinator_load.json
    .venv/bin/python bench/test_coordinator_load.py .benchmarks/coordinator_load.json

Issue 10's check: after a million commits over a thousand keys, the offsets
log's on-disk size and the coordinator's load time stay near those of a
thousand keys. Commits are a simple consumer's OffsetCommit of all 1,000
partitions at once, as in tests/broker/test_internal_topic_compaction.py.
Three stores are built once, untimed (`LOGSTORE_BENCH_COMMITS` rounds, default
1,000, makes the two big ones smaller for a quick run):

- few (peer, the baseline): one round, 1,000 commits;
- compacted (ours): every round, then cleaned until the cleaner's checkpoint
  reaches the active segment;
- uncompacted (context only): every round with `log.cleaner.enable=false`.

The few store is cleaned up to its active segment too, so on no store does the
cleaner find work during a timed open (checked after the run).

Timed, per round: what a broker restart pays before it serves offsets, as
broker/node.py does it: open the LogManager, load the transaction coordinator,
then `GroupCoordinator.load()`, which replays `__consumer_offsets`. Closing the
store is untimed (the next round's setup). Checked untimed: the loaded
coordinator serves each partition's last committed offset.

Targets (compacted against few): load time at most 2x, and on-disk `.log`
bytes at most 2x plus one offsets segment (1 MiB, the segment.bytes used here).
"""
from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile

import pytest

from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC, TransactionCoordinator, TxnConfig
from logstore.manager import LogManager

KEYS = 1_000
COMMITS = int(os.environ.get("LOGSTORE_BENCH_COMMITS", "1000"))
SEGMENT_BYTES = 1 << 20
WAIT_S = 120.0
ROUNDS = 20
LOAD_TARGET = 2.0
GROUP = "copier"
CONFIG = GroupConfig(initial_rebalance_delay_ms=0, fsync=False)
TXN_CONFIG = TxnConfig(state_partitions=1, offsets_partitions=1, offsets_segment_bytes=SEGMENT_BYTES, fsync=False)
# Rounds only when asked (await_round), and a map far larger than a thousand keys.
SETTINGS = {"log.cleaner.backoff.ms": 3_600_000, "log.cleaner.dedupe.buffer.size": 1 << 20}
STORES = {"few": (1, SETTINGS), "compacted": (COMMITS, SETTINGS),
          "uncompacted": (COMMITS, {**SETTINGS, "log.cleaner.enable": "false"})}
SIDES = {"few": "peer", "compacted": "ours", "uncompacted": "ours"}


def _open(path: str, settings: dict):
    store = LogManager(path, broker_settings=settings)
    ids = itertools.count(1000)
    txn = TransactionCoordinator(store, lambda: next(ids), TXN_CONFIG)
    groups = GroupCoordinator(store, txn, CONFIG)
    txn.on_offsets_marker = groups.complete_txn_offsets
    return store, txn, groups


def _expected(rounds: int) -> dict:
    return {("events", p): (rounds - 1) * 10 + p % 7 for p in range(KEYS)}


def _disk_bytes(path: str) -> int:
    directory = os.path.join(path, f"{OFFSETS_TOPIC}-0")
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".log"))


def _build(path: str, rounds: int, settings: dict) -> None:
    store, _, groups = _open(path, settings)
    try:
        groups.ensure_offsets_topic()
        for n in range(rounds):
            errors = groups.commit_offsets(GROUP, "", None, -1,
                                           {("events", p): (n * 10 + p % 7, -1, "") for p in range(KEYS)})
            assert not any(errors.values())
        target = store.log(OFFSETS_TOPIC, 0)
        target.roll()
        if settings.get("log.cleaner.enable") == "false":
            return
        for _ in range(20):
            assert store.cleaner.await_round(WAIT_S)
            if store.cleaner.checkpoints.get((OFFSETS_TOPIC, 0), 0) >= target.segments[-1].base_offset:
                return
        raise AssertionError("the cleaner did not catch up")
    finally:
        store.close()


@pytest.fixture(scope="module")
def stores():
    """store name -> its directory, all three built once."""
    root = tempfile.mkdtemp(prefix="coordinator-load-bench-")
    paths = {}
    for name, (rounds, settings) in STORES.items():
        paths[name] = os.path.join(root, name)
        _build(paths[name], rounds, settings)
    yield paths
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("name", list(STORES))
def test_coordinator_load(benchmark, stores, name):
    """Open the store and load both coordinators, as a restarted broker does before serving offsets."""
    path, (rounds, settings) = stores[name], STORES[name]
    opened = []

    def setup():
        while opened:
            store = opened.pop()[0]
            # A cleaner round during a timed open would have raced the load it was timed with.
            assert not store.cleaner.last_stats, "the cleaner had work on a timed open"
            store.close()
        return (), {}

    def restart():
        store, txn, groups = _open(path, settings)
        opened.append((store, groups))
        txn.load()
        groups.load()

    # Its own group for uncompacted: a group pairs one "ours" with one "peer".
    benchmark.group = f"coordinator-load/{KEYS}-keys-{COMMITS}-rounds" + (
        "/uncompacted" if name == "uncompacted" else "")
    benchmark.pedantic(restart, setup=setup, rounds=ROUNDS, warmup_rounds=1)
    store, groups = opened.pop()
    try:
        found = groups.fetch_offsets(GROUP, None, False)
        assert {tp: c.offset for tp, c in found.items()} == _expected(rounds)
        target = store.log(OFFSETS_TOPIC, 0)
        benchmark.extra_info.update(
            side=SIDES[name], store=name, op="load", keys=KEYS, commits=rounds * KEYS,
            disk_bytes=_disk_bytes(path), segment_bytes=SEGMENT_BYTES, segments=len(target.segments),
            records_replayed=sum(1 for _ in target.iter_records()), log_end_offset=target.log_end_offset)
        assert not store.cleaner.last_stats, "the cleaner had work on a timed open"
    finally:
        store.close()


def main(argv: list[str]) -> int:
    """Print each store's load time and disk bytes against the few-keys baseline, and the targets."""
    from benchjson import finish, load_groups, machine_line, met, table
    from summary import Summary

    prog = "bench/test_coordinator_load.py"
    path = argv[1] if len(argv) > 1 else ".benchmarks/coordinator_load.json"
    loaded = load_groups(path, prog)
    if isinstance(loaded, int):
        return loaded
    data, _, problems = loaded
    # Both "ours" are compared with the one "peer", so take the benchmarks by store.
    benches = {b["extra_info"].get("store"): b for b in data["benchmarks"]}
    few = benches.get("few")
    if few is None:
        problems.append("no 'few' benchmark to compare with")
        return finish([], problems, prog)
    few_s, few_bytes = few["stats"]["median"], few["extra_info"]["disk_bytes"]
    rows, verdicts = [], []
    summary = Summary("coordinator_load", "Coordinator load of a compacted __consumer_offsets vs a few-keys store",
                      data, path)
    for name in STORES:
        bench = benches.get(name)
        if bench is None:
            problems.append(f"no '{name}' benchmark")
            continue
        info, stats = bench["extra_info"], bench["stats"]
        load, disk = stats["median"] / few_s, info["disk_bytes"] / few_bytes
        load_cell = disk_cell = "-"
        if name == "compacted":
            # The min-over-min ratio flags a verdict the medians reach only through noise.
            load_cell = met(load <= LOAD_TARGET, stats["min"] / few["stats"]["min"] <= LOAD_TARGET)
            disk_cell = met(info["disk_bytes"] <= 2 * few_bytes + info["segment_bytes"])
            verdicts += [load_cell, disk_cell]
            summary.row(f"{name} load / few", load, verdict=load_cell, target=LOAD_TARGET, op="<=",
                        ours=f"{stats['median'] * 1000:,.1f} ms", peer=f"{few_s * 1000:,.1f} ms (few)")
            summary.row(f"{name} disk (target: 2x few + 1 segment)", info["disk_bytes"], verdict=disk_cell,
                        target=2 * few_bytes + info["segment_bytes"], op="<=", unit="B",
                        ours=f"{info['disk_bytes'] / 1024:,.1f} KiB")
        rows.append((name, f"{info['commits']:,}", f"{info['records_replayed']:,}", f"{info['segments']}",
                     f"{info['disk_bytes'] / 1024:,.1f} KiB", f"{disk:.2f}x",
                     f"{stats['median'] * 1000:,.1f} ms", f"{load:.2f}x", load_cell, disk_cell))
    print(machine_line(data))
    print()
    table(("store", "commits", "records replayed", "segments", "offsets .log bytes", "disk / few",
           "load (median)", "load / few", f"load <= {LOAD_TARGET:g}x", "disk <= 2x few + 1 segment"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", ":---:", ":---:"), rows)
    summary.write()
    return finish(verdicts, problems, prog)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
