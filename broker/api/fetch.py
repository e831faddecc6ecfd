"""Fetch (1), v4-12: whole batches from each partition's fetch offset, long-polled.

If less than `min_bytes` is there and no partition failed, the request
parks on its partitions until an append to one of them, or `max_wait`
(it still holds its connection, as in Kafka, but not a place in
`queued.max.requests`); an append elsewhere does not wake it. A partition
asked twice is answered once (the kit's rule). Each partition returns at most `partition_max_bytes`, the
response at most `max_bytes`, except that the first partition with data
returns at least one whole batch (KIP-74). read_committed stops at the last
stable offset and carries the aborted transactions the data overlaps. The
response is encoded natively and each partition's records are sent from
their segment file (sendfile when large), never through a Python object,
each on a duplicate fd that is closed on every path: sent, not encodable,
or dropped with its connection.
No fetch sessions: session id 0 makes clients send full requests. Topic
ids (v13+) are not served. A topic needs READ on the TOPIC (Kafka's
KafkaApis), else its partitions answer TOPIC_AUTHORIZATION_FAILED with -1
marks; a follower's fetch (replica_id >= 0) needs CLUSTER_ACTION on the
CLUSTER instead, else every partition answers TOPIC_AUTHORIZATION_FAILED.

Quotas (Kafka's KafkaApis): a client under a `consumer_byte_rate` is read
at most what its quota allows in one go (bound × (quota.window.num - 1) ×
quota.window.size.seconds bytes, min_bytes cut to it too). The answer's
record bytes are recorded against that quota and the handling time against
`request_percentage`; if either is over, the bytes are taken back and the
answer is empty (no partitions) with the larger throttle time in
throttle_time_ms, and the connection reads nothing more from the client for
that long.
"""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import cast

from logstore.broker.api import KioMessage, Request, api
from logstore.broker.api.kit import DENIED, AclOperation, ResourceType, Shape, attempt, denied, each_partition
from logstore.broker.protocol import ErrorCode, HeldSlice, PreEncoded, hold
from logstore.broker.request_time import request_throttle
from logstore.native.wire import encode_fetch
from logstore.read_committed import READ_COMMITTED, READ_UNCOMMITTED

KEY = 1
SHAPE = Shape(topic="topic", index="partition")

# A partition's row as `encode_fetch` takes it: (index, error code, high watermark, last stable offset,
# log start offset, the aborted transactions' (producer id, first offset) or None, the records): a
# segment's range held on its own fd, or bytes (b"" for none).
Aborted = list[tuple[int, int]] | None
FetchRow = tuple[int, int, int, int, int, Aborted, "HeldSlice | bytes"]
FetchTopics = list[tuple[str, list[FetchRow]]]
_THROTTLE = struct.Struct(">i")
# Where throttle_time_ms sits in the native encoder's first part: the size and correlation id, then (v12+,
# flexible) the response header's empty tagged fields.
_THROTTLE_AT = {False: 8, True: 9}


@dataclass
class FetchAnswer:
    """What the handler answers: the partitions' rows and the throttle time (ms) of the client's quotas."""

    topics: FetchTopics
    throttle_ms: int = 0


def _read_all(request: Request, body: KioMessage, isolation: str,
              max_bytes: int) -> tuple[FetchTopics, int, bool]:
    """The response's topics as `encode_fetch` rows, how many record bytes they carry, and if any failed."""
    store = request.broker.store
    total = 0

    def read(topic: str, index: int, asked: KioMessage) -> FetchRow:
        nonlocal total
        log_ = store.log(topic, index)
        room = min(asked.partition_max_bytes, max_bytes - total)
        data = log_.read(asked.fetch_offset, max(room, 0), isolation=isolation, min_one_message=total == 0)
        records = data.records if data.size and (room > 0 or total == 0) else None
        size = records.size if records is not None else 0
        total += size
        aborted = None
        if data.aborted_transactions is not None:
            aborted = [(t.producer_id, t.first_offset) for t in data.aborted_transactions]
        # Taken over row by row: a read's duplicate descriptor must not wait for the others'.
        return (index, 0, data.high_watermark, data.last_stable_offset, data.log_start_offset, aborted,
                hold(records) if records is not None and size else b"")

    def marks(topic: str, index: int) -> tuple[int, int, int]:
        log_ = store.log(topic, index)
        return log_.high_watermark, log_.last_stable_offset, log_.log_start_offset

    if body.replica_id >= 0:
        # A follower's fetch (Kafka's isFromFollower) needs CLUSTER_ACTION on the cluster instead of READ on
        # its topics; without it every partition is TOPIC_AUTHORIZATION_FAILED, as KafkaApis answers.
        refused = denied(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
        results = each_partition(request, body.topics, read, operation=None, shape=SHAPE,
                                 error=DENIED[ResourceType.TOPIC] if refused else ErrorCode.none)
    else:
        results = each_partition(request, body.topics, read, operation=AclOperation.READ, shape=SHAPE)
    failed = False
    topics: FetchTopics = []
    for topic, partitions in results:
        rows: list[FetchRow] = []
        for result in partitions:
            if result.outcome.ok:
                rows.append(result.outcome.result)
                continue
            failed = True
            # A partition the client may not read tells it nothing of its log (Kafka's partitionResponse: -1s).
            known = None if result.error == DENIED[ResourceType.TOPIC] else attempt(request, marks, topic, result.index)
            rows.append((result.index, int(result.error), *(known.result if known is not None and known.ok
                                                            else (-1, -1, -1)), None, b""))
        topics.append((topic, rows))
    return topics, total, failed


def _close(topics: FetchTopics) -> None:
    """Release the duplicate fds of rows that will not be sent."""
    for _, rows in topics:
        for row in rows:
            if isinstance(row[6], HeldSlice):
                row[6].close()


def _encode(correlation_id: int, version: int, answer: FetchAnswer) -> PreEncoded:
    """The whole response frame, natively: records go out as file ranges (released if it cannot be made)."""
    topics = answer.topics
    try:
        parts = encode_fetch(correlation_id, version, 0, 0, topics)
        if answer.throttle_ms:
            # The native encoder writes 0; the field is a fixed int32 in its first part.
            first = bytearray(cast(bytes, parts[0]))
            _THROTTLE.pack_into(first, _THROTTLE_AT[version >= 12], answer.throttle_ms)
            parts[0] = bytes(first)
    except BaseException:
        _close(topics)
        raise
    # encode_fetch's stub types a records part as anything with a size: here, the rows' own HeldSlices.
    return PreEncoded(cast("list[bytes | HeldSlice]", parts))


def _throttle(request: Request, total: int) -> int:
    """Record the answer's bytes and the handling time against the client's quotas; the larger throttle
    time (ms), with the bytes taken back and the connection muted if there is one."""
    quotas = request.broker.quotas
    user, client_id = request.principal.name, request.client_id or ""
    handling = request_throttle(quotas, request) if quotas.request.enabled else 0
    if not quotas.fetch.enabled:
        bandwidth = 0
    else:
        now = quotas.fetch.clock()
        bandwidth = quotas.fetch.record(user, client_id, total, now)
        if max(bandwidth, handling) > 0:
            # The throttled answer carries no records: they must not count against the quota.
            quotas.fetch.unrecord(user, client_id, total, now)
    throttle_ms = max(bandwidth, handling)
    if throttle_ms > 0:
        (quotas.fetch if bandwidth > handling else quotas.request).throttled(user, client_id, throttle_ms)
        request.throttle(throttle_ms)
    return throttle_ms


@api(KEY, 4, 12, encode=_encode)
async def handle(request: Request, body: KioMessage) -> FetchAnswer:
    """Read every partition asked; park on them while less than min_bytes is there."""
    broker = request.broker
    isolation = READ_COMMITTED if body.isolation_level == 1 else READ_UNCOMMITTED
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    gone = request.gone
    # What the client's consumer_byte_rate lets it take at once (Kafka's maxValueInQuotaWindow).
    quota_bytes = broker.quotas.fetch.max_value_in_window(request.principal.name, request.client_id or "")
    max_bytes = int(min(getattr(body, "max_bytes", 0x7FFFFFFF), quota_bytes))
    min_bytes = min(body.min_bytes, max_bytes)
    parked_on: set[tuple[str, int]] | None = None
    while True:
        topics, total, failed = _read_all(request, body, isolation, max_bytes)
        remaining = deadline - loop.time()
        # An error is answered at once, as Kafka does, so the client can act on it.
        if (total >= min_bytes or failed or remaining <= 0 or broker.closing
                or (gone is not None and gone.done())):
            break
        if parked_on is None:
            parked_on = {(name, index) for name, rows in topics for index, *_ in rows}
            request.waiting()
        del topics   # a parked read's ranges are read again once woken: their fds go back meanwhile
        # Parked in this same step as the read: an append after the read wakes it.
        await broker.wait_for_appends(parked_on, remaining, gone)
    throttle_ms = _throttle(request, total)
    if throttle_ms > 0:
        _close(topics)
        return FetchAnswer([], throttle_ms)
    return FetchAnswer(topics)
