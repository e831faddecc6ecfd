"""Topic names (Kafka's rule) and the `topic-configs` file of overrides, which Kafka keeps in its metadata log.

The file: one at the root of every log dir, each a full copy:

    {"version": 0, "generation": <n>, "topics": {"<topic>": {"<topic-level name>": <value>, ...}, ...}}

Values are stored under topic-level names (`retention.ms`, never
`log.retention.hours`). Each write replaces every copy atomically with the
generation raised by one; on open the copy with the highest generation wins
(`logstore.generation_files`), so a crash between two log dirs leaves the older
state or the newer one, never a mix. The file is written before a topic's directories are made and after
they are removed, so an entry without directories can only be a leftover of a
crash; opening drops it. No file is written while no topic has an override.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from logstore.checkpoints import CorruptCheckpointError
from logstore.config import BROKER_NAMES, HOURS_ALIASES, REMOVED_TOPIC_CONFIGS, TOPIC_CONFIGS, LogConfig
from logstore.errors import InvalidConfigError, InvalidTopicError
from logstore.filesystem import OS, FileSystem
from logstore.generation_files import GenerationFile

MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_CONFIGS_FILE = "topic-configs"
TOPIC_CONFIGS_COPIES = GenerationFile(TOPIC_CONFIGS_FILE, "topics")


def validate_topic_name(name: str) -> None:
    """Kafka's topic rule: 1-249 of [a-zA-Z0-9._-], not `.` or `..`."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters, the limit is {MAX_TOPIC_NAME}")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


def encode_topic_configs(generation: int, topics: Mapping[str, Mapping[str, Any]]) -> bytes:
    """The file's bytes for a generation of overrides."""
    return TOPIC_CONFIGS_COPIES.encode(generation, topics)


def topic_level(overrides: Mapping[str, Any], base: LogConfig) -> dict[str, Any]:
    """`overrides` checked and keyed by topic-level names (`log.retention.hours=1` → `retention.ms=3600000`); the
    configs Kafka removed are dropped, as Kafka drops them."""
    props = base.with_overrides(overrides).to_properties()
    names = {BROKER_NAMES.get(n, HOURS_ALIASES.get(n, n)) for n in overrides if n not in REMOVED_TOPIC_CONFIGS}
    return {name: props[name] for name in sorted(names)}


def read_topic_configs(path: str, fs: FileSystem = OS) -> tuple[int, dict[str, dict[str, Any]]]:
    """(generation, overrides per topic) of one `topic-configs` file; FileNotFoundError if there is none."""
    generation, topics = TOPIC_CONFIGS_COPIES.read(path, fs)

    def is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    for topic, overrides in topics.items():
        try:
            validate_topic_name(topic)
            if not isinstance(overrides, dict) or not overrides:
                raise InvalidConfigError("expected a non-empty object of settings")
            for name, value in overrides.items():
                if name not in TOPIC_CONFIGS or not (is_int(value) or isinstance(value, (bool, float, str))):
                    raise InvalidConfigError(f"{name}={value!r} is not a topic config")
            LogConfig().with_overrides(overrides)
        except (InvalidTopicError, InvalidConfigError) as exc:
            raise CorruptCheckpointError(path, 1, f"topic {topic!r}: {exc}") from None
    return generation, topics
