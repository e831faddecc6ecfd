"""Log configuration under Kafka's names.

Each topic-level config (`segment.bytes`) has the broker-level name that sets
its default (`log.segment.bytes`), as in Kafka's LogConfig; a value can be
given under either name and is checked against Kafka's range for it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from logstore.errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1

# topic name → (attribute, broker name, default, smallest value or allowed values)
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
    "cleanup.policy": ("cleanup_policy", "log.cleanup.policy", "delete", ("delete", "compact", "compact,delete",
                                                                           "delete,compact")),
}
BROKER_NAMES = {broker: topic for topic, (_, broker, _, _) in TOPIC_CONFIGS.items()}
# Kafka's coarser broker settings, applied when the ms form is not given.
HOURS_ALIASES = {"log.roll.hours": "segment.ms", "log.retention.hours": "retention.ms",
                 "log.retention.minutes": "retention.ms"}


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

    @classmethod
    def from_properties(cls, props: Mapping[str, Any] | None = None, base: "LogConfig | None" = None) -> "LogConfig":
        """A config from Kafka names (topic-level or broker-level) over `base` or the defaults."""
        return (base or cls()).with_overrides(props or {})

    def with_overrides(self, props: Mapping[str, Any]) -> "LogConfig":
        """This config with some values replaced; names are Kafka's, unknown names are refused."""
        changes: dict[str, Any] = {}
        hours = {}
        for name, value in props.items():
            if name in HOURS_ALIASES:
                minutes = name.endswith("minutes")
                target = HOURS_ALIASES[name]
                # Kafka: log.retention.minutes wins over log.retention.hours whatever their order.
                if minutes or (target, True) not in hours:
                    hours.pop((target, False), None)
                    hours[(target, minutes)] = _as_int(name, value) * (60_000 if minutes else 3_600_000)
                continue
            topic_name = BROKER_NAMES.get(name, name)
            if topic_name not in TOPIC_CONFIGS:
                raise InvalidConfigError(f"unknown log config {name!r}")
            attribute, _, default, rule = TOPIC_CONFIGS[topic_name]
            changes[attribute] = _checked(topic_name, value, default, rule)
        for (topic_name, _), value in hours.items():
            changes.setdefault(TOPIC_CONFIGS[topic_name][0], value)
        return replace(self, **changes)

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


def _as_int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{name} must be an integer, got {value!r}") from None


def _checked(name: str, value: Any, default: Any, rule: Any) -> Any:
    if isinstance(default, str):
        value = str(value).replace(" ", "")
        if value not in rule:
            raise InvalidConfigError(f"{name} must be one of {', '.join(rule)}, got {value!r}")
        return value
    number = _as_int(name, value)
    if rule is not None and number < rule:
        raise InvalidConfigError(f"{name} must be at least {rule}, got {number}")
    return number
