"""The group coordinator's settings, under Kafka's broker config names."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from logstore.broker.coordinator.consumer_group import ConsumerGroupConfig


@dataclass(frozen=True)
class GroupConfig:
    """The group coordinator's settings, under Kafka's broker config names in `from_settings`."""

    min_session_timeout_ms: int = 6_000          # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000      # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000      # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1                    # group.max.size
    offset_metadata_max_bytes: int = 4_096       # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    fsync: bool = True                           # logstore.acks.all.fsync
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()  # group.consumer.* (KIP-848 groups)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> GroupConfig:
        """From broker settings (missing names keep Kafka's defaults)."""
        names = {"group.min.session.timeout.ms": "min_session_timeout_ms",
                 "group.max.session.timeout.ms": "max_session_timeout_ms",
                 "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
                 "group.max.size": "max_size",
                 "offset.metadata.max.bytes": "offset_metadata_max_bytes",
                 "logstore.acks.all.fsync": "fsync"}
        values = {field: settings[name] for name, field in names.items() if name in settings}
        if "offsets.retention.minutes" in settings:
            values["offsets_retention_ms"] = settings["offsets.retention.minutes"] * 60_000
        return cls(**values, consumer=ConsumerGroupConfig.from_settings(settings))
