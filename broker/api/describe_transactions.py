"""DescribeTransactions (65), v0: what the transaction coordinator knows of each transactional id (KIP-664).

Behavior, as Kafka's TransactionCoordinator.handleDescribeTransactions:
- One row per id asked, in the order asked (an id asked twice is answered
  twice). An empty id is INVALID_REQUEST, an id the coordinator does not
  know (never initialised, or expired) TRANSACTIONAL_ID_NOT_FOUND; such rows
  carry the id and the error, every other field empty or zero (the schema's
  defaults, as Kafka sends them).
- Otherwise: the state's Kafka name (`Ongoing`, `CompleteCommit`, ...), the
  timeout (ms), the start time (ms since the epoch) of the current or last
  transaction, -1 if none began since the id was (re)initialised, the
  producer id and epoch, and the transaction's partitions grouped by topic.
- A transition being written is not shown: the row is the last persisted
  state, as Kafka shows the state and not the pending one. So an id being
  fenced shows its Ongoing transaction until the abort is decided, and
  PrepareEpochFence (only ever pending here) and Dead never appear.
- In PrepareCommit/PrepareAbort Kafka lists only the partitions still
  waiting for their marker; this coordinator writes the markers before it
  answers EndTxn and clears the partitions with the Complete state, so a
  Prepare state lists all of them.
- This node coordinates every id and loads them all before it listens, so
  neither NOT_COORDINATOR nor COORDINATOR_LOAD_IN_PROGRESS is answered.

- Authorization (Kafka's KafkaApis): an id the principal may not DESCRIBE
  answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; topics it may not DESCRIBE
  are left out of a transaction's partitions.

Version notes: v0 is the only version (flexible).
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import TYPE_CHECKING

from kio.static.primitive import i32Timedelta

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import TransactionalIdNotFoundError

if TYPE_CHECKING:
    from logstore.broker.coordinator.transaction import TransactionCoordinator
    from logstore.broker.coordinator.txn_metadata import TxnMetadata

KEY = 65
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(ms: int) -> datetime:
    """The datetime kio writes as `ms` (exact to the millisecond; -1, Kafka's "none", included)."""
    return _EPOCH + timedelta(milliseconds=ms)


def _error_row(state_cls: type[KioMessage], transactional_id: str, error: ErrorCode) -> KioMessage:
    return build(state_cls, error_code=error, transactional_id=transactional_id, transaction_state="",
                 transaction_timeout=ZERO_MS, transaction_start_time=epoch_ms(0), producer_id=0, producer_epoch=0,
                 topics=())


def _meta(transactions: TransactionCoordinator, transactional_id: str) -> TxnMetadata | ErrorCode:
    """What the coordinator holds of the id, or the code of why there is nothing to show."""
    if not transactional_id:
        return ErrorCode.invalid_request
    try:
        return transactions.describe(transactional_id)
    except TransactionalIdNotFoundError:
        return ErrorCode.transactional_id_not_found


def _row(state_cls: type[KioMessage], topic_cls: type[KioMessage], transactional_id: str, meta: TxnMetadata | ErrorCode,
         visible: set[str]) -> KioMessage:
    if isinstance(meta, ErrorCode):
        return _error_row(state_cls, transactional_id, meta)
    topics = tuple(build(topic_cls, topic=topic, partitions=tuple(p for _, p in group))
                   for topic, group in groupby(sorted(meta.partitions), key=lambda tp: tp[0]) if topic in visible)
    return build(state_cls, error_code=ErrorCode.none, transactional_id=transactional_id,
                 transaction_state=meta.state.kafka_name,
                 transaction_timeout=i32Timedelta.parse(timedelta(milliseconds=meta.timeout_ms)),
                 transaction_start_time=epoch_ms(meta.start_ms), producer_id=meta.producer_id,
                 producer_epoch=meta.producer_epoch, topics=topics)


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each transactional id asked."""
    broker = request.broker
    version = request.version
    state_cls = response_type(KEY, version, "TransactionState")
    topic_cls = response_type(KEY, version, "TopicData")
    ids = body.transactional_ids
    allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, ids)

    def describe_all() -> list[TxnMetadata | ErrorCode]:
        return [_meta(broker.transactions, t) if t in allowed else ErrorCode.transactional_id_authorization_failed
                for t in ids]

    found: list[TxnMetadata | ErrorCode] = await broker.coordinate(describe_all)
    named = {tp[0] for meta in found if not isinstance(meta, ErrorCode) for tp in meta.partitions}
    visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, named)
    rows = tuple(_row(state_cls, topic_cls, t, meta, visible) for t, meta in zip(ids, found))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, transaction_states=rows)
