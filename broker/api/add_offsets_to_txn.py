"""AddOffsetsToTxn (25), v0-3: put a group's `__consumer_offsets` partition in the transaction.

The COMMIT or ABORT marker then reaches that partition too, which is what
makes offsets sent with the transaction (TxnOffsetCommit) commit or vanish
with it. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
"""
from __future__ import annotations

from logstore.broker.api import api, build, coordinator_call, response_type
from logstore.broker.protocol import ZERO_MS

KEY = 25


@api(KEY, 0, 3)
async def handle(request, body):
    """Add the group's offsets partition to the producer's transaction."""
    error = await coordinator_call(request, request.broker.transactions.add_offsets, body.transactional_id,
                                   body.producer_id, body.producer_epoch, body.group_id, fenced_from=2)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error)
