"""DeleteTopics (20), v1-4: delete by name, as Kafka 4's controller answers (ControllerApis.deleteTopics).

- `delete.topic.enable` off refuses the whole request before anything else:
  every topic asked answers TOPIC_DELETION_DISABLED (INVALID_REQUEST before
  v3, which does not know that code).
- A name given more than once answers INVALID_REQUEST "Duplicate topic
  name." and is not deleted.
- Authorization: DELETE on the CLUSTER may delete every topic. Otherwise a
  topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether
  it exists or not (so nobody learns which names exist); one it may DESCRIBE
  that does not exist is UNKNOWN_TOPIC_OR_PARTITION; one that exists but it
  may not DELETE is TOPIC_AUTHORIZATION_FAILED.
- The coordinators' internal topics are refused with INVALID_REQUEST: their
  state lives there.
"""
from __future__ import annotations

from collections import Counter

from logstore.broker import collector
from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, attempt, authorized, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 20
DUPLICATE = "Duplicate topic name."
# The first version that knows TOPIC_DELETION_DISABLED.
DELETION_DISABLED_SINCE = 3


@api(KEY, 1, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Delete each named topic and its partitions' directories."""
    broker = request.broker
    result_cls = response_type(KEY, request.version, "DeletableTopicResult")
    if not broker.config["delete.topic.enable"]:
        error = (ErrorCode.topic_deletion_disabled if request.version >= DELETION_DISABLED_SINCE
                 else ErrorCode.invalid_request)
        return build(response_type(KEY, request.version), throttle_time=ZERO_MS, responses=tuple(
            build(result_cls, name=name, error_code=error, error_message=None) for name in body.topic_names))
    given = Counter(body.topic_names)
    single = [name for name, times in given.items() if times == 1]
    if not denied(request, AclOperation.DELETE, ResourceType.CLUSTER):
        describable = deletable = set(single)
    else:
        describable = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, single)
        deletable = authorized(request, AclOperation.DELETE, ResourceType.TOPIC, single)
    results = []
    for name, times in given.items():
        message = None
        if times > 1:
            error, message = ErrorCode.invalid_request, DUPLICATE
        elif name not in describable:
            error = ErrorCode.topic_authorization_failed
        elif not (known := attempt(request, broker.store.partitions, name)).ok:
            error, message = known.error, known.message
        elif name not in deletable:
            error = ErrorCode.topic_authorization_failed
        else:
            # Off the event loop: the offsets' tombstones wait for their fsync.
            outcome = await coordinate(request, broker.delete_topic, name)
            error, message = outcome.error, outcome.message
            if outcome.ok:
                collector.thaw()   # anything of it left in a cycle must be collectable
        results.append(build(result_cls, name=name, error_code=error, error_message=message))
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, responses=tuple(results))
