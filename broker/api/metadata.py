"""Metadata (3), v0-12: this broker as the only broker and controller, the cluster id, topics.

`topics` null (v1+) or empty (v0) asks for every topic; a name (or id) asked
twice is answered once, as Kafka's set of names does. A missing topic is
created with `num.partitions` (the internal topics with their own counts)
when the request allows it (v4+; always before v4) and
`auto.create.topics.enable` is on, and described once created: creation runs
in the coordinator pool and is awaited, so clients need not retry. As
Kafka's controller refuses a creation request of more than 10,000
partitions (`topic_creation`), a request whose missing topics add up to more
creates none of them, and they answer UNKNOWN_TOPIC_OR_PARTITION, as a
KRaft broker answers for topics it did not create; a name Kafka's rule
refuses answers INVALID_TOPIC_EXCEPTION. Otherwise a missing topic is
UNKNOWN_TOPIC_OR_PARTITION. From v10 each topic carries its id (the one in
its `partition.metadata`), and topics may be asked by id (name null), as
KIP-848 consumers do for the topic ids their assignments name; an unknown id
answers UNKNOWN_TOPIC_ID, and no topic is created by id. Fetch still names
topics (it stops at v12).

Authorization, as Kafka's KafkaApis: a topic needs DESCRIBE on the TOPIC.
Asked for every topic, the others are left out; asked by name or id, they
answer TOPIC_AUTHORIZATION_FAILED (by id with no name, not to disclose it).
A missing topic is created only with CREATE on the CLUSTER or on that
TOPIC, else it answers TOPIC_AUTHORIZATION_FAILED.

A partition whose log dir an I/O error took offline is answered as Kafka 4's
KRaft broker answers it once its controller has handled the offline dir
(handleDirectoriesOffline, then KRaftMetadataCache.getPartitionMetadata):
the broker, its only replica, no longer leads it and no other can, so it is
LEADER_NOT_AVAILABLE with leader -1, replicas and ISR as they were, and the
replica listed in `offline_replicas`. Produce and Fetch learn the same from the
log dir's state (KAFKA_STORAGE_ERROR); a restart recovers the dir.

Every client asks again and again, and a 1,000-partition topic costs tens of
milliseconds to encode, so each existing topic's encoded row is kept, keyed
by the version, its name, partition count and id, and the answer is the
encoded envelope (brokers, cluster, controller) around the rows. A request
that needs more than a little encoding is answered from the coordinator
pool, so the event loop goes on serving other connections meanwhile.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from typing import IO, cast

from kio.serial.writers import write_compact_array_length, write_legacy_array_length
from kio.static.primitive import i32

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, Outcome, ResourceType, authorized, coordinate, denied
from logstore.broker.api.topic_creation import MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS, NewTopic, create_topics
from logstore.broker.context import BrokerContext
from logstore.broker.coordinator.internal_topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TXN_STATE_TOPIC,
)
from logstore.broker.fast_codec import entity_encoder
from logstore.broker.protocol import ZERO_MS, ErrorCode, PreEncoded, ResponseFrame, encode_body, frame_of_body
from logstore.errors import InvalidTopicError, LogStoreError
from logstore.topics import validate_topic_name

log = logging.getLogger(__name__)

KEY = 3
NO_LEADER = -1
UNKNOWN_OPERATIONS = -2147483648
ZERO_UUID = uuid.UUID(int=0)
# Encoded rows of existing topics kept (all of them are dropped when full: stale rows are never asked again).
CACHED_ROWS = 65_536
# An answer with more topics than this, or more rows to encode (about 15 us each), is built in the coordinator pool.
INLINE_TOPICS = 100
INLINE_ROWS = 200
# Names of a request worked out per step on the event loop (about a millisecond each).
STEP = 4096

Hidden = list[tuple[str | None, uuid.UUID | None]]


@dataclass
class Asked:
    """What a request asks, once authorized: the names to describe (each once), those to create, the
    unknown ids, and the (name, id) pairs the principal may not see."""

    names: list[str]
    create: list[str]
    unknown_ids: list[uuid.UUID]
    hidden: Hidden


def _encode(correlation_id: int, version: int, body: bytes) -> PreEncoded:
    """The reply around a body encoded by the handler."""
    return frame_of_body(correlation_id, KEY, version, body)


def _topic_id(broker: BrokerContext, name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(bytes=broker.store.topic_id(name))
    except LogStoreError:
        return None


def _names_required(version: int, body: KioMessage) -> bool:
    """Whether a v10 or v11 request asks by topic id or with a null name: those versions carry ids but
    answer by name only (their response names are not nullable), so Kafka refuses both."""
    return 10 <= version < 12 and body.topics is not None and any(
        topic.name is None or topic.topic_id not in (None, ZERO_UUID) for topic in body.topics)


async def _asked(request: Request, body: KioMessage, existing: Mapping[str, int]) -> Asked:
    broker = request.broker
    asked = body.topics
    if asked is None or (request.version == 0 and not asked):
        everything = sorted(existing)
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, everything)
        return Asked([name for name in everything if name in visible], [], [], [])
    ids = dict.fromkeys(map(attrgetter("topic_id"), asked)) if request.version >= 10 else {}
    if ids.keys() - {None, ZERO_UUID}:
        # Asked by id (Kafka then ignores the names): the ids' topics, none created.
        by_id = {_topic_id(broker, name): name for name in existing}
        names: list[str] = []
        unknown_ids: list[uuid.UUID] = []
        for topic_id in ids:
            if topic_id in by_id:
                names.append(by_id[topic_id])
            elif topic_id not in (None, ZERO_UUID):
                unknown_ids.append(topic_id)
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        hidden: Hidden = [(None, _topic_id(broker, name)) for name in names if name not in visible]
        return Asked([name for name in names if name in visible], [], unknown_ids, hidden)
    return await _by_name(request, body, existing)


async def _by_name(request: Request, body: KioMessage, existing: Mapping[str, int]) -> Asked:
    """What a request naming its topics asks, worked out `STEP` names at a time (a 2 MB request names
    tens of thousands), with the event loop free to serve other connections between steps."""
    allow_create = getattr(body, "allow_auto_topic_creation", True) and request.broker.config[
        "auto.create.topics.enable"]
    create_any = allow_create and not denied(request, AclOperation.CREATE, ResourceType.CLUSTER)
    result = Asked([], [], [], [])
    seen: set[str] = set()
    topics = body.topics
    for start in range(0, len(topics), STEP):
        if start:
            await asyncio.sleep(0)
        step = [name for name in dict.fromkeys(map(attrgetter("name"), topics[start:start + STEP]))
                if name not in seen]
        seen.update(step)
        visible = authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, step)
        missing = [name for name in step if name in visible and name not in existing]
        creatable = set(missing) if create_any or not (allow_create and missing) else \
            authorized(request, AclOperation.CREATE, ResourceType.TOPIC, missing)
        for name in step:
            if name not in visible or (allow_create and name not in existing and name not in creatable):
                result.hidden.append((name, None))
                continue
            result.names.append(name)
            if allow_create and name not in existing:
                result.create.append(name)
    return result


def _auto_partitions(broker: BrokerContext, name: str) -> int:
    """The partitions an auto-created topic gets (Kafka's AutoTopicCreationManager.creatableTopic)."""
    if name == OFFSETS_TOPIC:
        return int(broker.config["offsets.topic.num.partitions"])
    if name == TXN_STATE_TOPIC:
        return int(broker.config["transaction.state.log.num.partitions"])
    if name == SHARE_STATE_TOPIC:
        return int(broker.config["share.coordinator.state.topic.num.partitions"])
    return int(broker.config["num.partitions"])


def _valid(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return False
    return True


def _create_internal(broker: BrokerContext, name: str) -> int:
    # Through the coordinators, which create them with their own settings and under their own lock.
    {OFFSETS_TOPIC: broker.transactions.ensure_offsets_topic, TXN_STATE_TOPIC: broker.transactions.ensure_state_topic,
     SHARE_STATE_TOPIC: broker.transactions.ensure_share_state_topic}[name]()
    return broker.store.partitions(name)


def _creation_plan(broker: BrokerContext, names: Sequence[str]) -> tuple[dict[str, ErrorCode], list[str]]:
    """The error of each missing topic that is not to be created, and those to create: invalid names are
    INVALID_TOPIC_EXCEPTION (not counted), and past the partition limit none is created."""
    errors = {name: ErrorCode.invalid_topic_exception for name in names if not _valid(name)}
    wanted = [name for name in names if name not in errors]
    partitions = sum(_auto_partitions(broker, name) for name in wanted)
    if partitions > MAX_PARTITIONS_PER_REQUEST:
        log.info("auto-creation of %d topics (%d partitions) refused: %s", len(wanted), partitions,
                 TOO_MANY_PARTITIONS)
        return {**errors, **dict.fromkeys(wanted, ErrorCode.unknown_topic_or_partition)}, []
    return errors, wanted


async def _auto_create(request: Request, names: Sequence[str]) -> dict[str, ErrorCode]:
    """Create the missing topics asked (or none if they exceed the limit); the error of each not created."""
    broker = request.broker
    if len(names) > INLINE_TOPICS:
        planned = await coordinate(request, _creation_plan, broker, names)
        # The plan raises no Kafka error: each name's is in it.
        errors, wanted = planned.result
    else:
        errors, wanted = _creation_plan(broker, names)
    for name in (name for name in wanted if name in INTERNAL_TOPICS):
        made = await coordinate(request, _create_internal, broker, name)
        if not made.ok:
            errors[name] = made.error
    plain = [NewTopic(name, _auto_partitions(broker, name)) for name in wanted if name not in INTERNAL_TOPICS]
    for new, created in zip(plain, await create_topics(request, plain)):
        # Another request may have created it meanwhile: it is described as it now is.
        if not created.ok and created.error != ErrorCode.topic_already_exists:
            errors[new.name] = created.error
    return errors


@api(KEY, 0, 12, encode=_encode)
async def handle(request: Request, body: KioMessage) -> bytes:
    """Describe the broker and the topics asked for, creating missing ones when allowed."""
    broker = request.broker
    version = request.version
    if _names_required(version, body):
        # Kafka refuses the whole request (InvalidRequestException), each topic answered with the error.
        refused = [Row(ErrorCode.invalid_request, topic.name or "", None) for topic in body.topics]
        if len(refused) <= INLINE_TOPICS:
            return _answer(broker, version, refused, request.listener)
        answered: Outcome[bytes] = await coordinate(request, _answer, broker, version, refused,
                                                    request.listener)
        return answered.result
    existing = broker.store.topics()
    asked = await _asked(request, body, existing)
    errors: dict[str, ErrorCode] = {}
    if asked.create:
        errors = await _auto_create(request, asked.create)
        existing = broker.store.topics()
    if len(asked.names) + len(asked.unknown_ids) + len(asked.hidden) <= INLINE_TOPICS:
        rows = _plan(broker, version, asked, existing, errors)
        if _light(broker, rows):
            return _answer(broker, version, rows, request.listener)
    built: Outcome[bytes] = await coordinate(request, _build, broker, version, asked, existing, errors,
                                             request.listener)
    # Building raises no Kafka error: every topic's error is already in its row.
    return built.result


# -- the answer --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One topic of the answer: its error, name, id and partition count; `key` names its cached bytes (None:
    not cached)."""

    error: ErrorCode
    name: str | None
    topic_id: uuid.UUID | None
    partitions: int = 0
    key: Hashable | None = None
    offline: frozenset[int] = frozenset()
    """The partitions whose log dir is offline."""


def _plan(broker: BrokerContext, version: int, asked: Asked, existing: Mapping[str, int],
          errors: Mapping[str, ErrorCode]) -> list[Row]:
    rows = [Row(ErrorCode.unknown_topic_id, None, topic_id) for topic_id in asked.unknown_ids]
    offline = _offline_partitions(broker)
    for name in asked.names:
        if name in existing:
            topic_id = _topic_id(broker, name)
            key: tuple[Hashable, ...] = (version, name, existing[name], topic_id)
            down = offline.get(name, frozenset())
            rows.append(Row(ErrorCode.none, name, topic_id, existing[name], (*key, down) if down else key, down))
        else:
            rows.append(Row(errors.get(name, ErrorCode.unknown_topic_or_partition), name, None))
    rows += [Row(ErrorCode.topic_authorization_failed, name, topic_id) for name, topic_id in asked.hidden]
    return rows


def _offline_partitions(broker: BrokerContext) -> dict[str, frozenset[int]]:
    """The partitions of each topic whose log dir is offline (none while every dir is online)."""
    store = broker.store
    if not store.offline_dirs:
        return {}
    found: dict[str, set[int]] = {}
    for (topic, partition), opened in store.logs().items():
        if not opened.dir_state.online:
            found.setdefault(topic, set()).add(partition)
    return {topic: frozenset(partitions) for topic, partitions in found.items()}


def _light(broker: BrokerContext, rows: Sequence[Row]) -> bool:
    """Whether the answer is cheap enough to build on the event loop."""
    if len(rows) > INLINE_TOPICS:
        return False
    cached = broker.response_cache.get(KEY, {})
    return sum(row.partitions + 1 for row in rows if row.key not in cached) <= INLINE_ROWS


def _build(broker: BrokerContext, version: int, asked: Asked, existing: Mapping[str, int],
           errors: Mapping[str, ErrorCode], listener: str) -> bytes:
    """The response body of a request (in the coordinator pool, for a large one)."""
    return _answer(broker, version, _plan(broker, version, asked, existing, errors), listener)


def _answer(broker: BrokerContext, version: int, rows: Sequence[Row], listener: str) -> bytes:
    """The response body: the envelope's bytes (this broker as `listener` advertises it) around each row's."""
    cached = broker.response_cache.setdefault(KEY, {})
    head, tail = _envelope(broker, version, cached, listener)
    write_row = _row_writer(version)
    parts = [head, _array_count(version, len(rows))]
    for row in rows:
        encoded = cached.get(row.key) if row.key is not None else None
        if encoded is None:
            encoded = write_row(_topic(version, row, broker.node_id))
            if row.key is not None:
                if len(cached) >= CACHED_ROWS:
                    cached.clear()
                cached[row.key] = encoded
        parts.append(encoded)
    parts.append(tail)
    return b"".join(parts)


def _topic(version: int, row: Row, node_id: int) -> KioMessage:
    cls = response_type(KEY, version, "MetadataResponseTopic")
    partition_cls = response_type(KEY, version, "MetadataResponsePartition")
    partitions = tuple(
        build(partition_cls, error_code=ErrorCode.leader_not_available, partition_index=p, leader_id=NO_LEADER,
              leader_epoch=0, replica_nodes=(node_id,), isr_nodes=(node_id,), offline_replicas=(node_id,))
        if p in row.offline else
        build(partition_cls, error_code=ErrorCode.none, partition_index=p, leader_id=node_id, leader_epoch=0,
              replica_nodes=(node_id,), isr_nodes=(node_id,), offline_replicas=())
        for p in range(row.partitions))
    return build(cls, error_code=row.error, name=row.name, topic_id=row.topic_id,
                 is_internal=row.name in INTERNAL_TOPICS, partitions=partitions,
                 topic_authorized_operations=UNKNOWN_OPERATIONS)


@cache
def _row_writer(version: int) -> Callable[[KioMessage], bytes]:
    """The encoder of one MetadataResponseTopic of `version`, returning its bytes (kio's)."""
    return entity_encoder(response_type(KEY, version, "MetadataResponseTopic"))


def _array_count(version: int, count: int) -> bytes:
    """The topics array's count as kio writes it: a compact length (flexible versions) or an int32."""
    frame = ResponseFrame()
    # kio types a writer's sink as a stream or IO[bytes], but its count writers only call write().
    sink = cast(IO[bytes], frame)
    if response_type(KEY, version).__flexible__:
        write_compact_array_length(sink, count)
    else:
        write_legacy_array_length(sink, i32(count))
    return b"".join(frame.finish().parts)


def _envelope(broker: BrokerContext, version: int, cached: dict[Hashable, bytes],
              listener: str) -> tuple[bytes, bytes]:
    """(what comes before the topics array, what comes after it) of this broker's answer."""
    head_key, tail_key = ("head", version, listener), ("tail", version, listener)
    if head_key in cached and tail_key in cached:
        return cached[head_key], cached[tail_key]
    body = encode_body(_response(broker, version, listener))
    cls = response_type(KEY, version)
    # After the topics: the cluster's authorized operations (v8-v10), then the tagged fields (flexible versions).
    tail_size = (4 if "cluster_authorized_operations" in cls.__dataclass_fields__ else 0) + int(cls.__flexible__)
    empty = _array_count(version, 0)
    start = len(body) - tail_size - len(empty)
    if body[start:start + len(empty)] != empty:
        raise AssertionError(f"Metadata v{version}: the topics array is not where its schema puts it")
    head, tail = body[:start], body[start + len(empty):]
    cached[head_key], cached[tail_key] = head, tail
    return head, tail


def _response(broker: BrokerContext, version: int, listener: str) -> ResponsePayload:
    """This broker's answer with no topics, as `listener` advertises it."""
    advertised = broker.config.advertised_for(listener)
    node = build(response_type(KEY, version, "MetadataResponseBroker"), node_id=broker.node_id,
                 host=advertised.host, port=advertised.port, rack=None)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, brokers=(node,), cluster_id=broker.cluster_id,
                 controller_id=broker.node_id, topics=(), cluster_authorized_operations=UNKNOWN_OPERATIONS)
