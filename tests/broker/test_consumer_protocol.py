"""ConsumerProtocol subscription and assignment blobs: a real client's bytes, kio as oracle, newer versions."""
from __future__ import annotations

import dataclasses
import importlib
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial import entity_writer

from logstore.broker.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from logstore.errors import CorruptRecordError
from spec_vectors import VECTORS_DIR as VECTORS

_RECORDS = json.loads((VECTORS / "v2_computed_consumer_offsets_records.json").read_text())["internalRecords"]
# The blobs a consumer put in its JoinGroup / SyncGroup, as persisted in GroupMetadataValue.
(_MEMBER,) = _RECORDS["group_metadata_k2_v3"]["value"]["members"]
CLIENT_SUBSCRIPTION = bytes.fromhex(_MEMBER["subscription"])
CLIENT_ASSIGNMENT = bytes.fromhex(_MEMBER["assignment"])


def test_a_real_clients_v0_subscription():
    assert CLIENT_SUBSCRIPTION.hex() == "00000000000100066f7264657273ffffffff"
    sub = decode_subscription(CLIENT_SUBSCRIPTION)
    assert sub == Subscription(("orders",), None, version=0)
    assert encode_subscription(sub) == CLIENT_SUBSCRIPTION


def test_a_real_clients_v0_assignment():
    assert CLIENT_ASSIGNMENT.hex() == "00000000000100066f72646572730000000100000003ffffffff"
    assignment = decode_assignment(CLIENT_ASSIGNMENT)
    assert assignment == Assignment((("orders", (3,)),), None, version=0)
    assert encode_assignment(assignment) == CLIENT_ASSIGNMENT


def test_empty_bytes_are_the_empty_assignment():
    assert decode_assignment(b"") == Assignment(())


def test_a_version_lacking_a_field_leaves_it_out():
    full = Subscription(("a",), b"u", (("a", (0,)),), generation_id=5, rack_id="r", version=3)
    assert decode_subscription(encode_subscription(dataclasses.replace(full, version=1))) == \
        Subscription(("a",), b"u", (("a", (0,)),), version=1)
    assert encode_subscription(dataclasses.replace(full, version=0)) == \
        encode_subscription(Subscription(("a",), b"u", version=0))


def test_a_newer_subscription_is_read_with_the_fields_this_code_knows():
    v3_body = encode_subscription(Subscription(("a", "b"), b"u", (("a", (1, 2)),), 7, "rack-1"))[2:]
    sub = decode_subscription(b"\x00\x09" + v3_body + b"\x00\x00\x00\x2a new fields")
    assert sub == Subscription(("a", "b"), b"u", (("a", (1, 2)),), 7, "rack-1", version=3)


def test_a_newer_assignment_is_read_with_the_fields_this_code_knows():
    body = encode_assignment(Assignment((("t", (0, 4)),), b"ud"))[2:]
    assert decode_assignment(b"\x00\x09" + body + b"\xff\xff") == Assignment((("t", (0, 4)),), b"ud", version=3)


@pytest.mark.parametrize("decode, what", [(decode_subscription, "Subscription"), (decode_assignment, "Assignment")])
def test_a_negative_version_is_refused(decode, what):
    with pytest.raises(CorruptRecordError, match=f"ConsumerProtocol{what} version -1"):
        decode(b"\xff\xff" + CLIENT_ASSIGNMENT[2:])


@pytest.mark.parametrize("decode, data", [(decode_subscription, CLIENT_SUBSCRIPTION),
                                          (decode_assignment, CLIENT_ASSIGNMENT)])
def test_every_truncation_is_refused(decode, data):
    for end in range(1, len(data)):
        with pytest.raises(CorruptRecordError):
            decode(data[:end])


@pytest.mark.parametrize("version", [-1, 4])
def test_encoding_at_an_unknown_version_is_a_caller_bug(version):
    with pytest.raises(ValueError):
        encode_subscription(Subscription(("a",), version=version))
    with pytest.raises(ValueError):
        encode_assignment(Assignment((), version=version))


text = st.text(max_size=15)
partitions = st.lists(st.tuples(text, st.lists(st.integers(-2**31, 2**31 - 1), max_size=5).map(tuple)),
                      max_size=4).map(tuple)
user_data = st.none() | st.binary(max_size=30)


@st.composite
def subscriptions(draw):
    """A subscription holding only fields its version has (the others at their defaults)."""
    version = draw(st.integers(0, 3))
    return Subscription(
        tuple(draw(st.lists(text, max_size=5))), draw(user_data),
        draw(partitions) if version >= 1 else (),
        draw(st.integers(-2**31, 2**31 - 1)) if version >= 2 else -1,
        draw(st.none() | text) if version >= 3 else None,
        version)


def _kio_bytes(schema: str, version: int, **fields) -> bytes:
    """The version-prefixed struct as kio (generated from Kafka's own schema) writes it."""
    module = importlib.import_module(f"kio.schema.{schema}.v{version}.data")
    entity_type = next(getattr(module, name) for name in dir(module) if name.startswith("ConsumerProtocol"))
    for name in ("owned_partitions", "assigned_partitions"):
        if name in fields:
            fields[name] = tuple(module.TopicPartition(topic=t, partitions=p) for t, p in fields[name])
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, entity_type(**fields))
    return version.to_bytes(2, "big") + buffer.getvalue()


@given(subscriptions())
def test_subscriptions_round_trip_and_match_kio(sub):
    data = encode_subscription(sub)
    assert decode_subscription(data) == sub
    fields = {"topics": sub.topics, "user_data": sub.user_data, "owned_partitions": sub.owned_partitions,
              "generation_id": sub.generation_id, "rack_id": sub.rack_id}
    names = ["topics", "user_data", "owned_partitions", "generation_id", "rack_id"][:sub.version + 2]
    assert data == _kio_bytes("consumer_protocol_subscription", sub.version, **{n: fields[n] for n in names})


@given(partitions, user_data, st.integers(0, 3))
def test_assignments_round_trip_and_match_kio(parts, data, version):
    assignment = Assignment(parts, data, version)
    encoded = encode_assignment(assignment)
    assert decode_assignment(encoded) == assignment
    assert encoded == _kio_bytes("consumer_protocol_assignment", version, assigned_partitions=parts,
                                 user_data=data)


@given(st.binary(max_size=60))
def test_garbage_decodes_or_is_refused(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except CorruptRecordError:
            pass
