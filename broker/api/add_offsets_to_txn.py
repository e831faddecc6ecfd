"""AddOffsetsToTxn (25), v0-3: put a group's `__consumer_offsets` partition in the transaction.

The COMMIT or ABORT marker then reaches that partition too, which is what
makes offsets sent with the transaction (TxnOffsetCommit) commit or vanish
with it. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

Authorization (Kafka's KafkaApis): WRITE on the TRANSACTIONAL_ID (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the GROUP (else
GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.protocol import ZERO_MS

KEY = 25


@api(KEY, 0, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Add the group's offsets partition to the producer's transaction."""
    error = (denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
             or denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id))
    if not error:
        error = (await coordinate(request, request.broker.transactions.add_offsets, body.transactional_id,
                                  body.producer_id, body.producer_epoch, body.group_id)).error
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error)
