"""What DescribeConfigs tells of each config of a topic or of the broker, as Kafka's ConfigHelper does.

Each config is a `ConfigEntry`: its value as Kafka writes it, where the value
came from, the chain of synonyms behind it (first wins), whether it can be
changed at run time, Kafka's type and a line of documentation.

Where a value comes from, highest first (Kafka's ConfigSource): the topic's
own override (TOPIC_CONFIG), this node's dynamic config
(DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic default
(DYNAMIC_DEFAULT_BROKER_CONFIG), what the broker started with
(STATIC_BROKER_CONFIG) and Kafka's default (DEFAULT_CONFIG). Synonyms are
Kafka's (DynamicBrokerConfig.brokerConfigSynonyms): `log.retention.ms`,
`log.retention.minutes` and `log.retention.hours` speak for one value, as do
`log.roll.ms` and `log.roll.hours`; the chain lists every layer's value of
every synonym, layer by layer. A broker config's chain starts at the config
itself (so an unset `log.retention.ms` is DEFAULT_CONFIG without a value
even when `log.retention.hours` is set, as in Kafka); a topic config's keeps
the coarser names (Kafka cuts them, so a static `log.retention.hours` would
show as DEFAULT_CONFIG; here it shows, and is the source). A topic-level name
given at broker level (`retention.ms` in server.properties, which this broker
takes) is the last synonym. Passwords and key material are sensitive: no
value is told, as Kafka hides them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import dropwhile
from typing import Any

from logstore.broker.config import BROKER_SETTINGS, LONG_SETTINGS, BrokerConfig
from logstore.broker.dynamic_config import (
    CLEANER_CONFIGS,
    CLUSTER_DEFAULT,
    CONNECTION_CONFIGS,
    DYNAMIC_CONFIGS,
    NEXT_START,
    NO_EFFECT,
    is_dynamic,
    listener_tls_setting,
)
from logstore.broker.group_configs import GROUP_CONFIGS, GroupConfigStore, broker_name
from logstore.config import TOPIC_CONFIG_DOCS, TOPIC_CONFIGS
from logstore.manager import LogManager

__all__ = ["ConfigEntry", "broker_entries", "group_entries", "topic_entries"]

# Kafka's ConfigSource numbers.
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 4, 5
DYNAMIC_GROUP_CONFIG = 8
# Kafka's ConfigType numbers.
TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
         "PASSWORD": 9}
# Kafka's PASSWORD configs among the broker's: never told.
SENSITIVE = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
                       "ssl.keystore.certificate.chain", "ssl.truststore.password", "ssl.truststore.certificates",
                       "sasl.jaas.config"})
# Kafka's LIST broker configs among those this broker knows.
LIST_SETTINGS = frozenset({"listeners", "advertised.listeners", "log.dirs", "super.users", "sasl.enabled.mechanisms",
                           "ssl.enabled.protocols", "ssl.cipher.suites", "group.consumer.assignors"})

# topic config → the broker names whose values are its default, in Kafka's order of precedence.
SYNONYMS: dict[str, tuple[str, ...]] = {topic: (broker,) if broker else () for topic, (_, broker, _, _) in
                                        TOPIC_CONFIGS.items()}
SYNONYMS["retention.ms"] = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
SYNONYMS["segment.ms"] = ("log.roll.ms", "log.roll.hours")
# Kafka's defaults of those names; None where a coarser synonym carries the default.
BROKER_LOG_DEFAULTS: dict[str, Any] = {broker: default for _, broker, default, _ in TOPIC_CONFIGS.values() if broker}
BROKER_LOG_DEFAULTS.update({"log.retention.ms": None, "log.retention.minutes": None, "log.retention.hours": 168,
                            "log.roll.ms": None, "log.roll.hours": 168})
# broker log name → the topic config it is a default of
TOPIC_OF = {broker: topic for topic, names in SYNONYMS.items() for broker in names}
DEFAULTS: dict[str, Any] = {**{name: default for name, (default, _) in BROKER_SETTINGS.items()},
                            **BROKER_LOG_DEFAULTS, **{name: default for name, (default, _, _) in NO_EFFECT.items()}}

Link = tuple[str, str | None, int]  # (name, value, source)
Layers = list[tuple[Mapping[str, Any], int]]


@dataclass(frozen=True)
class ConfigEntry:
    """One config as DescribeConfigs tells it."""

    name: str
    value: str | None
    chain: tuple[Link, ...]
    """The synonyms behind the value, first wins; the first link's source is the config's."""
    read_only: bool
    config_type: int
    doc: str | None
    sensitive: bool = False

    @property
    def source(self) -> int:
        """Where the value came from (Kafka's ConfigSource)."""
        return self.chain[0][2] if self.chain else DEFAULT_CONFIG


def text(value: Any) -> str | None:
    """A value as Kafka's ConfigDef.convertToString writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def layers(config: BrokerConfig) -> Layers:
    """Where broker-level values come from, highest first, each with its source."""
    node = str(config.static_settings["node.id"])
    return [(config.dynamic.of(node), DYNAMIC_BROKER_CONFIG),
            (config.dynamic.of(CLUSTER_DEFAULT), DYNAMIC_DEFAULT_BROKER_CONFIG),
            (config.static_values(), STATIC_BROKER_CONFIG), (DEFAULTS, DEFAULT_CONFIG)]


def _chain(names: tuple[str, ...], held: Layers) -> list[Link]:
    """Every layer's value of every name, layer by layer (Kafka's configSynonyms)."""
    return [(name, text(layer[name]), source) for layer, source in held for name in names
            if layer.get(name) is not None]


def topic_entries(config: BrokerConfig, store: LogManager, topic: str) -> list[ConfigEntry]:
    """Every config the topic runs with, sorted by name (the caller checked that it exists)."""
    overrides = store.topic_overrides(topic)
    held = layers(config)
    entries = []
    for name, value in sorted(store.config_for(topic).to_properties().items()):
        # dict.fromkeys: a config whose broker synonym has its own name (compression.type) is listed once.
        chain = _chain(tuple(dict.fromkeys((*SYNONYMS[name], name))), held)
        if name in overrides:
            chain.insert(0, (name, text(value), TOPIC_CONFIG))
        described = TOPIC_CONFIG_DOCS[name]
        doc = described.doc + (f" No effect on this broker: {described.no_effect}." if described.no_effect else "")
        entries.append(ConfigEntry(name, text(value), tuple(chain), False, TYPES[described.config_type], doc))
    return entries


def group_entries(config: BrokerConfig, store: GroupConfigStore, group_id: str) -> list[ConfigEntry]:
    """Every group config of a group, sorted by name, as Kafka's createGroupConfigEntry tells it: the group's
    override (DYNAMIC_GROUP_CONFIG) over the broker's `group.<name>` setting with its own layers, or, for a
    name the broker has no setting of, Kafka's GroupConfig default under the group config's name."""
    stored = store.stored(group_id)
    held = layers(config)
    entries = []
    for name, spec in sorted(GROUP_CONFIGS.items()):
        synonym = broker_name(name)
        chain = (_chain((synonym,), held) if synonym in BROKER_SETTINGS
                 else [(name, text(spec.default), DEFAULT_CONFIG)])
        value = stored[name] if name in stored else chain[0][1]
        if name in stored:
            chain.insert(0, (name, value, DYNAMIC_GROUP_CONFIG))
        entries.append(ConfigEntry(name, value, tuple(chain), False, TYPES[spec.config_type], spec.doc))
    return entries


def _broker_synonyms(name: str) -> tuple[str, ...]:
    topic = TOPIC_OF.get(name)
    return SYNONYMS[topic] if topic is not None else (name,)


def _broker_type(name: str) -> int:
    prefixed = listener_tls_setting(name)
    if prefixed is not None:
        name = prefixed[1]
    if name in SENSITIVE:
        return TYPES["PASSWORD"]
    if name in TOPIC_OF:
        return TYPES["INT"] if name.endswith((".hours", ".minutes")) else TYPES[
            TOPIC_CONFIG_DOCS[TOPIC_OF[name]].config_type]
    if name in NO_EFFECT:
        return TYPES[NO_EFFECT[name][1]]
    if name in LIST_SETTINGS:
        return TYPES["LIST"]
    kind = BROKER_SETTINGS[name][1]
    if kind is bool:
        return TYPES["BOOLEAN"]
    if kind is float:
        return TYPES["DOUBLE"]
    if kind is int:
        return TYPES["LONG"] if name in LONG_SETTINGS else TYPES["INT"]
    return TYPES["STRING"]


def _broker_doc(name: str) -> str:
    if name in TOPIC_OF:
        topic = TOPIC_OF[name]
        group = SYNONYMS[topic]
        unit = "" if name == group[0] else f" in {name.rpartition('.')[2]}"
        described = TOPIC_CONFIG_DOCS[topic]
        doc = f"Default of the topic config {topic}{unit}. {described.doc}"
        return doc + (f" No effect on this broker: {described.no_effect}." if described.no_effect else "")
    if name in NO_EFFECT:
        return f"Kafka's {name}, kept and shown. No effect on this broker: {NO_EFFECT[name][2]}."
    if name == "log.cleaner.threads":
        return "Changed at run time within Kafka's bounds and kept; one cleaner thread runs whatever it says."
    if name in CLEANER_CONFIGS:
        return "Changed at run time: the log cleaner's next round takes it."
    if name in NEXT_START:
        return f"Changed at run time, {NEXT_START[name]}."
    if name in CONNECTION_CONFIGS:
        return "Kafka's connection limit; a change applies to the next connections accepted."
    if name in DYNAMIC_CONFIGS:
        return "Changed at run time, applied at once."
    if listener_tls_setting(name) is not None:
        return "A listener's TLS key material, set per broker: its next connections take it."
    return "Set when the broker starts (server.properties, KAFKA_ environment, --override)."


def _broker_entry(config: BrokerConfig, name: str, held: Layers, *, running: bool = True) -> ConfigEntry:
    """`running`: the value the broker runs with (else the chain's first, the cluster default's)."""
    chain = list(dropwhile(lambda link: link[0] != name, _chain(_broker_synonyms(name), held)))
    value = text(config[name]) if running and name in BROKER_SETTINGS else chain[0][1] if chain else None
    prefixed = listener_tls_setting(name)
    sensitive = (prefixed[1] if prefixed is not None else name) in SENSITIVE
    if sensitive:
        value, chain = None, [(n, None, source) for n, _, source in chain]
    return ConfigEntry(name, value, tuple(chain), not is_dynamic(name), _broker_type(name), _broker_doc(name),
                       sensitive)


def broker_entries(config: BrokerConfig, *, cluster_default: bool = False) -> list[ConfigEntry]:
    """The configs of this node's BROKER resource, sorted by name: every config it knows; or, for the
    cluster-wide default (the resource ""), the dynamic defaults set, each told by that layer alone (Kafka's)."""
    held = layers(config)
    if cluster_default:
        defaults = [(layer, source) for layer, source in held if source == DYNAMIC_DEFAULT_BROKER_CONFIG]
        return [_broker_entry(config, name, defaults, running=False)
                for name in sorted(config.dynamic.of(CLUSTER_DEFAULT))]
    names = {*BROKER_SETTINGS, *BROKER_LOG_DEFAULTS, *NO_EFFECT,
             *(n for n in config.dynamic.of(str(config.static_settings["node.id"])) if listener_tls_setting(n))}
    return [_broker_entry(config, name, held) for name in sorted(names)]
