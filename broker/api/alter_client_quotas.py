"""AlterClientQuotas (49), v0-1: set or remove client quota configs of user / client-id entities (KIP-546).

Behavior, as Kafka's ClientQuotaControlManager:
- Each entry is an entity (types `user`, `client-id`; a null name is the
  type's default) and ops (a key and value, or `remove`). One answer per
  distinct entity, in the order first asked.
- INVALID_REQUEST, that entity unchanged: no types ("Invalid empty client
  quota entity"), a type twice, an unknown type ("Unhandled client quota
  entity type: t"), an empty name ("Empty user not supported"), ip with
  user or client-id, a key named twice or an entity named twice ("Ignoring
  duplicate entity ..."), an unknown key ("Invalid configuration key k"), a
  value not above 0 ("Quota k must be greater than 0"), a fractional byte
  rate ("k cannot be a fractional value."). Removing a key that is not set
  is no change.
- Refused here though Kafka stores them: `ip` entities
  (connection_creation_rate) and `controller_mutation_rate`, which this
  broker would never enforce (INVALID_REQUEST saying so).
- The valid entities' changes are written to `client-quotas` in every log
  dir together (a failed write: KAFKA_STORAGE_ERROR on every entity, nothing
  changed) and apply to the next request of every client at once;
  `validate_only` checks and changes nothing.

Authorization (Kafka's KafkaApis): ALTER_CONFIGS on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED on every entry.

Version notes: v1 is v0 made flexible.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.quotas import Alteration

KEY = 49
# A message echoes the entity and keys asked, each up to 32767 bytes, while v0's error_message has an int16
# length: kept to this many characters (4 UTF-8 bytes each at most), cut with an ellipsis.
MESSAGE_CHARS = 4096


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Check every entry, apply the valid ones (unless validate_only), answer per distinct entity."""
    alterations = [Alteration(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                              tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops))
                   for entry in body.entries]
    answers: dict[tuple[tuple[str, str | None], ...], tuple[ErrorCode, str | None]] = {}
    error = denied(request, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)
    if error != ErrorCode.none:
        answers = {tuple(sorted(a.entity, key=lambda pair: pair[0])): (error, "Cluster authorization failed.")
                   for a in alterations}
    else:
        outcome = await coordinate(request, request.broker.quotas.alter, alterations, body.validate_only)
        for alteration, message in zip(alterations, outcome.value or [None] * len(alterations)):
            key = tuple(sorted(alteration.entity, key=lambda pair: pair[0]))
            if not outcome.ok:
                answers[key] = (outcome.error, outcome.message)
            else:
                # A repeated entity's answer replaces the first one's, as Kafka's map of results does.
                answers[key] = (ErrorCode.none, None) if message is None else (ErrorCode.invalid_request, message)
    entity_cls = response_type(KEY, request.version, "EntityData")
    entry_cls = response_type(KEY, request.version, "EntryData")
    entries = tuple(build(entry_cls, error_code=code, error_message=_fitting(message),
                          entity=tuple(build(entity_cls, entity_type=kind, entity_name=name) for kind, name in entity))
                    for entity, (code, message) in answers.items())
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, entries=entries)


def _fitting(message: str | None) -> str | None:
    """`message`, cut to MESSAGE_CHARS so that any version's error_message can carry it."""
    if message is None or len(message) <= MESSAGE_CHARS:
        return message
    return message[:MESSAGE_CHARS - 1] + "\u2026"
