"""Metadata (3), v0-12: this broker as the only broker and controller, the cluster id, topics.

`topics` null (v1+) or empty (v0) asks for every topic. A missing topic is
created with `num.partitions` when the request allows it (v4+; always before
v4) and `auto.create.topics.enable` is on, and described at once (creation
here is synchronous, so clients need not retry on LEADER_NOT_AVAILABLE);
otherwise UNKNOWN_TOPIC_OR_PARTITION. From v10 each topic carries its id
(the one in its `partition.metadata`), and topics may be asked by id (name
null), as KIP-848 consumers do for the topic ids their assignments name; an
unknown id answers UNKNOWN_TOPIC_ID, and no topic is created by id. Fetch
still names topics (it stops at v12).

Authorization, as Kafka's KafkaApis: a topic needs DESCRIBE on the TOPIC.
Asked for every topic, the others are left out; asked by name or id, they
answer TOPIC_AUTHORIZATION_FAILED (by id with no name, not to disclose it).
A missing topic is created only with CREATE on the CLUSTER or on that
TOPIC, else it answers TOPIC_AUTHORIZATION_FAILED.

The encoded body of an answer about existing topics is kept, keyed by the
version and each topic's partition count: every client asks again and
again, and a 1,000-partition topic costs tens of milliseconds to encode.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, attempt, authorized, denied
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode, PreEncoded, encode_body, frame_of_body
from logstore.errors import LogStoreError

KEY = 3
UNKNOWN_OPERATIONS = -2147483648
CACHED_ANSWERS = 256
ZERO_UUID = uuid.UUID(int=0)


def _topic(version: int, name: str | None, error: ErrorCode, partitions: int, node_id: int,
           topic_id: uuid.UUID | None = None) -> KioMessage:
    cls = response_type(KEY, version, "MetadataResponseTopic")
    partition_cls = response_type(KEY, version, "MetadataResponsePartition")
    rows = tuple(build(partition_cls, error_code=ErrorCode.none, partition_index=p, leader_id=node_id,
                       leader_epoch=0, replica_nodes=(node_id,), isr_nodes=(node_id,), offline_replicas=())
                 for p in range(partitions))
    return build(cls, error_code=error, name=name, topic_id=topic_id, is_internal=(name or "").startswith("__"),
                 partitions=rows, topic_authorized_operations=UNKNOWN_OPERATIONS)


def _encode(correlation_id: int, version: int, body: bytes) -> PreEncoded:
    """The reply around a body encoded (or cached) by the handler."""
    return frame_of_body(correlation_id, KEY, version, body)


Hidden = list[tuple[str | None, uuid.UUID | None]]


def _asked(request: Request, body: KioMessage,
           existing: Mapping[str, int]) -> tuple[list[str], bool, list[uuid.UUID], Hidden]:
    """The topics to describe, whether missing ones may be created, the unknown ids, and the (name, id)
    pairs the principal may not see."""
    broker = request.broker
    asked = body.topics
    version = request.version
    unknown_ids: list[uuid.UUID] = []
    if asked is None or (version == 0 and not asked):
        everything = sorted(existing)
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, everything)
        return [name for name in everything if name in visible], False, unknown_ids, []
    if any(getattr(t, "topic_id", None) not in (None, ZERO_UUID) for t in asked):
        # Asked by id (Kafka then ignores the names): the ids' topics, none created.
        by_id = {_topic_id(broker, name): name for name in existing}
        names: list[str] = []
        for t in asked:
            if t.topic_id in by_id:
                names.append(by_id[t.topic_id])
            elif t.topic_id not in (None, ZERO_UUID):
                unknown_ids.append(t.topic_id)
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        hidden: Hidden = [(None, _topic_id(broker, name)) for name in names if name not in visible]
        return [name for name in names if name in visible], False, unknown_ids, hidden
    names = [t.name for t in asked]
    allow_create: bool = getattr(body, "allow_auto_topic_creation", True)
    visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    hidden = [(name, None) for name in names if name not in visible]
    names = [name for name in names if name in visible]
    missing = [name for name in names if name not in existing]
    if missing and allow_create and broker.config["auto.create.topics.enable"] and \
            denied(request, AclOperation.CREATE, ResourceType.CLUSTER):
        creatable = authorized(request, AclOperation.CREATE, ResourceType.TOPIC, missing)
        hidden = [(name, None) for name in missing if name not in creatable] + hidden
        names = [name for name in names if name in existing or name in creatable]
    return names, allow_create, unknown_ids, hidden


@api(KEY, 0, 12, encode=_encode)
async def handle(request: Request, body: KioMessage) -> bytes:
    """Describe the broker and the topics asked for, creating missing ones when allowed."""
    broker = request.broker
    version = request.version
    existing = broker.store.topics()
    names, allow_create, unknown_ids, hidden = _asked(request, body, existing)
    cache = broker.response_cache.setdefault(KEY, {})
    key = (version, tuple((name, existing.get(name), _topic_id(broker, name) if name in existing else None)
                          for name in names), tuple(unknown_ids), tuple(hidden))
    body_bytes: bytes | None = cache.get(key)
    if body_bytes is None:
        body_bytes = encode_body(_answer(request, names, existing, allow_create, unknown_ids, hidden))
        if all(name in existing for name in names):
            if len(cache) >= CACHED_ANSWERS:
                cache.clear()
            cache[key] = body_bytes
    return body_bytes


def _topic_id(broker: BrokerContext, name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(bytes=broker.store.topic_id(name))
    except LogStoreError:
        return None


def _answer(request: Request, names: list[str], existing: Mapping[str, int], allow_create: bool,
            unknown_ids: Iterable[uuid.UUID] = (),
            hidden: Iterable[tuple[str | None, uuid.UUID | None]] = ()) -> ResponsePayload:
    broker = request.broker
    version = request.version
    topics = [_topic(version, None, ErrorCode.unknown_topic_id, 0, broker.node_id, topic_id)
              for topic_id in unknown_ids]
    for name in names:
        if name in existing:
            topics.append(_topic(version, name, ErrorCode.none, existing[name], broker.node_id,
                                 _topic_id(broker, name)))
            continue
        error = ErrorCode.unknown_topic_or_partition
        if allow_create and broker.config["auto.create.topics.enable"]:
            created = attempt(request, broker.create_topic, name, broker.config["num.partitions"])
            if created.ok:
                topics.append(_topic(version, name, ErrorCode.none, created.result, broker.node_id,
                                     _topic_id(broker, name)))
                continue
            error = created.error
        topics.append(_topic(version, name, error, 0, broker.node_id))
    topics += [_topic(version, name, ErrorCode.topic_authorization_failed, 0, broker.node_id, topic_id)
               for name, topic_id in hidden]
    advertised = broker.config.advertised
    node = build(response_type(KEY, version, "MetadataResponseBroker"), node_id=broker.node_id,
                 host=advertised.host, port=advertised.port, rack=None)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, brokers=(node,), cluster_id=broker.cluster_id,
                 controller_id=broker.node_id, topics=tuple(topics),
                 cluster_authorized_operations=UNKNOWN_OPERATIONS)
