"""DescribeProducers (61), v0: the producers a partition remembers, and their open transactions (KIP-664).

Behavior, as Kafka's KafkaApis.handleDescribeProducersRequest and
UnifiedLog.activeProducers:
- Per partition asked: every producer in the partition's producer state
  (those not yet expired by producer.id.expiration.ms), sorted by producer
  id: its epoch, the last sequence it wrote (-1 if it has no batch cached,
  e.g. only markers since the snapshot), the max timestamp (ms) of its last
  batch or marker, the coordinator epoch of its last marker (-1 if none),
  and the first offset of its open transaction (-1 if none).
- A topic name Kafka would refuse is INVALID_TOPIC_EXCEPTION, an unknown
  topic or partition UNKNOWN_TOPIC_OR_PARTITION, on each partition asked.
- The state is read under the log's lock, so a row never shows half an
  append.

Version notes: v0 is the only version (flexible).
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import InvalidTopicError, UnknownTopicOrPartitionError
from logstore.manager import validate_topic_name

KEY = 61


def _topic_error(broker, name: str) -> tuple[ErrorCode, str] | None:
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        return ErrorCode.invalid_topic_exception, str(exc)
    if name not in broker.store.topics():
        return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
    return None


@api(KEY, 0, 0)
async def handle(request, body):
    """Describe the active producers of each partition asked."""
    broker = request.broker
    version = request.version
    partition_cls = response_type(KEY, version, "PartitionResponse")
    state_cls = response_type(KEY, version, "ProducerState")
    topic_cls = response_type(KEY, version, "TopicResponse")
    topics = []
    for topic in body.topics:
        topic_error = _topic_error(broker, topic.name)
        rows = []
        for index in topic.partition_indexes:
            error = topic_error
            entries = []
            if error is None:
                try:
                    entries = broker.store.log(topic.name, index).producer_entries()
                except UnknownTopicOrPartitionError:
                    error = ErrorCode.unknown_topic_or_partition, f"partition {topic.name}-{index} does not exist"
            producers = tuple(build(state_cls, producer_id=e.producer_id, producer_epoch=e.epoch,
                                    last_sequence=e.batches[-1][1] if e.batches else -1,
                                    last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                                    current_txn_start_offset=e.txn_first_offset) for e in entries)
            code, message = error if error is not None else (ErrorCode.none, None)
            rows.append(build(partition_cls, partition_index=index, error_code=code, error_message=message,
                              active_producers=producers))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(rows)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(topics))
