"""`logstore get-offsets` as kafka-get-offsets.sh is used, against records with known offsets and timestamps.

The scene: `go-ts` (3 partitions) holds, by partition, records whose
CreateTime timestamps are TIMESTAMPS[p] (partition 2 is empty); `go-wide`
(11 partitions) holds one record in partition 10, so Kafka's order of the
lines (by `topic-partition` as text: go-wide-10 before go-wide-2) shows.
"""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

import admin_cli_broker
from admin_cli_broker import TIMEOUT, cli, one_line_error

admin_broker = admin_cli_broker.admin_broker   # the fixture

TIMESTAMPS = {0: [1000, 2000, 3000], 1: [5000, 4000], 2: []}


@pytest.fixture(scope="module")
def scene(admin_broker):
    admin = ConfluentAdmin({"bootstrap.servers": admin_broker.bootstrap})
    for future in admin.create_topics([NewTopic("go-ts", 3, 1), NewTopic("go-wide", 11, 1)]).values():
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 0})
    for p, stamps in TIMESTAMPS.items():
        for ts in stamps:
            producer.produce("go-ts", b"v", partition=p, timestamp=ts)
            producer.flush(TIMEOUT)   # one batch per record: each timestamp its own
    producer.produce("go-wide", b"v", partition=10)
    assert producer.flush(TIMEOUT) == 0
    return admin_broker


def lines(done) -> list[str]:
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout.splitlines()


def test_latest_is_the_default_and_lines_sort_as_kafka_sorts_them(scene):
    assert lines(cli(scene, "get-offsets", "--topic", "go-.*")) == [
        "go-ts:0:3", "go-ts:1:2", "go-ts:2:0",
        "go-wide:0:0", "go-wide:1:0", "go-wide:10:1", *(f"go-wide:{p}:0" for p in range(2, 10))]
    assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", "-1")) == [
        "go-ts:0:3", "go-ts:1:2", "go-ts:2:0"]


def test_earliest_max_timestamp_and_a_timestamp(scene):
    for time in ("earliest", "-2", "earliest-local", "-4"):
        assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", time)) == [
            "go-ts:0:0", "go-ts:1:0", "go-ts:2:0"], time
    # The record with the largest timestamp; an empty partition has none and is left out.
    for time in ("max-timestamp", "-3"):
        assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", time)) == ["go-ts:0:2", "go-ts:1:0"]
    assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", "2500")) == ["go-ts:0:2", "go-ts:1:0"]
    assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", "4500")) == ["go-ts:1:0"]
    assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", "6000")) == []
    assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--time", "latest-tiered")) == []


def test_partitions_and_topic_partition_patterns(scene):
    assert lines(cli(scene, "get-offsets", "--topic", "go-ts", "--partitions", "0,2")) == ["go-ts:0:3", "go-ts:2:0"]
    assert lines(cli(scene, "get-offsets", "--topic-partitions", "go-ts:1,go-wide:9-")) == [
        "go-ts:1:2", "go-wide:10:1", "go-wide:9:0"]
    assert lines(cli(scene, "get-offsets", "--topic-partitions", "go-wide:1-3")) == ["go-wide:1:0", "go-wide:2:0"]
    assert lines(cli(scene, "get-offsets", "--topic-partitions", "go-.*:-1")) == ["go-ts:0:3", "go-wide:0:0"]
    assert lines(cli(scene, "get-offsets", "--topic-partitions", "go-ts")) == ["go-ts:0:3", "go-ts:1:2", "go-ts:2:0"]


def test_json(scene):
    done = cli(scene, "get-offsets", "--topic", "go-ts", "--time", "earliest", "--partitions", "1", "--json")
    assert json.loads(done.stdout) == {"offsets": [{"topic": "go-ts", "partition": 1, "offset": 0}]}


def test_internal_topics_are_included_unless_excluded(scene):
    consumer = Consumer({"bootstrap.servers": scene.bootstrap, "group.id": "go-group"})
    consumer.commit(offsets=[TopicPartition("go-ts", 0, 1)], asynchronous=False)
    consumer.close()
    assert any(line.startswith("__consumer_offsets:") for line in lines(cli(scene, "get-offsets")))
    assert not any(line.startswith("__consumer_offsets:")
                   for line in lines(cli(scene, "get-offsets", "--exclude-internal-topics")))


def test_errors(scene):
    one_line_error(cli(scene, "get-offsets", "--topic", "go-none"), 1,
                   "Could not match any topic-partitions with the specified filters")
    for args, fragment in [(("--topic-partitions", "go-ts:0", "--topic", "go-ts"), "cannot be used with --topic"),
                           (("--partitions", "a,b"), "comma separated list of numeric partition ids"),
                           (("--time", "yesterday"), "Malformed time argument yesterday"),
                           (("--time", "-7"), "one of -1..-5"),
                           (("--topic-partitions", "go-ts:x"), "Invalid rule specification: go-ts:x"),
                           (("--topic", "[",), "is an invalid regex")]:
        one_line_error(cli(scene, "get-offsets", *args), 2, "logstore get-offsets: error:", fragment)
