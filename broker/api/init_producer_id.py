"""InitProducerId (22), v0-4: without a transactional id, a fresh producer id at epoch 0.

Ids come from a persisted counter, so none is reused after a restart; an
idempotent producer's v3+ producer id and epoch are ignored, as Kafka does.
An empty transactional id is INVALID_REQUEST. Transactional ids need the
transaction coordinator, which this broker does not run yet:
COORDINATOR_NOT_AVAILABLE.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 22


@api(KEY, 0, 4)
async def handle(request, body):
    """Allocate a producer id for an idempotent producer."""
    error, pid, epoch = ErrorCode.none, -1, -1
    if body.transactional_id == "":
        error = ErrorCode.invalid_request
    elif body.transactional_id is not None:
        error = ErrorCode.coordinator_not_available
    else:
        pid, epoch = request.broker.producer_ids.allocate(), 0
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error, producer_id=pid,
                 producer_epoch=epoch)
