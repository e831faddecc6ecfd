"""IncrementalAlterConfigs (44), v0-1: set, delete, append to or subtract from single configs of a topic.

Behavior, as Kafka's ConfigAdminManager and ConfigurationControlManager:
- One answer per resource, in the order asked; a resource named twice, a
  key named twice in one resource, a null value for an operation other than
  DELETE, and an operation other than SET (0), DELETE (1), APPEND (2) and
  SUBTRACT (3) are INVALID_REQUEST, with Kafka's messages (AlterConfigs'
  docstring lists them).
- TOPIC (2): an empty name, an illegal one and an unknown topic are refused
  first, as AlterConfigs does. Then the operations apply in the order given
  to the topic's current overrides. SET replaces a value, DELETE drops the
  override (the broker's default or Kafka's applies again). APPEND and
  SUBTRACT take a comma-separated list and only work on a LIST config
  (cleanup.policy, the throttled replica lists); on another key they are
  INVALID_CONFIG "Can't APPEND to key x because its type is not LIST."
  before any other check of the values, as in Kafka. They start from the
  topic's override or, without one, from the topic config's own default
  (`delete`), not the broker's `log.cleanup.policy`: Kafka does the same.
  APPEND adds the items not there yet, SUBTRACT removes them.
  The whole resulting config is then checked as AlterConfigs does
  (INVALID_CONFIG), and nothing changes on error. A SUBTRACT that leaves
  cleanup.policy empty is INVALID_CONFIG here: Kafka takes an empty list (a
  log neither deleted nor compacted).
- BROKER (4), this node's id or "" (the cluster-wide default): the
  operations apply to the resource's dynamic configs as Kafka's
  prepareIncrementalConfigs does: SET and DELETE, APPEND/SUBTRACT on a LIST
  config (from the dynamic value, else Kafka's default; APPEND keeps
  repeats, SUBTRACT removes one of each); on a known config that is not a
  LIST INVALID_CONFIG "Config value append is not allowed for config key:
  x" (an unknown name: "Unknown config name: x"; Kafka fails there with
  UNKNOWN_SERVER_ERROR). The result is checked, kept and applied as
  AlterConfigs' BROKER resource is (`broker/reconfigure.py`).
- GROUP (32): SET and DELETE change the group's overrides; APPEND and
  SUBTRACT are INVALID_CONFIG "Can't APPEND to key x because its type is not
  LIST." (no group config is a LIST), as Kafka's controller answers. The
  whole resulting config is then checked, kept and applied as AlterConfigs'
  GROUP resource is (an empty name: "Default group resources are not
  allowed."). The group need not exist.
- BROKER_LOGGER (8): INVALID_REQUEST: log levels are not exposed (Kafka
  changes log4j levels here). Every other type: INVALID_REQUEST "Unknown
  resource type <n>".
- `validate_only`: every check, and nothing changes.

Authorization as AlterConfigs: ALTER_CONFIGS on the TOPIC, the GROUP or the CLUSTER.

Version notes: v0 and v1 carry the same fields; v1 is flexible.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from logstore.broker.api import KioMessage, Request, ResponsePayload, api
from logstore.broker.api.alter_configs import (
    Answer,
    Resources,
    alter_broker,
    alter_group,
    alter_topic,
    answer_each,
    check_broker_name,
    check_topic,
    common_checks,
)
from logstore.broker.api.describe_configs import BROKER, BROKER_LOGGER, GROUP, TOPIC
from logstore.broker.config_entries import DEFAULTS, LIST_SETTINGS, text
from logstore.broker.protocol import ErrorCode
from logstore.broker.reconfigure import is_known
from logstore.config import LIST_CONFIGS, TOPIC_CONFIGS
from logstore.errors import InvalidConfigError

KEY = 44

SET, DELETE, APPEND, SUBTRACT = range(4)
OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
# Kafka's LIST-typed broker configs among those this broker knows.
BROKER_LISTS = LIST_SETTINGS | {"log.cleanup.policy"}


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


def _broker_configs(current: Mapping[str, str], configs: Iterable[KioMessage]) -> dict[str, str]:
    """The resource's dynamic configs after Kafka's prepareIncrementalConfigs (InvalidConfigError: its refusal
    of an APPEND/SUBTRACT)."""
    result = dict(current)
    for config in configs:
        op, name = config.config_operation, config.name
        if op == SET:
            result[name] = config.value
        elif op == DELETE:
            result.pop(name, None)
        elif name not in BROKER_LISTS:
            if not is_known(name):
                raise InvalidConfigError(f"Unknown config name: {name}")
            raise InvalidConfigError(f"Config value {OP_NAMES[op].lower()} is not allowed for config key: {name}")
        else:
            items = (result[name] if name in result else text(DEFAULTS.get(name)) or "").split(",")
            for item in config.value.split(","):
                if op == APPEND:
                    items.append(item)
                elif item in items:
                    items.remove(item)
            result[name] = ",".join(items)
    return result


def _group_configs(current: Mapping[str, str], configs: Iterable[KioMessage]) -> dict[str, str]:
    """A group's overrides after SET and DELETE operations."""
    result = dict(current)
    for config in configs:
        if config.config_operation == SET:
            result[config.name] = config.value
        else:
            result.pop(config.name, None)
    return result


async def _alter(request: Request, resource: KioMessage, repeated: Resources, validate_only: bool) -> Answer:
    nulls = [c.name for c in resource.configs if c.value is None and c.config_operation != DELETE]
    refused = common_checks(request, resource, repeated, nulls)
    if refused:
        return refused
    kind, name = resource.resource_type, resource.resource_name
    unknown_op = next((c.config_operation for c in resource.configs if c.config_operation not in range(4)), None)
    if kind in (TOPIC, BROKER, GROUP) and unknown_op is not None:
        return ErrorCode.invalid_request, f"Unknown operations type {unknown_op}"
    if kind == BROKER:
        refused = check_broker_name(request.broker, name)
        if refused:
            return refused
        configs = resource.configs
        return await alter_broker(request, name, lambda current: _broker_configs(current, configs), validate_only)
    if kind == TOPIC:
        refused = check_topic(request.broker, name)
        if refused:
            return refused
        changes, refused = _topic_changes(request.broker.store.topic_overrides(name), resource.configs)
        return refused or await alter_topic(request, name, changes, validate_only)
    if kind == GROUP:
        listed = next((c for c in resource.configs if c.config_operation in OP_NAMES), None)
        if listed is not None:
            return (ErrorCode.invalid_config,
                    f"Can't {OP_NAMES[listed.config_operation]} to key {listed.name} because its type is not LIST.")
        configs = resource.configs
        return await alter_group(request, name, lambda current: _group_configs(current, configs), validate_only)
    if kind == BROKER_LOGGER:
        return ErrorCode.invalid_request, "broker loggers are not exposed by this broker"
    return ErrorCode.invalid_request, f"Unknown resource type {kind}"


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Apply each resource's operations, or say why not."""
    return await answer_each(KEY, request, body, _alter)
