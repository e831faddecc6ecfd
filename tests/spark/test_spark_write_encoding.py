"""The sink's native pieces against their oracles: murmur2 against kafka-python's, and Arrow columns encoded
into v2 batches against the codec's own decoder (nulls, slices, headers)."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from logstore.formats.kafka import decode_records, validate_batch
from logstore.formats.kafka_arrow import (
    HEADERS_TYPE,
    binary_column,
    encode_arrow,
    headers_column,
    murmur2,
    partitions_for_keys,
)
from logstore.spark.options import OptionError
from logstore.spark.sink_options import parse_sink_options

keys = st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60)


@given(st.binary(max_size=200))
def test_murmur2_is_kafka_pythons(data):
    assert murmur2(data) & 0x7FFFFFFF == kafka_murmur2(data) & 0x7FFFFFFF


@settings(deadline=None)
@given(keys, st.integers(1, 64), st.integers(0, 5))
def test_partitions_for_keys_is_the_default_partitioner_and_null_for_no_key(column, partitions, cut):
    array = pa.array(column, pa.binary()).slice(min(cut, len(column)))
    expected = [None if k is None else (kafka_murmur2(k) & 0x7FFFFFFF) % partitions for k in column[cut:]]
    assert partitions_for_keys(array, partitions, len(array)).to_pylist() == expected


header_lists = st.one_of(
    st.none(), st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=30)), st.one_of(st.none(), st.text(max_size=30)),
                          header_lists), min_size=1, max_size=40),
       st.data())
def test_arrow_columns_encode_to_the_batch_the_decoder_reads_back(rows, data):
    offset = data.draw(st.integers(0, len(rows) - 1))
    start = data.draw(st.integers(0, len(rows) - offset - 1))
    stop = data.draw(st.integers(start + 1, len(rows) - offset))
    k = pa.array([r[0] for r in rows], pa.binary()).slice(offset)
    v = pa.array([r[1] for r in rows], pa.string()).slice(offset)
    h = pa.array([None if r[2] is None else [{"key": a, "value": b} for a, b in r[2]] for r in rows],
                 HEADERS_TYPE).slice(offset)
    batch = encode_arrow(k, v, h, start, stop, 1_700_000_000_000, producer_id=7, producer_epoch=0,
                         base_sequence=3, transactional=True)
    header = validate_batch(batch, client=True)
    assert (header.producer_id, header.base_sequence, header.is_transactional) == (7, 3, True)
    got = [(r.key, r.value, list(r.headers), r.timestamp) for r in decode_records(batch)]
    want = [(key, None if value is None else value.encode(), list(hs or []), 1_700_000_000_000)
            for key, value, hs in rows[offset + start:offset + stop]]
    assert got == want


def test_large_and_unusable_columns():
    assert binary_column(pa.array([b"x"], pa.large_binary())).type == pa.binary()
    assert headers_column(None) is None
    with pytest.raises(TypeError, match="binary or string"):
        binary_column(pa.array([1]))
    with pytest.raises(ValueError, match="header's key is null"):
        encode_arrow(None, pa.array([b"v"]), pa.array([[{"key": None, "value": b"1"}]], HEADERS_TYPE), 0, 1, 0)


@pytest.mark.parametrize("options, fields, words", [
    ({}, [("value", StringType())], "option 'path'"),
    ({"path": "/d"}, [("value", StringType())], "topic option required"),
    ({"path": "/d", "topic": "t"}, [("key", StringType())], "required attribute 'value' not found"),
    ({"path": "/d", "topic": "t"}, [("value", LongType())], "value attribute type must be a string or binary"),
    ({"path": "/d"}, [("value", StringType()), ("topic", IntegerType())], "topic attribute type must be a string"),
    ({"path": "/d", "topic": "t"}, [("value", StringType()), ("partition", StringType())],
     "partition attribute type must be an int"),
    ({"path": "/d", "topic": "t"}, [("value", StringType()), ("headers", StringType())],
     "headers attribute type must be array<struct<key:string,value:binary>>"),
    ({"path": "/d", "topic": "t", "transaction.timeout.ms": "0"}, [("value", StringType())],
     "transaction.timeout.ms must be at least 1"),
    ({"path": "/d", "topic": "t", "kafka.bootstrap.servers": "h:9092"}, [("value", StringType())],
     "name two targets"),
    ({"topic": "t", "kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "TLS"},
     [("value", StringType())], "security.protocol=TLS is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"topic": "t", "kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SASL_SSL",
      "kafka.sasl.mechanism": "GSSAPI"}, [("value", StringType())], "sasl.mechanism=GSSAPI"),
    ({"topic": "t", "kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SSL",
      "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/nonexistent/ca.pem"},
     [("value", StringType())], "/nonexistent/ca.pem"),
])
def test_option_errors_name_the_problem(options, fields, words):
    schema = StructType([StructField(n, t) for n, t in fields])
    with pytest.raises(OptionError) as caught:
        parse_sink_options(options, schema)
    assert words in str(caught.value) and "\n" not in str(caught.value)
