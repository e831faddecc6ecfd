"""The transaction APIs on the wire, request by request, at the versions clients send.

Clients hide most answers behind retries; here each request is sent alone
(kio encodes it, as any client would) and the error code, the producer id and
epoch, and the markers on disk are checked directly.
"""
from __future__ import annotations

import datetime

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic
from kio.schema.add_offsets_to_txn.v0.request import AddOffsetsToTxnRequest as AddOffsetsV0
from kio.schema.add_partitions_to_txn.v0.request import AddPartitionsToTxnRequest as AddPartitionsV0
from kio.schema.add_partitions_to_txn.v0.request import AddPartitionsToTxnTopic
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1
from kio.schema.end_txn.v3.request import EndTxnRequest as EndTxnV3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest as FindCoordinatorV1
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.init_producer_id.v0.request import InitProducerIdRequest as InitV0
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitV4
from kio.static.primitive import i8, i16, i32Timedelta

from logstore.broker.admin_client import AdminClient
from logstore.broker.coordinator.partitioning import partition_for
from segment_files import batches, segment_paths

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))
OFFSETS_PARTITIONS = 50


@pytest.fixture(scope="module")
def wire(broker):
    with AdminClient(broker.bootstrap) as client:
        yield client


def init(client, txn_id, pid=-1, epoch=-1):
    response = client.request(InitV4(transactional_id=txn_id, transaction_timeout=TIMEOUT, producer_id=pid,
                                     producer_epoch=i16(epoch)))
    return response.error_code, response.producer_id, response.producer_epoch


def control_batches(data_dir, topic, partition):
    return [(b.producer_id, b.producer_epoch) for path in segment_paths(data_dir, topic, partition)
            for b in batches(path, whole=False) if b.is_control_batch]


def test_find_coordinator_answers_this_node_for_transactional_ids(wire, broker):
    single = wire.request(FindCoordinatorV1(key="w-find", key_type=i8(1)))
    assert (single.error_code, single.host, single.port) == (ErrorCode.none, broker.host, broker.port)
    batched = wire.request(FindCoordinatorV4(key_type=i8(1), coordinator_keys=("w-a", "", "w-b")))
    assert [(c.key, c.error_code) for c in batched.coordinators] == [
        ("w-a", ErrorCode.none), ("", ErrorCode.invalid_request), ("w-b", ErrorCode.none)]


def test_add_offsets_puts_the_groups_offsets_partition_in_the_transaction(wire, broker):
    error, pid, epoch = init(wire, "w-offsets")
    assert error == ErrorCode.none
    added = wire.request(AddOffsetsV0(transactional_id="w-offsets", producer_id=pid, producer_epoch=epoch,
                                      group_id="copiers"))
    assert added.error_code == ErrorCode.none
    ended = wire.request(EndTxnV3(transactional_id="w-offsets", producer_id=pid, producer_epoch=epoch,
                                  committed=True))
    assert ended.error_code == ErrorCode.none
    partition = partition_for("copiers", OFFSETS_PARTITIONS)
    assert control_batches(broker.data_dir, "__consumer_offsets", partition) == [(pid, epoch)]


def test_old_versions_name_a_fenced_producer_invalid_producer_epoch(wire):
    error, pid, old = init(wire, "w-fenced")
    assert init(wire, "w-fenced")[0] == ErrorCode.none
    assert wire.request(InitV4(transactional_id="w-fenced", transaction_timeout=TIMEOUT, producer_id=pid,
                               producer_epoch=i16(old - 1 if old else 99))).error_code == ErrorCode.producer_fenced
    assert wire.request(AddOffsetsV0(transactional_id="w-fenced", producer_id=pid, producer_epoch=old,
                                     group_id="g")).error_code == ErrorCode.invalid_producer_epoch
    assert wire.request(EndTxnV1(transactional_id="w-fenced", producer_id=pid, producer_epoch=old,
                                 committed=True)).error_code == ErrorCode.invalid_producer_epoch
    assert wire.request(EndTxnV3(transactional_id="w-fenced", producer_id=pid, producer_epoch=old,
                                 committed=True)).error_code == ErrorCode.producer_fenced


def test_init_refuses_a_timeout_above_the_maximum_and_an_empty_id(wire):
    too_long = i32Timedelta.parse(datetime.timedelta(milliseconds=900_001))
    assert wire.request(InitV0(transactional_id="w-timeout", transaction_timeout=too_long)).error_code == \
        ErrorCode.invalid_transaction_timeout
    assert wire.request(InitV0(transactional_id="", transaction_timeout=TIMEOUT)).error_code == \
        ErrorCode.invalid_request


def test_add_partitions_names_unknown_partitions_and_attempts_none(wire, broker):
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("w-known", 1, 1)])["w-known"].result()
    error, pid, epoch = init(wire, "w-unknown")
    topics = (AddPartitionsToTxnTopic(name="w-known", partitions=(0, 1)),)
    response = wire.request(AddPartitionsV0(v3_and_below_transactional_id="w-unknown", v3_and_below_producer_id=pid,
                                            v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics))
    assert [(r.partition_index, r.partition_error_code)
            for r in response.results_by_topic_v3_and_below[0].results_by_partition] == [
        (0, ErrorCode.operation_not_attempted), (1, ErrorCode.unknown_topic_or_partition)]
    # Nothing was added: ending is refused, there is no transaction.
    assert wire.request(EndTxnV3(transactional_id="w-unknown", producer_id=pid, producer_epoch=epoch,
                                 committed=True)).error_code == ErrorCode.invalid_txn_state
