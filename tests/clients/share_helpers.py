"""Share groups from confluent-kafka's ShareConsumer: group configs, consuming until a condition, records."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import AcknowledgeType, Message, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from logstore.broker.admin_client import AdminClient as WireAdmin
from logstore.broker.protocol import ErrorCode

TIMEOUT = 60.0   # s: how long a consuming loop may take to see what it waits for
__all__ = ["TIMEOUT", "AcknowledgeType", "commit", "consume_until", "create_topic", "describe", "finish",
           "produce_values", "set_group_configs", "share_consumer", "start_offsets"]


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create `topic` and wait for the answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Set a group's configs (dots written as underscores) through IncrementalAlterConfigs on a GROUP."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
               for name, value in configs.items()]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)


def produce_values(bootstrap: str, topic: str, values: Iterable[bytes], partition: int | None = None,
                   **config: object) -> None:
    """Write `values` (acks=all), every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failed: list = []
    for value in values:
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=value, on_delivery=lambda err, _: err and failed.append(err), **kwargs)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0 and not failed, failed


def share_consumer(bootstrap: str, group: str, topic: str, *, explicit: bool = False, **config: object
                   ) -> ShareConsumer:
    """A ShareConsumer subscribed to `topic` (implicit acknowledgement unless `explicit`)."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit" if explicit else "implicit", **config})
    consumer.subscribe([topic])
    return consumer


def consume_until(consumer: ShareConsumer, done: Callable[[], bool], on_message: Callable[[Message], None],
                  timeout: float = TIMEOUT) -> None:
    """Poll `consumer`, handing each record to `on_message`, until `done()`; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the share consumer did not get what it waited for in time"
        for message in consumer.poll(0.5):
            assert message.error() is None, message.error()
            on_message(message)


def commit(consumer: ShareConsumer) -> bool:
    """Send the pending acknowledgements and wait for them; every partition must take them (True)."""
    results = consumer.commit_sync(TIMEOUT)
    assert all(error is None for error in results.values()), results
    return True


def finish(consumer: ShareConsumer) -> None:
    """Acknowledge what the last poll returned, then close. librdkafka's close sends no implicit
    acknowledgements: without the commit, the last poll's records are released for redelivery."""
    try:
        commit(consumer)
    finally:
        consumer.close()


def describe(bootstrap: str, group: str, topics: dict[str, list[int]] | None = None):
    """DescribeShareGroupOffsets v1 of one group: the group's answer."""
    asked = None if topics is None else tuple(
        DescribeShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(i32(p) for p in ps))
        for t, ps in topics.items())
    with WireAdmin(bootstrap) as client:
        response = client.request(DescribeShareGroupOffsetsRequest(groups=(
            DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=asked),)))
    (answer,) = response.groups
    return answer


def start_offsets(bootstrap: str, group: str, topics: dict[str, list[int]] | None = None
                  ) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag) of the group's share-partitions."""
    answer = describe(bootstrap, group, topics)
    assert answer.error_code == ErrorCode.none, answer
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in answer.topics for p in t.partitions}
