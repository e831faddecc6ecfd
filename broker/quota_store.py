"""Client quota configs: the entities, their validation, and the `client-quotas` file that keeps them.

An entity is what Kafka's ClientQuotaEntity is: a map of entity type
(`user`, `client-id`) to a name, None meaning the type's default
(`<default>`). The configs of an entity are Kafka's quota keys with
positive values.

The file: one at the root of every log dir, each a full copy (as `topic-configs`):

    {"version": 0, "generation": <n>,
     "entities": [{"entity": {"user": "alice", "client-id": null}, "quotas": {"producer_byte_rate": 1048576.0}}]}

Each write replaces every copy atomically with the generation raised by one;
on open the copy with the highest generation wins (`logstore.generation_files`),
so a crash between two log dirs leaves the older state or the newer one, never
a mix. A copy that breaks the format is a `CorruptCheckpointError` naming the
file.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from logstore.checkpoints import CorruptCheckpointError
from logstore.filesystem import OS, FileSystem
from logstore.generation_files import GenerationFile

__all__ = ["CLIENT_QUOTAS_FILE", "CLIENT_ID", "USER", "IP", "QUOTA_KEYS", "ENFORCED_KEYS", "Entity", "QuotaStore",
           "entity_of", "entity_text", "validate_entity", "validate_value"]

CLIENT_QUOTAS_FILE = "client-quotas"
CLIENT_QUOTAS_COPIES = GenerationFile(CLIENT_QUOTAS_FILE, "entities", body_is_list=True)
USER, CLIENT_ID, IP = "user", "client-id", "ip"
# Kafka's QuotaConfig.userAndClientQuotaConfigs: key → whether the value is a whole number (LONG) or a DOUBLE.
QUOTA_KEYS: dict[str, bool] = {
    "producer_byte_rate": True,
    "consumer_byte_rate": True,
    "request_percentage": False,
    "controller_mutation_rate": False,
}
# What this broker enforces; controller_mutation_rate (topic creation throttling) and ip quotas
# (connection_creation_rate) would be stored and never applied, so they are refused instead.
ENFORCED_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage"})
_LONG_MAX = float(2**63 - 1)

# An entity: (type, name or None for the default) pairs, sorted by type, each type at most once.
Entity = tuple[tuple[str, str | None], ...]


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of (type, name) pairs, sorted (the caller checked that no type repeats)."""
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def entity_text(entity: Entity) -> str:
    """The entity as Kafka prints a ClientQuotaEntity: `(user=alice, client-id=<default>)`."""
    return "(" + ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity) + ")"


def validate_entity(pairs: Sequence[tuple[str, str | None]]) -> str | None:
    """Kafka's checks of an entity to alter (ClientQuotaControlManager.validateEntity and the type
    combination), as the INVALID_REQUEST message, or None if it may be altered here."""
    if not pairs:
        return "Invalid empty client quota entity"
    seen: set[str] = set()
    for kind, name in pairs:
        if kind in seen:
            return f"Invalid client quota entity, duplicate entity entry {kind}"
        seen.add(kind)
        if kind not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {kind}"
        if name is not None and not name:
            return f"Empty {kind} not supported"
    if IP in seen:
        if len(seen) > 1:
            return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        return "ip quotas (connection_creation_rate) are not enforced by this broker"
    return None


def validate_value(key: str, value: float) -> str | None:
    """Kafka's check of a quota key and value (validateQuotaKeyValue), as the INVALID_REQUEST message."""
    if key not in QUOTA_KEYS:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if key not in ENFORCED_KEYS:
        return f"Quota {key} is not enforced by this broker"
    if QUOTA_KEYS[key]:
        if value > _LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if abs(math.fmod(value, 1.0)) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def _quotas_json(quotas: Mapping[Entity, Mapping[str, float]]) -> list[dict[str, Any]]:
    return [{"entity": dict(entity), "quotas": dict(sorted(values.items()))}
            for entity, values in sorted(quotas.items(), key=lambda item: [(k, n or "") for k, n in item[0]])]


def _entity_from_file(path: str, raw: Any) -> Entity:
    if not isinstance(raw, dict) or not raw:
        raise CorruptCheckpointError(path, 1, f"entity {raw!r} is not a non-empty object")
    pairs = [(kind, name) for kind, name in raw.items()]
    if any(not isinstance(name, (str, type(None))) for _, name in pairs) or validate_entity(pairs) is not None:
        raise CorruptCheckpointError(path, 1, f"entity {raw!r}: {validate_entity(pairs) or 'names must be strings'}")
    return entity_of(pairs)


def read_client_quotas(path: str, fs: FileSystem = OS) -> tuple[int, dict[Entity, dict[str, float]]]:
    """(generation, quotas per entity) of one `client-quotas` file; FileNotFoundError if there is none."""
    generation, entities = CLIENT_QUOTAS_COPIES.read(path, fs)
    quotas: dict[Entity, dict[str, float]] = {}
    for item in entities:
        if not isinstance(item, dict) or set(item) != {"entity", "quotas"} or not isinstance(item["quotas"], dict):
            raise CorruptCheckpointError(path, 1, f"expected an object of entity and quotas, found {item!r}")
        entity = _entity_from_file(path, item["entity"])
        if entity in quotas:
            raise CorruptCheckpointError(path, 1, f"entity {entity_text(entity)} is listed twice")
        values: dict[str, float] = {}
        for key, value in item["quotas"].items():
            bad = ("not a number" if not isinstance(value, (int, float)) or isinstance(value, bool)
                   else validate_value(key, float(value)))
            if bad is not None:
                raise CorruptCheckpointError(path, 1, f"{entity_text(entity)} {key}={value!r}: {bad}")
            values[key] = float(value)
        if values:
            quotas[entity] = values
    return generation, quotas


class QuotaStore:
    """The `client-quotas` copies of a broker's log dirs: read once at start, each change written to
    every copy before it applies. Not thread-safe: the quota manager serialises calls."""

    def __init__(self, log_dirs: Sequence[str], fs: FileSystem = OS):
        self.log_dirs = list(log_dirs)
        self.fs = fs
        self.generation = 0

    def load(self) -> dict[Entity, dict[str, float]]:
        """The quotas of the copy with the highest generation (none if no copy exists)."""
        found = CLIENT_QUOTAS_COPIES.read_newest(self.log_dirs, lambda path: read_client_quotas(path, self.fs))
        self.generation, quotas = found or (0, {})
        return quotas

    def save(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """Replace every copy with `quotas` (StorageIOError if a write fails)."""
        # Raised before writing: a generation half-written by a failed write is never reused.
        self.generation += 1
        CLIENT_QUOTAS_COPIES.write(self.log_dirs, self.generation, _quotas_json(quotas), self.fs)
