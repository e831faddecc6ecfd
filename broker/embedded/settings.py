"""The embedded clients' settings, under the Java client's names and with its defaults.

A name the client does not know is refused (as librdkafka refuses it), so a
typo does not silently leave a default in place. `principal` is ours: who
the client runs as under the node's authorizer (see access.py), Kafka's
`type:name`, by default `User:ANONYMOUS` as on a PLAINTEXT connection.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logstore.broker.config import _parse
from logstore.errors import InvalidConfigError
from logstore.native.compression import CODEC_IDS

# name -> (default, parser, allowed values or None)
PRODUCER_SETTINGS: dict[str, tuple[Any, type, frozenset[str] | None]] = {
    "client.id": ("", str, None),
    "principal": ("User:ANONYMOUS", str, None),
    "transactional.id": (None, str, None),
    "enable.idempotence": (True, bool, None),
    "acks": ("all", str, frozenset({"all", "-1", "1", "0"})),
    "linger.ms": (5, int, None),
    "batch.size": (16_384, int, None),
    "compression.type": ("none", str, frozenset(CODEC_IDS)),
    "transaction.timeout.ms": (60_000, int, None),
}

CONSUMER_SETTINGS: dict[str, tuple[Any, type, frozenset[str] | None]] = {
    "client.id": ("", str, None),
    "principal": ("User:ANONYMOUS", str, None),
    "group.id": (None, str, None),
    "group.instance.id": (None, str, None),
    "isolation.level": ("read_uncommitted", str, frozenset({"read_uncommitted", "read_committed"})),
    "auto.offset.reset": ("latest", str, frozenset({"earliest", "latest", "none"})),
    "enable.auto.commit": (True, bool, None),
    "auto.commit.interval.ms": (5_000, int, None),
    "max.poll.records": (500, int, None),
    "max.partition.fetch.bytes": (1_048_576, int, None),
    "fetch.max.bytes": (52_428_800, int, None),
    "session.timeout.ms": (45_000, int, None),
    "heartbeat.interval.ms": (3_000, int, None),
    "max.poll.interval.ms": (300_000, int, None),
    "partition.assignment.strategy": ("range,cooperative-sticky", str, None),
}


def parse_settings(given: Mapping[str, Any] | None, known: Mapping[str, tuple[Any, type, frozenset[str] | None]],
                   what: str) -> dict[str, Any]:
    """Defaults overridden by `given`; unknown names and values outside a setting's choices are refused."""
    settings = {name: default for name, (default, _, _) in known.items()}
    for name, value in (given or {}).items():
        if name not in known:
            raise InvalidConfigError(f"unknown {what} config {name!r}")
        _, kind, choices = known[name]
        value = None if value is None else _parse(name, kind, value)
        if choices is not None and str(value).lower() not in choices:
            raise InvalidConfigError(f"{name} must be one of {sorted(choices)}, got {value!r}")
        settings[name] = value.lower() if isinstance(value, str) and choices is not None else value
    for name, (_, kind, _) in known.items():
        if kind is int and settings[name] is not None and settings[name] < 0:
            raise InvalidConfigError(f"{name} must not be negative, got {settings[name]}")
    return settings
