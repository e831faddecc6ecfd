"""The admin APIs for a log dir an I/O error took offline, as Kafka answers them: DescribeLogDirs gives the dir
KAFKA_STORAGE_ERROR and no partitions (the other dir is described as before), ElectLeaders finds no leader
to elect for its partition, DescribeTopicPartitions shows that partition without a leader and its replica
offline, as Metadata does (test_offline_dir_metadata.py, whose two-dir broker this reuses).
"""
from __future__ import annotations

import signal

from kafka import KafkaAdminClient

from broker_process import STOP_TIMEOUT
from logstore.broker.admin_client import AdminClient as WireClient
from test_admin_apis import request
from test_offline_dir_metadata import TOPIC, _take_offline, split_broker  # noqa: F401 - the fixture

KAFKA_STORAGE_ERROR, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE = 56, 80, 83
ELECTION_NOT_NEEDED = 84
TIMEOUT_MS = 30_000


def _log_dirs(broker) -> dict[str, tuple[int, dict[int, int]]]:
    """Each log dir: (its error, the size of each TOPIC partition in it)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_MS)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    return {d["log_dir"]: (d["error_code"], {p["partition_index"]: p["partition_size"]
                                             for t in d["topics"] if t["name"] == TOPIC for p in t["partitions"]})
            for d in answer["log_dirs"]}


def test_admin_apis_answer_an_offline_log_dir_as_kafka_does(split_broker):  # noqa: F811 - the fixture
    broker, bad, good, control = split_broker
    first, second = str(broker.data_dir), str(broker.data_dir.parent / "second")
    where = {bad: first, good: second}
    before = _log_dirs(broker)
    assert before == {first: (0, {bad: 0}), second: (0, {good: 0})}, before
    _take_offline(broker, bad, control)
    control.unlink()

    after = _log_dirs(broker)
    assert after[where[bad]] == (KAFKA_STORAGE_ERROR, {}), after
    assert after[where[good]] == (0, {good: 0}), after
    with WireClient(broker.bootstrap) as wire:
        asked = [{"topic": TOPIC, "partitions": [bad, good]}]
        preferred = wire.request(request(43, 2, election_type=0, topic_partitions=asked, timeout=TIMEOUT_MS))
        unclean = wire.request(request(43, 2, election_type=1, topic_partitions=asked, timeout=TIMEOUT_MS))
        paged = wire.request(request(75, 0, topics=[{"name": TOPIC}], response_partition_limit=10))
    assert {p.partition_id: p.error_code for r in preferred.replica_election_results for p in r.partition_result} == {
        bad: PREFERRED_LEADER_NOT_AVAILABLE, good: ELECTION_NOT_NEEDED}
    assert {p.partition_id: p.error_code for r in unclean.replica_election_results for p in r.partition_result} == {
        bad: ELIGIBLE_LEADERS_NOT_AVAILABLE, good: ELECTION_NOT_NEEDED}
    [topic] = paged.topics
    rows = {p.partition_index: p for p in topic.partitions}
    assert rows[bad].leader_id == -1 and list(rows[bad].offline_replicas) == list(rows[bad].replica_nodes)
    assert rows[good].leader_id == rows[good].replica_nodes[0] and not rows[good].offline_replicas

    broker.proc.send_signal(signal.SIGTERM)
    assert broker.proc.wait(STOP_TIMEOUT) == 0, broker.log_text()[-4000:]
    broker.proc.stdout.close()
    # A restart recovers the dir: it is described again.
    broker.start()
    assert _log_dirs(broker) == before
    broker.stop()
