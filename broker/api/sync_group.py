"""SyncGroup (14), v0-5: the leader hands out the assignment; every member gets its own.

Held until the leader's assignment is persisted (CompletingRebalance →
Stable); in a stable group a member gets its current assignment at once.
v5 names the protocol type and name, which must be the group's. READ on the
GROUP, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied, held, refuse
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 14


@api(KEY, 0, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """The member's assignment, once the leader's is stored."""
    groups = request.broker.groups
    assignments = {a.member_id: a.assignment for a in body.assignments}
    response = response_type(KEY, request.version)
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    outcome = refuse(refused) if refused else await held(
        request, groups.sync_group, body.group_id, body.generation_id, body.member_id,
        getattr(body, "group_instance_id", None), assignments, getattr(body, "protocol_type", None),
        getattr(body, "protocol_name", None))
    if not outcome.ok:
        return build(response, throttle_time=ZERO_MS, error_code=outcome.error, protocol_type=None,
                     protocol_name=None, assignment=b"")
    result = outcome.result
    return build(response, throttle_time=ZERO_MS, error_code=ErrorCode.none, protocol_type=result.protocol_type,
                 protocol_name=result.protocol_name, assignment=result.assignment)
