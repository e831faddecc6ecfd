"""FindCoordinator (10), v0-4: this broker coordinates every group and transactional id.

Key type 0 (a group) is answered with this node once `__consumer_offsets`
exists, and key type 1 (a transactional id) once `__transaction_state`
does: each is created at its first lookup, as Kafka does. An empty
transactional id is INVALID_REQUEST. v4+ (KIP-699) asks for several keys
and gets a row each.

Advertised from the start because librdkafka derives its LZ4 feature from
FindCoordinator being listed (rdkafka_feature.c: LZ4 arrived with
GroupCoordinator in 0.8.2, so that API stands in for it): without this key
every librdkafka producer silently sends lz4 batches uncompressed.

Authorization (Kafka's KafkaApis): DESCRIBE on the GROUP (else
GROUP_AUTHORIZATION_FAILED) or on the TRANSACTIONAL_ID (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 10
GROUP, TRANSACTION = 0, 1


async def _find(request: Request, key_type: int, key: str) -> dict[str, object]:
    broker = request.broker
    none = dict(node_id=-1, host="", port=-1)
    if key_type == TRANSACTION:
        refused = denied(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
        if not refused and not key:
            return dict(none, error_code=ErrorCode.invalid_request, error_message="empty transactional id")
        ensure = broker.transactions.ensure_state_topic
    elif key_type == GROUP:
        refused = denied(request, AclOperation.DESCRIBE, ResourceType.GROUP, key)
        ensure = broker.groups.ensure_offsets_topic
    else:
        return dict(none, error_code=ErrorCode.invalid_request, error_message=f"unknown key type {key_type}")
    if refused:
        return dict(none, error_code=refused, error_message=None)
    outcome = await coordinate(request, ensure)
    if not outcome.ok:
        # Whatever kept the internal topic from existing, the client retries the lookup.
        return dict(none, error_code=ErrorCode.coordinator_not_available, error_message=outcome.message)
    advertised = broker.config.advertised_for(request.listener)
    return dict(node_id=broker.node_id, host=advertised.host, port=advertised.port,
                error_code=ErrorCode.none, error_message=None)


@api(KEY, 0, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """The coordinator of each key asked (v4+: one row per key)."""
    version = request.version
    key_type = getattr(body, "key_type", GROUP)
    if version >= 4:
        rows = []
        for key in body.coordinator_keys:
            rows.append(build(response_type(KEY, version, "Coordinator"), key=key,
                              **await _find(request, key_type, key)))
        return build(response_type(KEY, version), throttle_time=ZERO_MS, coordinators=tuple(rows))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, **await _find(request, key_type, body.key))
