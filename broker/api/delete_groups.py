"""DeleteGroups (42), v0-2: remove empty groups and their offsets (tombstones in `__consumer_offsets`).

A group with members answers NON_EMPTY_GROUP; one the coordinator does not
have GROUP_ID_NOT_FOUND.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.api.group_calls import code_of
from logstore.broker.protocol import ZERO_MS

KEY = 42


@api(KEY, 0, 2)
async def handle(request, body):
    """Delete each group asked, each on its own."""
    errors = await request.broker.coordinate(request.broker.groups.delete_groups, list(body.groups_names))
    result_cls = response_type(KEY, request.version, "DeletableGroupResult")
    results = tuple(build(result_cls, group_id=g, error_code=code_of(errors[g])) for g in body.groups_names)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, results=results)
