"""Kafka's LogValidator on produce: the full check of a batch against the header-only check it replaced.

    .venv/bin/python -m pytest -q bench/test_produce_check.py --benchmark-only \\
        --benchmark-json=.benchmarks/produce_check.json
    .venv/bin/python bench/test_produce_check.py .benchmarks/produce_check.json

Batches as a producer sends them to the broker bench (bench/test_broker.py):
no keys, 100 B values of words from a seeded 512-word vocabulary (lz4 halves
them, as it would JSON or log lines), timestamps of now; 1,000 records (what
librdkafka puts in a batch by default) and 10,000 (batch.size=1 MiB),
uncompressed and lz4. Each group times two sides on the same bytes:

- header: `validate_records(client=True)`, what an append checked before:
  framing, CRC, the header's produce rules;
- full: `validate_append(rules=...)`, what `Log.validate` checks now: that,
  then every record decompressed and walked (count, offset deltas, lengths,
  varints, timestamps against message.timestamp.after.max.ms), and the
  AppendInfo the append takes.

The report prints, per group, what the full check adds per batch and per
record, and (`--produce-rate`, messages/s of the broker bench's produce case
on the same machine) that cost as a share of the produce path's time per
message. The issue's bound: the full check costs at most 10 % of produce
throughput against the header-only one.
"""
from __future__ import annotations

import json
import random
import sys
import time

import pytest

import logstore.formats.kafka as K
from logstore.formats.protocol import RecordRules

SEED = 20240521
VALUE_SIZE = 100
NOW = int(time.time() * 1000)
RULES = RecordRules(now=NOW, partition="bench-0", timestamp_after_max_ms=3_600_000)
MAX_MESSAGE_BYTES = 16 << 20
SIDES = ("header", "full")
COUNTS = (1_000, 10_000)
CODECS = {"none": K.NONE, "lz4": K.LZ4}


def _values(count: int) -> list[bytes]:
    rng = random.Random(SEED)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    words = [bytes(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(512)]
    out = []
    for _ in range(count):
        text = b" ".join(rng.choice(words) for _ in range(VALUE_SIZE // 3))
        out.append(text[:VALUE_SIZE].ljust(VALUE_SIZE, b" "))
    return out


_BATCHES: dict[tuple[str, int], bytearray] = {}


def _batch(codec: str, count: int) -> bytearray:
    if (codec, count) not in _BATCHES:
        values = _values(count)
        _BATCHES[codec, count] = bytearray(K.encode_batch([None] * count, values, timestamps=NOW,
                                                          compression=CODECS[codec]))
    return _BATCHES[codec, count]


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("codec", CODECS)
def test_produce_check(benchmark, codec, count, side):
    buf = _batch(codec, count)
    before = bytes(buf)
    if side == "header":
        def run():
            return K.validate_records(buf, client=True, max_batch_size=MAX_MESSAGE_BYTES)
        assert run()[0].record_count == count
    else:
        def run():
            return K.validate_append(buf, max_batch_size=MAX_MESSAGE_BYTES, rules=RULES)
        info = run()
        assert (info.record_count, info.max_timestamp) == (count, NOW)
    assert bytes(buf) == before
    benchmark.group = f"produce-check/{codec}/{count}"
    benchmark.extra_info.update({"side": side, "codec": codec, "records": count, "bytes": len(buf)})
    benchmark(run)


def main(argv: list[str]) -> int:
    """Print each group's cost of the full check over the header-only one."""
    if len(argv) < 2:
        print(f"usage: {argv[0]} BENCH_JSON [--produce-rate MSG_PER_S]", file=sys.stderr)
        return 2
    rate = float(argv[argv.index("--produce-rate") + 1]) if "--produce-rate" in argv else None
    with open(argv[1]) as f:
        data = json.load(f)
    groups: dict[str, dict[str, dict]] = {}
    for bench in data["benchmarks"]:
        groups.setdefault(bench["group"], {})[bench["extra_info"]["side"]] = bench
    for group, sides in sorted(groups.items()):
        header, full = sides["header"], sides["full"]
        records = full["extra_info"]["records"]
        extra = full["stats"]["median"] - header["stats"]["median"]
        line = (f"{group}: {full['extra_info']['bytes']} B, header "
                f"{header['stats']['median'] * 1e6:.1f} us, full {full['stats']['median'] * 1e6:.1f} us "
                f"({full['stats']['median'] / header['stats']['median']:.1f}x), "
                f"+{extra / records * 1e9:.1f} ns/record")
        if rate:
            line += f", {extra / records * rate * 100:.1f} % of produce time at {rate:,.0f} msg/s"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
