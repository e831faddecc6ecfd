"""DeleteRecords (21), v0-2: move each partition's log start offset up (-1: to the high
watermark); the answer is the new low watermark. Past the high watermark is OFFSET_OUT_OF_RANGE."""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 21


@api(KEY, 0, 2)
async def handle(request, body):
    """Delete records below each given offset."""
    version = request.version
    topics = []
    for topic in body.topics:
        rows = []
        for asked in topic.partitions:
            error, low = ErrorCode.none, -1
            try:
                log_ = request.broker.store.log(topic.name, asked.partition_index)
                low = log_.delete_records(log_.high_watermark if asked.offset == -1 else asked.offset)
            except LogStoreError as exc:
                error = ErrorCode(exc.code)
            rows.append(build(response_type(KEY, version, "DeleteRecordsPartitionResult"),
                              partition_index=asked.partition_index, low_watermark=low, error_code=error))
        topics.append(build(response_type(KEY, version, "DeleteRecordsTopicResult"), name=topic.name,
                            partitions=tuple(rows)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(topics))
