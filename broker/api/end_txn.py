"""EndTxn (26), v0-3: commit or abort the producer's transaction.

Answered once the decision is persisted and every partition of the
transaction (a group's `__consumer_offsets` partition included) has its
marker on disk: a read_committed consumer then already sees the outcome.
A retry of an EndTxn that succeeded succeeds again; one that meets the
markers still being written gets CONCURRENT_TRANSACTIONS. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2. v4+ (KIP-890 part 2, an epoch bump per
transaction) is not advertised. Authorization: WRITE on the
TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as Kafka.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.protocol import ZERO_MS

KEY = 26


@api(KEY, 0, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """End the transaction the way the producer asked."""
    error = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
    if not error:
        error = (await coordinate(request, request.broker.transactions.end_transaction, body.transactional_id,
                                  body.producer_id, body.producer_epoch, body.committed)).error
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error)
