"""ListTransactions (66), v0-2: the transactional ids this coordinator holds, filtered (KIP-664, 994, 1152).

Behavior, as Kafka's TransactionStateManager.listTransactionStates:
- Each row is a transactional id, its producer id and its state's Kafka
  name (the last persisted state; a transition being written is not shown).
  Rows are sorted by transactional id.
- The filters combine with AND; an empty one does not filter.
- `state_filters`: names Kafka knows (`Empty`, `Ongoing`, `PrepareCommit`,
  `PrepareAbort`, `CompleteCommit`, `CompleteAbort`, `Dead`,
  `PrepareEpochFence`). Any other name is returned in
  `unknown_state_filters` (once each, in the order asked) and matches
  nothing, so a filter of unknown names only lists no rows.
- `producer_id_filters`: the ids' current producer ids.
- `duration_filter` (v1+, ms): when >= 0, only transactions running longer
  than that: Ongoing, PrepareCommit or PrepareAbort, started more than
  `duration_filter` ms ago. Kafka compares the start time of whatever
  transaction the id last had, so it also lists ids whose transaction has
  ended and ids that never began one (start time -1); logstore lists only
  transactions still running, which is what KIP-994 describes.
- `transactional_id_pattern` (v2+): null or empty does not filter; else
  the whole id must match it (`re.fullmatch`, as Java's `Matcher.matches`).
  Kafka compiles it with RE2/J (KIP-1152), Python's `re` is close enough
  for the patterns operators write; it also takes backreferences and
  lookaround, which RE2 refuses, and can backtrack where RE2 stays linear,
  so matching runs off the event loop. A pattern that does not compile is
  INVALID_REGULAR_EXPRESSION with no rows.
- This node loads every id before it listens, so COORDINATOR_LOAD_IN_PROGRESS
  is never answered.
- Only the ids the principal may DESCRIBE are listed (Kafka's KafkaApis);
  the others are not named.

Version notes: v1 adds duration_filter, v2 transactional_id_pattern; all
versions are flexible.
"""
from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized
from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.broker.coordinator.txn_metadata import TxnMetadata

KEY = 66
_STATES = {state.kafka_name: state for state in TxnState}
_RUNNING = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def _included(meta: TxnMetadata, states: set[TxnState] | None, producer_ids: set[int], duration_ms: int,
              pattern: re.Pattern[str] | None, now: int) -> bool:
    if states is not None and meta.state not in states:
        return False
    if producer_ids and meta.producer_id not in producer_ids:
        return False
    if duration_ms >= 0 and not (meta.state in _RUNNING and meta.start_ms >= 0
                                 and now - meta.start_ms > duration_ms):
        return False
    return pattern is None or pattern.fullmatch(meta.transactional_id) is not None


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """List the transactional ids that pass every filter."""
    broker = request.broker
    version = request.version
    response_cls = response_type(KEY, version)
    asked = list(dict.fromkeys(body.state_filters))
    unknown = tuple(name for name in asked if name not in _STATES)
    states = {_STATES[name] for name in asked if name in _STATES} if asked else None
    source = getattr(body, "transactional_id_pattern", None)
    pattern = None
    if source:
        try:
            pattern = re.compile(source)
        except re.error:
            return build(response_cls, throttle_time=ZERO_MS, error_code=ErrorCode.invalid_regular_expression,
                         unknown_state_filters=unknown, transaction_states=())
    producer_ids = set(body.producer_id_filters)
    duration_ms = getattr(body, "duration_filter", -1)
    row_cls = response_type(KEY, version, "TransactionState")

    def listed() -> list[TxnMetadata]:
        now = int(time.time() * 1000)
        return [m for m in broker.transactions.transactions()
                if _included(m, states, producer_ids, duration_ms, pattern, now)]

    # Off the event loop: a client's pattern can be slow to match (Python's re backtracks, RE2 does not).
    found: list[TxnMetadata] = await broker.coordinate(listed)
    visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                         [m.transactional_id for m in found])
    rows = tuple(build(row_cls, transactional_id=m.transactional_id, producer_id=m.producer_id,
                       transaction_state=m.state.kafka_name) for m in found if m.transactional_id in visible)
    return build(response_cls, throttle_time=ZERO_MS, error_code=ErrorCode.none, unknown_state_filters=unknown,
                 transaction_states=rows)
