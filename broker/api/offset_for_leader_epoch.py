"""OffsetForLeaderEpoch (23), v2-4: the end offset of the largest leader epoch at or below the
one asked, from the partition's leader-epoch cache (KIP-320 log truncation detection)."""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 23


@api(KEY, 2, 4)
async def handle(request, body):
    """Look each (partition, epoch) up in the leader-epoch cache."""
    version = request.version
    topics = []
    for topic in body.topics:
        rows = []
        for asked in topic.partitions:
            row = dict(partition=asked.partition, error_code=ErrorCode.none, leader_epoch=-1, end_offset=-1)
            try:
                log_ = request.broker.store.log(topic.topic, asked.partition)
                epoch, end = log_.epoch_cache.end_offset_for(asked.leader_epoch, log_.log_end_offset)
                row.update(leader_epoch=epoch, end_offset=end)
            except LogStoreError as exc:
                row.update(error_code=ErrorCode(exc.code))
            rows.append(build(response_type(KEY, version, "EpochEndOffset"), **row))
        topics.append(build(response_type(KEY, version, "OffsetForLeaderTopicResult"), topic=topic.topic,
                            partitions=tuple(rows)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(topics))
