"""DescribeConfigs (32), v1-4: the configs of topics and of this broker, each with where it came from.

Behavior:
- TOPIC (2): every topic config logstore runs with (LogConfig's Kafka names),
  its value and its source: DYNAMIC_TOPIC_CONFIG (1) when the topic was created
  with it or it was set since (AlterConfigs, IncrementalAlterConfigs),
  STATIC_BROKER_CONFIG (4) when the broker's properties or an `--override` set
  the default (`log.retention.hours` for `retention.ms`), DEFAULT_CONFIG (5)
  otherwise. Not read-only, not sensitive. An unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION.
- BROKER (4), named by this node's id: every broker setting and every
  broker-level log default, read-only (static broker configs are, and this
  broker has no dynamic ones: AlterConfigs refuses to change them),
  STATIC_BROKER_CONFIG when set at start, else DEFAULT_CONFIG
  with Kafka's default (none for `log.retention.ms`, whose default is carried
  by `log.retention.hours=168`; it stays so when only the hours are set, as in
  Kafka, where each name speaks for itself). An empty name asks for the cluster-wide
  dynamic defaults, of which there are none: an empty list, as Kafka answers.
  Another id, or a name that is not an integer, is INVALID_REQUEST.
- BROKER_LOGGER (8) and every other type: INVALID_REQUEST (log levels are
  not exposed).
- `configuration_keys` null or empty asks for all; an unknown key is left
  out, as Kafka does.
- `include_synonyms`: the chain that made the value, first wins: the topic's
  own value, the broker names set at start (ms, then minutes, then hours), the
  default. Kafka cuts a topic's chain before its first broker synonym
  (`log.retention.ms`), so a static `log.retention.hours` shows there as
  DEFAULT_CONFIG with no synonyms; here it shows, and is the source.
- A broker setting's source is STATIC_BROKER_CONFIG when the properties or
  an override named it, DEFAULT_CONFIG otherwise.

Authorization (Kafka's KafkaApis): DESCRIBE_CONFIGS on the TOPIC (else
TOPIC_AUTHORIZATION_FAILED) or, for BROKER and BROKER_LOGGER, on the CLUSTER
(else CLUSTER_AUTHORIZATION_FAILED), per resource.

Version notes: kio has no v0 schema, so v0 is not served (every admin client
in use sends v1+). v1 brings synonyms and config_source, v3 config_type and
documentation (sent when `include_documentation`), v4 is flexible.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import dropwhile
from typing import Any, Protocol

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.config import BROKER_SETTINGS
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.config import TOPIC_CONFIGS
from logstore.errors import InvalidTopicError
from logstore.topics import validate_topic_name

KEY = 32

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
# Kafka's ConfigSource numbers.
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# Kafka's ConfigType numbers.
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)

# topic config → (Kafka's type, documentation)
TOPIC_DOCS: dict[str, tuple[int, str]] = {
    "segment.bytes": (INT, "Size (bytes) at which the log rolls to a new segment."),
    "segment.ms": (LONG, "Age (ms) at which the log rolls to a new segment even if it is not full."),
    "segment.jitter.ms": (LONG, "Largest random jitter (ms) taken off segment.ms, so partitions do not roll at once."),
    "segment.index.bytes": (INT, "Size (bytes) of each segment's offset and time indexes."),
    "index.interval.bytes": (INT, "Bytes appended between two offset index entries."),
    "retention.ms": (LONG, "Age (ms) after which a segment is deleted, with cleanup.policy delete; -1: no limit."),
    "retention.bytes": (LONG, "Size (bytes) a partition may reach before its oldest segments are deleted; "
                                "-1: no limit."),
    "flush.messages": (LONG, "Messages appended between two forced fsyncs of the log."),
    "flush.ms": (LONG, "Longest time (ms) a message waits in the log before a forced fsync."),
    "max.message.bytes": (INT, "Largest record batch (bytes) the log accepts."),
    "message.timestamp.type": (STRING, "CreateTime (the producer's timestamp) or LogAppendTime (the broker's clock)."),
    "message.timestamp.before.max.ms": (LONG, "Most ms a CreateTime timestamp may lie before the broker's clock."),
    "message.timestamp.after.max.ms": (LONG, "Most ms a CreateTime timestamp may lie after the broker's clock."),
    "file.delete.delay.ms": (LONG, "Time (ms) a deleted segment's files stay on disk."),
    "cleanup.policy": (LIST, "delete (retention removes old segments) and/or compact "
                              "(the latest value per key is kept)."),
    "min.cleanable.dirty.ratio": (DOUBLE, "Share of the log's bytes not yet compacted above which the cleaner "
                                          "compacts it."),
    "min.compaction.lag.ms": (LONG, "Least time (ms) a record stays uncompacted in the log."),
    "max.compaction.lag.ms": (LONG, "Longest time (ms) a record may stay uncompacted, whatever the dirty ratio."),
    "delete.retention.ms": (LONG, "Time (ms) a compacted log keeps tombstones and transaction markers once cleaned."),
}
assert TOPIC_DOCS.keys() == TOPIC_CONFIGS.keys(), "every topic config needs its type and doc"

# Broker names that set a topic config's default, in Kafka's order of precedence.
SYNONYMS: dict[str, tuple[str, ...]] = {topic: (broker,) for topic, (_, broker, _, _) in TOPIC_CONFIGS.items()}
SYNONYMS["retention.ms"] = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
SYNONYMS["segment.ms"] = ("log.roll.ms", "log.roll.hours")
# Kafka's defaults of those names; None where a coarser synonym carries the default.
BROKER_LOG_DEFAULTS: dict[str, Any] = {broker: default for _, broker, default, _ in TOPIC_CONFIGS.values()}
BROKER_LOG_DEFAULTS.update({"log.retention.ms": None, "log.retention.minutes": None, "log.retention.hours": 168,
                            "log.roll.ms": None, "log.roll.hours": 168})
# broker log name → the topic config it is a default of
TOPIC_OF = {broker: topic for topic, names in SYNONYMS.items() for broker in names}
# Kafka's ConfigDef types where a broker setting is not INT/BOOLEAN/STRING by its parser.
LONG_SETTINGS = {"log.retention.check.interval.ms", "log.flush.scheduler.interval.ms"}
BROKER_ID = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt takes

Chain = list[tuple[str, str | None, int]]  # (name, value, source) behind a value, first wins


class Make(Protocol):
    """Builds one config's entry of the response at the request's version (synonyms and doc as asked)."""

    def __call__(self, name: str, value: str | None, chain: Chain, *, read_only: bool, config_type: int,
                 doc: str | None) -> KioMessage: ...


def _text(value: Any) -> str | None:
    """A value as Kafka's ConfigDef.convertToString writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _chain(names: tuple[str, ...], static: Mapping[str, Any]) -> Chain:
    """(name, value, source) of the broker-level names behind a value, first wins: set at start, then defaults."""
    chain = [(n, _text(static[n]), STATIC_BROKER_CONFIG) for n in names if n in static]
    chain += [(n, _text(BROKER_LOG_DEFAULTS[n]), DEFAULT_CONFIG) for n in names
              if BROKER_LOG_DEFAULTS.get(n) is not None]
    return chain


def _entry(cls: type[KioMessage], synonym_cls: type[KioMessage], name: str, value: str | None, chain: Chain, *,
           read_only: bool, config_type: int, doc: str | None, with_synonyms: bool, with_doc: bool) -> KioMessage:
    return build(cls, name=name, value=value, read_only=read_only,
                 config_source=chain[0][2] if chain else DEFAULT_CONFIG, is_sensitive=False,
                 synonyms=tuple(build(synonym_cls, name=n, value=v, source=s) for n, v, s in chain)
                 if with_synonyms else (),
                 config_type=config_type, documentation=doc if with_doc else None)


def _topic_configs(broker: BrokerContext, topic: str, make: Make) -> list[KioMessage]:
    overrides = broker.store.topic_overrides(topic)
    values = broker.store.config_for(topic).to_properties()
    static = broker.config.log_properties
    entries = []
    for name, value in sorted(values.items()):
        # A topic-level name is also taken at broker level here, so it can be static too.
        chain = _chain((*SYNONYMS[name], name), static)
        if name in overrides:
            chain.insert(0, (name, _text(value), TOPIC_CONFIG))
        config_type, doc = TOPIC_DOCS[name]
        entries.append(make(name, _text(value), chain, read_only=False, config_type=config_type, doc=doc))
    return entries


def _broker_configs(broker: BrokerContext, make: Make) -> list[KioMessage]:
    config = broker.config
    entries = []
    for name, (default, kind) in BROKER_SETTINGS.items():
        value = config[name]
        chain = [(name, _text(default), DEFAULT_CONFIG)]
        if name in config.given:
            chain.insert(0, (name, _text(value), STATIC_BROKER_CONFIG))
        config_type = {bool: BOOLEAN, str: STRING}.get(kind, LONG if name in LONG_SETTINGS else INT)
        entries.append(make(name, _text(value), chain, read_only=True, config_type=config_type, doc=None))
    static = config.log_properties
    for name, default in BROKER_LOG_DEFAULTS.items():
        topic = TOPIC_OF[name]
        group = SYNONYMS[topic]
        chain = _chain(group, static)
        # As Kafka: a name's chain starts at the name itself, so an unset log.retention.ms is
        # DEFAULT_CONFIG with no value even when log.retention.hours is set.
        chain = list(dropwhile(lambda link: link[0] != name, chain))
        value = static.get(name, default)
        config_type, doc = TOPIC_DOCS[topic]
        if name.endswith((".hours", ".minutes")):
            config_type = INT
        unit = "" if name == group[0] else f" in {name.rpartition('.')[2]}"
        doc = f"Default of the topic config {topic}{unit}. {doc}"
        entries.append(make(name, _text(value), chain, read_only=True, config_type=config_type, doc=doc))
    return sorted(entries, key=lambda e: e.name)


def config_denial(request: Request, resource: KioMessage, operation: AclOperation) -> ErrorCode:
    """Kafka's authorization of a config resource: a TOPIC on itself, BROKER and BROKER_LOGGER on the CLUSTER."""
    kind = resource.resource_type
    if kind == TOPIC:
        return denied(request, operation, ResourceType.TOPIC, resource.resource_name)
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
        return ErrorCode.none, None, _topic_configs(broker, name, make)
    if kind == BROKER:
        if not name:
            return ErrorCode.none, None, []  # no dynamic cluster-wide defaults
        if not BROKER_ID.fullmatch(name):
            return ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}", []
        if int(name) != broker.node_id:
            return (ErrorCode.invalid_request,
                    f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}", [])
        return ErrorCode.none, None, _broker_configs(broker, make)
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

    def make(name: str, value: str | None, chain: Chain, *, read_only: bool, config_type: int,
             doc: str | None) -> KioMessage:
        return _entry(cls, synonym_cls, name, value, chain, read_only=read_only, config_type=config_type, doc=doc,
                      with_synonyms=body.include_synonyms, with_doc=with_doc)

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
