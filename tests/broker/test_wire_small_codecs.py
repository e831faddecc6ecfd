"""The native OffsetCommit request decoder and the OffsetCommit and Produce response encoders against kio,
the oracle (small_wire.pxi).

An OffsetCommit request kio writes must decode to kio's fields at every served version (2-9); truncated
frames and lying counts raise WireError. An answer the native encoders write must be byte for byte what kio
writes for the same values, and kio must read it back.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from logstore.broker.protocol import encode_kio
from logstore.native.wire import WireError, decode_offset_commit, encode_offset_commit, encode_produce
from test_wire_codecs import I32, I64, NAMES, _schema, _write

OFFSET_COMMIT, PRODUCE = 8, 0
CODES = st.sampled_from([0, 3, 12, 15, 16, 22, 25, 27, 29, 87])
METADATA = st.none() | NAMES

# kio reads retention_time_ms as a timedelta, which holds up to ~2.7e15 ms either way.
RETENTION_MS = st.integers(-(1 << 50), 1 << 50)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

offset_commits = st.tuples(
    st.integers(2, 9), st.none() | NAMES, NAMES, I32, NAMES, st.none() | NAMES, RETENTION_MS,
    st.lists(st.tuples(NAMES, st.lists(st.tuples(I32, I64, I32, METADATA), max_size=4)), max_size=4))


def kio_offset_commit_frame(version, client_id, group, generation, member, instance, retention, topics) -> bytes:
    module = _schema("offset_commit", version, "request")
    fields = dict(group_id=group, generation_id_or_member_epoch=generation, member_id=member, topics=tuple(
        module.OffsetCommitRequestTopic(name=name, partitions=tuple(
            module.OffsetCommitRequestPartition(**_partition(version, index, offset, epoch, metadata))
            for index, offset, epoch, metadata in partitions))
        for name, partitions in topics))
    if version >= 7:
        fields["group_instance_id"] = instance
    if version <= 4:
        fields["retention_time"] = timedelta(milliseconds=retention)
    body = module.OffsetCommitRequest(**fields)
    header_cls = module.OffsetCommitRequest.__header_schema__
    header = header_cls(request_api_key=OFFSET_COMMIT, request_api_version=version, correlation_id=7,
                        client_id=client_id)
    return _write(header_cls, header) + _write(module.OffsetCommitRequest, body)


def _partition(version, index, offset, epoch, metadata) -> dict[str, object]:
    fields = dict(partition_index=index, committed_offset=offset, committed_metadata=metadata)
    if version >= 6:
        fields["committed_leader_epoch"] = epoch
    return fields


@settings(max_examples=300, deadline=None)
@given(offset_commits)
def test_offset_commit_decodes_as_kio_writes_it(request):
    version, client_id, group, generation, member, instance, retention, topics = request
    got_client, got = decode_offset_commit(kio_offset_commit_frame(*request))
    assert got_client == client_id
    assert (got.group_id, got.generation_id_or_member_epoch, got.member_id) == (group, generation, member)
    assert got.group_instance_id == (instance if version >= 7 else None)
    # kio's retention_time is a duration: whole milliseconds here, -1 where the version has none.
    assert got.retention_time == (retention if version <= 4 else -1)
    assert [(t.name, [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                      for p in t.partitions]) for t in got.topics] == [
        (name, [(index, offset, epoch if version >= 6 else -1, metadata)
                for index, offset, epoch, metadata in partitions]) for name, partitions in topics]


# A truncated OffsetCommit frame is a WireError: test_wire_txn_codecs.py's test_a_truncated_frame_is_a_wire_error.


@pytest.mark.parametrize("version", [7, 8])
def test_a_lying_topic_count_fails_before_anything_is_allocated(version):
    flexible = version >= 8
    frame = bytearray(kio_offset_commit_frame(version, "c", "g", -1, "", None, 0, []))
    # Replace the empty topic array (and, flexible, the body's empty tag section) by two billion topics.
    frame[-2 if flexible else -4:] = b"\xff\xff\xff\xff\x07\x00" if flexible else b"\x7f\xff\xff\xff"
    with pytest.raises(WireError):
        decode_offset_commit(bytes(frame))


def test_unknown_tagged_fields_are_skipped_and_a_version_not_served_refused():
    frame = bytearray(kio_offset_commit_frame(9, "c", "g", 3, "m", None, 0, [("t", [(0, 42, 1, "x")])]))
    assert frame[-1] == 0
    frame[-1:] = b"\x01\x63\x03xyz"   # the body's tag section: one field, tag 99, three bytes
    _, got = decode_offset_commit(frame)
    assert got.topics[0].partitions[0].committed_offset == 42
    frame[2:4] = (10).to_bytes(2, "big")
    with pytest.raises(WireError, match="v10"):
        decode_offset_commit(frame)


def _reads_back(frame: bytes, expected) -> None:
    """`frame` is kio's frame of `expected`, byte for byte, and kio reads it back as `expected`."""
    header_cls = type(expected).__header_schema__
    kio_frame = b"".join(encode_kio(11, expected.__version__, expected).parts)
    assert frame == kio_frame
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, header_size = entity_reader(header_cls)(frame[4:], 0)
    assert header.correlation_id == 11
    decoded, size = entity_reader(type(expected))(frame[4:], header_size)
    assert decoded == expected and header_size + size == len(frame) - 4


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 9), st.integers(0, (1 << 31) - 1),
       st.lists(st.tuples(NAMES, st.lists(st.tuples(I32, CODES), max_size=4)), max_size=4))
def test_offset_commit_answers_encode_byte_for_byte_as_kio(version, throttle_ms, topics):
    module = _schema("offset_commit", version, "response")
    fields = dict(topics=tuple(module.OffsetCommitResponseTopic(name=name, partitions=tuple(
        module.OffsetCommitResponsePartition(partition_index=index, error_code=ErrorCode(code))
        for index, code in rows)) for name, rows in topics))
    if version >= 3:
        fields["throttle_time"] = timedelta(milliseconds=throttle_ms)
    frame = b"".join(encode_offset_commit(11, version, throttle_ms, topics))
    _reads_back(frame, module.OffsetCommitResponse(**fields))


record_errors = st.lists(st.tuples(I32, st.none() | NAMES), max_size=3)
# kio reads a log_append_time through a float of seconds: exact to the millisecond up to year 2100 or so.
APPEND_TIMES = st.integers(-1, 4_102_444_800_000)
produce_rows = st.lists(st.tuples(I32, CODES, I64, APPEND_TIMES, I64, record_errors,
                                  st.none() | NAMES), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.integers(3, 12), st.integers(0, (1 << 31) - 1), st.lists(st.tuples(NAMES, produce_rows), max_size=4))
def test_produce_answers_encode_byte_for_byte_as_kio(version, throttle_ms, topics):
    module = _schema("produce", version, "response")

    def partition(index, code, base, append_time, start, errors, message):
        fields = dict(index=index, error_code=ErrorCode(code), base_offset=base,
                      log_append_time=None if append_time == -1 else EPOCH + timedelta(milliseconds=append_time))
        if version >= 5:
            fields["log_start_offset"] = start
        if version >= 8:
            fields.update(error_message=message, record_errors=tuple(
                module.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m) for i, m in errors))
        return module.PartitionProduceResponse(**fields)

    expected = module.ProduceResponse(throttle_time=timedelta(milliseconds=throttle_ms), responses=tuple(
        module.TopicProduceResponse(name=name, partition_responses=tuple(partition(*row) for row in rows))
        for name, rows in topics))
    frame = b"".join(encode_produce(11, version, throttle_ms, topics))
    _reads_back(frame, expected)


@pytest.mark.parametrize(("encode", "version"), [(encode_offset_commit, 1), (encode_offset_commit, 10),
                                                 (encode_produce, 2), (encode_produce, 13)])
def test_versions_not_served_are_refused(encode, version):
    with pytest.raises(WireError, match=f"v{version}"):
        encode(1, version, 0, [])
