"""LeaveGroup (13), v0-5: members leave; the group rebalances without them.

v0-2 name one member and carry its error at the top; v3+ (KIP-345) name
several, by member id or group.instance.id, with an error each.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.api.group_calls import code_of
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 13


@api(KEY, 0, 5)
async def handle(request, body):
    """Remove each member named."""
    version = request.version
    groups = request.broker.groups
    leaving = [(body.member_id, None)] if version < 3 else [(m.member_id, m.group_instance_id) for m in body.members]
    response = response_type(KEY, version)
    try:
        errors = await request.broker.coordinate(groups.leave_group, body.group_id, leaving)
    except LogStoreError as exc:
        return build(response, throttle_time=ZERO_MS, error_code=ErrorCode(exc.code), members=())
    if version < 3:
        return build(response, throttle_time=ZERO_MS, error_code=code_of(errors[0]))
    member_cls = response_type(KEY, version, "MemberResponse")
    members = tuple(build(member_cls, member_id=m, group_instance_id=instance, error_code=code_of(error))
                    for (m, instance), error in zip(leaving, errors))
    return build(response, throttle_time=ZERO_MS, error_code=ErrorCode.none, members=members)
