"""Producer-state table benchmarks: logstore's native ProducerTable against a Python dict + deque map.

    make bench          (or: pytest -q bench/test_producer_state.py --benchmark-only
                         --benchmark-json=.benchmarks/producer.json; python bench/producer_report.py)

The peer is tests/producer/model.py, the native table's plain-Python twin that
the tests use as their oracle (bench/conftest.py puts its folder on the import
path): Kafka's ProducerStateEntry ported straight to Python (a dict of
`__slots__` objects, each with a deque(maxlen=5) of metadata tuples), with the
same operations. Cases (the issue's targets):

1. memory: bytes per producer with 1 M and 1.8 M producers holding 5 cached
   batches each, filled through `update_batch` (5 rounds over every producer,
   as traffic would). Each measurement runs in a fresh child process (this
   file run as a script) and records the growth of its resident set size,
   after a gc.collect(), between just before the table is made and just
   after it is full; ours also records `memory_bytes()`. Target: ours <= 256
   B per producer by both counts. The peer at 1.8 M producers needs ~3.5 GB;
   it is measured too. These are measured once: the benchmark's single
   "round" is the child's run (its time is the fill time, information), the
   bytes are in extra_info.
2. validate-update: the client append path for one batch, `append_batch`
   (the one call Log.append makes per batch: the duplicate check, Kafka's
   checks, the update), on both sides (the peer's method calls its own
   find_duplicate, check_batch and update_batch, as a straight port would)
   (idempotent, non-transactional, 5 records per batch, in sequence), for N
   producers round-robin in a fixed shuffled
   order (the same for both sides; shuffled so neither side gets a
   prefetcher-friendly sequential walk). Every producer starts with 5 cached
   batches, so each duplicate check scans a full cache and each update
   drops the oldest batch. A round is one batch for every producer; ops =
   batches. Target: ours >= 10x the peer's rate. `staged` (information) wraps
   each batch in begin()/commit() as a multi-batch append would, the peer in
   its own begin/commit (Kafka's ProducerAppendInfo).

Each ours round is paired with a peer round run just before it in the setup
(`paired_peer_seconds`), as in bench/test_storage.py. Before timing (once, in
the first validate-update benchmark's setup, so --benchmark-only runs it too),
a small table of each kind runs a few rounds and must end in the same state as
the other; after timing, each side's table must hold every batch it was given.
PRODUCER_BENCH_ROUNDS scales the round counts (default 1.0; 0.2 for a smoke run).
"""
from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import time

import pytest

from logstore.native.producer_state import ORIGIN_CLIENT, ProducerTable
from model import ProducerModel

SEED = 20240612
T0 = 1_700_000_000_000
EPOCH = 0
BATCH_RECORDS = 5
CACHED = 5  # batches per producer before timing (Kafka keeps the last 5)
SIDES = ("ours", "peer")

MEMORY_PRODUCERS = {"1M": 1_000_000, "1.8M": 1_800_000}
MEMORY_TARGET_BYTES = 256

RATE_PRODUCERS = {"10k": 10_000, "1M": 1_000_000}
RATE_TARGET = 10.0
SCALE = float(os.environ.get("PRODUCER_BENCH_ROUNDS", "1.0"))
RATE_ROUNDS = {"10k": 60, "1M": 8}


def _rounds(case: str) -> int:
    return max(2, round(RATE_ROUNDS[case] * SCALE))


def _tag(benchmark, op, case, side, **info):
    benchmark.group = f"{op}/{case}"
    benchmark.extra_info.update({"op": op, "case": case, "side": side, **info})


# ---------------------------------------------------------------------------
# Filling a table: `rounds` batches for every producer, in sequence.


def fill(table, producers, rounds: int, first_round: int = 0) -> None:
    """Append batches first_round..first_round+rounds-1 of every producer in `producers` (untimed helper)."""
    n = len(producers)
    update = table.update_batch
    for r in range(first_round, first_round + rounds):
        first, last = r * BATCH_RECORDS, r * BATCH_RECORDS + BATCH_RECORDS - 1
        offset = r * n * BATCH_RECORDS
        for pid in producers:
            update(pid, EPOCH, first, last, offset, offset + BATCH_RECORDS - 1, T0 + offset, False)
            offset += BATCH_RECORDS


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(side: str, producers: int) -> dict:
    """Child process: fill a table with `producers` x 5 batches; its RSS growth (and memory_bytes)."""
    ids = range(producers)
    gc.collect()
    before = _rss_bytes()
    started = time.perf_counter()
    table = ProducerTable() if side == "ours" else ProducerModel()
    fill(table, ids, CACHED)
    seconds = time.perf_counter() - started
    gc.collect()
    grown = _rss_bytes() - before
    assert len(table) == producers
    result = {"producers": producers, "rss_growth": grown, "fill_seconds": round(seconds, 3)}
    if side == "ours":
        result["memory_bytes"] = table.memory_bytes()
        entry = table.get(producers - 1)
        assert len(entry.batches) == CACHED, entry
    return result


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("case", MEMORY_PRODUCERS)
def test_memory(benchmark, case, side):
    producers = MEMORY_PRODUCERS[case]
    found = {}

    def run():
        # The child imports what this process imports (the peer's folder is on the path through conftest).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        child = subprocess.run([sys.executable, os.path.abspath(__file__), "memory", side, str(producers)],
                               capture_output=True, text=True, timeout=900, env=env)
        assert child.returncode == 0, child.stderr
        found.update(json.loads(child.stdout.strip().splitlines()[-1]))

    _tag(benchmark, "memory", case, side, unit="bytes_per_producer", producers=producers,
         target_bytes=MEMORY_TARGET_BYTES if side == "ours" else None,
         api=("ProducerTable" if side == "ours" else "dict of __slots__ entries + deque(maxlen=5) of tuples")
         + f", {producers:,} producers x {CACHED} batches, fresh child process")
    benchmark.pedantic(run, rounds=1, iterations=1)
    info = {"rss_growth": found["rss_growth"], "rss_bytes_per_producer": round(found["rss_growth"] / producers, 1),
            "fill_seconds": found["fill_seconds"]}
    if side == "ours":
        info["memory_bytes"] = found["memory_bytes"]
        info["memory_bytes_per_producer"] = round(found["memory_bytes"] / producers, 1)
    benchmark.extra_info.update(info)


# ---------------------------------------------------------------------------
# Validate + update rate


def append_round(table, producers, state: dict, staged: bool) -> None:
    """One timed round: the client append path for one batch of every producer."""
    r = state["round"]
    state["round"] = r + 1
    first, last = r * BATCH_RECORDS, r * BATCH_RECORDS + BATCH_RECORDS - 1
    offset = r * len(producers) * BATCH_RECORDS
    append_batch = table.append_batch
    rejected = 0
    if staged:
        begin, commit = table.begin, table.commit
        for pid in producers:
            begin()
            if append_batch(pid, EPOCH, first, last, offset, offset + 4, T0 + offset, False, ORIGIN_CLIENT) == 0:
                commit()
            else:
                table.rollback()
                rejected += 1
            offset += BATCH_RECORDS
    else:
        for pid in producers:
            if append_batch(pid, EPOCH, first, last, offset, offset + 4, T0 + offset, False, ORIGIN_CLIENT):
                rejected += 1
            offset += BATCH_RECORDS
    state["rejected"] += rejected


def _order(n: int) -> list[int]:
    """0..n-1 shuffled, as fresh int objects laid out in visiting order.

    A broker decodes each batch's producer id into a new int; a shuffled
    list of the ints made by range() would add a cache miss per batch
    (reading the int object) that the append path does not have.
    """
    ids = list(range(n))
    random.Random(f"{SEED}/{n}").shuffle(ids)
    return [(pid + 1) - 1 for pid in ids]


def _filled(side: str, n: int):
    table = ProducerTable() if side == "ours" else ProducerModel()
    fill(table, range(n), CACHED)
    return table, {"round": CACHED, "rejected": 0}


def _check_filled(table, state: dict, n: int) -> None:
    """Every producer holds the batches of the last 5 rounds: nothing was rejected or lost."""
    assert state["rejected"] == 0
    r = state["round"]
    for pid in random.Random(SEED).sample(range(n), min(n, 1000)):
        entry = table.get(pid)
        batches = entry[5]
        assert [b[1] for b in batches] == [k * BATCH_RECORDS + 4 for k in range(r - CACHED, r)], (pid, entry)


def check_sides_agree() -> None:
    """Untimed: both sides, fed the same rounds (direct and staged), end in the same state."""
    n = 2_000
    order = _order(n)
    ours, ours_state = _filled("ours", n)
    peer, peer_state = _filled("peer", n)
    for staged in (False, True, False):
        append_round(ours, order, ours_state, staged)
        append_round(peer, order, peer_state, staged)
    for pid in range(n):
        assert tuple(ours.get(pid)) == peer.get(pid), pid
    _check_filled(ours, ours_state, n)
    _check_filled(peer, peer_state, n)


def test_sides_agree():
    """Both sides end in the same state (also checked before the timed rounds, see TestValidateUpdate)."""
    check_sides_agree()


class TestValidateUpdate:
    """append_batch (duplicate check, checks, update) per batch, N producers round-robin."""

    @pytest.fixture(scope="class")
    @classmethod
    def tables(cls):
        """Per producer count, built on first use: ours, the peer paired with it, the standalone peer.

        Kept to the end of the class: the 1 M peers take ~2 GB each. First, both sides must agree:
        test_sides_agree is skipped under --benchmark-only, and a ratio against a peer that does
        something else means nothing.
        """
        check_sides_agree()
        built = {}

        def get(case: str):
            if case not in built:
                n = RATE_PRODUCERS[case]
                built[case] = {"order": _order(n), "ours": _filled("ours", n),
                               "paired": _filled("peer", n), "peer": _filled("peer", n)}
            return built[case]
        yield get
        built.clear()

    @pytest.mark.parametrize("side", SIDES)
    @pytest.mark.parametrize("case,mode", [("10k", "direct"), ("1M", "direct"), ("10k", "staged")])
    def test_validate_update(self, benchmark, tables, case, mode, side):
        n = RATE_PRODUCERS[case]
        built = tables(case)
        order = built["order"]
        staged = mode == "staged"
        table, state = built[side]
        op = "validate-update" if mode == "direct" else "validate-update-staged"
        api = ("begin(); " if staged else "") + "append_batch" + ("; commit()" if staged else "")
        _tag(benchmark, op, case, side, unit="ops", ops=n,
             target=RATE_TARGET if mode == "direct" else None,
             api=f"{api} per batch, {n:,} producers round-robin (shuffled), {CACHED} cached batches each",
             producers=n)
        rounds = _rounds(case)
        if side == "ours":
            paired_table, paired_state = built["paired"]
            paired_seconds: list[float] = []

            def setup():
                started = time.perf_counter()
                append_round(paired_table, order, paired_state, staged)
                paired_seconds.append(time.perf_counter() - started)
                return (table, order, state, staged), {}

            benchmark.pedantic(append_round, setup=setup, rounds=rounds, warmup_rounds=1)
            ours_seconds = list(benchmark.stats.stats.data)
            benchmark.extra_info["ours_seconds"] = ours_seconds
            benchmark.extra_info["paired_peer_seconds"] = paired_seconds[len(paired_seconds) - len(ours_seconds):]
            _check_filled(paired_table, paired_state, n)
        else:
            benchmark.pedantic(append_round, args=(table, order, state, staged), rounds=rounds, warmup_rounds=1)
        _check_filled(table, state, n)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "memory" and sys.argv[2] in SIDES:
        print(json.dumps(measure_memory(sys.argv[2], int(sys.argv[3]))))
        sys.exit(0)
    sys.exit(f"usage: {sys.argv[0]} memory ours|peer PRODUCERS (the memory benchmark's child)")
