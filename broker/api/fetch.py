"""Fetch (1), v4-12: whole batches from each partition's fetch offset, long-polled.

If less than `min_bytes` is there, the request waits for appends until
`max_wait` passes. Each partition returns at most `partition_max_bytes`, the
response at most `max_bytes`, except that the first partition with data
returns at least one whole batch (KIP-74). read_committed stops at the last
stable offset and carries the aborted transactions the data overlaps. No
fetch sessions: session id 0 makes clients send full requests. Topic ids
(v13+) are not served.
"""
from __future__ import annotations

import asyncio

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError
from logstore.read_committed import READ_COMMITTED, READ_UNCOMMITTED

KEY = 1


def _read_all(broker, version, body, isolation):
    """The response's topics and how many record bytes they carry."""
    total = 0
    max_bytes = getattr(body, "max_bytes", 0x7FFFFFFF)
    partition_cls = response_type(KEY, version, "PartitionData")
    aborted_cls = response_type(KEY, version, "AbortedTransaction")
    topics = []
    for topic in body.topics:
        rows = []
        for asked in topic.partitions:
            row = dict(partition_index=asked.partition, high_watermark=-1, last_stable_offset=-1,
                       log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1, records=b"")
            try:
                log_ = broker.store.log(topic.topic, asked.partition)
                room = min(asked.partition_max_bytes, max_bytes - total)
                data = log_.read(asked.fetch_offset, max(room, 0), isolation=isolation,
                                 min_one_message=total == 0)
                records = data.read() if room > 0 or total == 0 else b""
                total += len(records)
                aborted = None
                if data.aborted_transactions is not None:
                    aborted = tuple(build(aborted_cls, producer_id=t.producer_id, first_offset=t.first_offset)
                                    for t in data.aborted_transactions)
                row.update(error_code=ErrorCode.none, high_watermark=data.high_watermark,
                           last_stable_offset=data.last_stable_offset, log_start_offset=data.log_start_offset,
                           aborted_transactions=aborted, records=records)
            except LogStoreError as exc:
                row.update(error_code=ErrorCode(exc.code))
                try:
                    log_ = broker.store.log(topic.topic, asked.partition)
                    row.update(high_watermark=log_.high_watermark, last_stable_offset=log_.last_stable_offset,
                               log_start_offset=log_.log_start_offset)
                except LogStoreError:
                    pass
            rows.append(build(partition_cls, **row))
        topics.append(build(response_type(KEY, version, "FetchableTopicResponse"), topic=topic.topic,
                            partitions=tuple(rows)))
    return topics, total


@api(KEY, 4, 12)
async def handle(request, body):
    """Read every partition asked; wait for appends while less than min_bytes is there."""
    broker = request.broker
    version = request.version
    isolation = READ_COMMITTED if body.isolation_level == 1 else READ_UNCOMMITTED
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    while True:
        appended = broker.appended_event()
        topics, total = _read_all(broker, version, body, isolation)
        remaining = deadline - loop.time()
        if total >= body.min_bytes or remaining <= 0 or broker.closing:
            break
        try:
            await asyncio.wait_for(appended.wait(), remaining)
        except asyncio.TimeoutError:
            pass
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=ErrorCode.none, session_id=0,
                 responses=tuple(topics))
