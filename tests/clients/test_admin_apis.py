"""The admin APIs of issue 27 through real AdminClients (confluent-kafka, kafka-python, aiokafka) against a real
broker process: CreatePartitions with Kafka's edges, and CreateTopics with explicit replica assignments.

What the clients cannot send (a topic named twice) goes through the product's wire client with kio requests.
Producers and consumer groups across a CreatePartitions are in test_partition_growth.py.
"""
from __future__ import annotations

import asyncio
import datetime
import shutil
import sys
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidPartitionsError, InvalidReplicationAssignmentError, UnknownTopicOrPartitionError
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i32, i32Timedelta

from logstore.broker.admin_client import AdminClient as WireClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
from acl_wire import request  # noqa: E402

TIMEOUT = 30.0   # s: a bound on any one call; each returns far sooner
NODE_ID = 1      # the broker's default node.id


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin: AdminClient, name: str, partitions: int, **kwargs) -> None:
    for future in admin.create_topics([NewTopic(name, partitions, **kwargs)]).values():
        future.result(TIMEOUT)


def _partitions(admin: AdminClient, name: str) -> int:
    return len(admin.list_topics(name, timeout=TIMEOUT).topics[name].partitions)


def _grow_error(admin: AdminClient, new: NewPartitions, **kwargs) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        admin.create_partitions([new], **kwargs)[new.topic].result(TIMEOUT)
    return caught.value.args[0]


def _wire_grow(broker, *topics: tuple[str, int], validate_only: bool = False):
    with WireClient(broker.bootstrap) as wire:
        return wire.request(CreatePartitionsRequest(
            topics=tuple(CreatePartitionsTopic(name=name, count=i32(count), assignments=None)
                         for name, count in topics),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), validate_only=validate_only))


# -- CreatePartitions -------------------------------------------------------------------------

def test_confluent_grows_a_topic_and_metadata_shows_it_at_once(broker, topic):
    admin = _admin(broker)
    _create(admin, topic, 1)
    assert _partitions(admin, topic) == 1
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(TIMEOUT)
    assert _partitions(admin, topic) == 4
    # Every new partition has the topic's id on disk, as Kafka writes it.
    ids = {(broker.data_dir / f"{topic}-{p}" / "partition.metadata").read_text() for p in range(4)}
    assert len(ids) == 1, ids


def test_validate_only_grows_nothing(broker, topic):
    admin = _admin(broker)
    _create(admin, topic, 2)
    admin.create_partitions([NewPartitions(topic, 6)], validate_only=True)[topic].result(TIMEOUT)
    assert _partitions(admin, topic) == 2
    assert not (broker.data_dir / f"{topic}-2").exists()


def test_a_count_that_is_not_an_increase_is_invalid_partitions(broker, topic):
    admin = _admin(broker)
    _create(admin, topic, 3)
    same = _grow_error(admin, NewPartitions(topic, 3))
    assert same.code() == KafkaError.INVALID_PARTITIONS and same.str() == "Topic already has 3 partition(s).", same
    fewer = _grow_error(admin, NewPartitions(topic, 2))
    assert fewer.code() == KafkaError.INVALID_PARTITIONS, fewer
    assert fewer.str() == f"The topic {topic} currently has 3 partition(s); 2 would not be an increase.", fewer
    assert _partitions(admin, topic) == 3


def test_an_unknown_topic_is_unknown_topic_or_partition(broker, topic):
    error = _grow_error(_admin(broker), NewPartitions(topic, 3))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, error


def test_assignments_to_this_broker_are_taken_and_others_refused(broker, topic):
    admin = _admin(broker)
    _create(admin, topic, 1)
    other = _grow_error(admin, NewPartitions(topic, 3, replica_assignment=[[NODE_ID], [NODE_ID + 1]]))
    assert other.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, other
    assert "includes broker 2, but no such broker is registered" in other.str(), other
    twice = _grow_error(admin, NewPartitions(topic, 2, replica_assignment=[[NODE_ID, NODE_ID]]))
    assert twice.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "more than once" in twice.str(), twice
    short = _grow_error(admin, NewPartitions(topic, 3, replica_assignment=[[NODE_ID]]))
    assert short.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, short
    assert short.str() == "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    assert _partitions(admin, topic) == 1
    admin.create_partitions([NewPartitions(topic, 3, replica_assignment=[[NODE_ID], [NODE_ID]])])[topic].result(
        TIMEOUT)
    assert _partitions(admin, topic) == 3


def test_internal_topics_do_not_grow(broker):
    admin = _admin(broker)
    with WireClient(broker.bootstrap) as wire:
        # Asked for by name, the topic is made (as a group coordinator's lookup makes it).
        wire.request(MetadataRequest(topics=(MetadataRequestTopic(name="__consumer_offsets", topic_id=None),),
                                     allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    count = _partitions(admin, "__consumer_offsets")
    error = _grow_error(admin, NewPartitions("__consumer_offsets", count + 1))
    assert error.code() == KafkaError.INVALID_REQUEST, error
    assert _partitions(admin, "__consumer_offsets") == count


def test_a_topic_named_twice_is_invalid_request_and_the_others_grow(broker, topic):
    _create(_admin(broker), topic, 1)
    _create(_admin(broker), f"{topic}-b", 1)
    answer = _wire_grow(broker, (topic, 2), (topic, 3), (f"{topic}-b", 2))
    results = {r.name: (r.error_code, r.error_message) for r in answer.results}
    assert results == {topic: (ErrorCode.invalid_request, "Duplicate topic name."),
                       f"{topic}-b": (ErrorCode.none, None)}, results
    assert _partitions(_admin(broker), topic) == 1
    assert _partitions(_admin(broker), f"{topic}-b") == 2


def test_more_than_ten_thousand_new_partitions_in_one_request_grow_nothing(broker, topic):
    _create(_admin(broker), topic, 1)
    _create(_admin(broker), f"{topic}-b", 1)
    answer = _wire_grow(broker, (topic, 5001), (f"{topic}-b", 5002))
    assert {(r.error_code, r.error_message) for r in answer.results} == {
        (ErrorCode.policy_violation, "Excessively large number of partitions per request.")}
    assert _partitions(_admin(broker), topic) == 1
    # Up to the limit is one request's worth.
    answer = _wire_grow(broker, (topic, 5001), (f"{topic}-b", 5001), validate_only=True)
    assert {r.error_code for r in answer.results} == {ErrorCode.none}


def test_kafka_python_grows_a_topic_with_kafkas_errors(broker, topic):
    _create(_admin(broker), topic, 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    try:
        admin.create_partitions({topic: KpNewPartitions(3)})
        assert _partitions(_admin(broker), topic) == 3
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({topic: KpNewPartitions(2)})
        with pytest.raises(InvalidReplicationAssignmentError):
            admin.create_partitions({topic: KpNewPartitions(4, [[NODE_ID + 7]])})
        admin.create_partitions({topic: KpNewPartitions(4, [[NODE_ID]])})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.create_partitions({f"{topic}-none": KpNewPartitions(2)})
    finally:
        admin.close()
    assert _partitions(_admin(broker), topic) == 4


def test_aiokafka_grows_a_topic(broker, topic):
    _create(_admin(broker), topic, 2)

    async def grow():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await admin.create_partitions({topic: AioNewPartitions(5)})
        finally:
            await admin.close()
    answer = asyncio.run(grow())
    assert [(r[0], r[1]) for r in answer.topic_errors] == [(topic, 0)], answer
    assert _partitions(_admin(broker), topic) == 5


# -- DescribeCluster, DescribeLogDirs, DescribeTopicPartitions, ElectLeaders, ListPartitionReassignments ----------

def _kafka_python(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000))


def _produce(broker, topic: str, partition: int, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=bytes(size), key=b"%d" % i, partition=partition)
    assert producer.flush(TIMEOUT) == 0


def test_describe_cluster_names_this_broker_as_the_cluster_and_its_controller(broker):
    admin = _admin(broker)   # kept: the future dies with its client
    described = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert [(n.id, n.host, n.port) for n in described.nodes] == [(NODE_ID, broker.host, broker.port)]
    assert described.controller.id == NODE_ID
    cluster_id = (broker.data_dir / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
    assert described.cluster_id == cluster_id
    admin = _kafka_python(broker)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["cluster_id"] == cluster_id and cluster["controller_id"] == NODE_ID, cluster
    assert [(b["broker_id"], b["is_fenced"]) for b in cluster["brokers"]] == [(NODE_ID, False)], cluster
    # No authorizer: every cluster operation is allowed.
    assert set(cluster["authorized_operations"]) == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}


def test_describe_log_dirs_gives_each_partitions_real_size_and_the_disks_space(broker, topic):
    admin = _admin(broker)
    _create(admin, topic, 2)
    _produce(broker, topic, 1, 50, 1000)
    client = _kafka_python(broker)
    try:
        dirs = client.describe_log_dirs({topic: [0, 1]})
    finally:
        client.close()
    [per_broker] = dirs
    assert per_broker["broker"] == NODE_ID
    [log_dir] = per_broker["log_dirs"]
    assert log_dir["log_dir"] == str(broker.data_dir)
    assert log_dir["error_code"] == 0
    [topic_row] = log_dir["topics"]
    assert topic_row["name"] == topic
    sizes = {p["partition_index"]: (p["partition_size"], p["offset_lag"]) for p in topic_row["partitions"]}
    on_disk = {p: sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-{p}").glob("*.log")) for p in (0, 1)}
    assert sizes == {0: (0, 0), 1: (on_disk[1], 0)}, (sizes, on_disk)
    assert on_disk[1] > 50 * 1000
    usage = shutil.disk_usage(broker.data_dir)
    assert log_dir["total_bytes"] == usage.total
    # Other processes write meanwhile: the usable space is the disk's, within what the broker's own files took.
    assert abs(log_dir["usable_bytes"] - usage.free) < 256 * 1024 * 1024


def test_describe_topic_partitions_pages_with_its_cursor(broker, topic):
    admin = _admin(broker)
    _create(admin, f"{topic}-a", 3)
    _create(admin, f"{topic}-b", 2)
    client = _kafka_python(broker)
    try:
        first = client.describe_topic_partitions([f"{topic}-b", f"{topic}-a", f"{topic}-none"],
                                                 response_partition_limit=2)
        second = client.describe_topic_partitions([f"{topic}-a", f"{topic}-b"], response_partition_limit=2,
                                                  cursor=first["next_cursor"])
        third = client.describe_topic_partitions([f"{topic}-a", f"{topic}-b"], response_partition_limit=2,
                                                 cursor=second["next_cursor"])
    finally:
        client.close()

    def pages(answer):
        return [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]]
    assert pages(first) == [(f"{topic}-a", [0, 1])], first
    assert first["next_cursor"] == {"topic_name": f"{topic}-a", "partition_index": 2}, first
    assert pages(second) == [(f"{topic}-a", [2]), (f"{topic}-b", [0])], second
    assert pages(third) == [(f"{topic}-b", [1])] and third["next_cursor"] is None, third
    row = first["topics"][0]
    assert row["error_code"] == 0 and not row["is_internal"] and row["partitions"][0]["leader_id"] == NODE_ID
    assert row["partitions"][0]["replica_nodes"] == [NODE_ID] and row["partitions"][0]["isr_nodes"] == [NODE_ID]


def test_describe_topic_partitions_answers_unknown_topics_and_a_bad_cursor(broker, topic):
    with WireClient(broker.bootstrap) as wire:
        unknown = wire.request(request(75, 0, topics=[{"name": f"{topic}-none"}, {"name": "bad name"}],
                                       response_partition_limit=10))
        cursor = wire.request(request(75, 0, topics=[{"name": f"{topic}-none"}], response_partition_limit=10,
                                      cursor={"topic_name": "elsewhere", "partition_index": 0}))
    assert {(t.name, t.error_code) for t in unknown.topics} == {
        (f"{topic}-none", ErrorCode.unknown_topic_or_partition), ("bad name", ErrorCode.invalid_topic_exception)}
    assert [(t.name, t.error_code) for t in cursor.topics] == [(f"{topic}-none", ErrorCode.invalid_request)]


def test_elect_leaders_finds_no_election_needed(broker, topic):
    admin = _admin(broker)
    _create(admin, topic, 2)
    answer = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0), TopicPartition(topic, 1),
                                                          TopicPartition(topic, 5)]).result(TIMEOUT)
    codes = {tp.partition: error.code() if error is not None else None for tp, error in answer.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 1: KafkaError.ELECTION_NOT_NEEDED,
                     5: KafkaError.UNKNOWN_TOPIC_OR_PART}, codes
    with WireClient(broker.bootstrap) as wire:
        every = wire.request(request(43, 2, election_type=1, topic_partitions=None, timeout=10_000))
        bad = wire.request(request(43, 2, election_type=7, timeout=10_000,
                                   topic_partitions=[{"topic": topic, "partitions": [0]}]))
    # Asked for every partition, those that need no election are left out.
    assert every.error_code == 0 and all(not r.partition_result for r in every.replica_election_results)
    assert topic in {r.topic for r in every.replica_election_results}
    assert bad.error_code == ErrorCode.invalid_request
    assert [p.error_code for r in bad.replica_election_results for p in r.partition_result] == [
        ErrorCode.invalid_request]


def test_no_partition_reassignment_is_ever_in_progress(broker, topic):
    _create(_admin(broker), topic, 2)
    client = _kafka_python(broker)
    try:
        assert client.list_partition_reassignments() == {}
        assert client.list_partition_reassignments({topic: [0, 1]}) == {}
    finally:
        client.close()


# -- CreateTopics with explicit replica assignments ---------------------------------------------

def test_confluent_creates_a_topic_from_assignments_to_this_broker(broker, topic):
    admin = _admin(broker)
    admin.create_topics([NewTopic(topic, 3, replica_assignment=[[NODE_ID], [NODE_ID], [NODE_ID]])])[topic].result(
        TIMEOUT)
    assert _partitions(admin, topic) == 3
    refused = {}
    for name, assignment in ((f"{topic}-other", [[NODE_ID], [NODE_ID + 1]]), (f"{topic}-twice", [[NODE_ID, NODE_ID]])):
        with pytest.raises(KafkaException) as caught:
            admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)])[name].result(TIMEOUT)
        refused[name] = caught.value.args[0]
    assert {e.code() for e in refused.values()} == {KafkaError.INVALID_REPLICA_ASSIGNMENT}, refused
    assert "includes broker 2, but no such broker is registered" in refused[f"{topic}-other"].str()
    assert "includes the broker 1 more than once" in refused[f"{topic}-twice"].str()
    assert not set(refused) & set(admin.list_topics(timeout=TIMEOUT).topics)


def test_kafka_python_creates_a_topic_from_assignments_to_this_broker(broker, topic):
    admin = _kafka_python(broker)
    try:
        admin.create_topics([KpNewTopic(topic, replica_assignments={0: [NODE_ID], 1: [NODE_ID]})])
        admin.create_topics({f"{topic}-dict": {"assignments": {0: [NODE_ID]}}})
        with pytest.raises(InvalidReplicationAssignmentError):
            admin.create_topics({f"{topic}-other": {"assignments": {0: [NODE_ID + 3]}}})
    finally:
        admin.close()
    assert _partitions(_admin(broker), topic) == 2
    assert _partitions(_admin(broker), f"{topic}-dict") == 1


def test_assignments_with_a_count_or_gaps_are_refused_as_kafka_refuses_them(broker, topic):
    def create(name, **fields):
        with WireClient(broker.bootstrap) as wire:
            [row] = wire.request(request(19, 5, timeout=10_000, topics=[{"name": name, **fields}])).topics
        return row.error_code, row.error_message, row.num_partitions

    counted = create(f"{topic}-a", num_partitions=2, replication_factor=-1,
                     assignments=[{"partition_index": 0, "broker_ids": [NODE_ID]}])
    assert counted[:2] == (ErrorCode.invalid_request, "A manual partition assignment was specified, but "
                                                      "numPartitions was not set to -1."), counted
    factor = create(f"{topic}-b", num_partitions=-1, replication_factor=1,
                    assignments=[{"partition_index": 0, "broker_ids": [NODE_ID]}])
    assert factor[0] == ErrorCode.invalid_request, factor
    gap = create(f"{topic}-c", num_partitions=-1, replication_factor=-1,
                 assignments=[{"partition_index": 0, "broker_ids": [NODE_ID]},
                              {"partition_index": 2, "broker_ids": [NODE_ID]}])
    assert gap[:2] == (ErrorCode.invalid_replica_assignment,
                       "partitions should be a consecutive 0-based integer sequence"), gap
    repeat = create(f"{topic}-d", num_partitions=-1, replication_factor=-1,
                    assignments=[{"partition_index": 0, "broker_ids": [NODE_ID]},
                                 {"partition_index": 0, "broker_ids": [NODE_ID]}])
    assert repeat[:2] == (ErrorCode.invalid_replica_assignment,
                          "Found multiple manual partition assignments for partition 0"), repeat
    empty = create(f"{topic}-f", num_partitions=-1, replication_factor=-1,
                   assignments=[{"partition_index": 0, "broker_ids": []}])
    assert empty[:2] == (ErrorCode.invalid_replica_assignment,
                         "The manual partition assignment includes an empty replica list."), empty
    made = create(f"{topic}-e", num_partitions=-1, replication_factor=-1,
                  assignments=[{"partition_index": 1, "broker_ids": [NODE_ID]},
                               {"partition_index": 0, "broker_ids": [NODE_ID]}])
    assert made == (ErrorCode.none, None, 2), made
