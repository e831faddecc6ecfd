"""Heartbeat (12), v0-4: a member is alive; REBALANCE_IN_PROGRESS tells it to rejoin.
READ on the GROUP, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis)."""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate_soon, denied
from logstore.broker.protocol import ZERO_MS

KEY = 12


@api(KEY, 0, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Restart the member's session timer."""
    groups = request.broker.groups
    error = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    if not error:
        # A decision under the groups' lock that appends nothing: on the loop when the lock is free.
        error = (await coordinate_soon(request, groups.lock, groups.heartbeat, body.group_id, body.generation_id,
                                       body.member_id, getattr(body, "group_instance_id", None))).error
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error)
