"""ListOffsets (2), v1-7: an offset by timestamp, -1 latest (the last stable offset for
read_committed), -2 earliest, -3 the record with the largest timestamp; none found is offset -1."""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError
from logstore.log import LATEST_TIMESTAMP

KEY = 2


@api(KEY, 1, 7)
async def handle(request, body):
    """Look each partition's timestamp up in its log."""
    version = request.version
    committed = getattr(body, "isolation_level", 0) == 1
    partition_cls = response_type(KEY, version, "ListOffsetsPartitionResponse")
    topics = []
    for topic in body.topics:
        rows = []
        for asked in topic.partitions:
            row = dict(partition_index=asked.partition_index, error_code=ErrorCode.none, timestamp=-1, offset=-1,
                       leader_epoch=-1)
            try:
                log_ = request.broker.store.log(topic.name, asked.partition_index)
                if asked.timestamp == LATEST_TIMESTAMP:
                    found = (log_.last_stable_offset if committed else log_.high_watermark, -1)
                else:
                    found = log_.offset_for_timestamp(asked.timestamp)
                if found is not None:
                    row.update(offset=found[0], timestamp=found[1], leader_epoch=0)
            except (LogStoreError, ValueError) as exc:
                row.update(error_code=ErrorCode(exc.code) if isinstance(exc, LogStoreError)
                           else ErrorCode.invalid_request)
            rows.append(build(partition_cls, **row))
        topics.append(build(response_type(KEY, version, "ListOffsetsTopicResponse"), name=topic.name,
                            partitions=tuple(rows)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(topics))
