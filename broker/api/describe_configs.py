"""DescribeConfigs (32), v1-4: the configs of topics and of this broker, each with where it came from.

Behavior (what each entry says, its sources and synonyms: `broker/config_entries.py`):
- TOPIC (2): every topic config of Kafka 4.2 the topic runs with, its value
  and its source: TOPIC_CONFIG (1) when the topic was created with it or it
  was set since (AlterConfigs, IncrementalAlterConfigs), else the broker
  level's: DYNAMIC_BROKER_CONFIG (2), DYNAMIC_DEFAULT_BROKER_CONFIG (3),
  STATIC_BROKER_CONFIG (4) (`log.retention.hours` for `retention.ms`),
  DEFAULT_CONFIG (5). Not read-only, not sensitive. An unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION.
- BROKER (4), named by this node's id: every broker setting, every
  broker-level topic default and Kafka's dynamic configs that have no use on
  one node, each read-only unless Kafka can change it at run time
  (`dynamic_config.py`), with its source. An empty name asks for the
  cluster-wide dynamic defaults: only those set, as Kafka answers. Another
  id, or a name that is not an integer, is INVALID_REQUEST.
- GROUP (32): every group config of Kafka 4.2 (`broker/group_configs.py`)
  with the value the group runs with: DYNAMIC_GROUP_CONFIG (8) for the
  group's own override, else the broker's `group.<name>` setting with its
  source (STATIC_BROKER_CONFIG, DEFAULT_CONFIG), or Kafka's default as
  DEFAULT_CONFIG for a name the broker has no setting of. The group need not
  exist (configs may come before it). An empty name is INVALID_REQUEST
  "Group name must not be empty".
- BROKER_LOGGER (8) and every other type: INVALID_REQUEST (log levels are
  not exposed).
- `configuration_keys` null or empty asks for all; an unknown key is left
  out, as Kafka does.
- `include_synonyms`: the chain that made the value, first wins.
  `include_documentation`: a line on each, saying for a config that does
  nothing on one node why.
- Passwords and key material are sensitive: `is_sensitive`, no value.

Authorization (Kafka's KafkaApis): DESCRIBE_CONFIGS on the TOPIC (else
TOPIC_AUTHORIZATION_FAILED), on the GROUP (else GROUP_AUTHORIZATION_FAILED)
or, for BROKER and BROKER_LOGGER, on the CLUSTER (else
CLUSTER_AUTHORIZATION_FAILED), per resource.

Version notes: kio has no v0 schema, so v0 is not served (every admin client
in use sends v1+). v1 brings synonyms and config_source, v3 config_type and
documentation (sent when `include_documentation`), v4 is flexible.
"""
from __future__ import annotations

import re
from typing import Protocol

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.config_entries import ConfigEntry, broker_entries, group_entries, topic_entries
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import InvalidTopicError
from logstore.topics import validate_topic_name

KEY = 32

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
BROKER_ID = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt takes


class Make(Protocol):
    """Builds one config's entry of the response at the request's version (synonyms and doc as asked)."""

    def __call__(self, entry: ConfigEntry) -> KioMessage: ...


def _entry(cls: type[KioMessage], synonym_cls: type[KioMessage], entry: ConfigEntry, *, with_synonyms: bool,
           with_doc: bool) -> KioMessage:
    return build(cls, name=entry.name, value=entry.value, read_only=entry.read_only, config_source=entry.source,
                 is_sensitive=entry.sensitive,
                 synonyms=tuple(build(synonym_cls, name=n, value=v, source=s) for n, v, s in entry.chain)
                 if with_synonyms else (),
                 config_type=entry.config_type, documentation=entry.doc if with_doc else None)


def config_denial(request: Request, resource: KioMessage, operation: AclOperation) -> ErrorCode:
    """Kafka's authorization of a config resource: a TOPIC or a GROUP on itself, BROKER and BROKER_LOGGER on the
    CLUSTER."""
    kind = resource.resource_type
    if kind == TOPIC:
        return denied(request, operation, ResourceType.TOPIC, resource.resource_name)
    if kind == GROUP:
        return denied(request, operation, ResourceType.GROUP, resource.resource_name)
    if kind in (BROKER, BROKER_LOGGER):
        return denied(request, operation, ResourceType.CLUSTER)
    return ErrorCode.none


def _describe(broker: BrokerContext, resource: KioMessage,
              make: Make) -> tuple[ErrorCode, str | None, list[KioMessage]]:
    kind, name = resource.resource_type, resource.resource_name
    if kind == TOPIC:
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            return ErrorCode.invalid_topic_exception, str(exc), []
        if name not in broker.store.topics():
            return ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist", []
        return ErrorCode.none, None, [make(entry) for entry in topic_entries(broker.config, broker.store, name)]
    if kind == BROKER:
        if name and not BROKER_ID.fullmatch(name):
            return ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}", []
        if name and int(name) != broker.node_id:
            return (ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}", [])
        return ErrorCode.none, None, [make(entry) for entry in broker_entries(broker.config, cluster_default=not name)]
    if kind == GROUP:
        if not name:
            return ErrorCode.invalid_request, "Group name must not be empty", []
        return ErrorCode.none, None, [make(entry) for entry in group_entries(broker.config, broker.group_configs, name)]
    if kind == BROKER_LOGGER:
        return ErrorCode.invalid_request, "broker loggers are not described by this broker", []
    return ErrorCode.invalid_request, f"Unsupported resource type: {kind}", []


@api(KEY, 1, 4)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe each resource's configs, or say why not."""
    version = request.version
    cls = response_type(KEY, version, "DescribeConfigsResourceResult")
    synonym_cls = response_type(KEY, version, "DescribeConfigsSynonym")
    with_doc = getattr(body, "include_documentation", False)

    def make(entry: ConfigEntry) -> KioMessage:
        return _entry(cls, synonym_cls, entry, with_synonyms=body.include_synonyms, with_doc=with_doc)

    results = []
    for resource in body.resources:
        error = config_denial(request, resource, AclOperation.DESCRIBE_CONFIGS)
        message: str | None = None
        entries: list[KioMessage] = []
        if not error:
            error, message, entries = _describe(request.broker, resource, make)
        if resource.configuration_keys:
            wanted = set(resource.configuration_keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(build(response_type(KEY, version, "DescribeConfigsResult"), error_code=error,
                             error_message=message, resource_type=resource.resource_type,
                             resource_name=resource.resource_name, configs=tuple(entries)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, results=tuple(results))
