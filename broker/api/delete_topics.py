"""DeleteTopics (20), v1-4: delete by name; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION,
and every topic is refused with TOPIC_DELETION_DISABLED when `delete.topic.enable` is off.
The coordinators' internal topics are refused with INVALID_REQUEST: their state lives there."""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

KEY = 20


@api(KEY, 1, 4)
async def handle(request, body):
    """Delete each named topic and its partitions' directories."""
    broker = request.broker
    results = []
    for name in body.topic_names:
        error = ErrorCode.none
        if not broker.config["delete.topic.enable"]:
            error = ErrorCode.topic_deletion_disabled
        else:
            try:
                # Off the event loop: the offsets' tombstones wait for their fsync.
                await broker.coordinate(broker.delete_topic, name)
            except LogStoreError as exc:
                error = ErrorCode(exc.code)
        results.append(build(response_type(KEY, request.version, "DeletableTopicResult"), name=name,
                             error_code=error, error_message=None))
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, responses=tuple(results))
