"""The log cleaner on a dirty log against raw file I/O of the same bytes.

    .venv/bin/python -m pytest -q bench/test_cleaner.py --benchmark-only \\
        --benchmark-json=.benchmarks/cleaner.json
    .venv/bin/python bench/test_cleaner.py .benchmarks/cleaner.json

The log (the issue's case): 1 GiB of uncompressed batches of 200 records,
16-byte keys and 100-byte values, where the keys cycle over 10% of the record
count (so 10% of the records are live), in segments of 256 MiB plus a small
active segment; `LOGSTORE_BENCH_CLEANER_MIB` makes it smaller for a quick run.
It is built once through `Log.append` and copied fresh, untimed, before every
round, which also warms the page cache for both sides.

- ours: one cleaner round (`Cleaner.clean`, default 128 MiB offset map):
  map the keys, rewrite every segment, swap them in (fsyncs included).
- peer: read every segment file sequentially in 1 MiB chunks and write the
  same bytes to a new file, then fsync it: the bandwidth any cleaner that
  reads and writes the whole log works under.

Targets: ours at least 0.3x the peer's rate over the same bytes, and the
offset map's memory per key it can hold at most 24 bytes (Kafka's). Checked
untimed: every live key is still there with its latest value.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

import pytest

from logstore.cleaner import Cleaner, log_to_clean
from logstore.config import LogConfig
from logstore.log import Log

MIB = 1 << 20
TOTAL_BYTES = int(os.environ.get("LOGSTORE_BENCH_CLEANER_MIB", "1024")) * MIB
RECORDS_PER_BATCH = 200
VALUE_BYTES = 100
LIVE_SHARE = 10   # one record in ten is the latest of its key
ROUNDS = 3
TARGET = 0.3
MAP_BYTES_PER_KEY = 24   # Kafka's map: 16-byte MD5 digest + 8-byte offset
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 256 * MIB, "retention.ms": -1}


def _key(i: int) -> bytes:
    return b"key-%012d" % i


@pytest.fixture(scope="module")
def dirty_log():
    """(directory of the built log, its live key count, the last value of each key's index)."""
    root = tempfile.mkdtemp(prefix="cleaner-bench-")
    directory = os.path.join(root, "pristine", "table-0")
    target = Log.open(directory, LogConfig.from_properties(CONFIG))
    value = os.urandom(VALUE_BYTES - 12)
    record_bytes = 16 + VALUE_BYTES + 8
    records = TOTAL_BYTES // record_bytes
    live = records // LIVE_SHARE
    n = 0
    while target.size < TOTAL_BYTES:
        ids = [(n + j) % live for j in range(RECORDS_PER_BATCH)]
        target.append_records([b"%012d" % (n + j) + value for j in range(RECORDS_PER_BATCH)],
                              keys=[_key(i) for i in ids])
        n += RECORDS_PER_BATCH
    target.roll()
    target.append_records([b"tail"], keys=[b"tail"])
    target.close()
    yield directory, min(live, n), n
    shutil.rmtree(root, ignore_errors=True)


def _fresh_copy(dirty_log, name: str) -> str:
    directory = dirty_log[0]
    copy = os.path.join(os.path.dirname(os.path.dirname(directory)), name, "table-0")
    shutil.rmtree(os.path.dirname(copy), ignore_errors=True)
    shutil.copytree(directory, copy)
    return copy


def _segment_bytes(directory: str) -> tuple[list[str], int]:
    logs = sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))[:-1]
    return logs, sum(os.path.getsize(p) for p in logs)


def _copy_through(paths: list[str], out_path: str) -> None:
    buf = bytearray(MIB)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                while True:
                    got = os.readv(fd, [buf])
                    if not got:
                        break
                    os.write(out, memoryview(buf)[:got])
            finally:
                os.close(fd)
        os.fsync(out)
    finally:
        os.close(out)


@pytest.mark.parametrize("side", ["ours", "peer"])
def test_clean_dirty_log(benchmark, dirty_log, side):
    """One cleaner round over the whole dirty section, or a raw read+write of the same bytes."""
    _, live, written = dirty_log
    state = {}

    def setup():
        if "log" in state:
            state.pop("log").close()
        copy = _fresh_copy(dirty_log, "round")
        paths, size = _segment_bytes(copy)
        state.update(copy=copy, paths=paths, size=size)
        if side == "ours":
            state["log"] = Log.open(copy, LogConfig.from_properties(CONFIG), clean_shutdown=True)
            paired = os.path.join(os.path.dirname(copy), "paired-peer")
            start = time.perf_counter()
            _copy_through(paths, paired)
            state.setdefault("peer_seconds", []).append(time.perf_counter() - start)
            os.unlink(paired)
        return (), {}

    def ours():
        target = state["log"]
        cleaner = Cleaner()
        state["stats"] = cleaner.clean(log_to_clean(target, None, int(time.time() * 1000)))
        state["map_bytes_per_key"] = cleaner.offset_map.bytes_per_entry

    def peer():
        _copy_through(state["paths"], os.path.join(os.path.dirname(state["copy"]), "peer-copy"))

    benchmark.group = "clean/1GiB-10pct-live"
    benchmark.pedantic(ours if side == "ours" else peer, setup=setup, rounds=ROUNDS, warmup_rounds=0)
    info = {"side": side, "op": "clean", "bytes": state["size"], "records": written, "live_keys": live}
    if side == "ours":
        target, stats = state["log"], state["stats"]
        info.update(kept_bytes=stats.bytes_written, keys_mapped=stats.keys_mapped,
                    map_bytes_per_key=state["map_bytes_per_key"],
                    ours_seconds=list(benchmark.stats.stats.data), paired_peer_seconds=state["peer_seconds"])
        latest = {}
        for record in target.iter_records():
            latest[record.key] = record.value
        assert len(latest) == live + 1
        for i in range(0, live, max(1, live // 1000)):
            last = max(n for n in range(i, written, live))
            assert latest[_key(i)][:12] == b"%012d" % last
        target.close()
    benchmark.extra_info.update(info)


def main(argv: list[str]) -> int:
    """Print the rates, the ratio and the target."""
    from benchjson import finish, load_groups, machine_line, met, paired_ratio, pairs, table
    from summary import Summary

    prog = "bench/test_cleaner.py"
    path = argv[1] if len(argv) > 1 else ".benchmarks/cleaner.json"
    loaded = load_groups(path, prog)
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    rows, verdicts = [], []
    summary = Summary("cleaner", "Log cleaner vs a plain read+write of the dirty bytes", data, path)
    for group, ours, peer in pairs(groups, problems):
        size = ours["extra_info"]["bytes"]
        rate, peer_rate = size / ours["stats"]["median"] / MIB, size / peer["stats"]["median"] / MIB
        paired = paired_ratio(ours["extra_info"])
        verdict = met(rate / peer_rate >= TARGET, paired >= TARGET if paired else None)
        per_key = ours["extra_info"]["map_bytes_per_key"]
        verdicts += [verdict, met(per_key <= MAP_BYTES_PER_KEY)]
        summary.row(group, rate / peer_rate, verdict=verdict, target=TARGET, ours=f"{rate:,.0f} MiB/s",
                    peer=f"{peer_rate:,.0f} MiB/s")
        summary.row(f"{group} map memory per key", per_key, verdict=verdicts[-1], target=MAP_BYTES_PER_KEY, op="<=",
                    unit="B", ours=f"{per_key:.1f} B")
        rows.append((group, f"{size / MIB:,.0f} MiB", f"{rate:,.0f} MiB/s", f"{peer_rate:,.0f} MiB/s",
                     f"{rate / peer_rate:.2f}x", f"{paired:.2f}x" if paired else "-",
                     f"{ours['extra_info']['kept_bytes'] / MIB:,.1f} MiB", verdict,
                     f"{per_key:.1f} B", met(per_key <= MAP_BYTES_PER_KEY)))
    print(machine_line(data))
    print()
    table(("case", "dirty bytes", "cleaner", "read+write (peer)", "ratio", "paired", "kept", f">= {TARGET}x",
           "map memory per key", f"<= {MAP_BYTES_PER_KEY} B"),
          ("---", "---:", "---:", "---:", "---:", "---:", "---:", ":---:", "---:", ":---:"), rows)
    summary.write()
    return finish(verdicts, problems, prog)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
