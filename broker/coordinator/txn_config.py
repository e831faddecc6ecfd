"""The transaction coordinator's settings, under Kafka's broker config names."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TxnConfig:
    """The coordinator's settings, under Kafka's broker config names in `from_settings`."""

    state_partitions: int = 50            # transaction.state.log.num.partitions
    state_segment_bytes: int = 104_857_600  # transaction.state.log.segment.bytes
    offsets_partitions: int = 50          # offsets.topic.num.partitions
    offsets_segment_bytes: int = 104_857_600  # offsets.topic.segment.bytes
    max_timeout_ms: int = 900_000         # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000   # transactional.id.expiration.ms
    fsync: bool = True                    # logstore.acks.all.fsync: transitions and markers fsynced
    two_phase_commit: bool = False        # transaction.two.phase.commit.enable (KIP-939)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> TxnConfig:
        """From broker settings (missing names keep Kafka's defaults)."""
        names = {"transaction.state.log.num.partitions": "state_partitions",
                 "transaction.state.log.segment.bytes": "state_segment_bytes",
                 "offsets.topic.num.partitions": "offsets_partitions",
                 "offsets.topic.segment.bytes": "offsets_segment_bytes",
                 "transaction.max.timeout.ms": "max_timeout_ms",
                 "transactional.id.expiration.ms": "id_expiration_ms",
                 "logstore.acks.all.fsync": "fsync",
                 "transaction.two.phase.commit.enable": "two_phase_commit"}
        return cls(**{field: settings[name] for name, field in names.items() if name in settings})
