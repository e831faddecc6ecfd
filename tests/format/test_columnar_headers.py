"""ColumnarBuilder's optional columns (timestampType, headers) checked against the object decoder.

The Spark source reads Spark's Kafka schema, which adds to offset, timestamp,
key and value a `timestampType` int (0 CreateTime, 1 LogAppendTime) and, when
asked, `headers array<struct<key: string, value: binary>>`. Every check here
compares a builder's columns with decode_records field by field: the raw
buffers first (their sizes, offsets that span the data, null counts), then
the Arrow view (validate(full=True), the exact schema, to_pylist). Batches
come from encode_batch with every codec, null/empty/non-UTF-8 header keys and
values, many or no headers, LOG_APPEND_TIME, offset bounds, control batches
and builders reused after finish(). Hostile header sections must be refused
with InvalidRecordError and leave nothing behind; the mutation loop runs in a
child process so that a crash fails the test instead of the run.
"""
from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzing
import logstore.formats.kafka as K
from fuzzing import read_varint, v2_from_plain, varint
from logstore.errors import CorruptRecordError, InvalidRecordError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
FLAGS = [(True, True), (True, False), (False, True)]  # (headers, timestamp_types)
LOOP_SEED = 20261122
LOOP_INPUTS = 20_000

# Ill-formed UTF-8 (Unicode table 3-7) and the well-formed sequences beside each edge.
UTF8_EDGES = [b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xe0\x80\x80",
              b"\xe0\xa0\x80", b"\xf0\x80\x80\x80", b"\xf0\x90\x80\x80", b"\xf4\x90\x80\x80",
              b"\xf4\x8f\xbf\xbf", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82", b"\xf0\x9f\x98",
              b"\xe2\x82\xac", "😀".encode(), b"\x80", b"\xbf", b"\xff", b"\xfe", b"a", b"\x00"]

big_values = st.tuples(st.sampled_from((63, 64, 8191, 8192, 16384)), st.integers(0, 2**32)).map(
    lambda size_seed: random.Random(size_seed[1]).randbytes(size_seed[0]))
header_keys = st.one_of(
    st.text(max_size=10), st.sampled_from(["", "ключ", "キー", "emoji-😀", "trace-id"]),
    st.binary(max_size=10), st.lists(st.sampled_from(UTF8_EDGES), max_size=4).map(b"".join))
header_values = st.one_of(st.none(), st.just(b""), st.binary(max_size=20), big_values)
header_lists = st.integers(0, 19).flatmap(lambda r: (
    st.just([]) if r < 6 else
    st.lists(st.tuples(header_keys, header_values), min_size=40, max_size=300) if r == 19 else
    st.lists(st.tuples(header_keys, header_values), min_size=1, max_size=5)))
payloads = st.none() | st.binary(max_size=12)


@st.composite
def batch_args(draw, base_offset: int, max_records: int = 30) -> dict:
    """Keyword arguments for encode_batch: records with headers at `base_offset`."""
    n = draw(st.integers(0, max_records))
    return dict(
        keys=draw(st.lists(payloads, min_size=n, max_size=n)),
        values=draw(st.lists(payloads, min_size=n, max_size=n)),
        headers=draw(st.lists(header_lists, min_size=n, max_size=n)),
        timestamps=draw(st.lists(st.integers(0, 2**50), min_size=n, max_size=n)),
        base_offset=base_offset, compression=draw(st.sampled_from(range(5))),
        log_append_time=draw(st.none() | st.integers(0, 2**50)))


def expected_rows(buf, pos: int = 0, start: int = -2**63, end: int | None = None) -> list[tuple]:
    """What a builder must hold for the batch at `pos`, from decode_records: one tuple per record."""
    header = K.read_header(buf, pos)
    return [(r.offset, r.timestamp, r.key, r.value, header.timestamp_type, r.headers)
            for r in K.decode_records(buf, pos) if start <= r.offset and (end is None or r.offset < end)]


def _int32s(buf, count: int) -> tuple:
    view = memoryview(buf)
    assert len(view) == 4 * count, f"{len(view)} bytes for {count} int32"
    return struct.unpack(f"<{count}i", view)


def _offsets_span(bounds: tuple, data_len: int) -> None:
    assert bounds[0] == 0 and bounds[-1] == data_len
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))


def _bit(bitmap: bytes, i: int) -> bool:
    return bool(bitmap[i >> 3] >> (i & 7) & 1)


def raw_rows(cols, *, headers: bool, types: bool) -> list[tuple]:
    """The rows of `cols` as expected_rows gives them, read from its raw buffers (shapes checked)."""
    n = cols.count
    base = fuzzing.columns_rows(cols)  # checks the plain columns' shapes; nulls as ("NULL", length)
    if types:
        type_of = _int32s(cols.timestamp_types, n)
    else:
        assert cols.timestamp_types is None
        type_of = None
    if headers:
        m = cols.header_count
        lists = _int32s(cols.header_offsets, n + 1)
        key_bounds = _int32s(cols.header_key_offsets, m + 1)
        value_bounds = _int32s(cols.header_value_offsets, m + 1)
        keys = bytes(memoryview(cols.header_key_data))
        values = bytes(memoryview(cols.header_value_data))
        valid = bytes(memoryview(cols.header_value_validity))
        assert len(valid) == (m + 7) // 8
        _offsets_span(lists, m)
        _offsets_span(key_bounds, len(keys))
        _offsets_span(value_bounds, len(values))
        pairs = []
        for j in range(m):
            key = keys[key_bounds[j]:key_bounds[j + 1]].decode("utf-8")  # strict: Arrow strings are UTF-8
            if _bit(valid, j):
                pairs.append((key, values[value_bounds[j]:value_bounds[j + 1]]))
            else:
                assert value_bounds[j] == value_bounds[j + 1]
                pairs.append((key, None))
        assert cols.header_value_null_count == sum(v is None for _, v in pairs)
        header_of = [tuple(pairs[lists[i]:lists[i + 1]]) for i in range(n)]
    else:
        for name in ("header_count", "header_offsets", "header_key_offsets", "header_key_data",
                     "header_value_offsets", "header_value_data", "header_value_validity",
                     "header_value_null_count"):
            assert getattr(cols, name) is None, name
        header_of = None
    return [(offset, ts, None if isinstance(key, tuple) else key, None if isinstance(value, tuple) else value,
             type_of[i] if types else None, header_of[i] if headers else None)
            for i, (offset, ts, key, value) in enumerate(base)]


def check_columns(cols, expected: list[tuple], *, headers: bool, types: bool) -> None:
    """`cols` holds exactly `expected` (expected_rows tuples), raw buffers and Arrow view alike."""
    wanted = [(o, t, k, v, tt if types else None, h if headers else None) for o, t, k, v, tt, h in expected]
    assert raw_rows(cols, headers=headers, types=types) == wanted
    table = cols.to_arrow()
    table.validate(full=True)
    fields = [pa.field("offset", pa.int64()), pa.field("timestamp", pa.int64()),
              pa.field("key", pa.binary()), pa.field("value", pa.binary())]
    if types:
        fields.append(pa.field("timestampType", pa.int32()))
    if headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    assert table.schema.equals(pa.schema(fields)), table.schema  # nullable everywhere, no large_* types
    rows = table.to_pylist()
    assert [(r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows] == [e[:4] for e in expected]
    if types:
        assert [r["timestampType"] for r in rows] == [e[4] for e in expected]
    if headers:
        assert [r["headers"] for r in rows] == [[{"key": k, "value": v} for k, v in e[5]] for e in expected]


@SETTINGS
@given(st.sampled_from(FLAGS), st.data())
def test_columns_match_decode_records_across_batches_bounds_and_reuse(flags, data):
    headers, types = flags
    builder = K.ColumnarBuilder(headers=headers, timestamp_types=types)
    assert (builder.headers, builder.timestamp_types) == flags
    for _ in range(data.draw(st.integers(1, 3), label="rounds")):  # finish(), then the same builder again
        base = data.draw(st.integers(0, 2**40), label="base")
        batches, offset = [], base
        for _ in range(data.draw(st.integers(1, 4), label="batches")):
            kw = data.draw(batch_args(offset))
            batches.append(K.encode_batch(**kw))
            offset += len(kw["keys"])
            if data.draw(st.booleans(), label="marker"):
                # A transaction marker between data batches: skipped by default, contributes nothing.
                batches.append(K.encode_control_batch(True, 5, 7, 0, 99, base_offset=offset))
                offset += 1
        start = data.draw(st.none() | st.integers(base - 2, offset + 2), label="start")
        end = data.draw(st.none() | st.integers(base - 2, offset + 2), label="end")
        stream = b"".join(batches)
        bounds = {} if start is None else {"start_offset": start}
        expected, pos = [], 0
        for batch in batches:
            header = builder.add_batch(stream, pos, end_offset=end, **bounds)
            assert header.position == pos
            if not header.is_control:
                expected += expected_rows(stream, pos, -2**63 if start is None else start, end)
            pos += len(batch)
        assert builder.count == len(expected)
        check_columns(builder.finish(), expected, headers=headers, types=types)
    assert builder.count == 0
    check_columns(builder.finish(), [], headers=headers, types=types)


@SETTINGS
@given(batch_args(0, max_records=10))
def test_plain_columns_are_the_same_bytes_with_or_without_the_optional_ones(kw):
    buf = K.encode_batch(**kw)
    plain = K.ColumnarBuilder()
    plain.add_batch(buf)
    full = K.ColumnarBuilder(headers=True, timestamp_types=True)
    full.add_batch(buf)
    a, b = plain.finish(), full.finish()
    for name in ("offsets", "timestamps", "key_offsets", "key_data", "key_validity", "value_offsets",
                 "value_data", "value_validity"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    assert (a.count, a.key_null_count, a.value_null_count) == (b.count, b.key_null_count, b.value_null_count)
    assert a.to_arrow().schema.names == ["offset", "timestamp", "key", "value"]


@SETTINGS
@given(st.lists(st.lists(st.sampled_from(UTF8_EDGES) | st.binary(max_size=4), max_size=6).map(b"".join),
                min_size=1, max_size=8))
def test_header_keys_are_utf8_with_replacements_as_python_decodes_them(keys):
    # Arrow strings must be valid UTF-8; ill-formed bytes become U+FFFD per maximal subpart, the
    # string decode_records (errors="replace") and Java's decoder give.
    buf = K.encode_batch([None], [None], [[(k, b"v") for k in keys]], timestamps=0)
    builder = K.ColumnarBuilder(headers=True)
    builder.add_batch(buf)
    cols = builder.finish()
    want = [k.decode("utf-8", "replace") for k in keys]
    assert [k for k, _ in raw_rows(cols, headers=True, types=False)[0][5]] == want
    assert [h["key"] for h in cols.to_arrow().column("headers")[0].as_py()] == want
    assert [k for k, _ in K.decode_records(buf)[0].headers] == want


def test_timestamp_type_follows_the_batch_attribute():
    create = K.encode_batch([b"a", b"b"], [b"1", b"2"], timestamps=[5, 6], base_offset=0)
    append = K.encode_batch([b"c"], [b"3"], timestamps=[7], base_offset=2, log_append_time=1000)
    builder = K.ColumnarBuilder(timestamp_types=True)
    builder.add_batch(create)
    builder.add_batch(append)
    table = builder.finish().to_arrow()
    assert table.column("timestampType").to_pylist() == [0, 0, 1]
    assert table.column("timestamp").to_pylist() == [5, 6, 1000]


def test_arrow_columns_share_the_native_buffers():
    buf = K.encode_batch([b"k"] * 3, [b"v"] * 3, [[("a", b"x"), ("b", None)], [], [("c", b"yz")]],
                         timestamps=1)
    builder = K.ColumnarBuilder(headers=True, timestamp_types=True)
    builder.add_batch(buf)
    cols = builder.finish()
    table = cols.to_arrow()
    lists = table.column("headers")
    entries = lists.values
    keys, values = entries.field("key"), entries.field("value")
    address = lambda nb: pa.py_buffer(nb).address  # noqa: E731
    assert table.column("timestampType").buffers()[1].address == address(cols.timestamp_types)
    assert lists.buffers()[1].address == address(cols.header_offsets)
    assert keys.buffers()[1].address == address(cols.header_key_offsets)
    assert keys.buffers()[2].address == address(cols.header_key_data)
    assert values.buffers()[0].address == address(cols.header_value_validity)
    assert values.buffers()[1].address == address(cols.header_value_offsets)
    assert values.buffers()[2].address == address(cols.header_value_data)
    assert lists.to_pylist() == [[{"key": "a", "value": b"x"}, {"key": "b", "value": None}], [],
                                 [{"key": "c", "value": b"yz"}]]


def test_options_are_keyword_only_and_off_by_default():
    with pytest.raises(TypeError):
        K.ColumnarBuilder(True)
    builder = K.ColumnarBuilder()
    assert (builder.headers, builder.timestamp_types) == (False, False)
    builder.add_batch(K.encode_batch([b"k"], [b"v"], [[("h", b"x")]], timestamps=1))
    cols = builder.finish()
    assert cols.timestamp_types is None and cols.header_offsets is None and cols.header_count is None
    assert cols.to_arrow().schema.names == ["offset", "timestamp", "key", "value"]


# ---------------------------------------------------------------------------
# Hostile header sections


PREFIX = K.encode_batch([b"p0", b"p1"], [b"v0", b"v1"], [[("a", b"1"), ("b", None), ("c", b"")], []],
                        timestamps=7)
SUFFIX = K.encode_batch([None], [None], [[("s", None)] * 6], timestamps=9, base_offset=100,
                        log_append_time=50)


def header_fields(plain: bytes) -> list[tuple[int, list]]:
    """Per record with headers: (its index, the (name, start, end) spans of its header fields and count)."""
    out = []
    for i, fields in enumerate(fuzzing.record_fields(plain)):
        hdr = [f for f in fields if f[0].startswith("header")]
        if len(hdr) > 1:
            out.append((i, [f for f in fields if f[0] in ("length",)] + hdr))
    return out


def replace_varint(plain: bytes, fields: list, name: str, value: int, *, nth: int = 0, pad: int = 0,
                   refit: bool = True, drop: int = 0) -> bytes:
    """Put `value` in the nth varint field called `name` of one record, dropping `drop` bytes after
    it; refit the record's length if asked."""
    length_start, body_start = fields[0][1], fields[0][2]
    body_end = body_start + read_varint(plain, length_start)[0]
    _, s, e = [f for f in fields if f[0] == name][nth]
    lie = varint(value, pad)
    plain = plain[:s] + lie + plain[e + drop:]
    if refit:
        body_end += len(lie) - (e - s) - drop
        plain = plain[:length_start] + varint(body_end - body_start) + plain[body_start:]
    return plain


def _hostile_source():
    kw = dict(keys=[b"k0", b"k1", b"k2"], values=[b"v0", b"v1", b"v2"],
              headers=[[("x", b"1")], [("h1", b"aa"), ("h2", b"bbb")], [("t", None)]], timestamps=3,
              base_offset=10)
    batch = K.encode_batch(**kw)
    return batch[:61], batch[61:]


def _hostile(mutate, compressor="none") -> bytes:
    header, plain = _hostile_source()
    fields = dict(header_fields(plain))[1]
    return v2_from_plain(header, mutate(plain, fields), compressor)


HOSTILE = {
    "count-past-the-headers": lambda p, f: replace_varint(p, f, "header_count", 3),
    "count-negative": lambda p, f: replace_varint(p, f, "header_count", -1),
    "count-huge": lambda p, f: replace_varint(p, f, "header_count", 2**31 - 1),
    "key-length-null": lambda p, f: replace_varint(p, f, "header_key_length", -1),
    "key-length-past-the-record": lambda p, f: replace_varint(p, f, "header_key_length", 40, refit=False),
    "value-length-past-the-record": lambda p, f: replace_varint(p, f, "header_value_length", 9, nth=1),
    "value-length-short": lambda p, f: replace_varint(p, f, "header_value_length", 1, nth=1),
    "key-length-varint-too-long": lambda p, f: replace_varint(p, f, "header_key_length", 1, pad=5),
    "count-fewer-than-present": lambda p, f: replace_varint(p, f, "header_count", 1),
    "truncated-in-a-value": lambda p, f: p[:[e for n, _, e in f if n == "header_value"][1] - 1],
    "truncated-after-a-key": lambda p, f: p[:[e for n, _, e in f if n == "header_key"][0]],
}


@pytest.mark.parametrize("compressor", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_header_section_is_refused_and_leaves_nothing(name, compressor):
    buf = _hostile(HOSTILE[name], compressor)
    with pytest.raises(InvalidRecordError):
        K.decode_records(buf)
    builder = K.ColumnarBuilder(headers=True, timestamp_types=True)
    builder.add_batch(PREFIX)
    with pytest.raises(InvalidRecordError):
        builder.add_batch(buf)
    builder.add_batch(SUFFIX)
    check_columns(builder.finish(), expected_rows(PREFIX) + expected_rows(SUFFIX), headers=True, types=True)


def test_any_negative_header_value_length_is_null_as_in_kafka():
    # Kafka's DefaultRecord.readHeaders: a negative value size is a null value, -1 or not.
    buf = _hostile(lambda p, f: replace_varint(p, f, "header_value_length", -5, nth=1, drop=3))
    records = K.decode_records(buf)
    assert records[1].headers == (("h1", b"aa"), ("h2", None))
    builder = K.ColumnarBuilder(headers=True)
    builder.add_batch(buf)
    check_columns(builder.finish(), expected_rows(buf), headers=True, types=False)


def test_value_bits_of_a_rejected_batch_do_not_leak_into_the_next():
    # PREFIX leaves 3 headers (a bitmap mid-byte); the hostile batch writes 5 non-null header values
    # before its second record fails; SUFFIX's 6 null values land on those bits and must read null.
    batch = K.encode_batch([b"k", b"k"], [b"v", b"v"], [[(f"h{i}", b"set") for i in range(5)], [("x", b"1")]],
                           timestamps=1)
    plain = batch[61:]
    plain = replace_varint(plain, dict(header_fields(plain))[1], "header_key_length", -1)
    hostile = v2_from_plain(batch[:61], plain, "none")
    builder = K.ColumnarBuilder(headers=True)
    builder.add_batch(PREFIX)
    with pytest.raises(InvalidRecordError):
        builder.add_batch(hostile)
    builder.add_batch(SUFFIX)
    cols = builder.finish()
    check_columns(cols, expected_rows(PREFIX) + expected_rows(SUFFIX), headers=True, types=False)
    assert cols.header_value_null_count == 1 + 6


# The mutation loop: runs in a child (see the test below), importable by it.

def _loop_seeds(rng: random.Random) -> list[tuple[bytes, bytes, str]]:
    """(61-byte header, plain records, compressor) of valid batches with many kinds of headers."""
    seeds = []
    for compressor in ("none", "none", "none", "gzip", "snappy", "lz4", "zstd"):
        for n in (1, 3, 8):
            headers = [[(rng.choice(["", "h", "trace-id", "ключ", b"\xff\xfe", b"\xe2\x82"]),
                         rng.choice([None, b"", rng.randbytes(rng.randint(1, 20))]))
                        for _ in range(rng.choice((0, 1, 2, 5, 70)))] for _ in range(n)]
            batch = K.encode_batch([rng.randbytes(3) for _ in range(n)], [rng.randbytes(5) for _ in range(n)],
                                   headers, timestamps=1, base_offset=rng.randint(0, 2**40),
                                   log_append_time=rng.choice((None, 2**41)))
            if any(headers):
                seeds.append((batch[:61], batch[61:], compressor))
    return seeds


def _mutate_headers(rng: random.Random, plain: bytes) -> bytes:
    """`plain` with one lie, cut, flip or splice inside the header section of one record."""
    index, fields = rng.choice(header_fields(plain))
    op = rng.choice(("lie", "lie", "cut", "flip", "splice"))
    lo, hi = fields[1][1], fields[-1][2]  # the record's header section
    if op == "lie":
        names = [f[0] for f in fields[1:] if f[0].endswith(("_length", "_count"))]
        name = rng.choice(names)
        nth = rng.randrange(names.count(name))
        current = read_varint(plain, [f for f in fields if f[0] == name][nth][1])[0]
        value = rng.choice((current + 1, current - 1, current + 2, -1, -2, 0, hi - lo, hi - lo + 1,
                            2**31 - 1, -2**31, current * 2 + 1))
        return replace_varint(plain, fields, name, value, nth=nth, pad=rng.choice((0, 0, 0, 1, 4)),
                              refit=rng.random() < 0.6)
    if op == "cut":
        return plain[:rng.randint(lo, hi)]
    if op == "flip":
        mutable = bytearray(plain)
        for _ in range(rng.randint(1, 3)):
            mutable[rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
        return bytes(mutable)
    at = rng.randint(lo, hi)
    return plain[:at] + rng.randbytes(rng.randint(0, 6)) + plain[at + rng.randint(0, 6):]


def hostile_loop(seed: int, count: int) -> dict:
    """Feed `count` mutated batches to decode_records and a (good, hostile, good) builder; what happened."""
    rng = random.Random(seed)
    seeds = _loop_seeds(rng)
    prefix, suffix = expected_rows(PREFIX), expected_rows(SUFFIX)
    outcome = {"accepted": 0, "rejected": 0, "problems": []}
    for i in range(count):
        header, plain, compressor = rng.choice(seeds)
        buf = v2_from_plain(header, _mutate_headers(rng, plain), compressor)
        try:
            middle, refused = expected_rows(buf), None
        except CorruptRecordError as exc:
            middle, refused = [], exc
        builder = K.ColumnarBuilder(headers=True, timestamp_types=True)
        builder.add_batch(PREFIX)
        try:
            builder.add_batch(buf)
            error = None
        except Exception as exc:  # judged below: only InvalidRecordError may come out
            error = exc
        builder.add_batch(SUFFIX)
        try:
            if (error is None) != (refused is None):
                raise AssertionError(f"builder {error!r} but decode_records {refused!r}")
            if error is not None and type(error) is not type(refused):
                raise AssertionError(f"builder {error!r} but decode_records {refused!r}")
            # Cuts can leave fewer bytes than recordCount needs: that is refused, as corrupt, from the
            # batch header before any record is read. Everything else is an invalid record.
            if error is not None and not isinstance(error, InvalidRecordError) and not (
                    isinstance(error, CorruptRecordError) and "cannot fit" in str(error)):
                raise AssertionError(f"{type(error).__name__}: {error}")
            check_columns(builder.finish(), prefix + middle + suffix, headers=True, types=True)
        except AssertionError as exc:
            outcome["problems"].append(f"input {i} ({buf.hex()}): {exc}")
            if len(outcome["problems"]) >= 5:
                break
        outcome["accepted" if error is None else "rejected"] += 1
    return outcome


def test_mutated_header_sections_are_refused_cleanly_or_decoded_like_decode_records():
    # In a child: an out-of-bounds read can be a segfault.
    code = ("import json, test_columnar_headers as t\n"
            f"print(json.dumps(t.hostile_loop({LOOP_SEED}, {LOOP_INPUTS})))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    outcome = json.loads(result.stdout)
    assert not outcome["problems"], "\n".join(outcome["problems"])
    # Both outcomes must be common, or the loop is not testing what it claims.
    assert outcome["accepted"] > LOOP_INPUTS // 10 and outcome["rejected"] > LOOP_INPUTS // 10, outcome
