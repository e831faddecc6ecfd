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
KafkaApis), else its partitions answer TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import asyncio
from typing import cast

from logstore.broker.api import KioMessage, Request, api
from logstore.broker.api.kit import AclOperation, Shape, attempt, each_partition
from logstore.broker.protocol import HeldSlice, PreEncoded, hold
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


def _read_all(request: Request, body: KioMessage,
              isolation: str) -> tuple[FetchTopics, int, bool]:
    """The response's topics as `encode_fetch` rows, how many record bytes they carry, and if any failed."""
    store = request.broker.store
    total = 0
    max_bytes = getattr(body, "max_bytes", 0x7FFFFFFF)

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
            known = attempt(request, marks, topic, result.index)
            rows.append((result.index, int(result.error), *(known.result if known.ok else (-1, -1, -1)), None, b""))
        topics.append((topic, rows))
    return topics, total, failed


def _close(topics: FetchTopics) -> None:
    """Release the duplicate fds of rows that will not be sent."""
    for _, rows in topics:
        for row in rows:
            if isinstance(row[6], HeldSlice):
                row[6].close()


def _encode(correlation_id: int, version: int, topics: FetchTopics) -> PreEncoded:
    """The whole response frame, natively: records go out as file ranges (released if it cannot be made)."""
    try:
        parts = encode_fetch(correlation_id, version, 0, 0, topics)
    except BaseException:
        _close(topics)
        raise
    # encode_fetch's stub types a records part as anything with a size: here, the rows' own HeldSlices.
    return PreEncoded(cast("list[bytes | HeldSlice]", parts))


@api(KEY, 4, 12, encode=_encode)
async def handle(request: Request, body: KioMessage) -> FetchTopics:
    """Read every partition asked; park on them while less than min_bytes is there."""
    broker = request.broker
    isolation = READ_COMMITTED if body.isolation_level == 1 else READ_UNCOMMITTED
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    gone = request.gone
    parked_on: set[tuple[str, int]] | None = None
    while True:
        topics, total, failed = _read_all(request, body, isolation)
        remaining = deadline - loop.time()
        # An error is answered at once, as Kafka does, so the client can act on it.
        if (total >= body.min_bytes or failed or remaining <= 0 or broker.closing
                or (gone is not None and gone.done())):
            break
        if parked_on is None:
            parked_on = {(name, index) for name, rows in topics for index, *_ in rows}
            request.waiting()
        del topics   # a parked read's ranges are read again once woken: their fds go back meanwhile
        # Parked in this same step as the read: an append after the read wakes it.
        await broker.wait_for_appends(parked_on, remaining, gone)
    return topics
