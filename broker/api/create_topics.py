"""CreateTopics (19), v2-5: topics with a partition count (-1: num.partitions) and configs.

One node holds one replica: a replication factor above
`logstore.max.replication.factor` (3) is INVALID_REPLICATION_FACTOR, and one
up to it is accepted and stored as 1, as single-node brokers do (librdkafka's
tests ask for 3). `validate_only` checks without creating.

Authorization (Kafka's KafkaApis and ControllerApis): CREATE on the CLUSTER
allows every topic; without it, CREATE on each TOPIC, else that topic answers
TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, attempt, authorized, denied
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.config import LogConfig
from logstore.errors import InvalidConfigError, InvalidTopicError
from logstore.topics import validate_topic_name

KEY = 19


def _check(broker: BrokerContext, topic: KioMessage) -> tuple[ErrorCode, str | None, int, dict[str, str | None]]:
    partitions = broker.config["num.partitions"] if topic.num_partitions == -1 else topic.num_partitions
    factor = topic.replication_factor
    configs = {c.name: c.value for c in topic.configs}
    try:
        validate_topic_name(topic.name)
        if topic.name in broker.store.topics():
            return ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists", partitions, configs
        if partitions < 1:
            return ErrorCode.invalid_partitions, f"{partitions} partitions", partitions, configs
        if factor != -1 and not 1 <= factor <= broker.config["logstore.max.replication.factor"]:
            return (ErrorCode.invalid_replication_factor, f"replication factor {factor} on a single broker",
                    partitions, configs)
        if topic.assignments:
            return ErrorCode.invalid_request, "manual replica assignments are not supported", partitions, configs
        LogConfig.from_properties(configs, base=broker.config.log_config)
    except InvalidTopicError as exc:
        return ErrorCode.invalid_topic_exception, str(exc), partitions, configs
    except InvalidConfigError as exc:
        return ErrorCode.invalid_config, str(exc), partitions, configs
    return ErrorCode.none, None, partitions, configs


@api(KEY, 2, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Create each topic unless it fails a check (or only check, with validate_only)."""
    broker = request.broker
    version = request.version
    names = [topic.name for topic in body.topics]
    allowed = set(names) if not denied(request, AclOperation.CREATE, ResourceType.CLUSTER) else \
        authorized(request, AclOperation.CREATE, ResourceType.TOPIC, names)
    results = []
    for topic in body.topics:
        error, message, partitions, configs = _check(broker, topic)
        if topic.name not in allowed:
            error, message = ErrorCode.topic_authorization_failed, None
        if error == ErrorCode.none and not body.validate_only:
            created = attempt(request, broker.create_topic, topic.name, partitions, configs)
            error, message = created.error, created.message
        ok = error == ErrorCode.none
        results.append(build(response_type(KEY, version, "CreatableTopicResult"), name=topic.name, topic_id=None,
                             error_code=error, error_message=message, num_partitions=partitions if ok else -1,
                             replication_factor=1 if ok else -1, configs=()))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, topics=tuple(results))
