"""LeaveGroup (13), v0-5: members leave; the group rebalances without them.

v0-2 name one member and carry its error at the top; v3+ (KIP-345) name
several, by member id or group.instance.id, with an error each. READ on the
GROUP, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied, error_code, refuse
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 13


@api(KEY, 0, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Remove each member named."""
    version = request.version
    groups = request.broker.groups
    leaving = [(body.member_id, None)] if version < 3 else [(m.member_id, m.group_instance_id) for m in body.members]
    response = response_type(KEY, version)
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    outcome = refuse(refused) if refused else await coordinate(request, groups.leave_group, body.group_id,
                                                                      leaving)
    if not outcome.ok:
        return build(response, throttle_time=ZERO_MS, error_code=outcome.error, members=())
    errors = outcome.result
    if version < 3:
        return build(response, throttle_time=ZERO_MS, error_code=error_code(request, errors[0]))
    member_cls = response_type(KEY, version, "MemberResponse")
    members = tuple(build(member_cls, member_id=m, group_instance_id=instance, error_code=error_code(request, error))
                    for (m, instance), error in zip(leaving, errors))
    return build(response, throttle_time=ZERO_MS, error_code=ErrorCode.none, members=members)
