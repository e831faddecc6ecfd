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

- Authorization (Kafka's KafkaApis): READ on the TOPIC, else
  TOPIC_AUTHORIZATION_FAILED on each partition asked.

Version notes: v0 is the only version (flexible).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Never

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, Outcome, PartitionResult, Shape, each_partition, refuse, topic_rows
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import InvalidTopicError, UnknownTopicOrPartitionError
from logstore.topics import validate_topic_name

if TYPE_CHECKING:
    from logstore.manager import LogManager
    from logstore.producer_state import ProducerEntry

KEY = 61
SHAPE = Shape(partitions="partition_indexes", index=None)


def _producers(store: LogManager, topic: str, index: int) -> list[ProducerEntry] | Outcome[Never]:
    """The partition's producer entries, or Kafka's refusal of the topic or partition."""
    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        return refuse(ErrorCode.invalid_topic_exception, str(exc))
    if topic not in store.topics():
        return refuse(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist")
    try:
        return store.log(topic, index).producer_entries()
    except UnknownTopicOrPartitionError:
        return refuse(ErrorCode.unknown_topic_or_partition, f"partition {topic}-{index} does not exist")


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe the active producers of each partition asked."""
    version = request.version
    state_cls = response_type(KEY, version, "ProducerState")
    store = request.broker.store
    results = each_partition(request, body.topics, lambda topic, index, _: _producers(store, topic, index),
                             operation=AclOperation.READ, shape=SHAPE)

    def fields(result: PartitionResult[list[ProducerEntry]]) -> dict[str, object]:
        producers = tuple(build(state_cls, producer_id=e.producer_id, producer_epoch=e.epoch,
                                last_sequence=e.batches[-1][1] if e.batches else -1,
                                last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                                current_txn_start_offset=e.txn_first_offset) for e in result.value or ())
        return dict(partition_index=result.index, active_producers=producers)

    topics = topic_rows(results, response_type(KEY, version, "TopicResponse"),
                        response_type(KEY, version, "PartitionResponse"), fields)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=topics)
