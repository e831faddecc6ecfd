"""A broker listens at once and loads its groups behind: COORDINATOR_LOAD_IN_PROGRESS until they are in.

As Kafka's broker, `logstore broker` serves ApiVersions and Metadata while the
group coordinator still reads `__consumer_offsets`; a group whose partition is
not loaded yet answers COORDINATOR_LOAD_IN_PROGRESS (retriable; ListGroups too,
while any partition loads), and clients retry until its offsets come. The directory is built in-process with the
coordinator's own records: the group asked for sits in the partition loaded
last, behind 800,000 offsets of other groups in the partitions before
it, so the broker is still loading when the test's first requests arrive.
"""
from __future__ import annotations

import itertools
import time

from confluent_kafka import Consumer, TopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from broker_process import BrokerProcess, finish_brokers, free_port
from logstore.broker.admin_client import AdminClient
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.group_log import OffsetValue, encode_offset_key, encode_offset_value
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC, TransactionCoordinator, TxnConfig
from logstore.manager import LogManager

TOPIC = "loading"
PARTITIONS = 4
BULK_GROUPS = 8_000
BULK_OFFSETS = 100  # per group: 800,000 offsets ahead of the target's partition
DEADLINE = 60.0     # s: a bound on every wait
STARTS = 5


def build(data_dir) -> tuple[str, dict[int, int]]:
    """A log dir whose last `__consumer_offsets` partition holds the target group's offsets, and every
    other partition bulk offsets of other groups; (target group, its offsets by partition)."""
    with LogManager([str(data_dir)], start_scheduler=False) as store:
        store.create_topic(TOPIC, PARTITIONS)
        ids = itertools.count(1)
        transactions = TransactionCoordinator(store, lambda: next(ids), TxnConfig(fsync=False))
        groups = GroupCoordinator(store, transactions, GroupConfig(fsync=False))
        groups.ensure_offsets_topic()
        last = store.topics()[OFFSETS_TOPIC] - 1
        target = next(g for g in (f"target-{i}" for i in itertools.count()) if groups.partition_of(g) == last)
        committed = {p: 1_000 + p for p in range(PARTITIONS)}
        errors = groups.commit_offsets(target, "", None, -1, {(TOPIC, p): (o, -1, "") for p, o in committed.items()})
        assert not any(errors.values()), errors
        value = encode_offset_value(OffsetValue(42, -1, "", int(time.time() * 1000)))
        for number in range(BULK_GROUPS):
            group = f"bulk-{number}"
            prefix = encode_offset_key(group, TOPIC, 0)[:-4]  # the key up to its partition
            keys = [prefix + p.to_bytes(4, "big") for p in range(BULK_OFFSETS)]
            store.log(OFFSETS_TOPIC, number % last).append_records([value] * BULK_OFFSETS, keys=keys)
    return target, committed


def offset_fetch(admin: AdminClient, group: str):
    return admin.request(OffsetFetchRequest(group_id=GroupId(group), topics=(OffsetFetchRequestTopic(
        name=TopicName(TOPIC), partition_indexes=tuple(i32(p) for p in range(PARTITIONS))),)))


def _while_loading(admin: AdminClient, target: str) -> list:
    """OffsetFetch, DescribeGroups and ListGroups sent together (answered in order within milliseconds)."""
    sent = [admin.send(request) for request in (
        OffsetFetchRequest(group_id=GroupId(target), topics=(OffsetFetchRequestTopic(
            name=TopicName(TOPIC), partition_indexes=tuple(i32(p) for p in range(PARTITIONS))),)),
        DescribeGroupsRequest(groups=(GroupId(target),), include_authorized_operations=False),
        ListGroupsRequest())]
    return [admin.receive(each) for each in sent]


def test_groups_answer_load_in_progress_until_loaded_and_clients_get_their_offsets(tmp_path):
    data_dir = tmp_path / "broker"
    target, committed = build(data_dir)
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir)
    try:
        # The load takes a few hundred ms after the broker listens; a test process descheduled that long
        # meets a loaded coordinator: the broker starts again (a fresh load) until the requests come first.
        for _ in range(STARTS):
            broker.start()
            admin = AdminClient(broker.bootstrap).connect()
            fetched, described, listed = _while_loading(admin, target)
            if fetched.error_code == ErrorCode.coordinator_load_in_progress:
                break
            admin.close()
            broker.stop()
        else:
            raise AssertionError(f"the groups were loaded before the first request in {STARTS} starts")
        with admin:
            assert [g.error_code for g in described.groups] == [ErrorCode.coordinator_load_in_progress]
            assert (listed.error_code, listed.groups) == (ErrorCode.coordinator_load_in_progress, ())
            # Served at once, while the groups load.
            versions = admin.request(ApiVersionsRequest(client_software_name="test", client_software_version="1"))
            assert versions.error_code == ErrorCode.none
            metadata = admin.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None,
                                                                                  name=TopicName(TOPIC)),),
                                                     allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False))
            assert [(t.name, len(t.partitions)) for t in metadata.topics] == [(TOPIC, PARTITIONS)]

            # A consumer starting now retries until its group is loaded, then has its offsets.
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": target,
                                 "enable.auto.commit": False})
            try:
                found = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=DEADLINE)
            finally:
                consumer.close()
            assert {tp.partition: tp.offset for tp in found} == committed
            assert all(tp.error is None for tp in found)

            deadline = time.monotonic() + DEADLINE
            while (answer := offset_fetch(admin, target)).error_code == ErrorCode.coordinator_load_in_progress:
                assert time.monotonic() < deadline, "still loading"
            assert answer.error_code == ErrorCode.none
            assert {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions} == committed
            listed = admin.request(ListGroupsRequest())
            assert listed.error_code == ErrorCode.none and len(listed.groups) == BULK_GROUPS + 1
    finally:
        finish_brokers([broker])
    assert f"group coordinator loaded {BULK_GROUPS + 1} groups" in broker.log_text()
