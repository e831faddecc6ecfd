"""InitProducerId (22), v0-4: a producer id and epoch, from the transaction coordinator.

Without a transactional id: a fresh producer id at epoch 0 from a persisted
counter, so none is reused after a restart; an idempotent producer's v3+
producer id and epoch are ignored, as Kafka does. With one, the coordinator
bumps the epoch (fencing older instances), aborts an open transaction first
(CONCURRENT_TRANSACTIONS until the client retries), moves to a new producer
id when the epoch is exhausted, and checks a KIP-360 producer id and epoch.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4.

Authorization (Kafka's KafkaApis): WRITE on the TRANSACTIONAL_ID (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE on the
CLUSTER or WRITE on some topic (Kafka 4's authorizeByResourceType: any ALLOW
on a topic pattern, existing topic or not, that no DENY cancels; an authorizer
without ACLs is asked about the topics that exist), else
CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized_any, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 22


@api(KEY, 0, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Allocate a producer id, or (re)initialise a transactional one."""
    broker = request.broker
    pid, epoch = -1, -1
    if body.transactional_id is None:
        error = denied(request, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
        if error and authorized_any(request, AclOperation.WRITE, ResourceType.TOPIC, broker.store.topics):
            error = ErrorCode.none
        if not error:
            pid, epoch = broker.producer_ids.allocate(), 0
    else:
        error = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        if not error:
            timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
            outcome = await coordinate(request, broker.transactions.init_producer_id, body.transactional_id,
                                       timeout_ms, getattr(body, "producer_id", -1),
                                       getattr(body, "producer_epoch", -1))
            error = outcome.error
            if outcome.ok:
                pid, epoch = outcome.result
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error, producer_id=pid,
                 producer_epoch=epoch)
