"""Log configuration under Kafka's names.

Each topic-level config (`segment.bytes`) has the broker-level name that sets
its default (`log.segment.bytes`), as in Kafka's LogConfig; a value can be
given under either name and is checked against Kafka's type and range for it,
and a refusal reads as Kafka's ConfigException does.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from logstore.errors import InvalidConfigError

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1

# topic name → (attribute, broker name, default, rule). The rule follows the default's type:
# an int's smallest value (None: any), a float's (smallest, largest), a string's allowed values.
TOPIC_CONFIGS: dict[str, tuple[str, str, Any, Any]] = {
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
}
BROKER_NAMES = {broker: topic for topic, (_, broker, _, _) in TOPIC_CONFIGS.items()}
# Kafka's coarser broker settings, applied when the ms form is not given.
HOURS_ALIASES = {"log.roll.hours": "segment.ms", "log.retention.hours": "retention.ms",
                 "log.retention.minutes": "retention.ms"}
# Kafka's LIST configs: comma-separated, each item one of the allowed values
# (what IncrementalAlterConfigs may APPEND to or SUBTRACT from).
LIST_CONFIGS = frozenset({"cleanup.policy"})
# Kafka's INT configs (32-bit); every other whole-number config is a LONG.
INT_CONFIGS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes"})

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
        return config

    def to_properties(self) -> dict[str, Any]:
        """Every setting under its topic-level Kafka name."""
        by_attribute = {attribute: name for name, (attribute, *_rest) in TOPIC_CONFIGS.items()}
        return {by_attribute[f.name]: getattr(self, f.name) for f in fields(self)}

    @property
    def log_append_time(self) -> bool:
        """Whether the broker stamps batches with its own clock."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def deletes(self) -> bool:
        """Whether retention deletes old segments (cleanup.policy has `delete`)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """Whether the cleaner compacts the log (cleanup.policy has `compact`)."""
        return "compact" in self.cleanup_policy.split(",")


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


def _checked(name: str, topic_name: str, value: Any, default: Any, rule: Any) -> Any:
    if isinstance(default, str):
        text = str(value).strip()
        if topic_name in LIST_CONFIGS:
            items = [item.strip() for item in text.split(",")]
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
    if rule is not None and number < rule:
        raise _refused(name, value, f"Value must be at least {rule}")
    return number
