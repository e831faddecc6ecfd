"""ListGroups (16), v0-4: every group this coordinator has (v4: only those in the states asked)."""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 16


@api(KEY, 0, 4)
async def handle(request, body):
    """The groups, with their protocol type (and state, v4)."""
    version = request.version
    listed = await request.broker.coordinate(request.broker.groups.list_groups, getattr(body, "states_filter", ()))
    group_cls = response_type(KEY, version, "ListedGroup")
    rows = tuple(build(group_cls, group_id=group_id, protocol_type=protocol_type, group_state=state)
                 for group_id, protocol_type, state in sorted(listed))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=ErrorCode.none, groups=rows)
