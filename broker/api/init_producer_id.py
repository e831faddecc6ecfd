"""InitProducerId (22), v0-4: a producer id and epoch, from the transaction coordinator.

Without a transactional id: a fresh producer id at epoch 0 from a persisted
counter, so none is reused after a restart; an idempotent producer's v3+
producer id and epoch are ignored, as Kafka does. With one, the coordinator
bumps the epoch (fencing older instances), aborts an open transaction first
(CONCURRENT_TRANSACTIONS until the client retries), moves to a new producer
id when the epoch is exhausted, and checks a KIP-360 producer id and epoch.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4.
"""
from __future__ import annotations

from logstore.broker.api import api, build, coordinator_error, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 22


@api(KEY, 0, 4)
async def handle(request, body):
    """Allocate a producer id, or (re)initialise a transactional one."""
    broker = request.broker
    error, pid, epoch = ErrorCode.none, -1, -1
    if body.transactional_id is None:
        pid, epoch = broker.producer_ids.allocate(), 0
    else:
        timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
        try:
            pid, epoch = await broker.coordinate(broker.transactions.init_producer_id, body.transactional_id,
                                                 timeout_ms, getattr(body, "producer_id", -1),
                                                 getattr(body, "producer_epoch", -1))
        except LogStoreError as exc:
            error = coordinator_error(exc, request.version, 4)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error, producer_id=pid,
                 producer_epoch=epoch)
