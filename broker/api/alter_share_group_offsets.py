"""AlterShareGroupOffsets (91), v0: set the start offset (SPSO) of an empty share group's share-partitions.

Behavior:
- Each partition named gets its start offset, and its in-flight window is
  cleared (what was acknowledged, archived or counted before it is
  forgotten); durable when answered. A partition index past the topic's
  partitions answers UNKNOWN_TOPIC_OR_PARTITION, as does every partition
  of a topic that does not exist; a negative start offset INVALID_REQUEST.
- Only an empty share group's offsets change: one with members answers
  NON_EMPTY_GROUP, an id of a classic or consumer group GROUP_ID_NOT_FOUND
  ("Group ... is not a share group."), an empty id INVALID_GROUP_ID, each
  for the whole request. A group that does not exist yet gets its offsets,
  ready for its first member, as in Kafka 4.2 (which also records the group
  as Empty at once; here the group coordinator learns of it at its first
  member's heartbeat).
- Authorization (Kafka's KafkaApis and its ACL table): READ on the GROUP,
  else GROUP_AUTHORIZATION_FAILED; READ on each TOPIC, else its partitions
  answer TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import InvalidGroupIdError, NonEmptyGroupError

if TYPE_CHECKING:
    from logstore.broker.context import BrokerContext
    from logstore.broker.coordinator.group import GroupCoordinator

KEY = 91
ZERO_ID = uuid.UUID(int=0)
TopicPartition = tuple[str, int]


def empty_share_group(groups: GroupCoordinator, group_id: str, *, missing_ok: bool) -> bool:
    """Whether the share group exists; raise what Kafka answers for a group whose share offsets may not
    change: NON_EMPTY_GROUP with members, GROUP_ID_NOT_FOUND for another kind of group (or, unless
    `missing_ok`, for none)."""
    if not group_id:
        raise InvalidGroupIdError("The group id is empty.")
    (described,) = groups.share_group_describe([group_id])
    if described.error is None:
        if described.members:
            raise NonEmptyGroupError(f"Share group {group_id} is not empty.")
        return True
    if missing_ok and all(g.group_id != group_id for g in groups.listed_groups()):
        return False
    raise described.error


def alter_offsets(broker: BrokerContext, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Check the group and set each partition's start offset (the coordinator pool; durable on return)."""
    empty_share_group(broker.groups, group_id, missing_ok=True)
    for (topic, partition), offset in offsets.items():
        broker.share.partitions.reset(group_id, topic, partition, offset)


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Set the start offsets asked, after the group and topic checks."""
    response = response_type(KEY, request.version)
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    if refused:
        return build(response, throttle_time=ZERO_MS, error_code=refused, error_message=None, responses=())
    store = request.broker.store
    existing = store.topics()
    allowed = authorized(request, AclOperation.READ, ResourceType.TOPIC, [t.topic_name for t in body.topics])
    codes: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, int] = {}
    for topic in body.topics:
        for p in topic.partitions:
            key = (topic.topic_name, p.partition_index)
            if topic.topic_name not in allowed:
                codes[key] = ErrorCode.topic_authorization_failed
            elif not 0 <= p.partition_index < existing.get(topic.topic_name, 0):
                codes[key] = ErrorCode.unknown_topic_or_partition
            elif p.start_offset < 0:
                codes[key] = ErrorCode.invalid_request
            else:
                offsets[key] = p.start_offset
    outcome = await coordinate(request, alter_offsets, request.broker, body.group_id, offsets)
    error, message = ErrorCode.none, None
    if not outcome.ok:
        # The group's refusal is the answer's and its partitions'; those refused before it keep their own
        # code (KafkaApis adds the unauthorized topics to whatever the coordinator answered).
        error, message = outcome.error, outcome.message
        codes.update({key: error for key in offsets})
    topic_cls = response_type(KEY, request.version, "AlterShareGroupOffsetsResponseTopic")
    partition_cls = response_type(KEY, request.version, "AlterShareGroupOffsetsResponsePartition")
    topics = []
    for name in dict.fromkeys(t.topic_name for t in body.topics):
        indexes = dict.fromkeys(p.partition_index for t in body.topics if t.topic_name == name for p in t.partitions)
        topic_id = uuid.UUID(bytes=store.topic_id(name)) if name in existing and name in allowed else ZERO_ID
        topics.append(build(topic_cls, topic_name=name, topic_id=topic_id, partitions=tuple(
            build(partition_cls, partition_index=index, error_code=codes.get((name, index), ErrorCode.none),
                  error_message=None) for index in indexes)))
    return build(response, throttle_time=ZERO_MS, error_code=error, error_message=message, responses=tuple(topics))
