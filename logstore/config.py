"""Log configuration under Kafka's names.

Each topic-level config (`segment.bytes`) has the broker-level name that sets
its default (`log.segment.bytes`), as in Kafka's LogConfig; a value can be
given under either name and is checked against Kafka's type and range for it,
and a refusal reads as Kafka's ConfigException does.

Every topic config of Kafka 4.2 is here; `TOPIC_CONFIG_DOCS` says of each its
Kafka type, what it does and, for those that do nothing on one node
(replication, tiered storage, preallocation), why. The configs Kafka 4.0
removed but still takes from older tools (`REMOVED_TOPIC_CONFIGS`) are
accepted and dropped.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from logstore.errors import InvalidConfigError

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1

# Kafka's codecs a topic may force on what it stores (BrokerCompressionType); `producer` keeps the producer's.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
GZIP_DEFAULT_LEVEL = -1  # java.util.zip.Deflater.DEFAULT_COMPRESSION (zlib's 6)


def _gzip_level(name: str, number: int) -> None:
    # Deflater's levels, or its "default" marker, which is below the range.
    if number > 9 or (number < 1 and number != GZIP_DEFAULT_LEVEL):
        raise _refused(name, number, f"Value must be between 1 and 9 or equal to {GZIP_DEFAULT_LEVEL}")


def _replica_list(name: str, items: list[str]) -> None:
    # Kafka's ThrottledReplicaListValidator: `*`, or partition:broker pairs (empty items pass, as in Kafka).
    if not (all(re.fullmatch(r"([0-9]+:[0-9]+)?", item) for item in items) or "".join(items) == "*"):
        raise _refused(name, ",".join(items), f"{name} must be the literal '*' or a list of replicas in the following "
                                              "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


# topic name → (attribute, broker name or None, default, rule), Kafka 4.2's LogConfig. The rule follows the
# default's type: an int's smallest value (None: any), (smallest, largest) or a check; a float's (smallest,
# largest); a string's allowed values; a bool has none; a LIST config's (LIST_CONFIGS) allowed items or a check.
# The broker name is the server config whose value is the default (ServerTopicConfigSynonyms); None where Kafka
# has none.
TOPIC_CONFIGS: dict[str, tuple[str, str | None, Any, Any]] = {
    "segment.bytes": ("segment_bytes", "log.segment.bytes", 1 << 30, 14),
    "segment.ms": ("segment_ms", "log.roll.ms", 7 * 24 * 3600 * 1000, 1),
    "segment.jitter.ms": ("segment_jitter_ms", "log.roll.jitter.ms", 0, 0),
    "segment.index.bytes": ("segment_index_bytes", "log.index.size.max.bytes", 10 * 1024 * 1024, 4),
    "index.interval.bytes": ("index_interval_bytes", "log.index.interval.bytes", 4096, 0),
    "retention.ms": ("retention_ms", "log.retention.ms", 7 * 24 * 3600 * 1000, -1),
    "retention.bytes": ("retention_bytes", "log.retention.bytes", -1, None),
    "flush.messages": ("flush_messages", "log.flush.interval.messages", LONG_MAX, 1),
    "flush.ms": ("flush_ms", "log.flush.interval.ms", LONG_MAX, 0),
    "max.message.bytes": ("max_message_bytes", "message.max.bytes", 1048588, 0),
    "message.timestamp.type": ("message_timestamp_type", "log.message.timestamp.type", "CreateTime",
                               ("CreateTime", "LogAppendTime")),
    "file.delete.delay.ms": ("file_delete_delay_ms", "log.segment.delete.delay.ms", 60000, 0),
    "cleanup.policy": ("cleanup_policy", "log.cleanup.policy", "delete", ("compact", "delete")),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio", 0.5, (0, 1)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "log.cleaner.min.compaction.lag.ms", 0, 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "log.cleaner.max.compaction.lag.ms", LONG_MAX, 1),
    "delete.retention.ms": ("delete_retention_ms", "log.cleaner.delete.retention.ms", 86_400_000, 0),
    # KIP-937's bounds on a record's CreateTime around the broker's clock, with Kafka 4's defaults (the past
    # unbounded, the future an hour ahead; Kafka 4 dropped message.timestamp.difference.max.ms).
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", "log.message.timestamp.before.max.ms",
                                        LONG_MAX, 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", "log.message.timestamp.after.max.ms",
                                       3_600_000, 0),
    "compression.type": ("compression_type", "compression.type", "producer", COMPRESSION_TYPES),
    "compression.gzip.level": ("compression_gzip_level", "compression.gzip.level", GZIP_DEFAULT_LEVEL, _gzip_level),
    "compression.lz4.level": ("compression_lz4_level", "compression.lz4.level", 9, (1, 17)),
    "compression.zstd.level": ("compression_zstd_level", "compression.zstd.level", 3, (-131072, 22)),
    "min.insync.replicas": ("min_insync_replicas", "min.insync.replicas", 1, 1),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", "unclean.leader.election.enable", False,
                                       None),
    "preallocate": ("preallocate", "log.preallocate", False, None),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", None, "", _replica_list),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", None, "", _replica_list),
    "remote.storage.enable": ("remote_storage_enable", None, False, None),
    "local.retention.ms": ("local_retention_ms", "log.local.retention.ms", -2, -2),
    "local.retention.bytes": ("local_retention_bytes", "log.local.retention.bytes", -2, -2),
    "remote.log.copy.disable": ("remote_log_copy_disable", None, False, None),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", None, False, None),
}
BROKER_NAMES = {broker: topic for topic, (_, broker, _, _) in TOPIC_CONFIGS.items() if broker is not None}
# Kafka's coarser broker settings, applied when the ms form is not given.
HOURS_ALIASES = {"log.roll.hours": "segment.ms", "log.retention.hours": "retention.ms",
                 "log.retention.minutes": "retention.ms"}
# Kafka's LIST configs: comma-separated, each item one of the allowed values or passing the check
# (what IncrementalAlterConfigs may APPEND to or SUBTRACT from).
LIST_CONFIGS = frozenset({"cleanup.policy", "leader.replication.throttled.replicas",
                          "follower.replication.throttled.replicas"})
# Kafka's INT configs (32-bit); every other whole-number config is a LONG.
INT_CONFIGS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
                         "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
                         "min.insync.replicas"})
# Topic configs Kafka 4.0 removed (KIP-724: the v0/v1 formats are gone) that a Kafka 4 controller still takes
# from older tools and drops (they are neither kept nor shown): accepted with any value, never stored.
REMOVED_TOPIC_CONFIGS = frozenset({"message.format.version", "message.downconversion.enable"})


@dataclass(frozen=True)
class TopicConfigDoc:
    """What DescribeConfigs tells of one topic config: Kafka's type, what it does, and why it does nothing here."""

    config_type: str
    """Kafka's ConfigDef type: BOOLEAN, STRING, INT, LONG, DOUBLE or LIST."""
    doc: str
    no_effect: str = ""
    """Empty when the config has Kafka's effect here; else why a single node has none."""

    @property
    def has_effect(self) -> bool:
        """Whether setting it changes what this broker does."""
        return not self.no_effect


_REPLICATION = "one node has no followers: every partition's only replica is its leader and always in sync"
_TIERED = "this broker has no remote (tiered) storage: every segment stays in the local log dirs"

TOPIC_CONFIG_DOCS: dict[str, TopicConfigDoc] = {
    "segment.bytes": TopicConfigDoc("INT", "Size (bytes) at which the log rolls to a new segment."),
    "segment.ms": TopicConfigDoc("LONG", "Age (ms) at which the log rolls to a new segment even if it is not full."),
    "segment.jitter.ms": TopicConfigDoc("LONG", "Largest random jitter (ms) taken off segment.ms, so partitions do "
                                                "not roll at once."),
    "segment.index.bytes": TopicConfigDoc("INT", "Size (bytes) of each segment's offset and time indexes."),
    "index.interval.bytes": TopicConfigDoc("INT", "Bytes appended between two offset index entries."),
    "retention.ms": TopicConfigDoc("LONG", "Age (ms) after which a segment is deleted, with cleanup.policy delete; "
                                           "-1: no limit."),
    "retention.bytes": TopicConfigDoc("LONG", "Size (bytes) a partition may reach before its oldest segments are "
                                              "deleted; -1: no limit."),
    "flush.messages": TopicConfigDoc("LONG", "Messages appended between two forced fsyncs of the log."),
    "flush.ms": TopicConfigDoc("LONG", "Longest time (ms) a message waits in the log before a forced fsync."),
    "max.message.bytes": TopicConfigDoc("INT", "Largest record batch (bytes) the log accepts."),
    "message.timestamp.type": TopicConfigDoc("STRING", "CreateTime (the producer's timestamp) or LogAppendTime (the "
                                                       "broker's clock)."),
    "message.timestamp.before.max.ms": TopicConfigDoc("LONG", "Most ms a CreateTime timestamp may lie before the "
                                                              "broker's clock."),
    "message.timestamp.after.max.ms": TopicConfigDoc("LONG", "Most ms a CreateTime timestamp may lie after the "
                                                             "broker's clock."),
    "file.delete.delay.ms": TopicConfigDoc("LONG", "Time (ms) a deleted segment's files stay on disk."),
    "cleanup.policy": TopicConfigDoc("LIST", "delete (retention removes old segments) and/or compact (the latest "
                                             "value per key is kept)."),
    "min.cleanable.dirty.ratio": TopicConfigDoc("DOUBLE", "Share of the log's bytes not yet compacted above which "
                                                          "the cleaner compacts it."),
    "min.compaction.lag.ms": TopicConfigDoc("LONG", "Least time (ms) a record stays uncompacted in the log."),
    "max.compaction.lag.ms": TopicConfigDoc("LONG", "Longest time (ms) a record may stay uncompacted, whatever the "
                                                    "dirty ratio."),
    "delete.retention.ms": TopicConfigDoc("LONG", "Time (ms) a compacted log keeps tombstones and transaction "
                                                  "markers once cleaned."),
    "compression.type": TopicConfigDoc("STRING", "The codec the log stores batches in: uncompressed, zstd, lz4, "
                                                 "snappy or gzip (batches in another are recompressed on append), or "
                                                 "producer (kept as the producer sent them)."),
    "compression.gzip.level": TopicConfigDoc("INT", "Level of gzip when compression.type is gzip: 1-9, or -1 for "
                                                    "the codec's default."),
    "compression.lz4.level": TopicConfigDoc("INT", "Level of lz4 when compression.type is lz4: 1-17."),
    "compression.zstd.level": TopicConfigDoc("INT", "Level of zstd when compression.type is zstd: -131072 to 22."),
    "min.insync.replicas": TopicConfigDoc("INT", "Fewest in-sync replicas an acks=all produce needs; with more than "
                                                 "one, this single node answers acks=all with NOT_ENOUGH_REPLICAS."),
    "unclean.leader.election.enable": TopicConfigDoc("BOOLEAN", "Whether a replica that is not in sync may become "
                                                                "leader, losing data.", _REPLICATION),
    "preallocate": TopicConfigDoc("BOOLEAN", "Whether a new segment file is allocated at its full size up front.",
                                  "segment files here grow with each append; preallocation only spares some file "
                                  "systems fragmentation, and reads, rolls and recovery behave the same without it"),
    "leader.replication.throttled.replicas": TopicConfigDoc("LIST", "Replicas whose log the leader sends at the "
                                                                    "throttled rate: partition:broker pairs or *.",
                                                            _REPLICATION),
    "follower.replication.throttled.replicas": TopicConfigDoc("LIST", "Replicas a follower fetches at the throttled "
                                                                      "rate: partition:broker pairs or *.",
                                                              _REPLICATION),
    "remote.storage.enable": TopicConfigDoc("BOOLEAN", "Whether the topic's segments are copied to tiered storage; "
                                                       "true is refused, as by a Kafka broker without it.", _TIERED),
    "local.retention.ms": TopicConfigDoc("LONG", "Age (ms) a tiered segment stays local; -2: retention.ms.",
                                         _TIERED),
    "local.retention.bytes": TopicConfigDoc("LONG", "Local bytes a tiered partition keeps; -2: retention.bytes.",
                                            _TIERED),
    "remote.log.copy.disable": TopicConfigDoc("BOOLEAN", "Whether copying segments to tiered storage is paused.",
                                              _TIERED),
    "remote.log.delete.on.disable": TopicConfigDoc("BOOLEAN", "Whether turning tiered storage off deletes the "
                                                              "remote data.", _TIERED),
}
assert TOPIC_CONFIG_DOCS.keys() == TOPIC_CONFIGS.keys(), "every topic config needs its type and doc"

# Kafka creates its internal topics with these overrides and keeps them in its metadata (ZooKeeper or
# `__cluster_metadata`), not beside the partitions: a store opened on a directory Kafka wrote must still
# compact them, or retention would delete committed offsets and transaction state.
INTERNAL_TOPIC_CONFIGS: dict[str, dict[str, Any]] = {
    "__consumer_offsets": {"cleanup.policy": "compact", "segment.bytes": 104_857_600},
    "__transaction_state": {"cleanup.policy": "compact", "segment.bytes": 104_857_600},
}


@dataclass(frozen=True)
class LogConfig:
    """The settings one partition log runs with; defaults are Kafka's."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = 60000
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    compression_type: str = "producer"
    compression_gzip_level: int = GZIP_DEFAULT_LEVEL
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None, base: LogConfig | None = None) -> LogConfig:
        """A config from Kafka names (topic-level or broker-level) over `base` or the defaults."""
        return (base or cls()).with_overrides(props or {})

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """This config with some values replaced; names are Kafka's, unknown names are refused."""
        changes: dict[str, Any] = {}
        hours: dict[tuple[str, bool], int] = {}
        for name, value in props.items():
            if name in HOURS_ALIASES:
                minutes = name.endswith("minutes")
                target = HOURS_ALIASES[name]
                # Kafka: log.retention.minutes wins over log.retention.hours whatever their order.
                if minutes or (target, True) not in hours:
                    hours.pop((target, False), None)
                    hours[(target, minutes)] = _as_int(name, value, INT_MAX) * (60_000 if minutes else 3_600_000)
                continue
            if name in REMOVED_TOPIC_CONFIGS:
                continue
            topic_name = BROKER_NAMES.get(name, name)
            if topic_name not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            attribute, _, default, rule = TOPIC_CONFIGS[topic_name]
            changes[attribute] = _checked(name, topic_name, value, default, rule)
        for (topic_name, _), value in hours.items():
            changes.setdefault(TOPIC_CONFIGS[topic_name][0], value)
        config = replace(self, **changes)
        # Kafka's LogConfig.validateValues: the only check across two values.
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise InvalidConfigError(f"conflict topic config setting min.compaction.lag.ms "
                                     f"({config.min_compaction_lag_ms}) > max.compaction.lag.ms "
                                     f"({config.max_compaction_lag_ms})")
        if config.remote_storage_enable:
            # What Kafka answers when its remote.log.storage.system.enable is off; this node has no tiered storage.
            raise InvalidConfigError("Tiered Storage functionality is disabled in the broker. "
                                     "Topic cannot be configured with remote log storage.")
        return config

    def to_properties(self) -> dict[str, Any]:
        """Every setting under its topic-level Kafka name."""
        by_attribute = {attribute: name for name, (attribute, *_rest) in TOPIC_CONFIGS.items()}
        return {by_attribute[f.name]: getattr(self, f.name) for f in fields(self)}

    @cached_property
    def log_append_time(self) -> bool:
        """Whether the broker stamps batches with its own clock."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def deletes(self) -> bool:
        """Whether retention deletes old segments (cleanup.policy has `delete`)."""
        return "delete" in self.cleanup_policy.split(",")

    @cached_property
    def compacts(self) -> bool:
        """Whether the cleaner compacts the log (cleanup.policy has `compact`)."""
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def recompresses(self) -> bool:
        """Whether appended batches are stored in the topic's codec rather than the producer's."""
        return self.compression_type != "producer"

    @property
    def compression_level(self) -> int | None:
        """The level of the topic's codec (None: the codec has none, or the producer's codec is kept)."""
        return {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                "zstd": self.compression_zstd_level}.get(self.compression_type)


def _refused(name: str, value: Any, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {why}")


def _as_int(name: str, value: Any, largest: int = LONG_MAX) -> int:
    kind = "INT" if largest == INT_MAX else "LONG"
    if isinstance(value, float) or isinstance(value, bool):
        # Java's parser takes no fraction, and a boolean is not a number to Kafka.
        raise _refused(name, value, f"Not a number of type {kind}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise _refused(name, value, f"Not a number of type {kind}") from None
    if not -largest - 1 <= number <= largest:
        raise _refused(name, value, f"Not a number of type {kind}")
    return number


def _as_float(name: str, value: Any) -> float:
    try:
        number = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise _refused(name, value, "Not a number of type DOUBLE") from None
    if isinstance(value, bool) or math.isnan(number):
        # Java's Range lets NaN through (every comparison is false); a NaN ratio would never clean.
        raise _refused(name, value, "Not a number of type DOUBLE")
    return number


def _as_bool(name: str, value: Any) -> bool:
    # Java's ConfigDef: a Boolean, or the text true/false in any case.
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("true", "false"):
        raise _refused(name, value, "Expected value to be either true or false")
    return text == "true"


def _checked(name: str, topic_name: str, value: Any, default: Any, rule: Any) -> Any:
    if isinstance(default, bool):
        return _as_bool(name, value)
    if isinstance(default, str):
        text = str(value).strip()
        if topic_name in LIST_CONFIGS:
            items = [item.strip() for item in text.split(",")]
            if callable(rule):
                rule(name, items)
                return ",".join(items) if text else ""
            if text and all(item in rule for item in items):
                return ",".join(items)
            # An empty list is valid to Kafka (neither deleted nor compacted); no log here runs without a policy.
            why = f"String must be one of: {', '.join(rule)}" if text else "must name at least one of compact, delete"
            raise _refused(name, value, why)
        if text not in rule:
            raise _refused(name, value, f"String must be one of: {', '.join(rule)}")
        return text
    if isinstance(default, float):
        number = _as_float(name, value)
        smallest, largest = rule
        if number < smallest:
            raise _refused(name, value, f"Value must be at least {smallest}")
        if number > largest:
            raise _refused(name, value, f"Value must be no more than {largest}")
        return number
    number = _as_int(name, value, INT_MAX if topic_name in INT_CONFIGS else LONG_MAX)
    if callable(rule):
        rule(name, number)
    elif isinstance(rule, tuple):
        smallest, largest = rule
        if number < smallest:
            raise _refused(name, value, f"Value must be at least {smallest}")
        if number > largest:
            raise _refused(name, value, f"Value must be no more than {largest}")
    elif rule is not None and number < rule:
        raise _refused(name, value, f"Value must be at least {rule}")
    return number
