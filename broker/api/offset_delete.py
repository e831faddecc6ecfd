"""OffsetDelete (47), v0: remove a group's offsets for partitions it no longer consumes.

A partition of a topic the group's members subscribe to answers
GROUP_SUBSCRIBED_TO_TOPIC; a group with members that does not use the
consumer protocol NON_EMPTY_GROUP; an unknown group GROUP_ID_NOT_FOUND.
Authorization (Kafka's KafkaApis): DELETE on the GROUP, else
GROUP_AUTHORIZATION_FAILED; READ on each TOPIC, else TOPIC_AUTHORIZATION_FAILED
on its partitions.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.group_calls import known_partitions, partition_codes
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied, error_code
from logstore.broker.protocol import ZERO_MS

KEY = 47


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Delete the offsets asked, partition by partition."""
    error = denied(request, AclOperation.DELETE, ResourceType.GROUP, body.group_id)
    if not error:
        asked, codes = known_partitions(request, body.topics, lambda p: None)
        outcome = await coordinate(request, request.broker.groups.delete_offsets, body.group_id, list(asked))
        error = outcome.error
        if outcome.ok:
            codes.update({tp: error_code(request, e) for tp, e in outcome.result.items()})
    topics = partition_codes(KEY, request.version, "OffsetDeleteResponse", body.topics, codes) if not error else ()
    return build(response_type(KEY, request.version), error_code=error, throttle_time=ZERO_MS, topics=topics)
