"""Hostile input for the v2 and legacy codecs: only CorruptRecordError may come out.

The bulk is a deterministic fuzz loop (fuzzing.py) of 100,000 mutated valid
entries by default, 2,000,000 under `make soak`, run in subprocesses so a hang
or a segfault fails the test with the input that did it. Every input that ever
made a decoder misbehave is kept in corpus/ and replayed here as an ordinary
test. Decompression bombs are checked for the error and for the memory they
cost (tracemalloc), and the bugs the loop found have named scenarios below.
"""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from functools import cache

import lz4.frame
import pytest
import xxhash
from kafka.record.legacy_records import LegacyRecordBatchBuilder

import fuzzing
import logstore.formats.kafka as K
from fuzzing import (
    CORPUS_DIR,
    Seed,
    build_seeds,
    exercise,
    fix_v2_crc,
    legacy_message,
    load_corpus,
    read_crash_file,
    save_corpus,
    v2_from_plain,
    varint,
)
from logstore.errors import CorruptRecordError

SEED = int(os.environ.get("LOGSTORE_FUZZ_SEED", "20261121"))
DEFAULT_INPUTS = 100_000
SOAK_INPUTS = 2_000_000
WORKERS = 2  # the machine's cores


def run_fuzz(seed: int, count: int, timeout: float, extra: tuple = ()) -> list[str]:
    """Run inputs [0, count) of `seed` in WORKERS subprocesses; one paragraph per problem found."""
    problems, groups = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for w in range(WORKERS):
            start, stop = count * w // WORKERS, count * (w + 1) // WORKERS
            crash_file = os.path.join(tmp, f"worker{w}.crash")
            cmd = [sys.executable, fuzzing.__file__, "--seed", str(seed), "--start", str(start),
                   "--stop", str(stop), "--crash-file", crash_file, *extra]
            procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                          crash_file, start, stop))
        for proc, crash_file, start, stop in procs:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                problems.append(_died(f"hang (> {timeout:.0f} s)", seed, crash_file, start, stop, err))
                continue
            if proc.returncode != 0:
                problems.append(_died(f"exit status {proc.returncode}", seed, crash_file, start, stop, err))
                continue
            for failure in json.loads(out)["failures"].values():
                # One bug shows up in every entry point that shares the faulty code: group by symptom.
                key = failure["kind"] + "|" + failure["signature"].split("|", 2)[2]
                group = groups.setdefault(key, {"count": 0, "calls": set(), **failure})
                group["count"] += failure["count"]
                group["calls"].add(failure["call"])
    for group in groups.values():
        example = group["examples"][0]
        what = group["detail"].split(":")[0] if group["kind"] == "untyped" else min(group["calls"])
        path = save_corpus(bytes.fromhex(example["hex"]), f"{group['kind']}-{what}")
        problems.append(f"{group['count']} x {group['kind']}: {group['detail']}\n"
                        f"    in {', '.join(sorted(group['calls']))}\n"
                        f"    first: {example['mutation']}\n    kept as corpus/{path.name}\n"
                        f"    replay: {_replay(seed, example['index'])}")
    return problems


def _replay(seed: int, index: int) -> str:
    return f"python {fuzzing.__file__} --seed {seed} --start {index} --stop {index + 1} --verbose"


def _died(what: str, seed: int, crash_file: str, start: int, stop: int, stderr: str) -> str:
    crashed = read_crash_file(crash_file)
    if crashed is None:
        return f"worker [{start}, {stop}) {what} outside the loop: {stderr[-2000:]}"
    index, data = crashed
    path = save_corpus(data, "crash")
    return f"{what} on input {index} (replay: {_replay(seed, index)}); kept as corpus/{path.name}\n{stderr[-2000:]}"


def test_fuzz_loop_only_raises_corrupt_record_errors():
    problems = run_fuzz(SEED, DEFAULT_INPUTS, timeout=600)
    assert not problems, f"{len(problems)} kinds of misbehaviour:\n" + "\n".join(problems)


@pytest.mark.soak
def test_fuzz_soak_only_raises_corrupt_record_errors():
    problems = run_fuzz(SEED + 1, SOAK_INPUTS, timeout=2 * 3600)
    assert not problems, f"{len(problems)} kinds of misbehaviour:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", sorted(CORPUS_DIR.glob("*.hex")), ids=lambda p: p.stem)
def test_corpus_input_is_rejected_cleanly(path):
    failures = exercise(load_corpus(path))
    assert not failures, "\n".join(f"{f.kind} in {f.call}: {f.detail}" for f in failures)


def test_harness_keeps_the_input_that_killed_a_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(fuzzing, "CORPUS_DIR", tmp_path)
    problems = run_fuzz(SEED, 20, timeout=300, extra=("--abort-at", "13"))
    deaths = [p for p in problems if p.startswith("exit status")]
    assert len(deaths) == 1 and "on input 13" in deaths[0], problems
    kept = list(tmp_path.glob("crash-*.hex"))
    assert [load_corpus(p) for p in kept] == [fuzzing.mutate(build_seeds(SEED), SEED, 13)[0]]


def test_harness_reports_untyped_errors_and_bad_positions():
    calls = fuzzing._Calls(b"12345")
    calls("raises ValueError", int, "x")
    calls("raises out of range", lambda: (_ for _ in ()).throw(CorruptRecordError("far", 6)))
    calls("raises in range", lambda: (_ for _ in ()).throw(CorruptRecordError("near", 5)))
    assert [(f.kind, f.call) for f in calls.failures] == [
        ("untyped", "raises ValueError"), ("bad-position", "raises out of range")]


# ---------------------------------------------------------------------------
# Truncation at every byte, with and without the batch length claiming the cut


def _truncation_seeds() -> list[Seed]:
    wanted = {"v2/none/3", "v2/gzip/3", "v2/gzip-members/3", "v2/snappy/3", "v2/snappy-raw/3",
              "v2/lz4/3", "v2/lz4-checksums/3", "v2/lz4-stored/3", "v2/zstd/3", "v2/zstd-frames/3",
              "v2/none/4big", "v2/control/True", "legacy/v0/codec3/4", "legacy/v1/codec1/4",
              "legacy/v1/plain/4", "vector/real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc"}
    return [s for s in build_seeds(SEED) if s.name in wanted]


@pytest.mark.parametrize("seed", _truncation_seeds(), ids=lambda s: s.name)
def test_truncation_at_every_position_is_a_typed_error(seed):
    data = seed.data
    bad = []
    for cut in range(len(data)):
        variants = [data[:cut]]
        if cut > 21 and data[16] == 2:
            claimed = bytearray(data[:cut])
            struct.pack_into(">i", claimed, 8, cut - 12)
            fix_v2_crc(claimed)
            variants.append(bytes(claimed))
        for buf in variants:
            bad += [(cut, f) for f in exercise(buf, arrow=False) if f.kind != "inconsistent"]
    assert not bad, f"{len(bad)} failures, first: cut at {bad[0][0]}: {bad[0][1]}"


# ---------------------------------------------------------------------------
# Non-minimal varints: Kafka accepts them (spec §0.1), so the records must not change


def _pad_varints(plain: bytes) -> bytes:
    out = bytearray()
    for fields in fuzzing.record_fields(plain):
        body = bytearray()
        for name, s, e in fields[1:]:
            if name in ("attributes", "key", "value", "header_key", "header_value"):
                body += plain[s:e]
            else:
                value = fuzzing.read_varint(plain, s)[0]
                limit = 10 if name == "timestamp_delta" else 5
                body += varint(value, pad=max(0, min(2, limit - len(varint(value)))))
        out += varint(len(body)) + body
    return bytes(out)


@pytest.mark.parametrize("compressor", ["none", "gzip", "lz4", "zstd"])
def test_non_minimal_varints_decode_to_the_same_records(compressor):
    batch = K.encode_batch([b"k", None, b"x" * 70], [None, b"", b"v" * 9000],
                           [[("a", b"1")], [], [("ключ", None), ("", b"")]], [5, 2**40, 3])
    padded = v2_from_plain(batch, _pad_varints(batch[61:]), compressor)
    assert len(padded) > len(batch) or compressor != "none"
    assert K.decode_records(padded) == K.decode_records(batch)
    K.validate_batch(padded, deep=True)


# ---------------------------------------------------------------------------
# Decompression bombs: a small payload that inflates past max_decompressed


LIMIT = 1 << 20
BOMB = 64 << 20
ALLOWANCE = 3 * LIMIT
"""Peak traced memory a bomb may cost beyond one copy of its input: the limit, one copy, slack."""


@cache
def _bomb_plain() -> tuple[bytes, bytes]:
    batch = K.encode_batch([None], [bytes(BOMB)], timestamps=0)
    return batch[:61], batch[61:]


@cache
def _bomb(compressor: str) -> bytes:
    header, plain = _bomb_plain()
    return v2_from_plain(header, plain, compressor)


BOMB_COMPRESSORS = ["gzip", "gzip-members", "snappy", "snappy-raw", "lz4", "lz4-4mb",
                    "kafka-python-3", "zstd", "zstd-frames"]
ENTRY_POINTS = {
    "decode_records": lambda buf: K.decode_records(buf, max_decompressed=LIMIT),
    "decode_columnar": lambda buf: K.decode_columnar(buf, max_decompressed=LIMIT),
    "ColumnarBuilder.add_batch": lambda buf: K.ColumnarBuilder().add_batch(buf, max_decompressed=LIMIT),
}


def _peak_of(fn, buf) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            fn(buf)
            error = None
        except BaseException as exc:  # judged by the caller, after tracing stops
            error = exc
        return error, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _lz4_block_allowance(buf: bytes, at: int) -> int:
    """Room for one LZ4 block decoded whole (and copied once) whatever the limit: up to 2 x 4 MiB."""
    if buf[at:at + 4] != b"\x04\x22\x4d\x18":
        return 0
    return 2 * {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}[(buf[at + 5] >> 4) & 7]


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("compressor", BOMB_COMPRESSORS)
def test_decompression_bomb_is_refused_within_the_limit(compressor, entry):
    buf = _bomb(compressor)
    assert len(buf) < BOMB // 16
    error, peak = _peak_of(ENTRY_POINTS[entry], buf)
    assert isinstance(error, CorruptRecordError), f"expected CorruptRecordError, got {error!r}"
    assert re.search(r"more than|exceed|limit|too (large|big)", str(error)), error  # refused for its size
    assert -1 <= error.position <= len(buf)
    assert peak < ALLOWANCE + len(buf) + _lz4_block_allowance(buf, 61), \
        f"peak {peak / 2**20:.1f} MiB for a {LIMIT >> 20} MiB limit"


@pytest.mark.parametrize("magic,codec", [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)])
def test_legacy_wrapper_bomb_is_refused_within_the_limit(magic, codec):
    inner = legacy_message(0, magic, 0, 5, None, bytes(BOMB))
    value = fuzzing.LEGACY_COMPRESSORS[(magic, codec)](inner)
    buf = legacy_message(0, magic, codec, 5, None, value)
    error, peak = _peak_of(lambda b: K.decode_legacy(b, max_decompressed=LIMIT), buf)
    assert isinstance(error, CorruptRecordError), f"expected CorruptRecordError, got {error!r}"
    assert peak < ALLOWANCE + len(buf) + _lz4_block_allowance(value, 0), \
        f"peak {peak / 2**20:.1f} MiB for a {LIMIT >> 20} MiB limit"


def _lz4_claiming(content_size: int) -> bytes:
    """A v2 batch whose small LZ4 frame claims `content_size` bytes in its (checksummed) header."""
    batch = K.encode_batch([b"k"], [b"v" * 100], timestamps=0)
    frame = bytearray(lz4.frame.compress(batch[61:], block_linked=False, store_size=True))
    struct.pack_into("<Q", frame, 6, content_size)
    frame[14] = (xxhash.xxh32_intdigest(bytes(frame[4:14])) >> 8) & 0xFF
    buf = bytearray(batch[:61]) + frame
    struct.pack_into(">h", buf, 21, K.LZ4)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    fix_v2_crc(buf)
    return bytes(buf)


@pytest.mark.parametrize("claim", [1 << 30, 1 << 40])
def test_lz4_content_size_field_is_skipped_not_trusted(claim):
    # Kafka's reader skips the content size (§2.6): a lie there must neither fail the batch
    # nor size an allocation.
    buf = _lz4_claiming(claim)
    error, peak = _peak_of(ENTRY_POINTS["decode_records"], buf)
    assert error is None, f"expected the records, got {error!r}"
    assert K.decode_records(buf) == [K.Record(0, 0, b"k", b"v" * 100)]
    assert peak < ALLOWANCE + len(buf), f"peak {peak / 2**20:.1f} MiB for a {LIMIT >> 20} MiB limit"


def test_gzip_member_flood_decodes_without_quadratic_work():
    # 300,000 empty gzip members (6 MiB) make a valid empty batch (Java's GZIPInputStream reads
    # members one after another). Copying the unread rest once per member is quadratic: about
    # 40 s for this input, where a reader feeding zlib bounded chunks needs about 1.3 s here.
    # The child runs with a deadline so that shows up as a failure rather than a stuck run.
    code = ("import gzip, fuzzing, logstore.formats.kafka as K\n"
            "header = K.encode_batch([], [], timestamps=0)\n"
            "buf = bytearray(header) + gzip.compress(b'', mtime=0) * 300_000\n"
            "buf[22] |= K.GZIP\n"
            "buf[8:12] = (len(buf) - 12).to_bytes(4, 'big')\n"
            "fuzzing.fix_v2_crc(buf)\n"
            "assert K.decode_records(bytes(buf)) == []\n")
    try:
        result = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(fuzzing.__file__),
                                capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("decoding 300,000 empty gzip members did not finish within 20 s")
    assert result.returncode == 0, result.stderr[-1000:]


# ---------------------------------------------------------------------------
# Scenarios the loop found, as minimal reproductions


def test_columnar_builder_keeps_nothing_of_a_rejected_batch():
    # Two good records, then a third whose header count runs past its record.
    hostile = bytearray(K.encode_batch([b"a", b"b", b"c"], [b"x", b"y", b"z"], timestamps=1))
    hostile[-1] = 0x02
    fix_v2_crc(hostile)
    builder = K.ColumnarBuilder()
    with pytest.raises(CorruptRecordError):
        builder.add_batch(bytes(hostile))
    builder.add_batch(K.encode_batch([None, None, None], [None, None, None], timestamps=1, base_offset=10))
    table = builder.finish().to_arrow()
    table.validate(full=True)
    assert table.column("key").to_pylist() == [None, None, None]
    assert table.column("value").to_pylist() == [None, None, None]


def test_legacy_inner_offsets_beyond_int64_are_corrupt():
    # A magic 1 wrapper at offset 5 over inner offsets (2^63-1, 0): the shift pushes the first past int64.
    inner = legacy_message(2**63 - 1, 1, 0, 5, b"k", b"v") + legacy_message(0, 1, 0, 5, b"k", b"v")
    buf = legacy_message(5, 1, 1, 5, None, fuzzing.LEGACY_COMPRESSORS[(1, 1)](inner))
    with pytest.raises(CorruptRecordError):
        K.decode_legacy(buf)


def test_corrupt_lz4_block_in_a_magic0_wrapper_is_corrupt():
    builder = LegacyRecordBatchBuilder(0, 3, 1 << 20)
    builder.append(0, None, b"key", b"value " * 40)
    wrapper = bytearray(builder.build())
    # The first block's bytes follow the 7-byte frame header and 4-byte block size inside the value.
    block = 12 + 4 + 2 + 4 + 4 + 7 + 4
    for i in range(block, block + 6):
        wrapper[i] = 0xFF
    fuzzing.fix_legacy_crc(wrapper)
    with pytest.raises(CorruptRecordError):
        K.decode_legacy(bytes(wrapper))


def test_columnar_decoders_agree_with_decode_records_at_the_largest_base_offset():
    batch = bytearray(K.encode_batch([b"k"], [b"v"], timestamps=1))
    struct.pack_into(">q", batch, 0, 2**63 - 1)  # baseOffset is outside the CRC
    rows = fuzzing.record_rows(K.decode_records(bytes(batch)))
    assert fuzzing.columns_rows(K.decode_columnar(bytes(batch))) == rows


@pytest.mark.parametrize("call", [
    "K.decode_legacy(buf, -10**12)",
    "list(K.iter_entries(buf, -len(buf)))",
    "K.decode_legacy(buf, -1)",
])
def test_negative_positions_are_refused_without_reading_outside_the_buffer(call):
    # Run in a child: an out-of-bounds read can be a segfault.
    code = ("import logstore.formats.kafka as K\n"
            "from logstore.errors import CorruptRecordError\n"
            f"buf = {legacy_message(0, 1, 0, 5, b'k', b'v')!r}\n"
            f"try:\n    {call}\nexcept (CorruptRecordError, ValueError, IndexError) as e:\n"
            "    print(type(e).__name__, e)\nelse:\n    print('accepted')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-500:]}"
    # A complaint about the magic byte means the message was parsed at a position partly before the buffer.
    assert "accepted" not in result.stdout and "magic" not in result.stdout, result.stdout
