"""ListOffsets (2), v1-7: an offset by timestamp, -1 latest (the last stable offset for
read_committed), -2 earliest, -3 the record with the largest timestamp; none found is offset -1.
A timestamp the log refuses is INVALID_REQUEST; a topic the principal may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis)."""
from __future__ import annotations

from typing import Never

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, Outcome, PartitionResult, each_partition, refuse, topic_rows
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.log import LATEST_TIMESTAMP

KEY = 2
NOT_FOUND = dict(timestamp=-1, offset=-1, leader_epoch=-1)


@api(KEY, 1, 7)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Look each partition's timestamp up in its log."""
    version = request.version
    committed = getattr(body, "isolation_level", 0) == 1

    def look_up(topic: str, index: int, asked: KioMessage) -> tuple[int, int] | None | Outcome[Never]:
        log_ = request.broker.store.log(topic, index)
        if asked.timestamp == LATEST_TIMESTAMP:
            return log_.last_stable_offset if committed else log_.high_watermark, -1
        try:
            return log_.offset_for_timestamp(asked.timestamp)
        except ValueError:
            return refuse(ErrorCode.invalid_request)

    def fields(result: PartitionResult[tuple[int, int] | None]) -> dict[str, object]:
        found = result.value
        if found is None:
            return dict(NOT_FOUND, partition_index=result.index)
        return dict(partition_index=result.index, offset=found[0], timestamp=found[1], leader_epoch=0)

    results = each_partition(request, body.topics, look_up, operation=AclOperation.DESCRIBE)
    topics = topic_rows(results, response_type(KEY, version, "ListOffsetsTopicResponse"),
                        response_type(KEY, version, "ListOffsetsPartitionResponse"), fields)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=topics)
