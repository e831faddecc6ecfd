"""DeleteShareGroupOffsets (92), v0: forget an empty share group's share state of whole topics.

Behavior:
- Each topic named loses the group's share state of all its partitions
  (start offset, in-flight records, delivery counts; tombstones in
  `__share_group_state`), durable when answered: a member that later gets
  the topic starts it afresh from `share.auto.offset.reset`. A topic that
  does not exist answers UNKNOWN_TOPIC_OR_PARTITION, as does one the group
  has no share state for ("There is no offset information to delete.").
- Only an empty share group's state goes: one with members answers
  NON_EMPTY_GROUP, an unknown id or another kind of group's
  GROUP_ID_NOT_FOUND, an empty id INVALID_GROUP_ID, each for the whole
  request.
- Authorization (Kafka's KafkaApis): DELETE on the GROUP, else
  GROUP_AUTHORIZATION_FAILED; READ on each TOPIC, else the topic answers
  TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.alter_share_group_offsets import empty_share_group
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode

if TYPE_CHECKING:
    from logstore.broker.context import BrokerContext

KEY = 92
NO_OFFSETS = "There is no offset information to delete."
# (error code, message) per topic; a deleted topic also carries its id.
TopicResult = tuple[ErrorCode, str | None, bytes | None]


def delete_offsets(broker: BrokerContext, group_id: str, topics: list[str]) -> dict[str, TopicResult]:
    """Check the group and forget its share state of each topic (the coordinator pool; durable on return)."""
    empty_share_group(broker.groups, group_id, missing_ok=False)
    existing = broker.store.topics()
    with_state = {topic_id for _, topic_id, _ in broker.share.partitions.group_states(group_id)}
    results: dict[str, TopicResult] = {}
    for topic in topics:
        if topic not in existing:
            results[topic] = (ErrorCode.unknown_topic_or_partition, None, None)
            continue
        topic_id = broker.store.topic_id(topic)
        if topic_id not in with_state:
            results[topic] = (ErrorCode.unknown_topic_or_partition, NO_OFFSETS, topic_id)
            continue
        broker.share.partitions.delete_topic(group_id, topic_id)
        results[topic] = (ErrorCode.none, None, topic_id)
    return results


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Forget the share state of the topics asked, after the group and topic checks."""
    response = response_type(KEY, request.version)
    refused = denied(request, AclOperation.DELETE, ResourceType.GROUP, body.group_id)
    if refused:
        return build(response, throttle_time=ZERO_MS, error_code=refused, error_message=None, responses=())
    names = list(dict.fromkeys(t.topic_name for t in body.topics))
    allowed = authorized(request, AclOperation.READ, ResourceType.TOPIC, names)
    outcome = await coordinate(request, delete_offsets, request.broker, body.group_id,
                               [n for n in names if n in allowed])
    if not outcome.ok:
        # The group's refusal is the answer's; refused topics keep their own code, as KafkaApis adds them.
        return build(response, throttle_time=ZERO_MS, error_code=outcome.error, error_message=outcome.message,
                     responses=tuple(build(response_type(KEY, request.version, "DeleteShareGroupOffsetsResponseTopic"),
                                           topic_name=name, error_code=ErrorCode.topic_authorization_failed,
                                           error_message=None, topic_id=None)
                                     for name in names if name not in allowed))
    results = outcome.result
    topic_cls = response_type(KEY, request.version, "DeleteShareGroupOffsetsResponseTopic")
    topics = []
    for name in names:
        error, message, topic_id = results.get(name, (ErrorCode.topic_authorization_failed, None, None))
        topics.append(build(topic_cls, topic_name=name, error_code=error, error_message=message,
                            topic_id=None if topic_id is None else uuid.UUID(bytes=topic_id)))
    return build(response, throttle_time=ZERO_MS, error_code=ErrorCode.none, error_message=None,
                 responses=tuple(topics))
