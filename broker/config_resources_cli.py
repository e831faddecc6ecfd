"""`logstore configs --entity-type topics|brokers|groups`: config resources, with DescribeConfigs and
IncrementalAlterConfigs, as kafka-configs.sh describes and alters them.

`configs_cli` parses the entities and calls `describe` or `alter` here with
the entity type ("topics", "brokers" or "groups") and its name (None: every
topic, this broker and the cluster default, or every group ListGroups
lists; "" is the cluster-wide broker default).
The text is Kafka's (see `configs_cli`); the JSON is documented there.
"""
from __future__ import annotations

import argparse
import json
import re
from typing import TYPE_CHECKING, TextIO

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i8

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.admin_queries import TopicInfo, describe_topics
from logstore.broker.transactions_cli import BrokerError, UsageError

if TYPE_CHECKING:
    from kio.schema.describe_configs.v4.response import DescribeConfigsResourceResult, DescribeConfigsResponse
    from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
    from kio.schema.list_groups.v5.response import ListGroupsResponse
    from kio.schema.metadata.v12.response import MetadataResponse

__all__ = ["BROKER", "GROUP", "TOPIC", "alter", "describe", "parse_configs", "validate_name"]

TOPIC, BROKER, GROUP = 2, 4, 32  # DescribeConfigs' resource types
# Kafka's ConfigEntry.ConfigSource, by the number DescribeConfigs answers.
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, DYNAMIC_GROUP = 1, 2, 3, 8
SET, DELETE = i8(0), i8(1)  # IncrementalAlterConfigs' operations
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# kafka-configs' --add-config: commas split entries except inside [...], which holds a list value.
_ENTRY = re.compile(r",(?![^\[]*\])")


def validate_name(kind: str, name: str | None) -> None:
    """Kafka's checks of an entity name before anything is sent."""
    if name is None:
        return
    if kind == "topics" and (not _TOPIC_NAME.fullmatch(name) or name in (".", "..")):
        raise UsageError(f"--entity-name {name!r}: not a legal topic name (1 to 249 of a-z A-Z 0-9 . _ -)")
    if kind == "brokers" and not re.fullmatch(r"[+-]?[0-9]+", name):
        raise UsageError(f"The entity name for brokers must be a valid integer broker id, found: {name}")
    if kind == "groups" and not name:
        raise UsageError("An empty group name is not allowed")


def parse_configs(text: str | None) -> dict[str, str]:
    """Kafka's `k1=v1,k2=[v1,v2],k3=v3` (a bracketed value is a list, written without the brackets)."""
    configs: dict[str, str] = {}
    for item in _ENTRY.split(text or ""):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--add-config: {item!r} is not key=value")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def _resource_type(kind: str) -> int:
    return {"topics": TOPIC, "groups": GROUP}.get(kind, BROKER)


def _own_source(kind: str, name: str) -> int:
    """The source of the entity's own (dynamic) configs, which describe shows without --all."""
    if kind == "topics":
        return DYNAMIC_TOPIC
    if kind == "groups":
        return DYNAMIC_GROUP
    return DYNAMIC_DEFAULT_BROKER if name == "" else DYNAMIC_BROKER


def _names(client: AdminClient, kind: str, name: str | None) -> list[str]:
    if name is not None:
        return [name]
    if kind == "topics":
        return sorted(n for n, info in describe_topics(client).items() if isinstance(info, TopicInfo))
    if kind == "groups":
        listed: ListGroupsResponse = client.request(ListGroupsRequest(states_filter=(), types_filter=()))
        if listed.error_code != ErrorCode.none:
            raise BrokerError(f"Failed to list the groups: {error_name(listed.error_code)}")
        return sorted(g.group_id for g in listed.groups)
    metadata: MetadataResponse = client.request(MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return [str(b.node_id) for b in sorted(metadata.brokers, key=lambda b: b.node_id)] + [""]


def _configs(client: AdminClient, kind: str, names: list[str], *,
             synonyms: bool) -> list[tuple[str, tuple[DescribeConfigsResourceResult, ...]]]:
    """Each entity's configs as DescribeConfigs gives them, in the order asked."""
    if not names:
        return []
    response: DescribeConfigsResponse = client.request(DescribeConfigsRequest(
        resources=tuple(DescribeConfigsResource(resource_type=i8(_resource_type(kind)), resource_name=n,
                                                configuration_keys=None) for n in names),
        include_synonyms=synonyms, include_documentation=False))
    found = []
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise BrokerError(f"Failed to describe the configs of {_entity_text(kind, result.resource_name)}: "
                              f"{error_name(result.error_code)}: {result.error_message}")
        found.append((result.resource_name, result.configs))
    return found


def _entity_text(kind: str, name: str) -> str:
    return "the default broker" if kind == "brokers" and name == "" else f"{kind[:-1]} {name}"


def _shown(value: str | None) -> str:
    return "null" if value is None else value


def describe(client: AdminClient, kind: str, name: str | None, args: argparse.Namespace, out: TextIO) -> int:
    """Print the configs of one entity, or of every entity of `kind`; Kafka's lines or the JSON."""
    documents: list[dict[str, object]] = []
    for entity, configs in _configs(client, kind, _names(client, kind, name), synonyms=True):
        own = _own_source(kind, entity)
        chosen = sorted((c for c in configs if args.all or c.config_source == own), key=lambda c: c.name)
        if args.as_json:
            documents.append({"entityType": kind, "entityName": None if kind == "brokers" and entity == "" else entity,
                              "configs": [{"name": c.name, "value": c.value, "source": SOURCES.get(c.config_source,
                                                                                                 "UNKNOWN"),
                                           "sensitive": c.is_sensitive, "readOnly": c.read_only,
                                           "synonyms": [{"name": s.name, "value": s.value,
                                                         "source": SOURCES.get(s.source, "UNKNOWN")}
                                                        for s in c.synonyms]} for c in chosen]})
            continue
        if kind == "brokers" and entity == "":
            print("Default configs for brokers in the cluster are:", file=out)
        else:
            print(f"{'All' if args.all else 'Dynamic'} configs for {kind[:-1]} {entity} are:", file=out)
        for c in chosen:
            synonyms = ", ".join(f"{SOURCES.get(s.source, 'UNKNOWN')}:{s.name}={_shown(s.value)}" for s in c.synonyms)
            print(f"  {c.name}={_shown(c.value)} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}",
                  file=out)
    if args.as_json:
        json.dump({"entities": documents}, out)
        print(file=out)
    return 0


def alter(client: AdminClient, kind: str, name: str, args: argparse.Namespace, out: TextIO) -> int:
    """Set and delete one entity's configs with IncrementalAlterConfigs; Kafka's confirmation line."""
    added = parse_configs(args.add_config)
    deleted = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if deleted:
        ((_, configs),) = _configs(client, kind, [name], synonyms=False)
        own = {c.name for c in configs if c.config_source == _own_source(kind, name)}
        missing = [k for k in deleted if k not in own]
        if missing:
            raise BrokerError(f"Invalid config(s): {','.join(missing)}")
    ops = [AlterableConfig(name=k, config_operation=SET, value=v) for k, v in added.items()]
    ops += [AlterableConfig(name=k, config_operation=DELETE, value=None) for k in deleted]
    response: IncrementalAlterConfigsResponse = client.request(IncrementalAlterConfigsRequest(
        resources=(AlterConfigsResource(resource_type=i8(_resource_type(kind)), resource_name=name,
                                        configs=tuple(ops)),), validate_only=False))
    for result in response.responses:
        if result.error_code != ErrorCode.none:
            raise BrokerError(f"{error_name(result.error_code)}: {result.error_message}")
    if args.as_json:
        json.dump({"altered": True}, out)
        print(file=out)
    elif kind == "brokers" and name == "":
        print("Completed updating default config for brokers in the cluster.", file=out)
    else:
        print(f"Completed updating config for {kind[:-1]} {name}.", file=out)
    return 0
