"""Client quotas as Kafka enforces them: byte rates and request time per user and client id.

Three quota types, each its own `QuotaManager` (Kafka's ClientQuotaManager and
ClientRequestQuotaManager): `producer_byte_rate` (bytes of Produce requests
per second), `consumer_byte_rate` (bytes of Fetch responses per second),
`request_percentage` (time spent handling the client's requests, as a
percentage of one thread).

Which quota applies (the most specific wins; user is the request principal's
name, client id the request header's):

    1. user + client-id       2. user + default client-id     3. user
    4. default user + client-id   5. default user + default client-id
    6. default user           7. client-id                    8. default client-id

Usage is recorded per sensor, whose key keeps only what the matched level
names (a `client-id` quota is shared by every user of that client id, a `user`
quota by every client of that user), as Kafka's DefaultQuotaCallback tags it.
A sensor is a `SampledRate` over `quota.window.num` samples of
`quota.window.size.seconds` each. Recording a value over the quota gives the
throttle time Kafka computes (QuotaUtils.throttleTime): the delay X that
brings the observed rate O back to the bound T over the window W,
X = (O - T) / T * W, in ms; for request time it is bounded by one window
(boundedThrottleTime). Sensors idle for an hour are dropped.

Thread-safe: one lock per manager, held for a lookup and a record (no I/O);
`ClientQuotas.alter` writes the file under its own lock before it applies.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from logstore.broker.quota_store import CLIENT_ID, USER, Entity, QuotaStore, entity_of, validate_entity, validate_value
from logstore.filesystem import OS, FileSystem

if TYPE_CHECKING:
    from logstore.broker.config import BrokerConfig

__all__ = ["PRODUCE", "FETCH", "REQUEST", "ClientQuotas", "QuotaManager", "SampledRate", "Alteration",
           "throttle_time", "monotonic_ms"]

PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000
# Kafka's quotaTypesEnabled bits: which levels have a quota, so the sensor key needs no lookup when one does.
_CLIENT_ID_ENABLED, _USER_ENABLED, _USER_CLIENT_ID_ENABLED = 1, 2, 4
_NO_QUOTA = float(2**63 - 1)     # Kafka's Long.MAX_VALUE bound when nothing applies


def monotonic_ms() -> int:
    """The clock quotas run on, in ms (monotonic: a wall-clock step must not free or throttle anyone)."""
    return time.monotonic_ns() // 1_000_000


@dataclass
class _Sample:
    start_ms: int
    value: float = 0.0
    events: int = 0


@dataclass
class SampledRate:
    """Kafka's Rate over a SampledTotal: the sum recorded in the last `samples` windows of `window_ms`,
    per second. Not thread-safe (its manager's lock)."""

    samples: int
    window_ms: int
    _ring: list[_Sample] = field(default_factory=list)
    _current: int = 0
    last_record_ms: int = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add `value` at `now_ms` (a new sample once the current one's window is over)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._ring):
                self._ring.append(_Sample(now_ms))
            else:
                self._ring[self._current] = _Sample(now_ms)
            sample = self._ring[self._current]
        sample.value += value
        sample.events += 1
        self.last_record_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._ring:
            self._ring.append(_Sample(now_ms))
        return self._ring[self._current]

    def _purge(self, now_ms: int) -> None:
        # Samples older than the whole window count for nothing (reset to start now, as Kafka does).
        expire = self.samples * self.window_ms
        for i, sample in enumerate(self._ring):
            if now_ms - sample.start_ms >= expire:
                self._ring[i] = _Sample(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is taken over: since the oldest sample began, and at least `samples - 1`
        whole windows (so a young sensor does not see a burst as a huge rate)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._ring), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        """The rate per second at `now_ms`."""
        window = self.window_size_ms(now_ms)
        total = sum(s.value for s in self._ring)
        return total / (window / 1000) if window > 0 else 0.0


def throttle_time(rate: float, bound: float, window_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: ms without records that bring `rate` back to `bound`."""
    return round((rate - bound) / bound * window_ms)


@dataclass
class _Sensor:
    rate: SampledRate
    bound: float
    throttle_ms_total: int = 0          # what was asked of the client so far (Kafka's throttle-time sensor)


class QuotaManager:
    """One quota type's overrides and sensors (Kafka's ClientQuotaManager with its DefaultQuotaCallback).

    Owns: the quota per entity (the 8 precedence levels above) and one `SampledRate` per sensor key
    (user tag, client-id tag). Values are bytes (byte rates) or percent of one thread (request time);
    times are ms on `clock`. Thread-safe.
    """

    def __init__(self, quota_type: str, samples: int, window_seconds: int, *,
                 clock: Callable[[], int] = monotonic_ms, bounded: bool = False):
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.clock = clock
        self.bounded = bounded
        self._lock = threading.Lock()
        self._overrides: dict[Entity, float] = {}
        self._enabled = 0
        self._sensors: dict[tuple[str, str], _Sensor] = {}

    # -- configuration -------------------------------------------------------------------------

    def set_quotas(self, overrides: Mapping[Entity, float]) -> None:
        """Replace every override of this type; live sensors take their new bounds at once."""
        with self._lock:
            self._overrides = dict(overrides)
            enabled = 0
            for entity in self._overrides:
                kinds = {kind for kind, _ in entity}
                enabled |= (_USER_CLIENT_ID_ENABLED if kinds == {USER, CLIENT_ID}
                            else _USER_ENABLED if kinds == {USER} else _CLIENT_ID_ENABLED)
            self._enabled = enabled
            # A client whose key the new levels change gets a fresh sensor; one that keeps its key keeps
            # its usage under the new bound (Kafka's updateQuotaMetricConfigs).
            for key, sensor in self._sensors.items():
                sensor.bound = self._limit(*key)

    @property
    def enabled(self) -> bool:
        """Whether any quota of this type is set (Kafka records nothing otherwise)."""
        return self._enabled != 0

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to (user, client id), None if none does."""
        with self._lock:
            limit = self._limit(*self._key(user, client_id))
        return None if limit == _NO_QUOTA else limit

    def _find(self, *entity: tuple[str, str | None]) -> float | None:
        return self._overrides.get(entity_of(entity))

    def _limit(self, user: str, client_id: str) -> float:
        """The bound of a sensor key (Kafka's DefaultQuotaCallback.quotaLimit)."""
        found: float | None = None
        if user and client_id:
            found = next((q for q in (self._find((USER, user), (CLIENT_ID, client_id)),
                                      self._find((USER, user), (CLIENT_ID, None)),
                                      self._find((USER, None), (CLIENT_ID, client_id)),
                                      self._find((USER, None), (CLIENT_ID, None))) if q is not None), None)
        elif user:
            found = next((q for q in (self._find((USER, user)), self._find((USER, None))) if q is not None), None)
        elif client_id:
            found = next((q for q in (self._find((CLIENT_ID, client_id)), self._find((CLIENT_ID, None)))
                          if q is not None), None)
        return _NO_QUOTA if found is None else found

    def _key(self, user: str, client_id: str) -> tuple[str, str]:
        """The sensor key of a client: the tags the most specific matching level names."""
        enabled = self._enabled
        if enabled in (0, _CLIENT_ID_ENABLED):
            return "", client_id
        if enabled == _USER_ENABLED:
            return user, ""
        if enabled == _USER_CLIENT_ID_ENABLED:
            return user, client_id
        has = self._overrides.__contains__
        if has(entity_of([(USER, user), (CLIENT_ID, client_id)])) or has(entity_of([(USER, user), (CLIENT_ID, None)])):
            return user, client_id
        if has(((USER, user),)):
            return user, ""
        if has(entity_of([(USER, None), (CLIENT_ID, client_id)])) or has(entity_of([(USER, None), (CLIENT_ID, None)])):
            return user, client_id
        if has(((USER, None),)):
            return user, ""
        return "", client_id

    # -- recording -----------------------------------------------------------------------------

    def _sensor(self, user: str, client_id: str, now_ms: int) -> _Sensor:
        key = self._key(user, client_id)
        sensor = self._sensors.get(key)
        if sensor is None:
            self._expire(now_ms)
            sensor = self._sensors[key] = _Sensor(SampledRate(self.samples, self.window_ms), self._limit(*key))
        return sensor

    def _expire(self, now_ms: int) -> None:
        for key, sensor in list(self._sensors.items()):
            if now_ms - sensor.rate.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS:
                del self._sensors[key]

    def record(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
        """Record `value` for the client and return its throttle time in ms (0 within the quota)."""
        if not self._enabled:
            return 0
        now = self.clock() if now_ms is None else now_ms
        with self._lock:
            sensor = self._sensor(user, client_id, now)
            sensor.rate.record(value, now)
            rate = sensor.rate.measure(now)
            if rate <= sensor.bound:
                return 0
            ms = throttle_time(rate, sensor.bound, sensor.rate.window_size_ms(now))
            if self.bounded:
                ms = min(ms, self.window_ms)
            return max(ms, 0)

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Record `value` without a quota check (counted at the client's next request)."""
        if not self._enabled:
            return
        now = self.clock() if now_ms is None else now_ms
        with self._lock:
            self._sensor(user, client_id, now).rate.record(value, now)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Take back a recorded value (a throttled Fetch sends nothing, so its bytes must not count)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def throttled(self, user: str, client_id: str, ms: int) -> None:
        """Note that the client was told to wait `ms` (Kafka's throttle-time sensor)."""
        if ms > 0:
            with self._lock:
                sensor = self._sensors.get(self._key(user, client_id))
                if sensor is not None:
                    sensor.throttle_ms_total += ms

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without a certain throttle: bound × (samples - 1) ×
        window seconds (what a Fetch may return at most)."""
        if not self._enabled:
            return _NO_QUOTA
        with self._lock:
            bound = self._limit(*self._key(user, client_id))
        return bound * (self.samples - 1) * self.window_ms / 1000


@dataclass(frozen=True)
class Alteration:
    """One entity's changes of an AlterClientQuotas: key → new value, or None to remove it."""

    entity: Sequence[tuple[str, str | None]]
    ops: Sequence[tuple[str, float | None]]


class ClientQuotas:
    """The broker's client quotas: the configs per entity (persisted in `client-quotas`) and a
    `QuotaManager` per type. Thread-safe; `alter` writes the file before the change applies."""

    def __init__(self, log_dirs: Sequence[str], samples: int, window_seconds: int, *, fs: FileSystem = OS,
                 clock: Callable[[], int] = monotonic_ms):
        self.store = QuotaStore(log_dirs, fs)
        self._lock = threading.Lock()
        self.produce = QuotaManager(PRODUCE, samples, window_seconds, clock=clock)
        self.fetch = QuotaManager(FETCH, samples, window_seconds, clock=clock)
        self.request = QuotaManager(REQUEST, samples, window_seconds, clock=clock, bounded=True)
        self._configs: dict[Entity, dict[str, float]] = self.store.load()
        self._apply()

    @classmethod
    def of_broker(cls, config: BrokerConfig, fs: FileSystem = OS) -> ClientQuotas:
        """The quotas of a broker: its log dirs' `client-quotas`, its `quota.window.*` settings."""
        return cls(config.log_dirs, config["quota.window.num"], config["quota.window.size.seconds"], fs=fs)

    def _apply(self) -> None:
        for manager in (self.produce, self.fetch, self.request):
            manager.set_quotas({entity: values[manager.quota_type] for entity, values in self._configs.items()
                                if manager.quota_type in values})

    def configs(self) -> dict[Entity, dict[str, float]]:
        """A copy of every entity's quota configs."""
        with self._lock:
            return {entity: dict(values) for entity, values in self._configs.items()}

    def alter(self, alterations: Iterable[Alteration], validate_only: bool = False) -> list[str | None]:
        """Apply Kafka's AlterClientQuotas: per alteration, None or its INVALID_REQUEST message. Valid
        entities change together, in one write (StorageIOError if it fails: nothing changes)."""
        with self._lock:
            results: list[str | None] = []
            changed = {entity: dict(values) for entity, values in self._configs.items()}
            seen: set[Entity] = set()
            for alteration in alterations:
                error, entity, updates = _check(alteration, seen)
                results.append(error)
                if error is not None or entity is None:
                    continue
                values = changed.setdefault(entity, {})
                for key, value in updates.items():
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if not values:
                    del changed[entity]
            if not validate_only and changed != self._configs:
                self.store.save(changed)
                self._configs = changed
                self._apply()
            return results


def _check(alteration: Alteration, seen: set[Entity]) -> tuple[str | None, Entity | None, dict[str, float | None]]:
    """Kafka's checks of one alteration, in its order: keys named twice, the entity named twice, the
    entity, each value. (error, entity, key → new value or None)."""
    pairs = list(alteration.entity)
    updates: dict[str, float | None] = {}
    twice = False
    for key, value in alteration.ops:
        if key in updates:
            twice = True
        updates[key] = value
    entity_error = validate_entity(pairs)
    entity = entity_of(pairs) if entity_error is None else tuple(pairs)
    # Kafka answers both a repeated key and a repeated entity with the repeated entity's message.
    if twice or entity in seen:
        return f"Ignoring duplicate entity {_kafka_entity(entity)}", None, {}
    seen.add(entity)
    if entity_error is not None:
        return entity_error, None, {}
    for key, value in updates.items():
        if value is not None and (bad := validate_value(key, value)) is not None:
            return bad, None, {}
    return None, entity, updates


def _kafka_entity(entity: Entity) -> str:
    return "ClientQuotaEntity(entries=" + "{" + ", ".join(f"{k}={n}" for k, n in entity) + "})"
