"""Inputs for the codec microbenchmarks (bench/test_codec.py), built once per case.

Everything here is deterministic (seeded RNG, fixed timestamps), so two runs
time the same bytes. The peer is aiokafka 0.14.0's Cython codec; the imports
below fail loudly rather than fall back to aiokafka's pure-Python classes.

Cases (the issue's shapes): 1,000 records, key 16 B, and either value 100 B
without headers ("v100") or value 1 KiB with one header per record ("v1k");
uncompressed ("none") or LZ4 ("lz4"). Values are space-separated words from a
seeded 512-word vocabulary, so LZ4 compresses them about 2x, like text/JSON
payloads; random bytes would let LZ4 skip most of its work.

LZ4 level: the issue fixes ours at LZ4's fast level (never LZ4-HC), the level
Kafka's Java producer uses. aiokafka hard-wires level 9 (LZ4-HC) in
aiokafka.codec.lz4_encode, so the "lz4" cases run aiokafka's builder with that
function bound to the same fast level (see `peer_lz4_level`): both sides do the
same compression work. The "lz4-peer-hc9" cases (information only, no target)
run each side as shipped: ours fast, aiokafka HC level 9.
"""
from __future__ import annotations

import contextlib
import functools
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

# The Cython peer, never the pure-Python fallback: import the compiled module
# itself, not aiokafka.record.default_records (which picks one at import).
import aiokafka.codec as _peer_codec
import aiokafka.record._crecords.default_records as _peer_native
import pytest
from aiokafka.record._crecords.default_records import (
    DefaultRecordBatch as PeerReader,
)
from aiokafka.record._crecords.default_records import (
    DefaultRecordBatchBuilder as PeerBuilder,
)

import logstore.formats.kafka as K
import logstore.native.record_batch as _ours_native

for _mod in (_peer_native, _ours_native):
    if not _mod.__file__.endswith((".so", ".pyd")):
        raise RuntimeError(f"{_mod.__name__} is not a compiled extension: {_mod.__file__}")
if PeerBuilder.__module__ != "aiokafka.record._crecords.default_records":
    raise RuntimeError(f"aiokafka builder is {PeerBuilder.__module__}, not the Cython one")
if os.environ.get("AIOKAFKA_NO_EXTENSIONS"):
    raise RuntimeError("AIOKAFKA_NO_EXTENSIONS is set; unset it to benchmark aiokafka's Cython codec")

# The producer-state bench's peer is the tests' plain-Python producer table (tests/producer/model.py):
# one twin of the native table, so the peer timed here is the oracle the tests trust.
PRODUCER_MODEL_DIR = str(Path(__file__).resolve().parent.parent / "tests" / "producer")
if PRODUCER_MODEL_DIR not in sys.path:
    sys.path.append(PRODUCER_MODEL_DIR)

SEED = 20240521
RECORDS = 1000
KEY_SIZE = 16
BASE_TIMESTAMP = 1_700_000_000_000
VALUE_SIZES = {"v100": 100, "v1k": 1024}
HEADER_KEY = "trace-id"
# codec name -> (codec id, our compression_level, aiokafka's LZ4 level)
CODECS = {"none": (K.NONE, None, None), "lz4": (K.LZ4, None, 0), "lz4-peer-hc9": (K.LZ4, None, 9)}

# The stream for the validation benchmark: 16 batches of about 1 MiB each.
STREAM_BATCHES = 16
STREAM_BATCH_BYTES = 1 << 20
STREAM_POOL = 4096  # distinct values cycled through the stream's batches


def _vocabulary(rng: random.Random) -> list[bytes]:
    letters = b"abcdefghijklmnopqrstuvwxyz"
    return [bytes(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(512)]


def _values(rng: random.Random, words: list[bytes], size: int, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        parts, n = [], 0
        while n < size:
            w = rng.choice(words)
            parts.append(w)
            n += len(w) + 1
        out.append(b" ".join(parts)[:size].ljust(size, b" "))
    return out


@dataclass(frozen=True)
class Case:
    """One benchmark input: parallel per-record columns plus derived batches."""

    shape: str                 # "v100" or "v1k"
    codec_name: str            # "none", "lz4" or "lz4-peer-hc9"
    codec: int                 # Kafka codec id
    level: int | None          # our compression_level
    peer_level: int | None     # aiokafka's LZ4 level
    keys: list
    values: list
    timestamps: list
    headers: list              # per record: list of (str, bytes); [] when none
    headers_arg: object        # what ours' encode_batch gets: None when no headers
    batch: bytes               # encoded by ours at `level`; the decode input

    @property
    def id(self) -> str:
        return f"{self.shape}/{self.codec_name}"

    @property
    def count(self) -> int:
        return len(self.keys)

    def expected(self) -> list:
        """The records every encoder must round-trip and every decoder must return."""
        return [(i, self.timestamps[i], self.keys[i], self.values[i], list(self.headers[i]))
                for i in range(self.count)]


def _build_columns(shape: str, count: int, seed: int):
    rng = random.Random(f"{seed}/{shape}")
    words = _vocabulary(rng)
    keys = [b"key-%012d" % i for i in range(count)]
    assert all(len(k) == KEY_SIZE for k in keys)
    values = _values(rng, words, VALUE_SIZES[shape], count)
    timestamps = [BASE_TIMESTAMP + i * 3 + rng.randint(0, 2) for i in range(count)]
    if shape == "v1k":
        headers = [[(HEADER_KEY, b"%016x" % rng.getrandbits(64))] for _ in range(count)]
    else:
        headers = [[] for _ in range(count)]
    return keys, values, timestamps, headers


_CASES: dict[tuple[str, str], Case] = {}


def get_case(shape: str, codec_name: str) -> Case:
    key = (shape, codec_name)
    if key not in _CASES:
        keys, values, timestamps, headers = _build_columns(shape, RECORDS, SEED)
        codec, level, peer_level = CODECS[codec_name]
        headers_arg = headers if any(headers) else None
        batch = K.encode_batch(keys, values, headers_arg, timestamps,
                               compression=codec, compression_level=level)
        _CASES[key] = Case(shape, codec_name, codec, level, peer_level, keys, values, timestamps,
                           headers, headers_arg, batch)
    return _CASES[key]


@dataclass(frozen=True)
class Stream:
    """Concatenated ~1 MiB v2 batches and their (start, end) byte spans."""

    shape: str
    codec_name: str
    data: bytes
    spans: list
    records: int


_STREAMS: dict[tuple[str, str], Stream] = {}


def get_stream(shape: str, codec_name: str) -> Stream:
    key = (shape, codec_name)
    if key in _STREAMS:
        return _STREAMS[key]
    codec, level, _ = CODECS[codec_name]
    keys, values, timestamps, headers = _build_columns(shape, STREAM_POOL, SEED + 1)
    headers_arg = headers if any(headers) else None
    # Records per batch so that one batch is about 1 MiB on the wire.
    sample = K.encode_batch(keys[:1000], values[:1000], headers_arg and headers_arg[:1000],
                            timestamps[:1000], compression=codec, compression_level=level)
    per_batch = max(1, round(STREAM_BATCH_BYTES * 1000 / (len(sample) - K.RECORD_BATCH_OVERHEAD)))
    parts, spans, pos, total_records = [], [], 0, 0
    for b in range(STREAM_BATCHES):
        idx = [(b * 977 + i) % STREAM_POOL for i in range(per_batch)]
        batch = K.encode_batch([keys[i] for i in idx], [values[i] for i in idx],
                               None if headers_arg is None else [headers_arg[i] for i in idx],
                               [BASE_TIMESTAMP + b * 10_000 + i for i in range(per_batch)],
                               base_offset=total_records, compression=codec,
                               compression_level=level)
        parts.append(batch)
        spans.append((pos, pos + len(batch)))
        pos += len(batch)
        total_records += per_batch
    stream = Stream(shape, codec_name, b"".join(parts), spans, total_records)
    _STREAMS[key] = stream
    return stream


@pytest.fixture(scope="session")
def cases():
    """get_case(shape, codec_name) -> Case, cached for the session."""
    return get_case


@pytest.fixture(scope="session")
def streams():
    """get_stream(shape, codec_name) -> Stream, cached for the session."""
    return get_stream


@pytest.fixture(scope="session")
def ours():
    """Our codec façade (logstore.formats.kafka)."""
    return K


@pytest.fixture(scope="session")
def peer():
    """aiokafka's Cython classes: (builder class, reader class)."""
    return PeerBuilder, PeerReader


@contextlib.contextmanager
def _peer_lz4_level(level):
    """Bind aiokafka's LZ4 compressor to `level` while benchmarking its builder.

    The Cython builder looks `lz4_encode` up in its module's globals on every
    build(), so rebinding that name changes the level it compresses with.
    """
    original = _peer_native.lz4_encode
    if level is not None:
        _peer_native.lz4_encode = functools.partial(_peer_codec.lz4_encode, level=level)
    try:
        yield
    finally:
        _peer_native.lz4_encode = original


@pytest.fixture(scope="session")
def peer_lz4_level():
    """Context manager binding aiokafka's LZ4 level for its builder."""
    return _peer_lz4_level
