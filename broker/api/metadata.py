"""Metadata (3), v0-12: this broker as the only broker and controller, the cluster id, topics.

`topics` null (v1+) or empty (v0) asks for every topic. A missing topic is
created with `num.partitions` when the request allows it (v4+; always before
v4) and `auto.create.topics.enable` is on, and described at once (creation
here is synchronous, so clients need not retry on LEADER_NOT_AVAILABLE);
otherwise UNKNOWN_TOPIC_OR_PARTITION. Topic
ids are not sent (zero UUID), which is why Fetch stops at v12.

The encoded body of an answer about existing topics is kept, keyed by the
version and each topic's partition count: every client asks again and
again, and a 1,000-partition topic costs tens of milliseconds to encode.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode, encode_body, frame_of_body
from logstore.errors import InvalidTopicError, LogStoreError

KEY = 3
UNKNOWN_OPERATIONS = -2147483648
CACHED_ANSWERS = 256


def _topic(version, name, error, partitions, node_id):
    cls = response_type(KEY, version, "MetadataResponseTopic")
    partition_cls = response_type(KEY, version, "MetadataResponsePartition")
    rows = tuple(build(partition_cls, error_code=ErrorCode.none, partition_index=p, leader_id=node_id,
                       leader_epoch=0, replica_nodes=(node_id,), isr_nodes=(node_id,), offline_replicas=())
                 for p in range(partitions))
    return build(cls, error_code=error, name=name, topic_id=None, is_internal=name.startswith("__"),
                 partitions=rows, topic_authorized_operations=UNKNOWN_OPERATIONS)


@api(KEY, 0, 12)
async def handle(request, body):
    """Describe the broker and the topics asked for, creating missing ones when allowed."""
    broker = request.broker
    version = request.version
    existing = broker.store.topics()
    asked = body.topics
    if asked is None or (version == 0 and not asked):
        names, allow_create = sorted(existing), False
    else:
        names = [t.name for t in asked]
        allow_create = getattr(body, "allow_auto_topic_creation", True)
    cache = broker.response_cache.setdefault(KEY, {})
    key = (version, tuple((name, existing.get(name)) for name in names))
    body_bytes = cache.get(key)
    if body_bytes is None:
        body_bytes = encode_body(_answer(broker, version, names, existing, allow_create))
        if all(name in existing for name in names):
            if len(cache) >= CACHED_ANSWERS:
                cache.clear()
            cache[key] = body_bytes
    return frame_of_body(request.correlation_id, KEY, version, body_bytes)


def _answer(broker, version, names, existing, allow_create):
    topics = []
    for name in names:
        if name in existing:
            topics.append(_topic(version, name, ErrorCode.none, existing[name], broker.node_id))
            continue
        error = ErrorCode.unknown_topic_or_partition
        if allow_create and broker.config["auto.create.topics.enable"]:
            try:
                partitions = broker.create_topic(name, broker.config["num.partitions"])
                topics.append(_topic(version, name, ErrorCode.none, partitions, broker.node_id))
                continue
            except InvalidTopicError:
                error = ErrorCode.invalid_topic_exception
            except LogStoreError as exc:
                error = ErrorCode(exc.code)
        topics.append(_topic(version, name, error, 0, broker.node_id))
    advertised = broker.config.advertised
    node = build(response_type(KEY, version, "MetadataResponseBroker"), node_id=broker.node_id,
                 host=advertised.host, port=advertised.port, rack=None)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, brokers=(node,), cluster_id=broker.cluster_id,
                 controller_id=broker.node_id, topics=tuple(topics),
                 cluster_authorized_operations=UNKNOWN_OPERATIONS)
