"""The native replay of `__consumer_offsets` (logstore.native.offset_replay) against the Python decoders.

A coordinator's load applies plain batches natively, in columns; whatever the
native code does not read (other key types, value v4, anything malformed) it
leaves to the Python decoders, in log order. The oracle is the load's own
record-by-record path fed the same records: both must leave the same groups,
offsets and metadata, whatever the versions, tombstones and batch splits.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore.broker.coordinator import group_store
from logstore.broker.coordinator.group_log import (
    CommittedOffset,
    GroupValue,
    MemberValue,
    OffsetValue,
    decode_group_fields,
    decode_group_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from logstore.broker.coordinator.group_state import Group
from logstore.broker.coordinator.group_store import _PartitionReplay, load_partition
from logstore.broker.coordinator.records import Writer
from logstore.errors import StorageError
from logstore.manager import LogManager
from logstore.native.offset_replay import group_metadata

NOW = 1_700_000_000_000
GROUPS = ["g1", "g2", "grüppe"]
TOPICS = ["t", "topic-b"]


def offset_value(version: int, offset: int, epoch: int, metadata: str, timestamp: int) -> bytes:
    """OffsetCommitValue of `version` (0..4) as Kafka lays each out."""
    if version == 3:
        return encode_offset_value(OffsetValue(offset, epoch, metadata, timestamp))
    if version == 1:
        return encode_offset_value(OffsetValue(offset, -1, metadata, timestamp, timestamp + 1000))
    w = Writer().int(2, version).int(8, offset)
    if version == 4:
        return w.int(4, epoch).string(True, metadata).int(8, timestamp).tagged_fields().getvalue()
    return w.string(False, metadata).int(8, timestamp).getvalue()


def offset_key(version: int, group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey of `version` 0 or 1 (one layout)."""
    return struct.pack(">h", version) + encode_offset_key(group, topic, partition)[2:]


def group_value(version: int, value: GroupValue) -> bytes:
    """GroupMetadataValue of `version` 0..3 (the non-flexible ones)."""
    w = Writer().int(2, version).string(False, value.protocol_type).int(4, value.generation)
    w.string(False, value.protocol).string(False, value.leader)
    if version >= 2:
        w.int(8, value.current_state_timestamp)
    w.array_header(False, len(value.members))
    for m in value.members:
        w.string(False, m.member_id)
        if version >= 3:
            w.string(False, m.group_instance_id)
        w.string(False, m.client_id).string(False, m.client_host)
        if version >= 1:
            w.int(4, m.rebalance_timeout_ms)
        w.int(4, m.session_timeout_ms).bytes_(False, m.subscription).bytes_(False, m.assignment)
    return w.getvalue()


def as_version(version: int, value: GroupValue) -> GroupValue:
    """What a value of `version` keeps of `value` (older versions lack fields)."""
    members = tuple(MemberValue(m.member_id, m.group_instance_id if version >= 3 else None, m.client_id,
                                m.client_host, m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms,
                                m.session_timeout_ms, m.subscription, m.assignment) for m in value.members)
    return GroupValue(value.protocol_type, value.generation, value.protocol, value.leader,
                      value.current_state_timestamp if version >= 2 else -1, members)


text = st.text(max_size=6)
i32 = st.integers(-2**31, 2**31 - 1)
members = st.builds(MemberValue, text, st.none() | text, text, text, i32, i32, st.binary(max_size=8),
                    st.binary(max_size=8))
group_values = st.builds(GroupValue, text, i32, st.none() | text, st.none() | text,
                         st.integers(-1, 2**40), st.lists(members, max_size=2).map(tuple))

commits = st.builds(
    lambda key_version, group, topic, partition, version, offset, epoch, metadata:
        (offset_key(key_version, group, topic, partition),
         offset_value(version, offset, epoch, metadata, NOW - offset)),
    st.sampled_from([0, 1]), st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.integers(0, 3),
    st.integers(0, 4), st.integers(0, 2**40), st.integers(-1, 5), st.sampled_from(["", "", "meta", "é"]))
offset_tombstones = st.builds(lambda group, topic, partition: (encode_offset_key(group, topic, partition), None),
                              st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.integers(0, 3))
metadata = st.builds(lambda group, version, value: (encode_group_key(group), group_value(version, value)),
                     st.sampled_from(GROUPS), st.integers(0, 3), group_values)
metadata_tombstones = st.builds(lambda group: (encode_group_key(group), None), st.sampled_from(GROUPS))
# A record with no key, and one of a type the classic loading passes over (a share-group key of type 9).
others = st.sampled_from([(None, b"v"), (struct.pack(">hh", 9, 1) + b"g", None)])
records = st.lists(st.one_of(commits, commits, offset_tombstones, metadata, metadata_tombstones, others),
                   min_size=1, max_size=40)


def state(loaded) -> dict:
    """What a load leaves, comparable: each group's offsets, generation, protocol and members."""
    groups, pending, shares = loaded
    return {group_id: (g.offsets, g.generation_id, g.protocol_name, g.state,
                       sorted((m.member_id, m.session_timeout_ms, m.assignment) for m in g.members.values()))
            for group_id, g in groups.items()}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    manager = LogManager([str(tmp_path_factory.mktemp("offsets"))], start_scheduler=False)
    yield manager
    manager.close()


# No deadline: each example writes a partition to disk, whose time is the machine's (a loaded CI runner's
# fsyncs), not the replay's.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=records, cuts=st.lists(st.integers(1, 40), max_size=6), rows_a_call=st.sampled_from([1, 3, 10_000]))
def test_the_native_replay_leaves_what_the_record_by_record_replay_does(store, monkeypatch, records, cuts,
                                                                       rows_a_call):
    monkeypatch.setattr(group_store, "ROWS_A_CALL", rows_a_call)
    topic = f"offsets-{len(store.topics())}"
    store.create_topic(topic, 1)
    log = store.log(topic, 0)
    batches, start = [], 0
    for cut in sorted(set(cuts)) + [len(records)]:
        if start < cut <= len(records):
            batches.append(records[start:cut])
            start = cut
    for batch in batches:
        log.append_records([v for _, v in batch], keys=[k for k, _ in batch])
    reference = _PartitionReplay(0, lambda topic_id: None)
    for offset, (key, value) in enumerate(records):
        reference.record(key, value, offset, None)
    assert state(load_partition(log, 0, NOW)) == state(reference.result(NOW))


def test_a_corrupt_offset_key_in_a_batch_is_refused_with_its_offset(tmp_path):
    with LogManager([str(tmp_path)], start_scheduler=False) as manager:
        manager.create_topic("offsets", 1)
        log = manager.log("offsets", 0)
        good = (offset_key(1, "g1", "t", 0), offset_value(3, 5, 0, "", NOW))
        log.append_records([good[1], b"\x00\x03", good[1]],
                           keys=[good[0], struct.pack(">hh", 1, 40) + b"g1", good[0]])
        with pytest.raises(StorageError, match="offset 1"):
            load_partition(log, 0, NOW)


@given(st.integers(0, 3), group_values)
def test_group_values_of_every_plain_version_are_read_natively_with_their_defaults(version, value):
    data = group_value(version, value)
    assert group_metadata(data) is not None
    assert decode_group_value(data) == as_version(version, value)


@given(group_values)
def test_a_flexible_group_value_is_left_to_the_python_decoder(value):
    flexible = b"\x00\x04" + encode_group_value(value)[2:]
    assert group_metadata(flexible) is None


def test_a_tombstone_then_a_commit_of_the_same_group_and_topic_in_one_batch_makes_the_group_its_offsets(store):
    # The second row's key differs from the first's in its partition only: its group and topic are the last
    # row's, and the group has no offsets yet when the commit comes.
    store.create_topic("offsets-tombstone-first", 1)
    log = store.log("offsets-tombstone-first", 0)
    records = [(offset_key(1, "g1", "t", 0), None), (offset_key(1, "g1", "t", 1), offset_value(3, 7, 2, "m", NOW)),
               (offset_key(1, "g1", "t", 2), offset_value(1, 8, -1, "", NOW))]
    log.append_records([v for _, v in records], keys=[k for k, _ in records])
    groups, _, _ = load_partition(log, 0, NOW)
    assert groups["g1"].offsets == {("t", 1): CommittedOffset(7, 2, "m", NOW, -1, 1),
                                    ("t", 2): CommittedOffset(8, -1, "", NOW, NOW + 1000, 2)}


def test_a_committed_offset_compares_unpacks_and_replaces_as_the_named_tuple_it_replaces():
    committed = CommittedOffset(5, 3, "meta", NOW)
    assert committed == (5, 3, "meta", NOW, -1, -1) == CommittedOffset(5, 3, "meta", NOW, -1, -1)
    assert committed != CommittedOffset(5, 3, "meta", NOW, log_offset=9)
    assert hash(committed) == hash((5, 3, "meta", NOW, -1, -1))
    offset, epoch, metadata, timestamp, expire, log_offset = committed
    assert (offset, epoch, metadata, timestamp, expire, log_offset) == tuple(committed)
    assert (len(committed), committed[0], committed[-1]) == (6, 5, -1)
    moved = committed._replace(log_offset=42)
    assert (moved.log_offset, moved.offset, committed.log_offset) == (42, 5, -1)
    assert CommittedOffset(offset=1, leader_epoch=-1, metadata="", commit_timestamp=2).expire_timestamp == -1
    assert repr(committed) == ("CommittedOffset(offset=5, leader_epoch=3, metadata='meta', "
                               f"commit_timestamp={NOW}, expire_timestamp=-1, log_offset=-1)")
    with pytest.raises(ValueError, match="unexpected field"):
        committed._replace(epoch=1)
    with pytest.raises(AttributeError):
        committed.offset = 6  # type: ignore[misc]
    with pytest.raises(OverflowError):
        CommittedOffset(1, 2**31, "", NOW)


@given(st.integers(0, 3), group_values)
def test_a_group_restored_from_its_fields_holds_its_members_with_sessions_from_now(version, value):
    data = group_value(version, value)
    group = Group.from_fields("g", 0, decode_group_fields(data), NOW)
    kept = as_version(version, value)
    members = {m.member_id: m for m in kept.members}  # a repeated member id: the last one stays
    assert (group.generation_id, group.protocol_name, group.state.value) == (
        kept.generation, kept.protocol, "Stable" if members else "Empty")
    assert group.leader_id == (kept.leader if kept.leader in members else next(iter(members), None))
    assert {m.member_id: (m.session_timeout_ms, m.rebalance_timeout_ms, m.assignment, m.heartbeat_deadline)
            for m in group.members.values()} == {
        i: (m.session_timeout_ms, m.rebalance_timeout_ms, m.assignment, NOW + m.session_timeout_ms)
        for i, m in members.items()}


def test_a_flexible_group_value_gives_its_fields_through_the_python_decoder():
    # group_log's test of v4: member m1 (instance i1, client c1, host /h-1, timeouts 60000 and 30000), a
    # tagged field in the member and at the top.
    member = ("03" "6d31" "03" "6931" "03" "6331" "05" "2f682d31" "0000ea60" "00007530"
              "03" "0102" "01" "01" "07" "01" "ff")
    data = bytes.fromhex("0004" "09" + b"consumer".hex() + "00000004" "06" + b"range".hex() + "03" "6d31"
                         "0000000000000063" "02" + member + "02" "00" "00" "03" "02" "0000")
    assert group_metadata(data) is None
    assert decode_group_fields(data) == ("consumer", 4, "range", "m1", 99,
                                         [("m1", "i1", "c1", "/h-1", 60000, 30000, b"\x01\x02", b"")])
