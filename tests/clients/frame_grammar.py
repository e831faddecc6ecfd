"""Randomized request frames from kio's schemas: valid, mutated, oversized, with random keys and garbage tags.

`FrameGrammar(rng, apis, topics)` draws a request of any (api key, version)
in `apis` (what the broker advertises in ApiVersions) from kio's request
classes, each field drawn by its Kafka type from a seeded `random.Random`:
names from a small pool (hostile topics, unknown names, names of 249 and 300
characters, path tricks, empty), integers at their edges, arrays empty, null,
short or huge, record batches valid or random. `frame()` then applies at most
one mutation (bit flips, truncation, length-prefix lies inside the body, an
unknown api key or version, garbage tagged fields, a size prefix beyond
`socket.request.max.bytes`). The pool never names the well-behaved clients'
topics or groups, so nothing hostile can legitimately change their data.

The pool of names is small on purpose: auto-creation, CreateTopics and
CreatePartitions can only ever create a bounded number of partitions (topics
in the pool times `MAX_SMALL_PARTITIONS`, or requests beyond Kafka's limits,
which must be refused), so fds and disk stay bounded by design, not by luck.
"""
from __future__ import annotations

import dataclasses
import io
import random
import struct
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from kio.serial import entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type, is_optional

import logstore.formats.kafka as K

MAX_SMALL_PARTITIONS = 7
ELEMENT_BUDGET = 20_000  # elements of arrays in one drawn request: huge arrays, not an unbounded generator
NOW_MS = int(time.time() * 1000)
# Field names whose integers create partitions or replicas: drawn from a small set plus Kafka's refusals.
PARTITION_COUNTS = ("num_partitions", "count", "replication_factor")
KINDS = ("valid", "bit-flip", "truncate", "length-lie", "api-key", "tagged", "oversized", "size-lie")
KIND_WEIGHTS = (40, 14, 10, 12, 8, 8, 3, 5)


def hostile_topics(prefix: str) -> list[str]:
    """Topic names the hostile load may create, produce to and delete."""
    return [f"{prefix}-{i}" for i in range(6)]


def name_pool(topics: list[str]) -> list[str]:
    """Every string a drawn request may carry: valid hostile names, unknown ones, and invalid ones."""
    return [*topics, "hostile-unknown", "", ".", "..", "../escape", "a/b", "x" * 249, "y" * 250, "z" * 300,
            "ütf-8-ñame", "__consumer_offsets", "__transaction_state", "sp ace", "\x00nul"]


@cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field, object, str | None, bool], ...]:
    """(field, classification, kafka type or None for entities, nullable) of each field of a kio class."""
    out = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        kafka_type = None if isinstance(kind, (EntityField, EntityTupleField)) else get_schema_field_type(f)
        out.append((f, kind, kafka_type, is_optional(f) or "None" in str(f.type)))
    return tuple(out)


@dataclass
class Drawn:
    """One frame and how it was made (for a reproducer)."""

    kind: str
    api_key: int
    version: int
    correlation_id: int
    data: bytes
    """The whole frame, size prefix included."""
    framed: bool
    """Whether the size prefix is honest, so that the broker's next frame starts after this one."""
    answered: bool | None
    """True: a valid request the broker must answer; False: it must not (Produce with acks=0); None: either
    (a mutated frame may still read as a request, or close the connection)."""


class FrameGrammar:
    """Seeded request frames for the (api key, version) pairs in `apis`."""

    def __init__(self, rng: random.Random, apis: dict[int, tuple[int, int]], topics: list[str],
                 max_request_bytes: int):
        self.rng = rng
        # Versions advertised without a kio schema (Produce v0-2) are only reached by the api-key mutation.
        self.apis = sorted((k, v) for k, (lo, hi) in apis.items() for v in range(lo, hi + 1) if _has_schema(k, v))
        self.topics = topics
        self.names = name_pool(topics)
        self.max_request_bytes = max_request_bytes
        self._budget = 0
        self.last_body: object = None

    # -- values by Kafka type --------------------------------------------------------------------

    def _int(self, bits: int, signed: bool = True) -> int:
        rng = self.rng
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        choice = rng.random()
        if choice < 0.5:
            return rng.choice([0, 1, -1 if signed else 2, 2, 3])
        if choice < 0.75:
            return rng.choice([lo, hi, lo + 1, hi - 1])
        return rng.randint(lo, hi)

    def _string(self, name: str) -> str:
        rng = self.rng
        if name in ("topic", "name", "topic_name", "resource_name") or rng.random() < 0.7:
            # A topic named by any field of the request (resource names included) comes from the pool.
            pool = self.names if name != "resource_name" else [n for n in self.names if n]
            return rng.choice(pool)
        return "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(40)))

    def _records(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.6:
            n = rng.randrange(1, 6)
            keys = [rng.randbytes(rng.randrange(8)) or None for _ in range(n)]
            values = [rng.randbytes(rng.randrange(100)) for _ in range(n)]
            return bytes(K.encode_batch(keys, values, [()] * n, [NOW_MS] * n, compression=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1))
        return rng.randbytes(rng.randrange(200))

    def _primitive(self, kafka_type: str, name: str) -> object:
        rng = self.rng
        if name in PARTITION_COUNTS and kafka_type in ("int32", "int16"):
            return rng.choice([-1, 0, 1, 2, 3, MAX_SMALL_PARTITIONS, 10_001, 2**15 - 1])
        match kafka_type:
            case "int8":
                return self._int(8)
            case "int16":
                return self._int(16)
            case "int32":
                return self._int(32)
            case "int64":
                return self._int(64)
            case "uint16":
                return self._int(16, signed=False)
            case "float64":
                return rng.choice([0.0, -1.0, 1e308, float("nan")])
            case "bool":
                return rng.random() < 0.5
            case "string":
                return self._string(name)
            case "bytes":
                return rng.randbytes(rng.choice([0, 1, 16, 300]))
            case "records":
                return self._records()
            case "uuid":
                return rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
            case "timedelta_i32" | "timedelta_i64":
                # Waits stay short: a hostile Fetch may park, but only as long as a real client's would.
                return timedelta(milliseconds=rng.choice([0, 1, 10, 100, 500, -1]))
        raise AssertionError(f"no values drawn for Kafka type {kafka_type}")

    def _count(self) -> int:
        rng = self.rng
        r = rng.random()
        n = 0 if r < 0.2 else rng.randrange(1, 4) if r < 0.95 else rng.choice([100, 1000, 10_000])
        n = min(n, self._budget)
        self._budget -= n
        return n

    def entity(self, cls: type) -> object:
        """An instance of kio class `cls` with every field drawn."""
        values: dict[str, object] = {}
        for f, kind, kafka_type, nullable in _fields(cls):
            if nullable and self.rng.random() < 0.1:
                values[f.name] = None
                continue
            if isinstance(kind, EntityTupleField):
                n = self._count()
                element = self._flat_entity(kind.type_) if n > 100 else None
                # A huge array repeats one element: its size is the lie a broker must bound, not its variety.
                values[f.name] = tuple(element if element is not None else self.entity(kind.type_) for _ in range(n))
            elif isinstance(kind, EntityField):
                values[f.name] = self.entity(kind.type_)
            elif kind.is_array:
                assert kafka_type is not None
                values[f.name] = tuple(self._primitive(kafka_type, f.name) for _ in range(self._count()))
            else:
                assert kafka_type is not None
                values[f.name] = self._primitive(kafka_type, f.name)
        return cls(**values)

    def _flat_entity(self, cls: type) -> object:
        """An element of a huge array, whose own arrays stay empty (the frame stays within a few MiB)."""
        budget, self._budget = self._budget, 0
        try:
            return self.entity(cls)
        finally:
            self._budget = budget

    # -- frames ----------------------------------------------------------------------------------

    def request(self, correlation_id: int, api: tuple[int, int] | None = None) -> tuple[int, int, bytes]:
        """(api key, version, frame) of one drawn request with an honest size prefix."""
        api_key, version = api or self.rng.choice(self.apis)
        cls = load_request_schema(api_key, version)
        header_cls = cls.__header_schema__
        self._budget = ELEMENT_BUDGET
        sink = io.BytesIO()
        entity_writer(header_cls)(sink, header_cls(request_api_key=api_key, request_api_version=version,
                                                   correlation_id=correlation_id, client_id=self._client_id()))
        self.last_body = self.entity(cls)
        entity_writer(cls)(sink, self.last_body)
        return api_key, version, struct.pack(">i", len(sink.getbuffer())) + sink.getvalue()

    def _client_id(self) -> str | None:
        return self.rng.choice([None, "", "hostile", "h" * 300, "ünïcode"])

    def frame(self, correlation_id: int) -> Drawn:
        """A drawn request with at most one mutation (the kind says which)."""
        rng = self.rng
        kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
        api_key, version, data = self.request(correlation_id)
        framed = True
        answered: bool | None = None
        if kind == "valid" and len(data) - 4 <= self.max_request_bytes:
            answered = not (api_key == 0 and getattr(self.last_body, "acks", None) == 0)
        # Mutations leave the size prefix and the api key, version and correlation id alone (bytes 0-11),
        # except those that are about them: replies can then be matched to requests.
        body = bytearray(data)
        match kind:
            case "bit-flip":
                for _ in range(rng.randrange(1, 8)):
                    if len(body) > 12:
                        body[rng.randrange(12, len(body))] ^= 1 << rng.randrange(8)
            case "truncate":
                cut = rng.randrange(12, len(body)) if len(body) > 12 else len(body)
                body = body[:cut]
                body[0:4] = struct.pack(">i", len(body) - 4)
            case "length-lie":
                if len(body) > 16:
                    at = rng.randrange(12, len(body) - 4)
                    body[at:at + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                                                  b"\xff\xff\xff\x0f", b"\x00\x00\x10\x00"])
            case "api-key":
                api_key = rng.choice([-1, 999, 2**15 - 1, rng.randrange(100), api_key])
                version = rng.choice([version + 1, -1, 2**15 - 1, 0, rng.randrange(20)])
                body[4:8] = struct.pack(">hh", api_key, version)
            case "tagged":
                # Unknown tags are skipped as Kafka does; small tags are known ones with garbage inside.
                garbage = bytes([rng.randrange(1, 4)])
                for _ in range(garbage[0]):
                    size = rng.choice([0, 1, 5, 200, 2**31 - 1])
                    garbage += _uvarint(rng.choice([0, 1, 2, 3, 200, 2**31 - 1])) + _uvarint(size)
                    garbage += rng.randbytes(min(size, rng.randrange(0, 64)))
                if body[-1:] == b"\x00":
                    body = body[:-1] + garbage
                else:
                    body += garbage
                body[0:4] = struct.pack(">i", len(body) - 4)
            case "oversized":
                # Announces more than socket.request.max.bytes; only the start is sent: the broker must close.
                announced = rng.choice([self.max_request_bytes + 1, 2**31 - 1, self.max_request_bytes * 2])
                body[0:4] = struct.pack(">i", announced)
                framed = False
            case "size-lie":
                body[0:4] = struct.pack(">i", max(0, len(body) - 4 + rng.choice([-8, -1, 1, 64, -len(body)])))
                framed = False
        return Drawn(kind, api_key, version, correlation_id, bytes(body), framed, answered)


def _has_schema(api_key: int, version: int) -> bool:
    try:
        load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        return False
    return True


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7
