"""CreateTopics (19), v2-5: topics with a partition count (-1: num.partitions) and configs.

One node holds one replica: a replication factor above
`logstore.max.replication.factor` (3) is INVALID_REPLICATION_FACTOR, and one
up to it is accepted and stored as 1, as single-node brokers do (librdkafka's
tests ask for 3). `validate_only` checks without creating.

Manual `assignments` are taken as a one-node Kafka takes them: the count and
the factor must then be -1 (else INVALID_REQUEST), the partitions are those
assigned, numbered 0..n-1 each once, and each must be assigned to this
broker alone (another broker id, a repeat or an empty list is
INVALID_REPLICA_ASSIGNMENT with Kafka's message).

As Kafka's controller (ControllerApis, ReplicationControlManager): a name
given more than once answers INVALID_REQUEST "Duplicate topic name." and is
not created; if the other topics add up to more than 10,000 partitions, every
topic answers POLICY_VIOLATION and nothing is created (`topic_creation`).
The topics are created in the coordinator pool, one after another.

Authorization (Kafka's KafkaApis and ControllerApis): CREATE on the CLUSTER
allows every topic; without it, CREATE on each TOPIC, else that topic answers
TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from collections.abc import Mapping

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.create_partitions import assignment_error
from logstore.broker.api.kit import AclOperation, ResourceType, authorized, denied
from logstore.broker.api.topic_creation import (
    MAX_PARTITIONS_PER_REQUEST,
    TOO_MANY_PARTITIONS,
    NewTopic,
    create_topics,
    requested_partitions,
)
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.config import LogConfig
from logstore.errors import InvalidConfigError, InvalidTopicError
from logstore.topics import validate_topic_name

KEY = 19
DUPLICATE = "Duplicate topic name."


def _check(broker: BrokerContext, topic: KioMessage,
           existing: Mapping[str, int]) -> tuple[ErrorCode, str | None, int, dict[str, str | None]]:
    partitions = broker.config["num.partitions"] if topic.num_partitions == -1 else topic.num_partitions
    factor = topic.replication_factor
    configs = {c.name: c.value for c in topic.configs}
    try:
        validate_topic_name(topic.name)
        if topic.name in existing:
            return ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists", partitions, configs
        if topic.assignments:
            error, message = _assignments_error(broker, topic)
            if error != ErrorCode.none:
                return error, message, partitions, configs
            partitions, factor = len(topic.assignments), -1
        if partitions < 1:
            return ErrorCode.invalid_partitions, f"{partitions} partitions", partitions, configs
        if factor != -1 and not 1 <= factor <= broker.config["logstore.max.replication.factor"]:
            return (ErrorCode.invalid_replication_factor, f"replication factor {factor} on a single broker",
                    partitions, configs)
        LogConfig.from_properties(configs, base=broker.config.log_config)
    except InvalidTopicError as exc:
        return ErrorCode.invalid_topic_exception, str(exc), partitions, configs
    except InvalidConfigError as exc:
        return ErrorCode.invalid_config, str(exc), partitions, configs
    return ErrorCode.none, None, partitions, configs


def _assignments_error(broker: BrokerContext, topic: KioMessage) -> tuple[ErrorCode, str | None]:
    """Kafka's refusal of a topic's manual assignments (ReplicationControlManager.createTopic), or NONE: they
    must come with -1 for the count and the factor, name each partition 0..n-1 once, each on this broker."""
    if topic.replication_factor != -1:
        return (ErrorCode.invalid_request,
                "A manual partition assignment was specified, but replication factor was not set to -1.")
    if topic.num_partitions != -1:
        return (ErrorCode.invalid_request,
                "A manual partition assignment was specified, but numPartitions was not set to -1.")
    seen: set[int] = set()
    for assignment in topic.assignments:
        index = int(assignment.partition_index)
        if index in seen:
            return (ErrorCode.invalid_replica_assignment,
                    f"Found multiple manual partition assignments for partition {index}")
        seen.add(index)
        why = assignment_error(list(assignment.broker_ids), broker.node_id, index)
        if why is not None:
            return ErrorCode.invalid_replica_assignment, why
    if seen != set(range(len(seen))):
        return ErrorCode.invalid_replica_assignment, "partitions should be a consecutive 0-based integer sequence"
    return ErrorCode.none, None


def _by_name(topics: list[KioMessage]) -> tuple[dict[str, KioMessage], set[str]]:
    """Each name's entry, in the request's order, and the names given more than once."""
    first: dict[str, KioMessage] = {}
    duplicates: set[str] = set()
    for topic in topics:
        if topic.name in first:
            duplicates.add(topic.name)
        else:
            first[topic.name] = topic
    return first, duplicates


def _row(version: int, name: str, error: ErrorCode, message: str | None, partitions: int = -1) -> KioMessage:
    ok = error == ErrorCode.none
    return build(response_type(KEY, version, "CreatableTopicResult"), name=name, topic_id=None, error_code=error,
                 error_message=message, num_partitions=partitions if ok else -1,
                 replication_factor=1 if ok else -1, configs=())


@api(KEY, 2, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Create each topic unless it fails a check (or only check, with validate_only)."""
    broker = request.broker
    version = request.version
    topics, duplicates = _by_name(list(body.topics))
    allowed = set(topics) if not denied(request, AclOperation.CREATE, ResourceType.CLUSTER) else \
        authorized(request, AclOperation.CREATE, ResourceType.TOPIC, list(topics))
    default_partitions = broker.config["num.partitions"]
    asked = sum(requested_partitions(topic, default_partitions) for name, topic in topics.items()
                if name in allowed and name not in duplicates)
    if asked > MAX_PARTITIONS_PER_REQUEST:
        # The controller refuses the request whole, before creating anything.
        rows = [_row(version, name, ErrorCode.policy_violation, TOO_MANY_PARTITIONS) for name in topics]
        return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(rows))
    existing = broker.store.topics()
    answers: dict[str, tuple[ErrorCode, str | None, int]] = {}
    creating: list[NewTopic] = []
    for name, topic in topics.items():
        if name in duplicates:
            answers[name] = (ErrorCode.invalid_request, DUPLICATE, -1)
        elif name not in allowed:
            answers[name] = (ErrorCode.topic_authorization_failed, None, -1)
        else:
            error, message, partitions, configs = _check(broker, topic, existing)
            answers[name] = (error, message, partitions)
            if error == ErrorCode.none and not body.validate_only:
                creating.append(NewTopic(name, partitions, configs))
    for new, created in zip(creating, await create_topics(request, creating)):
        answers[new.name] = (created.error, created.message, new.partitions)
    rows = [_row(version, name, *answers[name]) for name in topics]
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(rows))
