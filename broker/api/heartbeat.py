"""Heartbeat (12), v0-4: a member is alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 12


@api(KEY, 0, 4)
async def handle(request, body):
    """Restart the member's session timer."""
    groups = request.broker.groups
    try:
        await request.broker.coordinate(groups.heartbeat, body.group_id, body.generation_id, body.member_id,
                                        getattr(body, "group_instance_id", None))
        error = ErrorCode.none
    except LogStoreError as exc:
        error = ErrorCode(exc.code)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=error)
