"""Kafka v2 RecordBatch codec: ours (logstore.formats.kafka) against aiokafka's Cython codec.

Every pytest-benchmark group holds exactly two benchmarks, ours and the peer,
on the same input; bench/report.py turns the JSON into ratios against the
issue's targets. Before timing, each benchmark checks once (untimed) that its
output round-trips through the *other* implementation to the expected records,
so a broken fast path cannot be measured by accident. `side` is the outermost
parametrize so that it varies fastest: a group's two sides run back to back
and see the same machine load.

Run with `make bench`; `make test` does not collect this folder.
"""
from __future__ import annotations

import pytest
from crc32c import crc32c

SHAPES = ("v100", "v1k")
ENCODE_CODECS = ("none", "lz4", "lz4-peer-hc9")  # lz4-peer-hc9: information only
CRC_MODES = ("nocrc", "crc")  # decoders: neither side checks the CRC / both do
DECODE_CODECS = ("none", "lz4")
SIDES = ("ours", "peer")
PEER_BATCH_SIZE = 1 << 30  # aiokafka refuses appends past batch_size; never reached here

# Minimum ours/peer throughput ratio per operation (the targets).
TARGETS = {
    "encode-bulk": 2.0,
    "encode-builder": 1.0,
    "decode-objects": 1.5,
    "decode-columnar": 10.0,
    "validate-crc": 0.8,
}

OURS_API = {
    "encode-bulk": "K.encode_batch(keys, values, headers, timestamps)",
    "encode-builder": "K.BatchBuilder: append() x N + build()",
    "decode-objects": "K.decode_records(buf, verify_crc=crc)",
    "decode-columnar": "K.decode_columnar(buf, verify_crc=crc)",
    "validate-crc": "K.validate_batch(stream, pos) walked over the stream",
}
PEER_API = {
    "encode-bulk": "DefaultRecordBatchBuilder: append() x N + build()",
    "encode-builder": "DefaultRecordBatchBuilder: append() x N + build()",
    "decode-objects": "list(DefaultRecordBatch(buf)) (+ validate_crc() when crc)",
    "decode-columnar": "list(DefaultRecordBatch(buf)) (+ validate_crc() when crc)",
    "validate-crc": "crc32c.crc32c(batch[21:end]) per batch",
}


def _tag(benchmark, op, case_id, side, *, records=None, nbytes=None, codec_name=""):
    target = TARGETS[op] if codec_name != "lz4-peer-hc9" else None
    benchmark.group = f"{op}/{case_id}"
    benchmark.extra_info.update({
        "op": op,
        "case": case_id,
        "side": side,
        "api": (OURS_API if side == "ours" else PEER_API)[op],
        "target": target,
        "unit": "records" if records is not None else "bytes",
        "records": records,
        "bytes": nbytes,
    })


def _records(recs):
    """Records (ours or aiokafka's) as comparable tuples; keys/values must be bytes."""
    out = []
    for r in recs:
        assert r.key is None or type(r.key) is bytes, type(r.key)
        assert r.value is None or type(r.value) is bytes, type(r.value)
        out.append((r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]))
    return out


def _peer_encoder(PeerBuilder, case):
    keys, values, timestamps, headers = case.keys, case.values, case.timestamps, case.headers
    codec, n = case.codec, case.count

    def run():
        builder = PeerBuilder(2, codec, 0, -1, -1, -1, PEER_BATCH_SIZE)
        append = builder.append
        for offset, ts, key, value, hdrs in zip(range(n), timestamps, keys, values, headers):
            append(offset, ts, key, value, hdrs)
        return builder.build()

    return run


def _check_encoded(ours, PeerReader, case, out, side):
    """`out` must decode to the input records with the other side's decoder."""
    expected = case.expected()
    if side == "ours":
        assert _records(PeerReader(bytes(out))) == expected
    else:
        assert _records(ours.decode_records(out)) == expected
    header = ours.validate_batch(out, client=True)
    assert header.record_count == case.count and header.compression == case.codec


# ---------------------------------------------------------------------------
# Encoding


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("codec_name", ENCODE_CODECS)
@pytest.mark.parametrize("shape", SHAPES)
def test_encode_bulk(benchmark, cases, ours, peer, peer_lz4_level, side, shape, codec_name):
    case = cases(shape, codec_name)
    PeerBuilder, PeerReader = peer
    if side == "ours":
        keys, values, headers, timestamps = case.keys, case.values, case.headers_arg, case.timestamps
        codec, level, encode = case.codec, case.level, ours.encode_batch

        def run():
            return encode(keys, values, headers, timestamps, compression=codec, compression_level=level)
    else:
        run = _peer_encoder(PeerBuilder, case)
    with peer_lz4_level(case.peer_level):
        out = run()
        _check_encoded(ours, PeerReader, case, out, side)
        if codec_name == "none":  # uncompressed, both must write the very same bytes
            assert bytes(out) == bytes(_peer_encoder(PeerBuilder, case)())
        _tag(benchmark, "encode-bulk", case.id, side, records=case.count, codec_name=codec_name)
        benchmark(run)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("codec_name", ENCODE_CODECS)
@pytest.mark.parametrize("shape", SHAPES)
def test_encode_builder(benchmark, cases, ours, peer, peer_lz4_level, side, shape, codec_name):
    case = cases(shape, codec_name)
    PeerBuilder, PeerReader = peer
    if side == "ours":
        keys, values, timestamps, headers = case.keys, case.values, case.timestamps, case.headers
        codec, level, Builder = case.codec, case.level, ours.BatchBuilder

        def run():
            builder = Builder(compression=codec, compression_level=level)
            append = builder.append
            for ts, key, value, hdrs in zip(timestamps, keys, values, headers):
                append(ts, key, value, hdrs)
            return builder.build()
    else:
        run = _peer_encoder(PeerBuilder, case)
    with peer_lz4_level(case.peer_level):
        out = run()
        _check_encoded(ours, PeerReader, case, out, side)
        if codec_name == "none":
            assert bytes(out) == bytes(_peer_encoder(PeerBuilder, case)())
        _tag(benchmark, "encode-builder", case.id, side, records=case.count, codec_name=codec_name)
        benchmark(run)


# ---------------------------------------------------------------------------
# Decoding


def _peer_decoder(PeerReader, buf, crc):
    if crc:
        def run():
            batch = PeerReader(buf)
            if not batch.validate_crc():
                raise AssertionError("peer rejected a valid CRC")
            return list(batch)
    else:
        def run():
            return list(PeerReader(buf))
    return run


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("crc", CRC_MODES)
@pytest.mark.parametrize("codec_name", DECODE_CODECS)
@pytest.mark.parametrize("shape", SHAPES)
def test_decode_objects(benchmark, cases, ours, peer, side, shape, codec_name, crc):
    case = cases(shape, codec_name)
    PeerReader = peer[1]
    buf = case.batch
    verify = crc == "crc"
    if side == "ours":
        decode = ours.decode_records

        def run():
            return decode(buf, verify_crc=verify)
    else:
        run = _peer_decoder(PeerReader, buf, verify)
    out = run()
    assert type(out) is list and len(out) == case.count
    assert _records(out) == case.expected()
    _tag(benchmark, "decode-objects", f"{case.id}/{crc}", side, records=case.count)
    benchmark(run)


def _columns_as_records(columns):
    """Rebuild (offset, timestamp, key, value) tuples from a Columns object."""
    n = columns.count
    offsets = memoryview(columns.offsets).cast("q")
    timestamps = memoryview(columns.timestamps).cast("q")
    key_off = memoryview(columns.key_offsets).cast("i")
    value_off = memoryview(columns.value_offsets).cast("i")
    key_data = bytes(memoryview(columns.key_data))
    value_data = bytes(memoryview(columns.value_data))
    key_valid = bytes(memoryview(columns.key_validity))
    value_valid = bytes(memoryview(columns.value_validity))
    assert len(offsets) == len(timestamps) == n and len(key_off) == len(value_off) == n + 1
    out = []
    for i in range(n):
        key = key_data[key_off[i]:key_off[i + 1]] if key_valid[i >> 3] >> (i & 7) & 1 else None
        value = value_data[value_off[i]:value_off[i + 1]] if value_valid[i >> 3] >> (i & 7) & 1 else None
        out.append((offsets[i], timestamps[i], key, value))
    return out


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("crc", CRC_MODES)
@pytest.mark.parametrize("codec_name", DECODE_CODECS)
@pytest.mark.parametrize("shape", SHAPES)
def test_decode_columnar(benchmark, cases, ours, peer, side, shape, codec_name, crc):
    case = cases(shape, codec_name)
    PeerReader = peer[1]
    buf = case.batch
    verify = crc == "crc"
    expected = [r[:4] for r in case.expected()]
    if side == "ours":
        decode = ours.decode_columnar

        def run():
            return decode(buf, verify_crc=verify)
        assert _columns_as_records(run()) == expected
    else:
        run = _peer_decoder(PeerReader, buf, verify)
        assert [r[:4] for r in _records(run())] == expected
    _tag(benchmark, "decode-columnar", f"{case.id}/{crc}", side, records=case.count)
    benchmark(run)


# ---------------------------------------------------------------------------
# Header validation with CRC over a stream of ~1 MiB batches


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("codec_name", DECODE_CODECS)
@pytest.mark.parametrize("shape", SHAPES)
def test_validate_crc(benchmark, streams, ours, side, shape, codec_name):
    stream = streams(shape, codec_name)
    data = stream.data
    view = memoryview(data)
    # What crc32c alone computes: each batch's CRC-covered bytes [21, end).
    crcs = [crc32c(view[start + 21:end]) for start, end in stream.spans]
    if side == "ours":
        validate = ours.validate_batch
        size = len(data)

        def run():
            pos = 0
            count = 0
            while pos < size:
                header = validate(data, pos)
                pos += header.batch_length + 12
                count += 1
            return count
        assert run() == len(stream.spans)
        headers = [validate(data, start) for start, _ in stream.spans]
        assert [h.crc for h in headers] == crcs
        assert sum(h.record_count for h in headers) == stream.records
    else:
        slices = [(start + 21, end) for start, end in stream.spans]

        def run():
            return [crc32c(view[start:end]) for start, end in slices]
        stored = [int.from_bytes(data[start + 17:start + 21], "big") for start, _ in stream.spans]
        assert run() == crcs == stored
    _tag(benchmark, "validate-crc", f"{shape}/{codec_name}", side, nbytes=len(data))
    benchmark(run)
