"""AlterConfigs (33), v0-2: replace the configs of a topic or, for the dynamic ones, of this broker.

Behavior, as Kafka's ConfigAdminManager (checks on the broker) and
ConfigurationControlManager with ControllerConfigurationValidator (checks
and changes on the controller):
- One answer per resource, in the order asked. A resource (type and name)
  named twice is INVALID_REQUEST "Each resource must appear at most once."
  in both places; a key named twice in one resource INVALID_REQUEST "Error
  due to duplicate config keys"; a null value INVALID_REQUEST "Null value not
  supported for : <keys>".
- TOPIC (2): the configs listed become the topic's overrides and every
  override not listed is deleted (the legacy API's semantics; the
  incremental one changes single keys). An empty name is INVALID_REQUEST
  ("Default topic resources are not allowed."), an illegal one
  INVALID_TOPIC_EXCEPTION, and an unknown topic UNKNOWN_TOPIC_OR_PARTITION
  before any config is looked at (issue 27: Kafka's tools see the unknown
  topic first). Then the whole resulting config is checked before anything
  changes: an unknown name ("Unknown topic config name: x"), a value of the
  wrong type or out of range ("Invalid value v for configuration x: ...")
  and min.compaction.lag.ms above max.compaction.lag.ms are INVALID_CONFIG.
  A config Kafka 4 removed (`message.format.version`,
  `message.downconversion.enable`) is taken and dropped, as Kafka 4 does.
  The change is written to `topic-configs` before the answer, applies to
  every partition at once, survives a restart, and DescribeConfigs shows it
  as TOPIC_CONFIG. The internal topics can be altered, as in Kafka.
- BROKER (4), named by this node's id (this broker's dynamic configs) or ""
  (the cluster-wide default): a name that is not an integer or another
  node's id is INVALID_REQUEST, with Kafka's messages. The configs listed
  become the resource's dynamic configs (the others are deleted), checked
  and applied as `broker/reconfigure.py` says: a config Kafka cannot change
  at run time is INVALID_REQUEST "Cannot update these configs dynamically:
  Set(...)", a bad value INVALID_REQUEST with Kafka's ConfigException text.
  Kept in `broker-configs` before the answer; in effect at once.
- GROUP (32): the configs listed become the group's configs and every one
  not listed is deleted (as for a topic). An empty name is INVALID_REQUEST
  "Default group resources are not allowed."; the whole resulting config is
  checked as Kafka's GroupConfig.validate does (`broker/group_configs.py`:
  unknown names, bad values, the broker's min/max bounds, INVALID_CONFIG);
  kept in `group-configs` before the answer, and the group runs with it at
  once. The group need not exist.
- Every other type, BROKER_LOGGER included (the legacy API never took it):
  INVALID_REQUEST "Unknown resource type <n>".
- `validate_only`: every check, and nothing changes.

Authorization (Kafka's KafkaApis): ALTER_CONFIGS on the TOPIC (else
TOPIC_AUTHORIZATION_FAILED), on the GROUP (else GROUP_AUTHORIZATION_FAILED)
or, for BROKER and BROKER_LOGGER, on the CLUSTER
(else CLUSTER_AUTHORIZATION_FAILED), after the request's own checks.

Version notes: v0-2 carry the same fields; v1 only means throttling after
the response, v2 is flexible. kio has every one of them.
"""
from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.describe_configs import BROKER, BROKER_ID, GROUP, TOPIC, config_denial
from logstore.broker.api.kit import AclOperation, coordinate
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.reconfigure import Change, alter_broker_configs
from logstore.errors import InvalidTopicError
from logstore.topics import validate_topic_name

KEY = 33

Answer = tuple[ErrorCode, str | None]
OK: Answer = (ErrorCode.none, None)
Resources = set[tuple[int, str]]      # (resource type, name)
# (request, resource, the resources named twice, validate_only) → the resource's answer
Alter = Callable[[Request, KioMessage, Resources, bool], Awaitable[Answer]]


def repeated_resources(resources: Iterable[KioMessage]) -> Resources:
    """The (type, name) pairs named more than once."""
    seen: Resources = set()
    twice: Resources = set()
    for resource in resources:
        key = (resource.resource_type, resource.resource_name)
        (twice if key in seen else seen).add(key)
    return twice


def common_checks(request: Request, resource: KioMessage, repeated: Resources, null_keys: list[str]) -> Answer | None:
    """Kafka's first checks of a resource (ConfigAdminManager.preprocess) and its authorization, or None
    when it passes them."""
    if (resource.resource_type, resource.resource_name) in repeated:
        return ErrorCode.invalid_request, "Each resource must appear at most once."
    names = [config.name for config in resource.configs]
    if len(set(names)) != len(names):
        return ErrorCode.invalid_request, "Error due to duplicate config keys"
    if null_keys:
        return ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(null_keys)
    refused = config_denial(request, resource, AclOperation.ALTER_CONFIGS)
    return (refused, None) if refused else None


def check_broker_name(broker: BrokerContext, name: str) -> Answer | None:
    """Kafka's validateResourceNameIsCurrentNodeId for a non-empty name, or None when it is this node."""
    if not name:
        return None
    if not BROKER_ID.fullmatch(name):
        return ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}"
    if int(name) != broker.node_id:
        return ErrorCode.invalid_request, f"Unexpected broker id, expected {broker.node_id}, but received {name}"
    return None


def check_topic(broker: BrokerContext, name: str) -> Answer | None:
    """The topic's refusal before any config is looked at (default resource, illegal name, unknown topic),
    or None when it exists."""
    if not name:
        return ErrorCode.invalid_request, "Default topic resources are not allowed."
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        return ErrorCode.invalid_topic_exception, str(exc)
    if name not in broker.store.topics():
        return ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
    return None


async def alter_topic(request: Request, topic: str, changes: Mapping[str, Any | None], validate_only: bool) -> Answer:
    """Apply (or only check) changes to a topic's overrides in the store; None values delete."""
    store = request.broker.store
    # Off the event loop: the overrides are fsynced, and a cleaning round may have to stop first.
    call = functools.partial(store.alter_topic_config, topic, dict(changes), validate_only=validate_only)
    outcome = await coordinate(request, call)
    return OK if outcome.ok else (outcome.error, outcome.message)


async def alter_group(request: Request, group_id: str, change: Callable[[dict[str, str]], Mapping[str, str]],
                      validate_only: bool) -> Answer:
    """Replace (or only check) a group's configs with `change(current)` in the store, or say why not."""
    if not group_id:
        return ErrorCode.invalid_request, "Default group resources are not allowed."
    # Off the event loop: `group-configs` is fsynced in every log dir.
    call = functools.partial(request.broker.group_configs.alter, group_id, change, validate_only=validate_only)
    outcome = await coordinate(request, call)
    return OK if outcome.ok else (outcome.error, outcome.message)


def broker_resource(name: str) -> str:
    """The key of a BROKER resource in `broker-configs`: "" or the node id as a number writes it ("+1", "01"
    and "1" name one node, as Java's parseInt reads them)."""
    return str(int(name)) if name else ""


async def alter_broker(request: Request, name: str, change: Change, validate_only: bool) -> Answer:
    """Change the dynamic config of the BROKER resource `name` (checked) as `alter_broker_configs` does, or say
    why not."""
    broker = request.broker
    # Off the event loop: `broker-configs` is fsynced in every log dir, and the store's lock is taken.
    call = functools.partial(alter_broker_configs, broker.config, broker.store, broker_resource(name), change,
                             validate_only=validate_only)
    outcome = await coordinate(request, call)
    return OK if outcome.ok else (outcome.error, outcome.message)


def answer(key: int, version: int, resource: KioMessage, result: Answer) -> KioMessage:
    """One resource's row of an (Incremental)AlterConfigs response."""
    code, message = result
    return build(response_type(key, version, "AlterConfigsResourceResponse"), error_code=code,
                 error_message=message, resource_type=resource.resource_type,
                 resource_name=resource.resource_name)


async def _alter(request: Request, resource: KioMessage, repeated: Resources, validate_only: bool) -> Answer:
    nulls = [config.name for config in resource.configs if config.value is None]
    refused = common_checks(request, resource, repeated, nulls)
    if refused:
        return refused
    kind, name = resource.resource_type, resource.resource_name
    if kind == BROKER:
        return check_broker_name(request.broker, name) or await alter_broker(
            request, name, {config.name: config.value for config in resource.configs}, validate_only)
    if kind == TOPIC:
        refused = check_topic(request.broker, name)
        if refused:
            return refused
        # Legacy semantics: what is not listed is deleted.
        changes: dict[str, Any | None] = dict.fromkeys(request.broker.store.topic_overrides(name))
        changes.update((config.name, config.value) for config in resource.configs)
        return await alter_topic(request, name, changes, validate_only)
    if kind == GROUP:
        listed = {config.name: config.value for config in resource.configs}
        return await alter_group(request, name, lambda current: listed, validate_only)
    return ErrorCode.invalid_request, f"Unknown resource type {kind}"


async def answer_each(key: int, request: Request, body: KioMessage, alter: Alter) -> ResponsePayload:
    """The response of AlterConfigs or IncrementalAlterConfigs: `alter` answers each resource in turn."""
    repeated = repeated_resources(body.resources)
    results = [answer(key, request.version, resource, await alter(request, resource, repeated, body.validate_only))
               for resource in body.resources]
    return build(response_type(key, request.version), throttle_time=ZERO_MS, responses=tuple(results))


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Replace each resource's configs, or say why not."""
    return await answer_each(KEY, request, body, _alter)
