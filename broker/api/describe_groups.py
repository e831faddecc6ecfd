"""DescribeGroups (15), v0-5: state, protocol and members of classic groups.

As in Kafka, members' metadata and assignments are filled in only for a
Stable group, and a group the coordinator does not know is described as
Dead with no members and no error, and so are a KIP-848 consumer group
and a KIP-932 share group (ConsumerGroupDescribe and ShareGroupDescribe
describe those), as Kafka answers these versions (v6 would answer
GROUP_ID_NOT_FOUND, "Group ... is not a classic group."). A group the principal may
not DESCRIBE answers GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis), one whose
`__consumer_offsets` partition is still loading COORDINATOR_LOAD_IN_PROGRESS.
Authorized operations are "not requested".
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, coordinate
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.broker.coordinator.group_results import GroupDescription

KEY = 15
UNKNOWN_OPERATIONS = -2147483648


@api(KEY, 0, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each group asked."""
    version = request.version
    groups = request.broker.groups
    group_cls = response_type(KEY, version, "DescribedGroup")
    member_cls = response_type(KEY, version, "DescribedGroupMember")
    allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.GROUP, body.groups)
    described = []
    for group_id in body.groups:
        if group_id not in allowed:
            described.append(build(group_cls, error_code=ErrorCode.group_authorization_failed, group_id=group_id,
                                   group_state="", protocol_type="", protocol_data="", members=(),
                                   authorized_operations=UNKNOWN_OPERATIONS))
            continue
        outcome = await coordinate(request, groups.describe, group_id)
        if not outcome.ok:  # the group's partition is still loading (or failed to)
            described.append(build(group_cls, error_code=outcome.error, group_id=group_id, group_state="",
                                   protocol_type="", protocol_data="", members=(),
                                   authorized_operations=UNKNOWN_OPERATIONS))
            continue
        d: GroupDescription = outcome.result
        members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                              client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                              member_assignment=m.assignment) for m in d.members)
        described.append(build(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=d.state,
                               protocol_type=d.protocol_type, protocol_data=d.protocol_name, members=members,
                               authorized_operations=UNKNOWN_OPERATIONS))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, groups=tuple(described))
