"""DeleteRecords (21), v0-2: move each partition's log start offset up (-1: to the high
watermark); the answer is the new low watermark. Past the high watermark is OFFSET_OUT_OF_RANGE.
A topic the principal may not DELETE answers TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis).
The coordinators' internal topics answer INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager
refuses them: records cut from `__consumer_offsets` would take committed offsets with them."""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, each_partition, topic_rows
from logstore.broker.coordinator.internal_topics import INTERNAL_TOPICS
from logstore.broker.protocol import ZERO_MS
from logstore.errors import InvalidTopicError

KEY = 21


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Delete records below each given offset."""
    version = request.version

    def delete(topic: str, index: int, asked: KioMessage) -> int:
        # Looked up first: an unknown partition of an internal topic is UNKNOWN_TOPIC_OR_PARTITION, as in Kafka.
        log_ = request.broker.store.log(topic, index)
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
        return log_.delete_records(log_.high_watermark if asked.offset == -1 else asked.offset)

    results = each_partition(request, body.topics, delete, operation=AclOperation.DELETE)
    topics = topic_rows(results, response_type(KEY, version, "DeleteRecordsTopicResult"),
                        response_type(KEY, version, "DeleteRecordsPartitionResult"),
                        lambda r: dict(partition_index=r.index, low_watermark=r.value if r.outcome.ok else -1))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=topics)
