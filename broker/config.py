"""Broker settings under Kafka's names: defaults, then a server.properties file, the environment, overrides.

Log settings (`log.segment.bytes`, `log.retention.ms`, `message.max.bytes`,
...) go to the store as Kafka's broker-level defaults of topic configs; the
rest configure the broker itself. Kafka settings that mean nothing on one
node (replication, the controller quorum, ZooKeeper, thread counts, socket
buffers: `config_sources.means_nothing_here`) are accepted and named in one
warning, so Kafka's stock files start a broker; any other unknown name is
refused with the closest known one, so a typo does not pass for a setting.
Every refusal names the setting, the value, what is allowed and where the
value came from (a file line, a variable, `--override`).

Which entry of `listeners` is served, and what is advertised, is
`listeners.py`.

The configs Kafka lets an admin change at run time are kept in the log dirs'
`broker-configs` (`dynamic_config.py`) and read here too: the settings and
log defaults a `BrokerConfig` gives are the static ones overridden by the
cluster-wide dynamic default, then by this node's dynamic configs; a change
(`reconfigure.py`) swaps them whole and tells the `reconfigurables`.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from logstore.broker.acceptor import ConnectionSettingError, check_connection_settings
from logstore.broker.config_sources import (
    SINGLE_NODE_NAMES,
    ConfigEntry,
    closest_name,
    means_nothing_here,
    read_environment,
    read_overrides,
    read_properties_file,
)
from logstore.broker.dynamic_config import (
    CLUSTER_DEFAULT,
    LOG_CONFIGS,
    NO_EFFECT,
    DynamicConfigs,
    is_dynamic,
    listener_tls_setting,
    parse_no_effect,
    read_dynamic_configs,
)
from logstore.broker.listeners import (
    DEFAULT_PROTOCOL_MAP,
    Listener,
    ListenerConfigError,
    advertised_listener,
    served_listeners,
)
from logstore.broker.security_config import SECURITY_SETTINGS, for_listener, parse_listener_setting
from logstore.config import (
    BROKER_NAMES,
    HOURS_ALIASES,
    INT_MAX,
    LONG_MAX,
    TOPIC_CONFIGS,
    LogConfig,
    _as_float,
    _as_int,
    _refused,
)
from logstore.errors import InvalidConfigError, StorageError
from logstore.log_cleaner import CLEANER_DEFAULTS
from logstore.manager import SCHEDULE_DEFAULTS

__all__ = ["ALIASES", "BROKER_SETTINGS", "BrokerConfig", "Listener"]

log = logging.getLogger(__name__)

# name → (default, parser)
BROKER_SETTINGS: dict[str, tuple[Any, type]] = {
    "node.id": (1, int),
    "listeners": ("PLAINTEXT://127.0.0.1:9092", str),
    "advertised.listeners": ("", str),
    # Empty allows every request (Kafka's default without an authorizer); else `module.Class`.
    "authorizer.class.name": ("", str),
    "controller.listener.names": ("", str),
    "listener.security.protocol.map": (DEFAULT_PROTOCOL_MAP, str),
    "log.dirs": ("./data", str),
    "num.partitions": (1, int),
    "default.replication.factor": (1, int),
    "auto.create.topics.enable": (True, bool),
    "delete.topic.enable": (True, bool),
    "socket.request.max.bytes": (104_857_600, int),
    "connections.max.idle.ms": (600_000, int),
    # Requests read whose handlers still work, broker-wide (Kafka's request queue); reading stops at it.
    "queued.max.requests": (500, int),
    "max.connections": (2_147_483_647, int),
    "max.connections.per.ip": (2_147_483_647, int),
    "max.connections.per.ip.overrides": ("", str),
    "transaction.max.timeout.ms": (900_000, int),
    # KIP-939: whether InitProducerId may enable two-phase commit (transactions no timeout aborts).
    "transaction.two.phase.commit.enable": (False, bool),
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
    # Share groups (KIP-932): Kafka's GroupCoordinatorConfig and ShareGroupConfig names and defaults; a
    # group's own share.* configs (group configs) override the first four within the min/max bounds.
    "group.share.session.timeout.ms": (45_000, int),
    "group.share.min.session.timeout.ms": (45_000, int),
    "group.share.max.session.timeout.ms": (60_000, int),
    "group.share.heartbeat.interval.ms": (5_000, int),
    "group.share.min.heartbeat.interval.ms": (5_000, int),
    "group.share.max.heartbeat.interval.ms": (15_000, int),
    "group.share.max.size": (200, int),
    "group.share.assignors": ("simple", str),
    "group.share.record.lock.duration.ms": (30_000, int),
    "group.share.min.record.lock.duration.ms": (15_000, int),
    "group.share.max.record.lock.duration.ms": (60_000, int),
    "group.share.delivery.count.limit": (5, int),
    "group.share.min.delivery.count.limit": (2, int),
    "group.share.max.delivery.count.limit": (10, int),
    "group.share.partition.max.record.locks": (2_000, int),
    "group.share.max.share.sessions": (2_000, int),
    "share.coordinator.state.topic.num.partitions": (50, int),
    "share.coordinator.state.topic.segment.bytes": (104_857_600, int),
    "share.coordinator.snapshot.update.records.per.snapshot": (500, int),
    # Kafka acknowledges acks=all once replicated, never fsynced; one node has
    # no replicas, so by default acks=all waits for the group-commit fsync.
    # false gives Kafka's page-cache behaviour.
    "logstore.acks.all.fsync": (True, bool),
    # Single-node brokers accept a replication factor up to this and store 1
    # (librdkafka's test suite creates topics with 3).
    "logstore.max.replication.factor": (3, int),
    # The most partitions one DescribeTopicPartitions answer holds.
    "max.request.partition.size.limit": (2_000, int),
    # The Prometheus endpoint (/metrics, /health, /ready, broker/metrics.py): off while the port is 0.
    "metrics.port": (0, int),
    "metrics.host": ("127.0.0.1", str),
    **{name: (default, int) for name, default in SCHEDULE_DEFAULTS.items()},
    **{name: (default, type(default)) for name, default in CLEANER_DEFAULTS.items()},
    **SECURITY_SETTINGS,
}
# The lock limit's name in Kafka's share-consumer docs (the broker config is the other).
ALIASES = {"broker.id": "node.id", "log.dir": "log.dirs",
           "group.share.record.lock.partition.limit": "group.share.partition.max.record.locks"}
# Kafka's LONG settings among the whole numbers above; the others are INT (32-bit).
LONG_SETTINGS = frozenset({"connections.max.idle.ms", "connections.max.reauth.ms",
                           "offsets.retention.check.interval.ms",
                           "log.retention.check.interval.ms", "log.flush.scheduler.interval.ms",
                           "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms"})
# Kafka's ConfigDef lower bounds (atLeast) of the whole numbers above that have one.
AT_LEAST = {
    "node.id": 0, "num.partitions": 1, "socket.request.max.bytes": 1, "transaction.max.timeout.ms": 1,
    "transaction.state.log.num.partitions": 1, "transaction.state.log.segment.bytes": 1,
    "transactional.id.expiration.ms": 1, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 1, "offsets.topic.num.partitions": 1,
    "offsets.topic.segment.bytes": 1, "offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 1,
    "group.max.size": 1, "group.consumer.max.size": 1, "log.retention.check.interval.ms": 1,
    "num.recovery.threads.per.data.dir": 1, "log.cleaner.threads": 0, "logstore.max.replication.factor": 1,
    "queued.max.requests": 1, "max.request.partition.size.limit": 1, "max.connections": 0, "max.connections.per.ip": 0,
    "connections.max.reauth.ms": 0, "connection.failed.authentication.delay.ms": 0,
    "sasl.server.max.receive.size": 1, "quota.window.num": 1, "quota.window.size.seconds": 1,
    "group.share.max.size": 1, "group.share.max.share.sessions": 1,
    "share.coordinator.state.topic.num.partitions": 1, "share.coordinator.state.topic.segment.bytes": 1,
    "share.coordinator.snapshot.update.records.per.snapshot": 0,
}


def _parse(name: str, kind: type, value: Any) -> Any:
    """A value of `kind`, refused in Kafka's words (ConfigException) if it is not one."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise _refused(name, value, "Expected value to be either true or false")
        return text == "true"
    if kind is int:
        number = _as_int(name, value, LONG_MAX if name in LONG_SETTINGS else INT_MAX)
        if name in AT_LEAST and number < AT_LEAST[name]:
            raise _refused(name, value, f"Value must be at least {AT_LEAST[name]}")
        return number
    if kind is float:
        return _as_float(name, value)
    return str(value).strip()


@dataclass
class BrokerConfig:
    """Every broker setting, Kafka-named, the log settings for the store, and where each came from.

    Built once, checked whole (`from_entries`), then read by the broker, the node and the handlers
    without locks: a dynamic change (`reconfigure.py`, under `alter_lock`) swaps `settings`,
    `log_properties` and `dynamic` whole, so a reader sees the old dict or the new one. Durations
    are in the unit their name says (ms, minutes).
    """

    settings: dict[str, Any] = field(default_factory=dict)
    log_properties: dict[str, Any] = field(default_factory=dict)
    given: frozenset[str] = frozenset()
    """The broker settings given by a file, the environment, overrides or code (DescribeConfigs: static)."""
    origins: dict[str, str] = field(default_factory=dict)
    """Where each given setting came from ("server.properties line 12", "environment KAFKA_LOG_DIRS", ...)."""
    ignored: tuple[ConfigEntry, ...] = ()
    """Kafka settings accepted but meaningless on one node (replication, quorum, threads...)."""
    unknown_environment: tuple[ConfigEntry, ...] = ()
    """KAFKA_/LOGSTORE_ variables that name no setting (the environment is shared: not refused)."""
    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    """The listeners the broker binds, each with its security protocol."""
    unopened: tuple[Listener, ...] = ()
    """Entries of `listeners` not opened: the controller listeners."""
    static_settings: dict[str, Any] = field(default_factory=dict)
    """`settings` as the broker started, before the dynamic configs."""
    static_log_properties: dict[str, Any] = field(default_factory=dict)
    """`log_properties` as the broker started, before the dynamic configs."""
    dynamic: DynamicConfigs = field(default_factory=DynamicConfigs)
    """The dynamic configs in effect (`broker-configs`)."""
    reconfigurables: list[Callable[[BrokerConfig], None]] = field(default_factory=list, repr=False, compare=False)
    """Called with this config after each dynamic change (the acceptor's connection limits register here)."""
    alter_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Held by a dynamic change from its checks to its last reconfigurable (changes run one at a time)."""
    validators: list[Callable[[BrokerConfig], None]] = field(default_factory=list, repr=False, compare=False)
    """Called with the config a dynamic change would make, before it is saved; each may refuse it by raising
    InvalidRequestError with Kafka's message (the listeners' TLS register here)."""

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None) -> BrokerConfig:
        """Defaults overridden by `props` (Kafka names, as code gives them); unknown names are refused."""
        return cls.from_entries(ConfigEntry(name, value, "") for name, value in (props or {}).items())

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = (),
             environ: Mapping[str, str] | None = None) -> BrokerConfig:
        """A server.properties file (if any), then the environment (if given), then `key=value` overrides."""
        entries = read_properties_file(path) if path is not None else []
        entries += read_environment(environ) if environ is not None else []
        entries += read_overrides(overrides)
        return cls.from_entries(entries)

    @classmethod
    def from_entries(cls, entries: Iterable[ConfigEntry]) -> BrokerConfig:
        """Defaults overridden by `entries` in order (a later one for the same setting wins)."""
        merged: dict[str, ConfigEntry] = {}
        for entry in entries:
            merged[ALIASES.get(entry.name, entry.name)] = entry
        settings = {name: default for name, (default, _) in BROKER_SETTINGS.items()}
        log_properties: dict[str, Any] = {}
        ignored, unknown_environment = [], []
        for name, entry in merged.items():
            if name in BROKER_SETTINGS:
                settings[name] = _located(entry, _parse, name, BROKER_SETTINGS[name][1], entry.value)
            elif (prefixed := parse_listener_setting(name)) is not None:
                # `listener.name.<l>.<setting>`: kept under its full name, read with `for_listener`.
                kind = BROKER_SETTINGS[prefixed[2]][1] if prefixed[2] in BROKER_SETTINGS else str
                settings[name] = _located(entry, _parse, prefixed[2], kind, entry.value)
            elif name in BROKER_NAMES or name in HOURS_ALIASES or name in TOPIC_CONFIGS:
                _located(entry, LogConfig.from_properties, {name: entry.value})
                log_properties[name] = entry.value
            elif means_nothing_here(name):
                ignored.append(entry)
            elif entry.from_environment:
                unknown_environment.append(entry)
            else:
                raise InvalidConfigError(_unknown(entry))
        given = frozenset(name for name in merged if name in settings)
        config = cls(settings, log_properties, given, {name: merged[name].origin for name in merged},
                     tuple(ignored), tuple(unknown_environment))
        config.static_settings, config.static_log_properties = dict(settings), dict(log_properties)
        config.log_config  # noqa: B018 (the property checks the values now, not at the first topic) (across values too), not at the first topic
        if not config.log_dirs:
            raise InvalidConfigError(config._where("log.dirs", f"Invalid value '{config['log.dirs']}' for "
                                                   "configuration log.dirs: at least one directory is needed"))
        try:
            check_connection_settings(settings)
        except ConnectionSettingError as exc:
            raise InvalidConfigError(config._where(exc.setting, str(exc))) from None
        try:
            config.listeners, config.unopened = served_listeners(
                settings["listeners"], settings["controller.listener.names"],
                settings["listener.security.protocol.map"])
            for listener in config.listeners:
                config.advertised_for(listener.name)  # checks the advertised entry now
        except ListenerConfigError as exc:
            raise InvalidConfigError(config._where(exc.setting, str(exc))) from None
        try:
            dynamic = read_dynamic_configs(config.log_dirs)
        except (StorageError, OSError) as exc:
            # Read before anything else of the log dirs: the store must open with the defaults in effect.
            raise InvalidConfigError(f"the dynamic broker configs cannot be read: {exc}") from None
        config.apply_dynamic(dynamic)
        return config

    def __getitem__(self, name: str) -> Any:
        return self.settings[name]

    # -- dynamic configs -----------------------------------------------------------------------------

    def overlaid(self, dynamic: DynamicConfigs, *, strict: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
        """(settings, log properties) of the static ones overridden by `dynamic`'s cluster default, then by
        this node's configs. A config this broker cannot take raises InvalidConfigError when `strict`, else
        is left out with a warning (Kafka ignores an invalid stored dynamic config)."""
        settings, log_properties = dict(self.static_settings), dict(self.static_log_properties)
        for resource in (CLUSTER_DEFAULT, str(self.static_settings["node.id"])):
            for name, value in dynamic.of(resource).items():
                try:
                    _take_dynamic(name, value, settings, log_properties)
                except InvalidConfigError as exc:
                    if strict:
                        raise
                    log.warning("ignoring the dynamic config %s=%s of %s: %s", name, value,
                                f"broker {resource}" if resource else "the cluster default", exc)
        return settings, log_properties

    def apply_dynamic(self, dynamic: DynamicConfigs) -> None:
        """Run with `dynamic` as the dynamic configs: `settings` and `log_properties` are swapped for
        `overlaid(dynamic)` (the reconfigurables are the caller's to tell). A stored config this broker
        cannot take is forgotten, as Kafka's fromPersistentProps drops it: the next change of its resource
        neither keeps it nor is refused for it."""
        self.settings, self.log_properties = self.overlaid(dynamic)
        kept = {resource: {name: value for name, value in configs.items() if _takes_dynamic(name, value)}
                for resource, configs in dynamic.resources.items()}
        self.dynamic = DynamicConfigs(dynamic.generation, {resource: held for resource, held in kept.items() if held})

    def static_values(self) -> dict[str, Any]:
        """What the broker was started with, by Kafka name (DescribeConfigs' STATIC_BROKER_CONFIG): the settings
        given, the log settings, and Kafka's settings taken with no use here."""
        values = {name: self.static_settings[name] for name in self.given}
        values.update(self.static_log_properties)
        values.update((entry.name, entry.value) for entry in self.ignored)
        return values

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
        """The first listener served (the one scripts and tests connect to)."""
        return self.listeners[0]

    @property
    def advertised(self) -> Listener:
        """What Metadata tells clients of the first listener to connect to."""
        return self.advertised_for(self.listener.name)

    def advertised_for(self, name: str) -> Listener:
        """What Metadata tells a client connected to the listener `name`: its advertised entry."""
        served = next(listener for listener in self.listeners if listener.name == name)
        return advertised_listener(served, self.settings["advertised.listeners"])

    def for_listener(self, listener: str, name: str, mechanism: str | None = None) -> Any:
        """Setting `name` as the listener sees it: `listener.name.<listener>.[<mechanism>.]<name>`, else the
        broker-wide value."""
        return for_listener(self.settings, listener, name, mechanism)

    def warnings(self) -> list[str]:
        """What the broker logs as warnings at start: ignored settings, unopened listeners, stray variables."""
        lines = []
        if self.ignored:
            lines.append(f"ignoring {len(self.ignored)} Kafka settings that mean nothing on a single-node broker "
                         f"(replication, controller quorum, ZooKeeper, threads, socket buffers): "
                         f"{', '.join(sorted(e.name for e in self.ignored))}")
        for listener in self.unopened:
            lines.append(f"not listening on {listener} from listeners: a controller listener "
                         "(controller.listener.names): this broker has no controller quorum")
        if self.unknown_environment:
            names = []
            for entry in self.unknown_environment:
                near = closest_name(entry.name, _known_names())
                names.append(f"{entry.origin.split()[-1]} ({entry.name}{f'; did you mean {near}?' if near else ''})")
            lines.append(f"ignoring environment variables that name no broker setting: {', '.join(names)}")
        return lines

    def values(self) -> list[tuple[str, str]]:
        """(name, value) of every setting the broker runs with, sorted: the broker settings, then the log
        defaults under their broker-level names (Kafka's `KafkaConfig values:` block)."""
        rows = {name: _text(value) for name, value in self.settings.items()}
        effective = self.log_config.to_properties()
        rows.update((broker, _text(effective[topic])) for broker, topic in BROKER_NAMES.items())
        rows.update((name, _text(value)) for name, value in self.log_properties.items() if name in HOURS_ALIASES)
        return sorted(rows.items())

    # -- helpers -----------------------------------------------------------------------------------

    def _where(self, name: str, message: str) -> str:
        origin = self.origins.get(name)
        return f"{message} (from {origin})" if origin else message


_T = TypeVar("_T")


def _takes_dynamic(name: str, value: str) -> bool:
    """Whether this broker can take `name=value` as a dynamic config."""
    try:
        _take_dynamic(name, value, {}, {})
    except InvalidConfigError:
        return False
    return True


def _take_dynamic(name: str, value: str, settings: dict[str, Any], log_properties: dict[str, Any]) -> None:
    """Put a dynamic config's value where it applies, checked as a static one is (InvalidConfigError if not)."""
    if not is_dynamic(name):
        raise InvalidConfigError(f"{name} cannot be updated dynamically")
    if listener_tls_setting(name) is not None:
        settings[name] = value   # text, as the static `listener.name.` settings (tls.py checks it)
    elif name in BROKER_SETTINGS:
        settings[name] = _parse(name, BROKER_SETTINGS[name][1], value)
    elif name in LOG_CONFIGS:
        LogConfig.from_properties({name: value})
        log_properties[name] = value
    elif name in NO_EFFECT:
        try:
            parse_no_effect(name, value)
        except ValueError as exc:
            raise _refused(name, value, str(exc)) from None


def _located(entry: ConfigEntry, check: Callable[..., _T], *args: Any) -> _T:
    """`check(*args)`, with a refusal naming where `entry` came from."""
    try:
        return check(*args)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{exc} (from {entry.origin})" if entry.origin else str(exc)) from None


def _unknown(entry: ConfigEntry) -> str:
    where = f" (from {entry.origin})" if entry.origin else ""
    near = closest_name(entry.name, _known_names())
    return f"Unknown configuration {entry.name!r}{where}" + (f"; did you mean {near!r}?" if near else "")


def _known_names() -> set[str]:
    # Not log.dir: a typo of log.dirs is closer to it, and log.dirs is the name to suggest.
    return {*BROKER_SETTINGS, "broker.id", *BROKER_NAMES, *HOURS_ALIASES, *TOPIC_CONFIGS, *SINGLE_NODE_NAMES}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
