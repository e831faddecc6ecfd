"""ListGroups (16), v0-5: every group this coordinator has: classic, KIP-848 consumer and KIP-932 share groups.

v4 lists only the groups in the states asked, v5 only those of the types
asked ("classic", "consumer", "share"; case-insensitive) and names each
group's type. A consumer group's protocol type is "consumer" and its states
are Kafka's (Empty, Assigning, Reconciling, Stable); a share group's protocol
type is "share" and its states Empty and Stable. As Kafka's KafkaApis: DESCRIBE on the
CLUSTER lists every group; without it, only the groups the principal may
DESCRIBE, and the others are not named. While some `__consumer_offsets`
partition is still loading, the answer is COORDINATOR_LOAD_IN_PROGRESS and no
groups, as Kafka's coordinator answers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.broker.coordinator.group_results import ListedGroup

KEY = 16


@api(KEY, 0, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """The groups, with their protocol type (and state, v4; and type, v5)."""
    version = request.version
    if request.broker.groups.loading:
        return build(response_type(KEY, version), throttle_time=ZERO_MS,
                     error_code=ErrorCode.coordinator_load_in_progress, groups=())
    listed: list[ListedGroup] = await request.broker.coordinate(
        request.broker.groups.listed_groups, getattr(body, "states_filter", ()), getattr(body, "types_filter", ()))
    if denied(request, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.GROUP, [g.group_id for g in listed])
        listed = [g for g in listed if g.group_id in visible]
    group_cls = response_type(KEY, version, "ListedGroup")
    rows = tuple(build(group_cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                       group_type=g.group_type) for g in sorted(listed, key=lambda g: g.group_id))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=ErrorCode.none, groups=rows)
