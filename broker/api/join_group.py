"""JoinGroup (11), v0-7: a member joins (or rejoins) a classic group.

The answer is held until the rebalance completes: every member rejoined,
or the rebalance timeout passed (after group.initial.rebalance.delay.ms for
a group that was empty). From v4 a member without an id first gets
MEMBER_ID_REQUIRED with an id to rejoin with (KIP-394). Only the leader's
answer lists the members and their metadata. v0 has no rebalance timeout:
the session timeout stands in, as in Kafka. READ on the GROUP, else
GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.group_calls import millis
from logstore.broker.api.kit import AclOperation, ResourceType, denied, held, refuse
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import MemberIdRequiredError

KEY = 11


@api(KEY, 0, 7)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Join, and answer when the group's next generation starts."""
    version = request.version
    groups = request.broker.groups
    session_ms = millis(body.session_timeout)
    rebalance_ms = millis(getattr(body, "rebalance_timeout", body.session_timeout))
    protocols = [(p.name, p.metadata) for p in body.protocols]
    response = response_type(KEY, version)
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    outcome = refuse(refused) if refused else await held(
        request, groups.join_group, body.group_id, body.member_id, getattr(body, "group_instance_id", None),
        request.client_id or "", request.client_host, session_ms, rebalance_ms, body.protocol_type, protocols,
        version >= 4)
    if not outcome.ok:
        exc = outcome.exc
        member_id = exc.member_id if isinstance(exc, MemberIdRequiredError) else body.member_id
        return build(response, throttle_time=ZERO_MS, error_code=outcome.error, generation_id=-1,
                     protocol_type=None, protocol_name=None if version >= 7 else "", leader="",
                     member_id=member_id, members=())
    result = outcome.result
    member_cls = response_type(KEY, version, "JoinGroupResponseMember")
    members = tuple(build(member_cls, member_id=m, group_instance_id=instance, metadata=metadata)
                    for m, instance, metadata in result.members)
    return build(response, throttle_time=ZERO_MS, error_code=ErrorCode.none, generation_id=result.generation_id,
                 protocol_type=result.protocol_type, protocol_name=result.protocol_name or "",
                 leader=result.leader_id, member_id=result.member_id, members=members)
