"""DeleteTopics (20), v1-4: delete by name; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION,
and every topic is refused with TOPIC_DELETION_DISABLED when `delete.topic.enable` is off.
The coordinators' internal topics are refused with INVALID_REQUEST: their state lives there.
A name given more than once answers INVALID_REQUEST "Duplicate topic name." and is not deleted,
as Kafka's ControllerApis answers it.
A topic the principal may not DELETE answers TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis)."""
from __future__ import annotations

from collections import Counter

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, coordinate
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 20
DUPLICATE = "Duplicate topic name."


@api(KEY, 1, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Delete each named topic and its partitions' directories."""
    broker = request.broker
    given = Counter(body.topic_names)
    allowed = authorized(request, AclOperation.DELETE, ResourceType.TOPIC, list(given))
    results = []
    for name, times in given.items():
        message = None
        if times > 1:
            error, message = ErrorCode.invalid_request, DUPLICATE
        elif name not in allowed:
            error = ErrorCode.topic_authorization_failed
        elif not broker.config["delete.topic.enable"]:
            error = ErrorCode.topic_deletion_disabled
        else:
            # Off the event loop: the offsets' tombstones wait for their fsync.
            error = (await coordinate(request, broker.delete_topic, name)).error
        results.append(build(response_type(KEY, request.version, "DeletableTopicResult"), name=name,
                             error_code=error, error_message=message))
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, responses=tuple(results))
