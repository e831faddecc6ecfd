"""OffsetDelete (47), v0: remove a group's offsets for partitions it no longer consumes.

A partition of a topic the group's members subscribe to answers
GROUP_SUBSCRIBED_TO_TOPIC; a group with members that does not use the
consumer protocol NON_EMPTY_GROUP; an unknown group GROUP_ID_NOT_FOUND.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.api.group_calls import code_of, known_partitions, partition_codes
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 47


@api(KEY, 0, 0)
async def handle(request, body):
    """Delete the offsets asked, partition by partition."""
    asked, codes = known_partitions(request, body.topics)
    error = ErrorCode.none
    try:
        errors = await request.broker.coordinate(request.broker.groups.delete_offsets, body.group_id, list(asked))
        codes.update({tp: code_of(e) for tp, e in errors.items()})
    except LogStoreError as exc:
        error = ErrorCode(exc.code)
    topics = partition_codes(KEY, request.version, "OffsetDeleteResponse", body.topics, codes) if not error else ()
    return build(response_type(KEY, request.version), error_code=error, throttle_time=ZERO_MS, topics=topics)
