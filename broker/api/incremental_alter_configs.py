"""IncrementalAlterConfigs (44), v0-1: set, delete, append to or subtract from single configs of a topic.

Behavior, as Kafka's ConfigAdminManager and ConfigurationControlManager:
- One answer per resource, in the order asked; a resource named twice, a
  key named twice in one resource, a null value for an operation other than
  DELETE, and an operation other than SET (0), DELETE (1), APPEND (2) and
  SUBTRACT (3) are INVALID_REQUEST, with Kafka's messages (AlterConfigs'
  docstring lists them).
- TOPIC (2): the operations apply in the order given to the topic's current
  overrides. SET replaces a value, DELETE drops the override (the broker's
  default or Kafka's applies again). APPEND and SUBTRACT take a
  comma-separated list and only work on a LIST config (cleanup.policy); on
  another key they are INVALID_CONFIG "Can't APPEND to key x because its
  type is not LIST." before any other check, as in Kafka. They start from the
  topic's override or, without one, from the topic config's own default
  (`delete`), not the broker's `log.cleanup.policy`: Kafka does the same.
  APPEND adds the items not there yet, SUBTRACT removes them.
  The whole resulting config is then checked as AlterConfigs does
  (INVALID_CONFIG, then UNKNOWN_TOPIC_OR_PARTITION), and nothing changes on
  error. A SUBTRACT that leaves cleanup.policy empty is INVALID_CONFIG here:
  Kafka takes an empty list (a log neither deleted nor compacted).
- BROKER (4): as in AlterConfigs, after Kafka's replay of the operations:
  DELETE of a name leaves nothing to refuse (NONE), APPEND/SUBTRACT on a
  known broker config that is not a LIST is INVALID_CONFIG "Config value
  append is not allowed for config key: x" (an unknown name: "Unknown config
  name: x"; Kafka fails there with UNKNOWN_SERVER_ERROR), and any name left
  set is INVALID_REQUEST "Cannot update these configs dynamically: Set(...)".
- BROKER_LOGGER (8): INVALID_REQUEST: log levels are not exposed (Kafka
  changes log4j levels here). Every other type: INVALID_REQUEST "Unknown
  resource type <n>".
- `validate_only`: every check, and nothing changes.

Authorization as AlterConfigs: ALTER_CONFIGS on the TOPIC or the CLUSTER.

Version notes: v0 and v1 carry the same fields; v1 is flexible.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from logstore.broker.api import KioMessage, Request, ResponsePayload, api
from logstore.broker.api.alter_configs import (
    BROKER_CONFIG_NAMES,
    Answer,
    Resources,
    alter_topic,
    answer_each,
    check_broker_name,
    check_topic_name,
    common_checks,
    refuse_broker_configs,
)
from logstore.broker.api.describe_configs import BROKER, BROKER_LOGGER, TOPIC
from logstore.broker.protocol import ErrorCode
from logstore.config import LIST_CONFIGS, TOPIC_CONFIGS

KEY = 44

SET, DELETE, APPEND, SUBTRACT = range(4)
OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
# Kafka's LIST-typed broker configs among those this broker knows.
BROKER_LISTS = frozenset({"log.cleanup.policy", "group.consumer.assignors"})


def _items(value: Any) -> list[str]:
    return [item for item in str(value).split(",") if item] if value is not None else []


def _topic_changes(current: Mapping[str, Any],
                   configs: Iterable[KioMessage]) -> tuple[dict[str, Any | None], Answer | None]:
    """The new value (None: deleted) of every key the operations touch, or Kafka's refusal."""
    changes: dict[str, Any | None] = {}
    for config in configs:
        op, name = config.config_operation, config.name
        if op == SET:
            changes[name] = config.value
        elif op == DELETE:
            changes[name] = None
        else:
            if name not in LIST_CONFIGS:
                return changes, (ErrorCode.invalid_config,
                                 f"Can't {OP_NAMES[op]} to key {name} because its type is not LIST.")
            old = changes[name] if name in changes else current.get(name, TOPIC_CONFIGS[name][2])
            items = _items(old)
            for item in config.value.split(","):
                if op == APPEND and item not in items:
                    items.append(item)
                elif op == SUBTRACT and item in items:
                    items.remove(item)
            changes[name] = ",".join(items)
    return changes, None


def _broker_names(configs: Iterable[KioMessage]) -> tuple[set[str], Answer | None]:
    """The names left set after Kafka's prepareIncrementalConfigs, or its refusal of an APPEND/SUBTRACT."""
    names: set[str] = set()
    for config in configs:
        op, name = config.config_operation, config.name
        if op == DELETE:
            names.discard(name)
            continue
        if op in OP_NAMES and name not in BROKER_LISTS:
            if name not in BROKER_CONFIG_NAMES:
                return names, (ErrorCode.invalid_config, f"Unknown config name: {name}")
            return names, (ErrorCode.invalid_config,
                           f"Config value {OP_NAMES[op].lower()} is not allowed for config key: {name}")
        names.add(name)
    return names, None


async def _alter(request: Request, resource: KioMessage, repeated: Resources, validate_only: bool) -> Answer:
    nulls = [c.name for c in resource.configs if c.value is None and c.config_operation != DELETE]
    refused = common_checks(request, resource, repeated, nulls)
    if refused:
        return refused
    kind, name = resource.resource_type, resource.resource_name
    unknown_op = next((c.config_operation for c in resource.configs if c.config_operation not in range(4)), None)
    if kind in (TOPIC, BROKER) and unknown_op is not None:
        return ErrorCode.invalid_request, f"Unknown operations type {unknown_op}"
    if kind == BROKER:
        refused = check_broker_name(request.broker, name)
        if refused:
            return refused
        names, refused = _broker_names(resource.configs)
        return refused or refuse_broker_configs(names)
    if kind == TOPIC:
        changes, refused = _topic_changes(request.broker.store.topic_overrides(name), resource.configs)
        if refused:
            return refused
        return check_topic_name(name) or await alter_topic(request, name, changes, validate_only)
    if kind == BROKER_LOGGER:
        return ErrorCode.invalid_request, "broker loggers are not exposed by this broker"
    return ErrorCode.invalid_request, f"Unknown resource type {kind}"


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Apply each resource's operations, or say why not."""
    return await answer_each(KEY, request, body, _alter)
