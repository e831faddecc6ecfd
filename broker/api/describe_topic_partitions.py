"""DescribeTopicPartitions (75), v0: topics and their partitions a page at a time, as Kafka's
DescribeTopicPartitionsRequestHandler and KRaftMetadataCache answer (KIP-966; what kafka-topics and the Java
AdminClient's describeTopics use).

- `topics` empty asks for every topic. The topics answered are those at or
  after the cursor's topic by name, in name order; partitions of the
  cursor's topic start at its partition index, the others at 0.
- At most `response_partition_limit` partitions are answered (at least 1,
  at most `max.request.partition.size.limit`, 2,000 by default): where the
  limit cuts a topic, or leaves a topic unanswered, `next_cursor` names the
  first partition not answered.
- A cursor whose topic is not among the topics asked, or whose partition is
  negative, refuses the request: every topic asked answers INVALID_REQUEST.
- Asked by name, an unknown topic answers UNKNOWN_TOPIC_OR_PARTITION, a name
  Kafka's rule refuses INVALID_TOPIC_EXCEPTION; a page of every topic lists
  only existing ones. Each partition is this broker's, leader and only
  replica; one in an offline log dir has no leader and lists the broker in
  `offline_replicas`, as Metadata answers it.

Authorization, as Metadata (Kafka's handler): DESCRIBE on each TOPIC. A page
of every topic leaves the others out; a topic asked by name answers
TOPIC_AUTHORIZATION_FAILED with the zero id (appended after the others),
whether it exists or not. Each topic answered carries the bit field of the
operations the principal may perform on it.
"""
from __future__ import annotations

import uuid

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.describe_cluster import authorized_operations
from logstore.broker.api.kit import AclOperation, ResourceType, authorized
from logstore.broker.coordinator.internal_topics import INTERNAL_TOPICS
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import InvalidTopicError, LogStoreError
from logstore.manager import LogManager
from logstore.topics import validate_topic_name

KEY = 75
NO_LEADER = -1
ZERO_UUID = uuid.UUID(int=0)


def _topic_id(store: LogManager, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(bytes=store.topic_id(name))
    except LogStoreError:
        return ZERO_UUID


def _missing(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


def _offline(store: LogManager) -> set[tuple[str, int]]:
    """The partitions whose log dir is offline (none while every dir is online)."""
    if not store.offline_dirs:
        return set()
    return {key for key, opened in store.logs().items() if not opened.dir_state.online}


def _partitions(request: Request, name: str, start: int, end: int,
                offline: set[tuple[str, int]]) -> tuple[KioMessage, ...]:
    node = request.broker.node_id
    cls = response_type(KEY, request.version, "DescribeTopicPartitionsResponsePartition")
    rows = []
    for index in range(start, end):
        online = (name, index) not in offline
        rows.append(build(cls, error_code=ErrorCode.none, partition_index=index,
                          leader_id=node if online else NO_LEADER, leader_epoch=0, replica_nodes=(node,),
                          isr_nodes=(node,), eligible_leader_replicas=(), last_known_elr=(),
                          offline_replicas=() if online else (node,)))
    return tuple(rows)


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """One page of the topics asked, from the cursor, up to the partition limit."""
    version = request.version
    store = request.broker.store
    topic_cls = response_type(KEY, version, "DescribeTopicPartitionsResponseTopic")
    cursor = body.cursor
    after = cursor.topic_name if cursor is not None else ""
    every = not body.topics
    counts = store.topics()
    names = sorted({n for n in (counts if every else (t.name for t in body.topics)) if n >= after})
    if cursor is not None and ((not every and cursor.topic_name not in names) or cursor.partition_index < 0):
        return build(response_type(KEY, version), throttle_time=ZERO_MS, next_cursor=None, topics=tuple(
            build(topic_cls, error_code=ErrorCode.invalid_request, name=t.name, topic_id=ZERO_UUID,
                  is_internal=False, partitions=(), topic_authorized_operations=0) for t in body.topics))
    visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    limit = max(min(request.broker.config["max.request.partition.size.limit"], body.response_partition_limit), 1)
    remaining = limit
    offline = _offline(store)
    rows: list[KioMessage] = []
    next_cursor = None
    for name in (n for n in names if n in visible):
        if remaining == 0:
            next_cursor = build(response_type(KEY, version, "Cursor"), topic_name=name, partition_index=0)
            break
        if name not in counts:
            if not every:
                rows.append(build(topic_cls, error_code=_missing(name), name=name, topic_id=ZERO_UUID,
                                  is_internal=name in INTERNAL_TOPICS, partitions=(),
                                  topic_authorized_operations=authorized_operations(request, ResourceType.TOPIC, name)))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(counts[name], start + remaining)
        partitions = _partitions(request, name, start, end, offline)
        rows.append(build(topic_cls, error_code=ErrorCode.none, name=name, topic_id=_topic_id(store, name),
                          is_internal=name in INTERNAL_TOPICS, partitions=partitions,
                          topic_authorized_operations=authorized_operations(request, ResourceType.TOPIC, name)))
        if end < counts[name]:
            next_cursor = build(response_type(KEY, version, "Cursor"), topic_name=name, partition_index=end)
            break
        remaining -= max(end - start, 0)
    rows += [build(topic_cls, error_code=ErrorCode.topic_authorization_failed, name=name, topic_id=ZERO_UUID,
                   is_internal=False, partitions=(), topic_authorized_operations=0)
             for name in names if name not in visible and not every]
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(rows), next_cursor=next_cursor)
