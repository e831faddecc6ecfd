"""The compiled codecs against kio, the oracle, for every API and version the broker serves.

Responses: `encode_response` (the encoder `fast_codec` generates from kio's
schema) must write exactly kio's `entity_writer` bytes, header and size
prefix included, for random values of every response class served; and a
value kio cannot write must not be written either. Requests: kio still reads
them, behind the array-count walk that `array_bounds` compiles; a request kio
writes must decode to what kio's reader makes of it, and on any frame
(valid, truncated, bit-flipped, lying counts, stray tags) the compiled walk
must end exactly as the reference walk does: the same frame back, or the
same error.
"""
from __future__ import annotations

import dataclasses
import io
import os
import struct
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type
from kio.static.primitive import Records

from logstore.broker.api import load_all
from logstore.broker.array_bounds import ArrayCountError, _check_and_strip, check_and_strip
from logstore.broker.fast_codec import BIG, entity_encoder, source_of
from logstore.broker.protocol import ProtocolError, decode_request, encode_body, encode_response, frame_of_body

# kio registers strategies for its primitives but not for record batches: any bytes will do here.
st.register_type_strategy(Records, st.binary(max_size=64))

# The small requests a client sends in a loop get more examples than the rest.
HOT = {0, 3, 2, 8, 9, 10, 11, 12, 14, 24, 26}


def _served() -> list[tuple[int, int]]:
    pairs = []
    for key, served in sorted(load_all().items()):
        for version in range(served.accept_from, served.max_version + 1):
            try:
                load_request_schema(key, version)
            except UnknownEntity:
                continue
            pairs.append((key, version))
    return pairs


SERVED = _served()
IDS = [f"key{key}-v{version}" for key, version in SERVED]


def _examples(key: int) -> settings:
    # FAST_CODEC_EXAMPLES=300 for a longer search than make test's.
    examples = int(os.environ.get("FAST_CODEC_EXAMPLES", 30 if key in HOT else 6))
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _kio(cls, value) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, value)
    return out.getvalue()


def _kio_frame(correlation_id: int, response) -> bytes:
    header = response.__header_schema__
    body = _kio(header, header(correlation_id=correlation_id)) + _kio(type(response), response)
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_every_served_response_encodes_to_kios_bytes(key, version):
    cls = load_response_schema(key, version)

    @_examples(key)
    @given(st.from_type(cls), st.integers(-(1 << 31), (1 << 31) - 1))
    def check(response, correlation_id):
        try:
            expected = _kio_frame(correlation_id, response)
        except Exception:
            with pytest.raises(Exception):  # noqa: B017 - kio's and struct's errors differ; both refuse
                encode_response(correlation_id, response)
            return
        frame = encode_response(correlation_id, response)
        assert b"".join(frame.parts) == expected
        assert frame.size == len(expected)
        assert encode_body(response) == expected[len(expected) - len(_kio(cls, response)):]
        reply = frame_of_body(correlation_id, key, version, encode_body(response))
        assert b"".join(reply.parts) == expected
    check()


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_every_served_request_decodes_as_kio_reads_it(key, version):
    cls = load_request_schema(key, version)
    header_cls = cls.__header_schema__

    @_examples(key)
    @given(st.from_type(cls), st.none() | st.text(max_size=20), st.integers(-(1 << 31), (1 << 31) - 1))
    def check(request, client_id, correlation_id):
        header = header_cls(request_api_key=key, request_api_version=version, correlation_id=correlation_id,
                            client_id=client_id)
        try:
            head, body = _kio(header_cls, header), _kio(cls, request)
        except Exception:
            assume(False)
        # Also the same objects as kio's own writer makes for the header and body: its encoders are ours.
        assert entity_encoder(header_cls)(header) == head and entity_encoder(cls)(request) == body
        frame = head + body
        try:
            expected_header, size = entity_reader(header_cls)(frame, 0)
            expected_body, _ = entity_reader(cls)(frame, size)
        except ValueError:  # kio writes durations it cannot read back (over timedelta's range)
            with pytest.raises(ProtocolError):
                decode_request(frame)
            return
        got_header, got_body = decode_request(frame)
        # repr, not ==: a NaN float64 read twice is two unequal floats.
        assert repr(got_header) == repr(expected_header)
        assert repr(got_body) == repr(expected_body)
    check()


def _outcome(walk, cls, frame: bytes, offset: int) -> object:
    try:
        return walk(cls, frame, offset)
    except ArrayCountError as exc:
        return ("ArrayCountError", str(exc))


LIES = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\x0f", b"\x00\x00\x10\x00",
        b"\x00\x00\x00\x01", b"\xff\xff\xff\xfe"]


@st.composite
def _mutated(draw, frame: bytes) -> bytes:
    """`frame` as it is, cut short, with bits flipped, with four bytes lying, or with a tag section grown."""
    kind = draw(st.sampled_from(["as-is", "truncate", "flip", "lie", "tags"]))
    data = bytearray(frame)
    if kind == "truncate":
        data = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    elif kind == "flip" and data:
        for at in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=6)):
            data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "lie" and len(data) >= 4:
        at = draw(st.integers(0, len(data) - 4))
        data[at:at + 4] = draw(st.sampled_from(LIES))
    elif kind == "tags":
        zeros = [i for i, byte in enumerate(data) if byte == 0]
        if zeros:
            at = draw(st.sampled_from(zeros))
            data[at:at + 1] = draw(st.sampled_from([b"\x01\x00\x00", b"\x01\x40\x02hi", b"\x02\x7f\x00\x00\x00",
                                                    b"\x01\x00\x05ab", b"\xff\xff\xff\x0f", b"\x01\x00\x7f"]))
    return bytes(data)


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_compiled_walk_ends_as_the_reference_walk_on_any_frame(key, version):
    cls = load_request_schema(key, version)
    header_cls = cls.__header_schema__

    @_examples(key)
    @given(st.from_type(cls), st.data())
    def check(request, data):
        header = header_cls(request_api_key=key, request_api_version=version, correlation_id=1, client_id="c")
        try:
            frame = _kio(header_cls, header) + _kio(cls, request)
        except Exception:
            assume(False)
        frame = data.draw(_mutated(frame))
        for walked, offset in ((header_cls, 0), (cls, data.draw(st.integers(0, len(frame))))):
            assert _outcome(check_and_strip, walked, frame, offset) == _outcome(_check_and_strip, walked, frame,
                                                                                offset)
    check()


def _sample(cls):
    """A `cls` with every field present: arrays of one element, nullable fields not null, tags not default."""
    values = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            value = _sample(kind.type_)
        else:
            value = SAMPLES[get_schema_field_type(f)]
        values[f.name] = (value,) if kind.is_array else value
    return cls(**values)


SAMPLES = {"int8": 1, "int16": 1, "int32": 1, "int64": 1, "uint16": 1, "float64": 1.5, "bool": True,
           "string": "ab", "bytes": b"ab", "records": b"ab", "uuid": uuid.UUID(int=1),
           "error_code": ErrorCode.none, "timedelta_i32": timedelta(milliseconds=1),
           "timedelta_i64": timedelta(milliseconds=1), "datetime_i64": datetime(2020, 1, 1, tzinfo=UTC)}


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_compiled_walk_ends_as_the_reference_walk_for_every_lie_at_every_position(key, version):
    cls = load_request_schema(key, version)
    header_cls = cls.__header_schema__
    header = _kio(header_cls, header_cls(request_api_key=key, request_api_version=version, correlation_id=1,
                                         client_id="c"))
    frame = header + _kio(cls, _sample(cls))
    frames = [frame[:cut] for cut in range(len(frame))]
    frames += [frame[:at] + lie + frame[at + len(lie):] for at in range(len(frame)) for lie in LIES]
    for mutated in frames:
        for walked, offset in ((header_cls, 0), (cls, len(header))):
            assert _outcome(check_and_strip, walked, mutated, offset) == _outcome(_check_and_strip, walked,
                                                                                  mutated, offset)


def test_a_count_larger_than_the_frame_is_refused_before_kio_reads_it():
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.request_header.v2 import RequestHeader
    head = _kio(RequestHeader, RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1,
                                             client_id="x"))
    body = b"\xff\xff\xff\xff\x0f" + b"\x00" * 8  # topics: 2**32 - 2 announced in a 13-byte body
    with pytest.raises(ProtocolError, match="topics: 4294967294 elements announced, 8 bytes left"):
        decode_request(head + body)
    frame = head + _kio(MetadataRequest, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                         include_topic_authorized_operations=False))
    with pytest.raises(ProtocolError):
        decode_request(frame[:-2])


def test_a_large_records_value_is_a_part_of_its_own_not_a_copy():
    from kio.schema.fetch.v12 import response as fetch
    records = b"r" * BIG
    response = fetch.FetchResponse(throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0,
                                   responses=(fetch.FetchableTopicResponse(topic="t", partitions=(
                                       fetch.PartitionData(partition_index=0, error_code=ErrorCode.none,
                                                           high_watermark=1, last_stable_offset=1,
                                                           log_start_offset=0, aborted_transactions=None,
                                                           preferred_read_replica=-1, records=records),)),))
    frame = encode_response(9, response)
    assert any(part is records for part in frame.parts)
    assert b"".join(frame.parts) == _kio_frame(9, response)
    assert encode_body(response) == _kio(type(response), response)


def test_generated_source_is_readable_python():
    from kio.schema.offset_commit.v9.response import OffsetCommitResponse
    source = source_of(OffsetCommitResponse)
    assert source.startswith("def encode(v, out, parts):")
    assert "for " in source and "v.topics" in source
