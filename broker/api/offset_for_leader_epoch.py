"""OffsetForLeaderEpoch (23), v2-4: the end offset of the largest leader epoch at or below the
one asked, from the partition's leader-epoch cache (KIP-320 log truncation detection). A topic
the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis; CLUSTER_ACTION,
which Kafka's followers hold, is for replicas this broker does not have)."""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, PartitionResult, Shape, each_partition, topic_rows
from logstore.broker.protocol import ZERO_MS

KEY = 23
SHAPE = Shape(topic="topic", index="partition")


@api(KEY, 2, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Look each (partition, epoch) up in the leader-epoch cache."""
    version = request.version

    def end_offset(topic: str, index: int, asked: KioMessage) -> tuple[int, int]:
        log_ = request.broker.store.log(topic, index)
        return log_.epoch_cache.end_offset_for(asked.leader_epoch, log_.log_end_offset)

    def fields(result: PartitionResult[tuple[int, int]]) -> dict[str, object]:
        epoch, end = result.outcome.result if result.outcome.ok else (-1, -1)
        return dict(partition=result.index, leader_epoch=epoch, end_offset=end)

    results = each_partition(request, body.topics, end_offset, operation=AclOperation.DESCRIBE, shape=SHAPE)
    topics = topic_rows(results, response_type(KEY, version, "OffsetForLeaderTopicResult"),
                        response_type(KEY, version, "EpochEndOffset"), fields, topic_field="topic")
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=topics)
