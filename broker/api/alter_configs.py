"""AlterConfigs (33), v0-2: replace a topic's config overrides; this broker has no dynamic broker configs.

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
  incremental one changes single keys). The whole resulting config is
  checked before anything changes: an unknown name ("Unknown topic config
  name: x"), a value of the wrong type or out of range ("Invalid value v for
  configuration x: ...") and min.compaction.lag.ms above max.compaction.lag.ms
  are INVALID_CONFIG. Then an unknown topic is UNKNOWN_TOPIC_OR_PARTITION
  (Kafka checks the values first). An empty name is INVALID_REQUEST
  ("Default topic resources are not allowed."), an illegal one
  INVALID_TOPIC_EXCEPTION. The change is written to `topic-configs` before
  the answer, applies to every partition at once, survives a restart, and
  DescribeConfigs shows it as DYNAMIC_TOPIC_CONFIG. The internal topics can
  be altered, as in Kafka.
- BROKER (4), named by this node's id or "" (the cluster-wide default): a
  name that is not an integer or another node's id is INVALID_REQUEST, with
  Kafka's messages. Kafka refuses a config that cannot be updated
  dynamically with INVALID_REQUEST "Cannot update these configs dynamically:
  Set(...)" (DynamicBrokerConfig.validateConfigs, turned into
  InvalidRequestException by ConfigAdminManager); every broker config here
  is static, so every one is refused so (Kafka would store an unknown custom
  name; it is refused here too, having nowhere to live). A resource with no
  config changes nothing and answers NONE.
- Every other type, BROKER_LOGGER included (the legacy API never took it):
  INVALID_REQUEST "Unknown resource type <n>".
- `validate_only`: every check, and nothing changes.

Authorization (Kafka's KafkaApis): ALTER_CONFIGS on the TOPIC (else
TOPIC_AUTHORIZATION_FAILED) or, for BROKER and BROKER_LOGGER, on the CLUSTER
(else CLUSTER_AUTHORIZATION_FAILED), after the request's own checks.

Version notes: v0-2 carry the same fields; v1 only means throttling after
the response, v2 is flexible. kio has every one of them.
"""
from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.describe_configs import BROKER, BROKER_ID, BROKER_LOG_DEFAULTS, TOPIC, config_denial
from logstore.broker.api.kit import AclOperation, coordinate
from logstore.broker.config import BROKER_SETTINGS
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 33

Answer = tuple[ErrorCode, str | None]
OK: Answer = (ErrorCode.none, None)
Resources = set[tuple[int, str]]      # (resource type, name)
# (request, resource, the resources named twice, validate_only) → the resource's answer
Alter = Callable[[Request, KioMessage, Resources, bool], Awaitable[Answer]]
# Every broker-level name DescribeConfigs shows: what Kafka's KafkaConfig.configKeys knows here.
BROKER_CONFIG_NAMES = frozenset(BROKER_SETTINGS) | frozenset(BROKER_LOG_DEFAULTS)


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


def refuse_broker_configs(names: Iterable[str]) -> Answer:
    """NONE for no config; otherwise Kafka's answer for configs that cannot be updated dynamically."""
    names = sorted(set(names))
    if not names:
        return OK
    return ErrorCode.invalid_request, f"Cannot update these configs dynamically: Set({', '.join(names)})"


def check_topic_name(name: str) -> Answer | None:
    """ControllerConfigurationValidator's refusal of the default topic resource (the rest is the store's)."""
    if not name:
        return ErrorCode.invalid_request, "Default topic resources are not allowed."
    return None


async def alter_topic(request: Request, topic: str, changes: Mapping[str, Any | None], validate_only: bool) -> Answer:
    """Apply (or only check) changes to a topic's overrides in the store; None values delete."""
    store = request.broker.store
    # Off the event loop: the overrides are fsynced, and a cleaning round may have to stop first.
    call = functools.partial(store.alter_topic_config, topic, dict(changes), validate_only=validate_only)
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
        return check_broker_name(request.broker, name) or refuse_broker_configs(c.name for c in resource.configs)
    if kind == TOPIC:
        refused = check_topic_name(name)
        if refused:
            return refused
        # Legacy semantics: what is not listed is deleted.
        changes: dict[str, Any | None] = dict.fromkeys(request.broker.store.topic_overrides(name))
        changes.update((config.name, config.value) for config in resource.configs)
        return await alter_topic(request, name, changes, validate_only)
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
