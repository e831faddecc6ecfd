"""Metadata for the partitions of a log dir an I/O error took offline, as Kafka 4's KRaft broker answers it.

Kafka's controller, told of the offline dir (handleDirectoriesOffline), takes the broker out of the
leadership of every partition in it; with the broker the only replica, no leader is left (-1) and the
ISR keeps its last member. KRaftMetadataCache then answers such a partition LEADER_NOT_AVAILABLE with
leader -1, its replicas and ISR as they are, and the replica in `offline_replicas` (its dir is not among
the broker's online dirs). The partitions of the other log dir are served as before.

The broker runs on `faulty_disk_broker.py` with two log dirs; a write fault on one partition's `.log`
takes its dir offline.
"""
from __future__ import annotations

import errno
import signal
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from broker_process import STOP_TIMEOUT, BrokerProcess, free_port
from raw_wire import kio_round_trip

TIMEOUT = 30.0   # s: any one wait for the broker or a client
LAUNCHER = str(Path(__file__).with_name("faulty_disk_broker.py"))
CONTROL = "LOGSTORE_TEST_DISK_FAULTS"
METADATA, NONE, LEADER_NOT_AVAILABLE, NO_LEADER = 3, 0, 5, -1
TOPIC = "split"


@pytest.fixture
def split_broker(tmp_path):
    """A broker over two log dirs with TOPIC's two partitions one in each; (broker, partition in the first dir,
    the other, control file). Killed at teardown if still running."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    control = tmp_path / "faults"
    broker = BrokerProcess("127.0.0.1", free_port(), first, (f"log.dirs={first},{second}",),
                           env={CONTROL: str(control)}, launcher=(LAUNCHER,))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT)
        in_first = [p for p in range(2) if (first / f"{TOPIC}-{p}").is_dir()]
        assert len(in_first) == 1, "the two partitions went to the same log dir"
        yield broker, in_first[0], 1 - in_first[0], control
    finally:
        if broker.running:
            broker.kill()


def _take_offline(broker: BrokerProcess, bad: int, control: Path) -> None:
    """Fail a write of partition `bad` (its dir goes offline), through a real produce."""
    control.write_text(f"{broker.data_dir}/{TOPIC}-{bad}/*.log {errno.EIO}\n")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(KafkaStorageError):
            producer.send(TOPIC, b"torn", partition=bad).get(TIMEOUT)
    finally:
        producer.close(0)


def _raw_partitions(broker: BrokerProcess) -> tuple[int, dict[int, object]]:
    """(the broker's node id, the Metadata v12 partitions of TOPIC by index)."""
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
                           allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    response = kio_round_trip(broker, METADATA, 12, body, 7)
    (topic,) = response.topics
    assert int(topic.error_code) == NONE
    return int(response.brokers[0].node_id), {int(p.partition_index): p for p in topic.partitions}


def test_a_partition_of_an_offline_dir_has_no_leader_and_its_replica_is_offline(split_broker):
    broker, bad, good, control = split_broker
    node, before = _raw_partitions(broker)
    assert [int(r) for r in before[bad].offline_replicas] == []
    _take_offline(broker, bad, control)
    control.unlink()

    node, after = _raw_partitions(broker)
    offline, online = after[bad], after[good]
    assert int(offline.error_code) == LEADER_NOT_AVAILABLE
    assert int(offline.leader_id) == NO_LEADER
    assert [int(r) for r in offline.replica_nodes] == [node] and [int(r) for r in offline.isr_nodes] == [node]
    assert [int(r) for r in offline.offline_replicas] == [node]
    assert int(online.error_code) == NONE and int(online.leader_id) == node
    assert [int(r) for r in online.offline_replicas] == []

    # What a real client makes of it: no leader for the offline partition, the other one served.
    described = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(TOPIC, timeout=TIMEOUT)
    partitions = described.topics[TOPIC].partitions
    assert partitions[bad].leader == NO_LEADER
    assert partitions[bad].error is not None and partitions[bad].error.code() == KafkaError.LEADER_NOT_AVAILABLE
    assert partitions[good].leader == node and partitions[good].error is None
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        assert producer.send(TOPIC, b"fine", partition=good).get(TIMEOUT).offset == 0
    finally:
        producer.close(0)

    broker.proc.send_signal(signal.SIGTERM)
    assert broker.proc.wait(STOP_TIMEOUT) == 0, broker.log_text()[-4000:]
    broker.proc.stdout.close()
    # A restart recovers the dir: the partition has its leader again.
    broker.start()
    node, restarted = _raw_partitions(broker)
    assert int(restarted[bad].error_code) == NONE and int(restarted[bad].leader_id) == node
    assert [int(r) for r in restarted[bad].offline_replicas] == []
    broker.stop()
