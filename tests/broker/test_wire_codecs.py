"""The native Produce decoder and Fetch encoder against kio, the oracle.

A Produce request kio writes must decode to the same fields, with records
that are views of the frame; a Fetch response the native encoder writes
must be byte for byte what kio writes for the same values, and kio must read
it back. Truncated or lying frames raise WireError, never crash or hang.
"""
from __future__ import annotations

import importlib
import io
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from logstore.native.wire import WireError, decode_produce, encode_fetch

PRODUCE, FETCH = 0, 1
I16 = st.integers(-(1 << 15), (1 << 15) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
RECORDS = st.none() | st.binary(max_size=300)


def _schema(api: str, version: int, kind: str):
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def _write(cls, value) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, value)
    return out.getvalue()


produce_requests = st.builds(
    lambda version, client_id, txn, acks, timeout, topics: (version, client_id, txn, acks, timeout, topics),
    st.integers(3, 10), st.none() | NAMES, st.none() | NAMES, I16, st.integers(0, (1 << 31) - 1),
    st.lists(st.tuples(NAMES, st.lists(st.tuples(I32, RECORDS), max_size=4)), max_size=4),
)


def kio_produce_frame(version, client_id, txn, acks, timeout_ms, topics) -> bytes:
    module = _schema("produce", version, "request")
    body = module.ProduceRequest(
        transactional_id=txn, acks=acks, timeout=timedelta(milliseconds=timeout_ms),
        topic_data=tuple(module.TopicProduceData(name=name, partition_data=tuple(
            module.PartitionProduceData(index=index, records=records) for index, records in partitions))
            for name, partitions in topics))
    header_cls = module.ProduceRequest.__header_schema__
    header = header_cls(request_api_key=PRODUCE, request_api_version=version, correlation_id=7,
                        client_id=client_id)
    return _write(header_cls, header) + _write(module.ProduceRequest, body)


@settings(max_examples=300, deadline=None)
@given(produce_requests)
def test_produce_decodes_as_kio_writes_it(request):
    version, client_id, txn, acks, timeout_ms, topics = request
    frame = bytearray(kio_produce_frame(*request))
    got_client, got = decode_produce(frame)
    assert got_client == client_id
    assert (got.transactional_id, got.acks, got.timeout_ms) == (txn, acks, timeout_ms)
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in got.topic_data] == [(name, list(parts)) for name, parts in topics]
    # Zero copy: a records view writes through to the frame (offsets are assigned in place).
    for topic in got.topic_data:
        for partition in topic.partition_data:
            if partition.records is not None and len(partition.records):
                assert not partition.records.readonly
                partition.records[0] ^= 0xFF
                assert partition.records.obj is frame


@settings(max_examples=300, deadline=None)
@given(produce_requests, st.data())
def test_a_truncated_produce_frame_is_a_wire_error(request, data):
    frame = kio_produce_frame(*request)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(WireError):
        decode_produce(frame[:cut])


@pytest.mark.parametrize("flexible", [False, True])
def test_lying_array_counts_fail_before_anything_is_allocated(flexible):
    version = 9 if flexible else 8
    frame = bytearray(kio_produce_frame(version, "c", None, -1, 1000, []))
    # Replace the empty topic array by a count of two billion.
    frame[-2 if flexible else -4:] = b"\xff\xff\xff\xff\x07\x00" if flexible else b"\x7f\xff\xff\xff"
    with pytest.raises(WireError):
        decode_produce(bytes(frame))


def test_unknown_tagged_fields_are_skipped():
    frame = bytearray(kio_produce_frame(9, "c", None, 1, 1000, [("t", [(0, b"abc")])]))
    # The body's trailing tag section: one field, tag 99, three bytes.
    assert frame[-1] == 0
    frame[-1:] = b"\x01\x63\x03xyz"
    _, got = decode_produce(frame)
    assert bytes(got.topic_data[0].partition_data[0].records) == b"abc"


class Slice:
    """A stand-in for a segment's FileSlice: the encoder only needs `.size`."""

    def __init__(self, data: bytes):
        self.data = data
        self.size = len(data)


aborted_lists = st.none() | st.lists(st.tuples(I64, I64), max_size=3)
fetch_partitions = st.lists(st.tuples(I32, st.sampled_from([0, 1, 3, 6]), I64, I64, I64, aborted_lists,
                                      RECORDS, st.booleans()), max_size=4)
fetch_responses = st.tuples(st.integers(4, 12), I32, st.sampled_from([0, 3]), I32,
                            st.lists(st.tuples(NAMES, fetch_partitions), max_size=4))


def kio_fetch(version, error, session_id, topics):
    module = _schema("fetch", version, "response")
    fields = dict(throttle_time=timedelta(0), responses=tuple(
        module.FetchableTopicResponse(topic=name, partitions=tuple(
            _kio_partition(module, version, row) for row in rows)) for name, rows in topics))
    if version >= 7:
        fields.update(error_code=ErrorCode(error), session_id=session_id)
    return module.FetchResponse(**fields)


def _kio_partition(module, version, row):
    index, error, hw, lso, start, aborted, records, _ = row
    fields = dict(partition_index=index, error_code=ErrorCode(error), high_watermark=hw, last_stable_offset=lso,
                  aborted_transactions=None if aborted is None else tuple(
                      module.AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted),
                  records=records)
    if version >= 5:
        fields["log_start_offset"] = start
    if version >= 11:
        fields["preferred_read_replica"] = -1
    return module.PartitionData(**fields)


@settings(max_examples=300, deadline=None)
@given(fetch_responses)
def test_fetch_encodes_byte_for_byte_as_kio(response):
    version, correlation_id, error, session_id, topics = response
    rows = [(name, [(i, e, hw, lso, start, aborted, Slice(r) if as_slice and r else r)
                    for i, e, hw, lso, start, aborted, r, as_slice in parts]) for name, parts in topics]
    parts = encode_fetch(correlation_id, version, error, session_id, rows)
    frame = b"".join(p.data if isinstance(p, Slice) else bytes(p) for p in parts)

    expected = kio_fetch(version, error, session_id, topics)
    header_cls = type(expected).__header_schema__
    kio_frame = _write(header_cls, header_cls(correlation_id=correlation_id)) + _write(type(expected), expected)
    assert frame[4:] == kio_frame
    assert int.from_bytes(frame[:4], "big") == len(kio_frame)
    header, header_size = entity_reader(header_cls)(frame, 4)
    assert header.correlation_id == correlation_id
    decoded, size = entity_reader(type(expected))(frame, 4 + header_size)
    assert decoded == expected and 4 + header_size + size == len(frame)
    # Records given as file slices stay parts of their own, unread.
    assert sum(isinstance(p, Slice) for p in parts) == sum(
        1 for _, ps in topics for *_, r, as_slice in ps if as_slice and r)
