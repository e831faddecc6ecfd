"""DeleteGroups (42), v0-2: remove empty groups and their offsets (tombstones in `__consumer_offsets`).

A group with members answers NON_EMPTY_GROUP; one the coordinator does not
have GROUP_ID_NOT_FOUND. An empty share group goes with all its records, and
the share-fetch path forgets its share state. A group the principal may not DELETE answers
GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, error_code
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.errors import LogStoreError

KEY = 42


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Delete each group asked, each on its own."""
    allowed = authorized(request, AclOperation.DELETE, ResourceType.GROUP, body.groups_names)
    errors: dict[str, LogStoreError | None] = await request.broker.coordinate(
        request.broker.groups.delete_groups, [g for g in body.groups_names if g in allowed])
    result_cls = response_type(KEY, request.version, "DeletableGroupResult")
    results = tuple(build(result_cls, group_id=g, error_code=error_code(request, errors[g]) if g in allowed
                          else ErrorCode.group_authorization_failed) for g in body.groups_names)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, results=results)
