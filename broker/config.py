"""Broker settings under Kafka's names, from a server.properties file and overrides.

Log settings (`log.segment.bytes`, `log.retention.ms`, `message.max.bytes`,
...) go to the store as Kafka's broker-level defaults of topic configs; the
rest configure the broker itself. An unknown name is refused, so a typo does
not pass for a setting.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from logstore.config import BROKER_NAMES, HOURS_ALIASES, TOPIC_CONFIGS, LogConfig
from logstore.errors import InvalidConfigError
from logstore.log_cleaner import CLEANER_DEFAULTS
from logstore.manager import SCHEDULE_DEFAULTS

# name → (default, parser)
BROKER_SETTINGS: dict[str, tuple[Any, type]] = {
    "node.id": (1, int),
    "listeners": ("PLAINTEXT://127.0.0.1:9092", str),
    "advertised.listeners": ("", str),
    "log.dirs": ("./data", str),
    "num.partitions": (1, int),
    "default.replication.factor": (1, int),
    "auto.create.topics.enable": (True, bool),
    "delete.topic.enable": (True, bool),
    "socket.request.max.bytes": (104_857_600, int),
    "connections.max.idle.ms": (600_000, int),
    "transaction.max.timeout.ms": (900_000, int),
    "transaction.state.log.num.partitions": (50, int),
    "transaction.state.log.segment.bytes": (104_857_600, int),
    "transactional.id.expiration.ms": (604_800_000, int),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (10_000, int),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (3_600_000, int),
    "offsets.topic.num.partitions": (50, int),
    "offsets.topic.segment.bytes": (104_857_600, int),
    "offsets.retention.minutes": (10_080, int),
    "offsets.retention.check.interval.ms": (600_000, int),
    "offset.metadata.max.bytes": (4_096, int),
    "group.min.session.timeout.ms": (6_000, int),
    "group.max.session.timeout.ms": (1_800_000, int),
    "group.initial.rebalance.delay.ms": (3_000, int),
    "group.max.size": (2_147_483_647, int),
    # KIP-848 consumer groups (group.protocol=consumer); checked together in ConsumerGroupConfig.
    "group.consumer.session.timeout.ms": (45_000, int),
    "group.consumer.min.session.timeout.ms": (45_000, int),
    "group.consumer.max.session.timeout.ms": (60_000, int),
    "group.consumer.heartbeat.interval.ms": (5_000, int),
    "group.consumer.min.heartbeat.interval.ms": (5_000, int),
    "group.consumer.max.heartbeat.interval.ms": (15_000, int),
    "group.consumer.max.size": (2_147_483_647, int),
    "group.consumer.assignors": ("org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
                                 "org.apache.kafka.coordinator.group.assignor.RangeAssignor", str),
    # Online migration of groups with members between the classic and consumer protocols (Kafka's
    # default): upgrade, downgrade, bidirectional or disabled (empty groups convert under any).
    "group.consumer.migration.policy": ("bidirectional", str),
    # Kafka acknowledges acks=all once replicated, never fsynced; one node has
    # no replicas, so by default acks=all waits for the group-commit fsync.
    # false gives Kafka's page-cache behaviour.
    "logstore.acks.all.fsync": (True, bool),
    # Single-node brokers accept a replication factor up to this and store 1
    # (librdkafka's test suite creates topics with 3).
    "logstore.max.replication.factor": (3, int),
    **{name: (default, int) for name, default in SCHEDULE_DEFAULTS.items()},
    **{name: (default, type(default)) for name, default in CLEANER_DEFAULTS.items()},
}
ALIASES = {"broker.id": "node.id", "log.dir": "log.dirs"}


def _parse(name: str, kind: type, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise InvalidConfigError(f"{name} must be true or false, got {value!r}")
        return text == "true"
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{name} must be {kind.__name__}, got {value!r}") from None


@dataclass
class Listener:
    """One `NAME://host:port` entry."""

    name: str
    host: str
    port: int


def parse_listeners(text: str) -> list[Listener]:
    """Kafka's `listeners` syntax: comma-separated `NAME://host:port`."""
    found = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = urlsplit(item)
        if not parts.scheme or parts.port is None:
            raise InvalidConfigError(f"listener {item!r} is not NAME://host:port")
        found.append(Listener(parts.scheme.upper(), parts.hostname or "", parts.port))
    if not found:
        raise InvalidConfigError("listeners is empty")
    return found


@dataclass
class BrokerConfig:
    """Every broker setting, Kafka-named, and the log settings for the store."""

    settings: dict[str, Any] = field(default_factory=dict)
    log_properties: dict[str, Any] = field(default_factory=dict)
    given: frozenset[str] = frozenset()
    """The broker settings named in the properties or overrides (DescribeConfigs calls them static)."""

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> "BrokerConfig":
        """Defaults overridden by `props` (Kafka names); unknown names are refused."""
        settings = {name: default for name, (default, _) in BROKER_SETTINGS.items()}
        log_properties: dict[str, Any] = {}
        given = set()
        for name, value in (props or {}).items():
            name = ALIASES.get(name, name)
            if name in BROKER_SETTINGS:
                settings[name] = _parse(name, BROKER_SETTINGS[name][1], value)
                given.add(name)
            elif name in BROKER_NAMES or name in HOURS_ALIASES or name in TOPIC_CONFIGS:
                log_properties[name] = value
            else:
                raise InvalidConfigError(f"unknown broker config {name!r}")
        config = cls(settings, log_properties, frozenset(given))
        config.log_config  # checked now, not at the first topic
        parse_listeners(settings["listeners"])
        return config

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = ()) -> "BrokerConfig":
        """A server.properties file (if any) then `key=value` overrides, as `kafka-server-start.sh` takes them."""
        props: dict[str, str] = {}
        if path is not None:
            with open(path, encoding="utf-8") as f:
                props.update(read_properties(f.read()))
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise InvalidConfigError(f"override {item!r} is not key=value")
            props[key.strip()] = value.strip()
        return cls.from_properties(props)

    def __getitem__(self, name: str) -> Any:
        return self.settings[name]

    @property
    def log_config(self) -> LogConfig:
        """The default LogConfig of new topics."""
        return LogConfig.from_properties(self.log_properties)

    @property
    def log_dirs(self) -> list[str]:
        """The store's directories."""
        return [os.path.abspath(d.strip()) for d in self.settings["log.dirs"].split(",") if d.strip()]

    @property
    def listener(self) -> Listener:
        """The listener the broker binds (the first of `listeners`)."""
        return parse_listeners(self.settings["listeners"])[0]

    @property
    def advertised(self) -> Listener:
        """What Metadata tells clients to connect to."""
        text = self.settings["advertised.listeners"] or self.settings["listeners"]
        listener = parse_listeners(text)[0]
        if listener.host in ("", "0.0.0.0", "::"):
            listener.host = "127.0.0.1"
        return listener


def read_properties(text: str) -> dict[str, str]:
    """Java .properties lines: `key=value` or `key: value`, `#`/`!` comments, no continuations needed here."""
    props = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                props[line[:i].strip()] = line[i + 1:].strip()
                break
        else:
            props[line] = ""
    return props
