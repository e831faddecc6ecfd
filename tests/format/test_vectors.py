"""The Kafka codec against the spec's byte-exact vectors (on-disk-format.md §13).

Every vector is decoded field by field to its JSON description; the negative
ones must be rejected with the right typed error; every valid v2 batch is
rebuilt with the encoder, byte for byte where the original writer behaves like
Kafka's; columnar decoding must agree with record decoding.
"""
from __future__ import annotations

import struct

import pytest

import logstore.formats.kafka as K
from logstore.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError

TIMESTAMP_TYPES = ("CREATE_TIME", "LOG_APPEND_TIME")
CRC_FIELD = {2: 17, 1: 12, 0: 12}  # byte position of the CRC within an entry, by magic


# ---------------------------------------------------------------------------
# Vector selection (predicates for @pytest.mark.vectors, see conftest.py)


def _is_stream(name, doc):
    return "validBytes" in doc.get("expected", {})


def _is_decodable(name, doc):
    # INVALID vectors cannot be decoded at all; the BAD_CRC one decodes without CRC checks.
    return _is_stream(name, doc) and "INVALID" not in name


def _is_valid(name, doc):
    return _is_decodable(name, doc) and "BAD" not in name


def _is_valid_v2(name, doc):
    return _is_valid(name, doc) and any(e["magic"] == 2 for e in doc["expected"]["entries"])


def _v2_batches(data):
    """(key, header) of every v2 batch in a vector's bytes; key is NAME-relative `@position`."""
    return [(f"@{e.position}", e) for e in K.iter_entries(data) if isinstance(e, K.BatchHeader)]


# ---------------------------------------------------------------------------
# Describing decoded objects in the vocabulary of the JSON files


def _hex(value):
    return None if value is None else value.hex()


def _json_hex(field):
    return None if field is None else field["hex"]


def _crc_valid(data, entry):
    """Whether the entry's stored CRC is right, as the codec's CRC check sees it."""
    try:
        if isinstance(entry, K.BatchHeader):
            K.validate_batch(data, entry.position)
        else:
            K.decode_legacy(data, entry.position)
    except CorruptRecordError as exc:
        if exc.position != entry.position + CRC_FIELD[entry.magic]:
            raise
        return False
    return True


def _v2_header(data, h):
    return {
        "position": h.position, "sizeInBytes": h.size_in_bytes, "baseOffset": h.base_offset,
        "batchLength": h.batch_length, "partitionLeaderEpoch": h.partition_leader_epoch,
        "magic": h.magic, "crc": h.crc, "crcValid": _crc_valid(data, h),
        "attributes": h.attributes, "compression": K.CODEC_NAMES[h.compression],
        "timestampType": TIMESTAMP_TYPES[h.timestamp_type],
        "isTransactional": h.is_transactional, "isControl": h.is_control,
        "hasDeleteHorizon": h.has_delete_horizon, "lastOffsetDelta": h.last_offset_delta,
        "lastOffset": h.last_offset, "baseTimestamp": h.base_timestamp,
        "maxTimestamp": h.max_timestamp, "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch, "baseSequence": h.base_sequence,
        "recordCount": h.record_count, "lastSequence": h.last_sequence,
    }


def _expected_v2_header(want):
    fields = {k: v for k, v in want.items() if k != "records"}
    if fields["lastSequence"] is None:
        # The vectors leave it undefined for empty batches; Kafka's lastSequence()
        # applies the formula of §2.4 whatever the count.
        base = fields["baseSequence"]
        last = fields["lastOffsetDelta"]
        fields["lastSequence"] = -1 if base < 0 else K.increment_sequence(base, last)
    return fields


def _v2_record(r, h):
    delta = r.offset - h.base_offset
    out = {
        "offset": r.offset, "offsetDelta": delta, "timestamp": r.timestamp,
        "sequence": -1 if h.base_sequence < 0 else K.increment_sequence(h.base_sequence, delta),
        "key": _hex(r.key), "value": _hex(r.value),
        "headers": [[name, _hex(value)] for name, value in r.headers],
    }
    if h.timestamp_type == K.CREATE_TIME:
        # Under LOG_APPEND_TIME the deltas are not observable (every record reports maxTimestamp).
        out["timestampDelta"] = r.timestamp - h.base_timestamp
    if h.is_control:
        control = K.read_control_record(r)
        out["controlKey"] = {"version": control.version, "type": control.type,
                             "typeName": control.type_name}
        out["coordinatorEpoch"] = control.coordinator_epoch
    return out


def _expected_v2_record(want, h):
    out = {
        "offset": want["offset"], "offsetDelta": want["offsetDelta"],
        "timestamp": want["timestamp"], "sequence": want["sequence"],
        "key": _json_hex(want["key"]), "value": _json_hex(want["value"]),
        "headers": [[name, _json_hex(value)] for name, value in want["headers"]],
    }
    if h.timestamp_type == K.CREATE_TIME:
        out["timestampDelta"] = want["timestampDelta"]
    if h.is_control:
        out["controlKey"] = want["controlKey"]
        marker = want.get("endTxnMarker")
        out["coordinatorEpoch"] = None if marker is None else marker["coordinatorEpoch"]
    return out


def _legacy_entry(data, e):
    return {
        "position": e.position, "sizeInBytes": e.size_in_bytes, "magic": e.magic,
        "offset": e.offset, "crc": e.crc, "crcValid": _crc_valid(data, e),
        "attributes": e.attributes, "compression": K.CODEC_NAMES[e.compression],
        "timestampType": None if e.timestamp_type is None else TIMESTAMP_TYPES[e.timestamp_type],
        "timestamp": e.timestamp,
    }


def _expected_legacy_entry(want):
    fields = {k: v for k, v in want.items() if k not in ("inner", "key", "value")}
    if fields["timestamp"] is None:  # magic 0 has no timestamp: NO_TIMESTAMP
        fields["timestamp"] = -1
    return fields


def _legacy_record(r):
    return {"offset": r.offset, "timestamp": r.timestamp,
            "key": _hex(r.key), "value": _hex(r.value)}


def _expected_legacy_records(want):
    # A plain message is its own single record; a wrapper lists its inner messages.
    messages = want["inner"] if "inner" in want else [want]
    return [{"offset": m["offset"], "timestamp": -1 if m["timestamp"] is None else m["timestamp"],
             "key": _json_hex(m["key"]), "value": _json_hex(m["value"])} for m in messages]


# ---------------------------------------------------------------------------
# Re-encoding


def _timestamps_for_reencoding(records, h, want):
    if h.timestamp_type == K.LOG_APPEND_TIME:
        # The batch hides the records' create times; the JSON keeps their deltas.
        return [want["baseTimestamp"] + r["timestampDelta"] for r in want["records"]]
    return [r.timestamp for r in records]


def _reencode(data, h, want):
    """Rebuild the batch at h.position with encode_batch from its decoded content."""
    records = K.decode_records(data, h.position)
    return K.encode_batch(
        [r.key for r in records], [r.value for r in records], [r.headers for r in records],
        _timestamps_for_reencoding(records, h, want),
        base_offset=h.base_offset, compression=h.compression, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        log_append_time=h.max_timestamp if h.timestamp_type == K.LOG_APPEND_TIME else None)


def _entry_json(doc, h):
    return next(e for e in doc["expected"]["entries"] if e["position"] == h.position)


# Batches the encoder must reproduce byte for byte: written by Kafka brokers, the
# Java client, librdkafka (uncompressed and LZ4, whose frame shape is Kafka's) and
# the spec's clean-room Kafka-style encoder. Java's snappy-java and our cramjam
# happen to produce the same xerial bytes for the Java-client vector.
BYTE_EXACT = [
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@356",
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@462",
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@804",
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@1094",
    "real_broker_fetch_records_v2_v2@0",
    "real_broker_fetch_records_v2_v2@150",
    "real_broker_fetch_records_v2b_v1@0",
    "real_broker_fetch_records_v2c_v2_v2c@133",
    "v2_broker_kafka011_single_record@0",
    "v2_broker_kafka011_two_records@0",
    "v2_broker_two_batches_with_header@0",
    "v2_broker_two_batches_with_header@71",
    "v2_computed_consumer_offsets_records@0",
    "v2_computed_control_abort@0",
    "v2_computed_control_commit@0",
    "v2_computed_log_append_time@0",
    "v2_computed_lz4_java_style@0",
    "v2_computed_sequence_wraparound@0",
    "v2_computed_transaction_state_records@0",
    "v2_computed_transactional_3_records_headers@0",
    "v2_javaclient_idempotent_console_producer@0",
    "v2_javaclient_snappy_xerial_2_records@0",
    "v2_librdkafka_lz4_standard_frame@0",
    "v2_librdkafka_uncompressed_header@0",
    "v2_stream_with_partial_tail@0",
    "v2_stream_with_partial_tail@71",
    "v2_stream_with_partial_tail@147",
    "v2_stream_with_partial_tail@218",
]

# The three gzip writers differ from ours only in the gzip header; their deflate
# streams are ours (test_gzip_deflate_stream_matches_the_writer).
_OLD_JDK_GZIP = "gzip header OS byte 0 (Kafka on a JDK before 16); we write 255 like JDK 16+"
_PYTHON_GZIP = "Python's gzip header (XFL 2, OS 3)"
_ZLIB_GZIP = "zlib's gzip header (OS 3)"
_SARAMA_TIMESTAMPS = ("sarama writes baseTimestamp below the first record's and maxTimestamp 0 "
                      "(0/0 for an empty batch, where Kafka writes -1/-1); "
                      "encode_batch derives both")
NOT_BYTE_EXACT = {
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@568": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@686": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@957": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc@1244": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2bc_v1@0": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2bc_v1_v1c@0": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2bc_v1c@0": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2c_v2_v2c@0": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2c_v2_v2c@285": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2c_v2c@0": _OLD_JDK_GZIP,
    "real_broker_fetch_records_v2c_v2c@133": _OLD_JDK_GZIP,
    "v2_computed_gzip@0": _PYTHON_GZIP,
    "v2_librdkafka_gzip@0": _ZLIB_GZIP,
    "v2_computed_zstd@0": "single-segment frame with content size; Kafka's streaming zstd-jni "
                          "writer, like ours, omits it",
    "v2_librdkafka_snappy_raw_no_xerial@0": "raw snappy block; Kafka (and we) write xerial framing",
    "v2_sarama_control_empty@0": _SARAMA_TIMESTAMPS,
    "v2_sarama_empty_batch@0": _SARAMA_TIMESTAMPS,
    "v2_sarama_uncompressed_header@0": _SARAMA_TIMESTAMPS,
    "v2_sarama_snappy_xerial@0": _SARAMA_TIMESTAMPS,
    "v2_sarama_gzip@0": _SARAMA_TIMESTAMPS + "; Go's gzip header and deflate level differ",
    "v2_sarama_lz4_content_checksum@0": _SARAMA_TIMESTAMPS + "; LZ4 frame with content checksum "
                                        "and a stored block",
}
# Writers whose header timestamps encode_batch cannot reproduce (see _SARAMA_TIMESTAMPS).
DERIVED_TIMESTAMPS = {"v2_sarama_control_empty", "v2_sarama_empty_batch",
                      "v2_sarama_uncompressed_header", "v2_sarama_snappy_xerial",
                      "v2_sarama_gzip", "v2_sarama_lz4_content_checksum"}
GZIP_SAME_DEFLATE = [key for key, why in NOT_BYTE_EXACT.items()
                     if why in (_OLD_JDK_GZIP, _PYTHON_GZIP, _ZLIB_GZIP)]
GZIP_XFL_OS = slice(69, 71)  # bytes 8-9 of the gzip header that starts at 61


def _batch(vector, key):
    name, _, position = key.partition("@")
    data, doc = vector(name)
    h = K.read_header(data, int(position))
    return data, doc, h


def _rebuilt_header(h):
    """The header fields a rebuild keeps (crc and batchLength follow the bytes)."""
    return {
        "base_offset": h.base_offset, "partition_leader_epoch": h.partition_leader_epoch,
        "attributes": h.attributes, "last_offset_delta": h.last_offset_delta,
        "base_timestamp": h.base_timestamp, "max_timestamp": h.max_timestamp,
        "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence, "record_count": h.record_count,
    }


# ---------------------------------------------------------------------------
# Every vector decodes to its description


@pytest.mark.vectors(select=_is_decodable)
def test_vector_decodes_to_its_description(vector_name, vector):
    data, doc = vector(vector_name)
    expected = doc["expected"]
    verify_crc = all(e["crcValid"] for e in expected["entries"])
    entries = list(K.iter_entries(data, verify_crc=verify_crc))
    assert len(entries) == len(expected["entries"])
    for entry, want in zip(entries, expected["entries"]):
        records = K.decode_entry(data, entry, verify_crc=verify_crc)
        if want["magic"] == 2:
            assert _v2_header(data, entry) == _expected_v2_header(want)
            assert [_v2_record(r, entry) for r in records] == [
                _expected_v2_record(w, entry) for w in want["records"]]
        else:
            assert _legacy_entry(data, entry) == _expected_legacy_entry(want)
            assert [_legacy_record(r) for r in records] == _expected_legacy_records(want)
    end = K.entry_end(entries[-1]) if entries else 0
    assert end == expected["validBytes"]


def test_partial_tail_is_not_an_entry(vector):
    data, doc = vector("v2_stream_with_partial_tail")
    ends = [K.entry_end(e) for e in K.iter_entries(data)]
    assert ends[-1] == doc["expected"]["validBytes"] == 299
    assert len(data) == 303


# ---------------------------------------------------------------------------
# Negative vectors are rejected with the right typed error


# name: (exact error type, Kafka error code, byte position of the fault)
NEGATIVE = {
    "v2_control_abort_BAD_CRC_opaque_value": (CorruptRecordError, 2, 17),  # the crc field
    "v0_sarama_gzip_wrapper_EMPTY_INVALID": (InvalidRecordError, 87, 0),  # the wrapper
    "v1_sarama_zstd_wrapper_INVALID_FOR_KAFKA": (UnsupportedCompressionError, 76, 17),  # attributes
}


@pytest.mark.parametrize("name", NEGATIVE)
def test_negative_vector_is_rejected(vector, name):
    error, code, position = NEGATIVE[name]
    data, _ = vector(name)
    with pytest.raises(CorruptRecordError) as caught:
        list(K.iter_entries(data))
    assert type(caught.value) is error
    assert caught.value.code == code
    assert caught.value.position == position


@pytest.mark.vectors(select=lambda name, doc: _is_stream(name, doc) and not _is_valid(name, doc))
def test_every_negative_vector_is_covered(vector_name):
    assert vector_name in NEGATIVE


def test_bad_crc_batch_is_rejected_by_every_v2_entry_point(vector):
    data, _ = vector("v2_control_abort_BAD_CRC_opaque_value")
    for decode in (K.validate_batch, K.decode_records, K.decode_columnar):
        with pytest.raises(CorruptRecordError) as caught:
            decode(data)
        assert type(caught.value) is CorruptRecordError
        assert caught.value.position == 17


def test_bad_crc_batch_decodes_without_crc_check(vector):
    data, doc = vector("v2_control_abort_BAD_CRC_opaque_value")
    (record,) = K.decode_records(data, verify_crc=False)
    control = K.read_control_record(record)
    assert control.type_name == "ABORT"
    assert (control.version, control.type) == (0, K.CONTROL_ABORT)
    marker = doc["expected"]["entries"][0]["records"][0]["endTxnMarker"]
    assert control.coordinator_epoch == marker["coordinatorEpoch"]


# ---------------------------------------------------------------------------
# Re-encoding


@pytest.mark.vectors(select=_is_valid_v2)
def test_every_valid_v2_batch_is_classified(vector_name, vector):
    data, _ = vector(vector_name)
    batches = {vector_name + key for key, _ in _v2_batches(data)}
    exact = {k for k in BYTE_EXACT if k.partition("@")[0] == vector_name}
    inexact = {k for k in NOT_BYTE_EXACT if k.partition("@")[0] == vector_name}
    assert not exact & inexact
    assert exact | inexact == batches


@pytest.mark.parametrize("key", BYTE_EXACT)
def test_reencoding_is_byte_exact(vector, key):
    data, doc, h = _batch(vector, key)
    original = bytes(data[h.position:K.entry_end(h)])
    assert _reencode(data, h, _entry_json(doc, h)).hex() == original.hex()


@pytest.mark.parametrize("key", [k for k in BYTE_EXACT if "control" not in k])
def test_batch_builder_is_byte_exact(vector, key):
    data, doc, h = _batch(vector, key)
    records = K.decode_records(data, h.position)
    builder = K.BatchBuilder(
        base_offset=h.base_offset, compression=h.compression, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, partition_leader_epoch=h.partition_leader_epoch,
        log_append_time=h.max_timestamp if h.timestamp_type == K.LOG_APPEND_TIME else None)
    stamps = _timestamps_for_reencoding(records, h, _entry_json(doc, h))
    for r, timestamp in zip(records, stamps):
        builder.append(timestamp, r.key, r.value, r.headers)
    assert builder.build().hex() == bytes(data[h.position:K.entry_end(h)]).hex()


@pytest.mark.vectors(select=_is_valid_v2)
def test_reencoding_keeps_records_and_header(vector_name, vector):
    data, doc = vector(vector_name)
    for _, h in _v2_batches(data):
        rebuilt = _reencode(data, h, _entry_json(doc, h))
        again = K.validate_batch(rebuilt, deep=True)
        assert K.decode_records(rebuilt) == K.decode_records(data, h.position)
        want, got = _rebuilt_header(h), _rebuilt_header(again)
        if vector_name in DERIVED_TIMESTAMPS:
            stamps = [r.timestamp for r in K.decode_records(data, h.position)]
            want["base_timestamp"] = stamps[0] if stamps else -1
            want["max_timestamp"] = max(stamps, default=-1)
        assert got == want


@pytest.mark.parametrize("key", GZIP_SAME_DEFLATE)
def test_gzip_deflate_stream_matches_the_writer(vector, key):
    data, doc, h = _batch(vector, key)
    original = bytes(data[h.position:K.entry_end(h)])
    rebuilt = _reencode(data, h, _entry_json(doc, h))
    # Only the CRC and the gzip header's XFL/OS bytes (which the CRC covers) may differ.
    patched = bytearray(original)
    patched[17:21] = rebuilt[17:21]
    patched[GZIP_XFL_OS] = rebuilt[GZIP_XFL_OS]
    assert rebuilt.hex() == patched.hex()


@pytest.mark.parametrize("name", ["v2_computed_control_commit", "v2_computed_control_abort"])
def test_control_batch_encoder_reproduces_marker(vector, name):
    data, doc = vector(name)
    (want,) = doc["expected"]["entries"]
    (record,) = want["records"]
    assert want["partitionLeaderEpoch"] == 7
    encoded = K.encode_control_batch(
        record["controlKey"]["typeName"] == "COMMIT", record["endTxnMarker"]["coordinatorEpoch"],
        want["producerId"], want["producerEpoch"], want["baseTimestamp"],
        base_offset=want["baseOffset"], partition_leader_epoch=want["partitionLeaderEpoch"])
    assert encoded.hex() == data.hex()


# ---------------------------------------------------------------------------
# Columnar decoding agrees with record decoding


def _ints(buf, fmt, count):
    return list(struct.unpack(f"<{count}{fmt}", memoryview(buf).tobytes()))


def _binary_column(offsets, data, validity, count):
    bounds = _ints(offsets, "i", count + 1)
    raw = memoryview(data).tobytes()
    bits = memoryview(validity).tobytes()
    return [raw[bounds[i]:bounds[i + 1]] if bits[i >> 3] >> (i & 7) & 1 else None
            for i in range(count)]


def _arrow_columns(columns):
    """columns.to_arrow() as a dict of lists, validated by pyarrow."""
    table = columns.to_arrow()
    table.validate(full=True)
    return table.to_pydict()


@pytest.mark.vectors(select=_is_valid_v2)
def test_columnar_decoding_matches_records(vector_name, vector):
    data, _ = vector(vector_name)
    for _, h in _v2_batches(data):
        records = K.decode_records(data, h.position)
        columns = K.decode_columnar(data, h.position)
        n = len(records)
        want = {
            "offset": [r.offset for r in records],
            "timestamp": [r.timestamp for r in records],
            "key": [r.key for r in records],
            "value": [r.value for r in records],
        }
        assert columns.count == n
        assert columns.key_null_count == want["key"].count(None)
        assert columns.value_null_count == want["value"].count(None)
        assert {
            "offset": _ints(columns.offsets, "q", n),
            "timestamp": _ints(columns.timestamps, "q", n),
            "key": _binary_column(columns.key_offsets, columns.key_data, columns.key_validity, n),
            "value": _binary_column(columns.value_offsets, columns.value_data,
                                    columns.value_validity, n),
        } == want
        assert _arrow_columns(columns) == want
