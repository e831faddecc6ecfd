"""InitProducerId (22), v0-6: a producer id and epoch, from the transaction coordinator.

Behavior:
Without a transactional id: a fresh producer id at epoch 0 from a persisted
counter, so none is reused after a restart; an idempotent producer's v3+
producer id and epoch are ignored, as Kafka does. With one, the coordinator
bumps the epoch (fencing older instances), aborts an open transaction first
(CONCURRENT_TRANSACTIONS until the client retries), moves to a new producer
id when the epoch is exhausted, and checks a KIP-360 producer id and epoch.

v6 (KIP-939, two-phase commit): `enable2_pc` makes the id's transactions
two-phase-commit ones, which the timeout sweep never aborts (their timeout is
Integer.MAX_VALUE, as Kafka records them, so the mark survives a restart).
It needs the broker's `transaction.two.phase.commit.enable` and the
TWO_PHASE_COMMIT operation on the TRANSACTIONAL_ID besides WRITE, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers (a client cannot tell
a disabled broker from a missing ACL). `keep_prepared_txn` keeps an open
two-phase-commit transaction instead of aborting it: the epoch is bumped
(fencing the instance that wrote it), and the transaction's own producer id
and epoch come back in OngoingTxnProducerId/Epoch (-1 when nothing was
kept); the new instance then commits or aborts it with EndTxn.
keep_prepared_txn without enable2_pc is INVALID_REQUEST, an open transaction
that is not a two-phase-commit one INVALID_TXN_STATE.

Version notes: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4; v5 only
adds TRANSACTION_ABORTABLE to what may be answered (KIP-890). Kafka marks v6
unstable (not advertised by default in 4.2/4.3); it is advertised here, and
the schema is Kafka trunk's.

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
from logstore.broker.api.txn_calls import durably
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 22


@api(KEY, 0, 6)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Allocate a producer id, or (re)initialise a transactional one."""
    broker = request.broker
    pid, epoch, ongoing_pid, ongoing_epoch = -1, -1, -1, -1
    if body.transactional_id is None:
        error = denied(request, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
        if error and authorized_any(request, AclOperation.WRITE, ResourceType.TOPIC, broker.store.topics):
            error = ErrorCode.none
        if not error:
            pid, epoch = broker.producer_ids.allocate(), 0
    else:
        enable_2pc, keep = getattr(body, "enable2_pc", False), getattr(body, "keep_prepared_txn", False)
        error = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
        if enable_2pc and not error:
            error = (denied(request, AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID,
                            body.transactional_id)
                     if broker.transactions.config.two_phase_commit
                     else ErrorCode.transactional_id_authorization_failed)
        if not error:
            timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
            args = (body.transactional_id, timeout_ms, getattr(body, "producer_id", -1),
                    getattr(body, "producer_epoch", -1), enable_2pc, keep)
            transactions = broker.transactions
            # The first one creates `__transaction_state` (a partition's files and fsyncs each): in the pool.
            outcome = (await durably(request, transactions.init_two_phase_durably, *args)
                       if transactions.state_topic_exists
                       else await coordinate(request, transactions.init_two_phase, *args))
            error = outcome.error
            if outcome.ok:
                pid, epoch, ongoing_pid, ongoing_epoch = outcome.result
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error, producer_id=pid,
                 producer_epoch=epoch, ongoing_txn_producer_id=ongoing_pid, ongoing_txn_producer_epoch=ongoing_epoch)
