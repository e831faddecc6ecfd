"""Group configs (config resource GROUP, 32): Kafka's GroupConfig names, their checks, and the `group-configs`
file that keeps each group's overrides.

A group's config overrides the broker's group settings for that group alone
(KIP-848's `consumer.*`, KIP-932's `share.*`, KIP-1071's `streams.*`). A
group need not exist to hold configs: they are set before its first member
joins, as Kafka allows. Each name without an override runs with the broker's
`group.<name>` setting where the broker has one (`group.consumer.session.timeout.ms`
for `consumer.session.timeout.ms`), else Kafka's GroupConfig default.

Checks, as Kafka's GroupConfig.validate (the whole resulting config of the
group over the broker's values, INVALID_CONFIG with Kafka's messages):
unknown names ("Unknown group config name: x"); each value parsed as Kafka's
ConfigDef parses its type, with its lower bound ("Invalid value v for
configuration x: Value must be at least 1"); then the broker's min/max
settings ("consumer.session.timeout.ms must be greater than or equal to
group.consumer.min.session.timeout.ms"); then a session timeout above its
heartbeat interval. `share.auto.offset.reset` is `latest`, `earliest` or
`by_duration:<ISO-8601 duration>` (not negative); `share.isolation.level`
is `read_committed` or `read_uncommitted`.

A stored value later outside the broker's bounds (the broker restarted with
narrower ones) runs clamped to them, as Kafka's GroupConfig.evaluate does.

The file: one copy at the root of every log dir (the `logstore.generation_files` layout):

    {"version": 0, "generation": <n>, "groups": {"<group id>": {"consumer.session.timeout.ms": "2000"}}}

values as Kafka's ConfigDef writes them (text). A change is written to every
copy before it is answered and before it applies; a name or value a copy
holds that this broker cannot take (a hand edit, a broker with other bounds)
is left out with a warning, as Kafka ignores an invalid stored config. A
write that fails part-way changes nothing: the old configs are written back
over any copy that took the change, under a newer generation.
"""
from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from logstore.checkpoints import CorruptCheckpointError
from logstore.errors import InvalidConfigError, StorageError
from logstore.filesystem import OS, FileSystem
from logstore.generation_files import GenerationFile

__all__ = ["GROUP_CONFIGS", "GROUP_CONFIGS_FILE", "GroupConfigDef", "GroupConfigStore", "auto_offset_reset",
           "broker_default", "broker_name", "checked_configs", "parse_value", "text_of"]

log = logging.getLogger(__name__)

GROUP_CONFIGS_FILE = "group-configs"
GROUP_CONFIGS_COPIES = GenerationFile(GROUP_CONFIGS_FILE, "groups")
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class GroupConfigDef:
    """One of Kafka's group configs: its ConfigDef type (INT, STRING, BOOLEAN), Kafka's default, its lower
    bound, the broker settings of its min and max (with Kafka's defaults of those, for a broker without
    them), and its documentation."""

    name: str
    config_type: str
    default: Any
    doc: str
    at_least: int | None = None
    bounds: tuple[str | None, str] | None = None
    bound_defaults: tuple[int | None, int] | None = None
    choices: tuple[str, ...] = ()


def _ranged(name: str, default: int, doc: str, at_least: int, bound_defaults: tuple[int, int]) -> GroupConfigDef:
    """An INT group config `<kind>.<rest>` bounded by the broker settings Kafka names for it,
    `group.<kind>.min.<rest>` and `group.<kind>.max.<rest>` (with Kafka's defaults of those)."""
    kind, rest = name.split(".", 1)
    return GroupConfigDef(name, "INT", default, doc, at_least, (f"group.{kind}.min.{rest}", f"group.{kind}.max.{rest}"),
                          bound_defaults)


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    _ranged("consumer.session.timeout.ms", 45_000,
            "The timeout to detect client failures when using the consumer group protocol.", 1, (45_000, 60_000)),
    _ranged("consumer.heartbeat.interval.ms", 5_000,
            "The heartbeat interval given to the members of a consumer group.", 1, (5_000, 15_000)),
    _ranged("share.session.timeout.ms", 45_000,
            "The timeout to detect client failures when using the share group protocol.", 1, (45_000, 60_000)),
    _ranged("share.heartbeat.interval.ms", 5_000,
            "The heartbeat interval given to the members of a share group.", 1, (5_000, 15_000)),
    _ranged("share.record.lock.duration.ms", 30_000,
            "The record acquisition lock duration in milliseconds for share groups.", 1_000, (15_000, 60_000)),
    _ranged("share.delivery.count.limit", 5,
            "The maximum number of delivery attempts for a record delivered to a share group.", 2, (2, 10)),
    _ranged("share.partition.max.record.locks", 2_000,
            "Share-group record lock limit per share-partition.", 100, (100, 10_000)),
    GroupConfigDef("share.auto.offset.reset", "STRING", "latest",
                   "The strategy to initialize the share-partition start offset: earliest, latest, or "
                   "by_duration:<ISO-8601 duration> (PnDTnHnMn.nS, not negative) for the first offset whose "
                   "timestamp is at most that long ago."),
    GroupConfigDef("share.isolation.level", "STRING", "read_uncommitted",
                   "Controls how to read records written transactionally: read_committed delivers only committed "
                   "transactional records (below the last stable offset, aborted ones left out); read_uncommitted "
                   "delivers every record.", choices=("read_committed", "read_uncommitted")),
    GroupConfigDef("share.renew.acknowledge.enable", "BOOLEAN", True,
                   "Whether the renew acknowledge type is enabled for the share group."),
    _ranged("streams.session.timeout.ms", 45_000,
            "The timeout to detect client failures when using the streams group protocol. Kept and shown; "
            "streams groups are not served by this broker.", 1, (45_000, 60_000)),
    _ranged("streams.heartbeat.interval.ms", 5_000,
            "The heartbeat interval given to the members of a streams group. Kept and shown; streams groups "
            "are not served by this broker.", 1, (5_000, 15_000)),
    GroupConfigDef("streams.num.standby.replicas", "INT", 0,
                   "The number of standby replicas for each task of a streams group. Kept and shown; streams groups "
                   "are not served by this broker.", 0, (None, "group.streams.max.standby.replicas"), (None, 2)),
    GroupConfigDef("streams.initial.rebalance.delay.ms", "INT", 3_000,
                   "The delay before the first rebalance of a streams group. Kept and shown; streams groups are not "
                   "served by this broker.", 0),
)}
# (session timeout, heartbeat interval) pairs: the session must be longer (Kafka's last checks).
_SESSION_PAIRS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                  ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                  ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))
# The order Kafka's validateValues checks the broker's bounds in.
_BOUNDS_ORDER = ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.heartbeat.interval.ms",
                 "share.session.timeout.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
                 "share.partition.max.record.locks", "streams.heartbeat.interval.ms", "streams.session.timeout.ms",
                 "streams.num.standby.replicas")
# java.time.Duration.parse's grammar (case-insensitive): days, hours, minutes, seconds with up to 9 decimals.
_ISO_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                           r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


def broker_name(name: str) -> str:
    """The broker setting whose value is a group config's default (Kafka's GROUP_PREFIX + name)."""
    return "group." + name


def _iso_duration_ms(text: str) -> int:
    """An ISO-8601 duration (java.time.Duration.parse's form) in ms; ValueError if malformed or negative."""
    match = _ISO_DURATION.fullmatch(text)
    if match is None or match.group(3) == "T" or not any(match.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(text)
    days, hours, minutes, seconds = (int(match.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = (match.group(7) or "").ljust(9, "0")
    nanos = int(fraction) * (-1 if match.group(6) and match.group(6).startswith("-") else 1)
    total_ns = ((days * 86_400 + hours * 3_600 + minutes * 60 + seconds) * 1_000_000_000 + nanos)
    if match.group(1) == "-":
        total_ns = -total_ns
    if total_ns < 0:
        raise ValueError(text)
    return total_ns // 1_000_000


def auto_offset_reset(value: str) -> tuple[str, int | None]:
    """`share.auto.offset.reset` as (strategy, duration in ms): ("latest", None), ("earliest", None) or
    ("by_duration", ms); ValueError with Kafka's message if it is none of them."""
    if value in ("latest", "earliest"):
        return value, None
    if value.startswith("by_duration:"):
        try:
            return "by_duration", _iso_duration_ms(value[len("by_duration:"):])
        except ValueError:
            pass
    raise ValueError(f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
                     f"'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")


def _refused(name: str, value: object, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {why}")


def parse_value(name: str, value: Any) -> Any:
    """A value of group config `name` as Kafka's ConfigDef parses it (int, str or bool), its lower bound and
    allowed strings checked; InvalidConfigError with Kafka's ConfigException text."""
    spec = GROUP_CONFIGS[name]
    if spec.config_type == "INT":
        try:
            number = int(str(value).strip())
        except ValueError:
            raise _refused(name, value, "Not a number of type INT") from None
        if not -INT_MAX - 1 <= number <= INT_MAX:
            raise _refused(name, value, "Not a number of type INT")
        if spec.at_least is not None and number < spec.at_least:
            raise _refused(name, number, f"Value must be at least {spec.at_least}")
        return number
    if spec.config_type == "BOOLEAN":
        if isinstance(value, bool):
            return value
        lowered = str(value).strip().lower()
        if lowered not in ("true", "false"):
            raise _refused(name, value, "Expected value to be either true or false")
        return lowered == "true"
    text = str(value).strip()
    if spec.choices and text not in spec.choices:
        raise _refused(name, text, "String must be one of: " + ", ".join(spec.choices))
    if name == "share.auto.offset.reset":
        try:
            auto_offset_reset(text)
        except ValueError as exc:
            raise _refused(name, text, str(exc)) from None
    return text


def text_of(value: Any) -> str:
    """A parsed value as Kafka's ConfigDef.convertToString writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _bounds(name: str, settings: Mapping[str, Any]) -> tuple[int | None, int | None, str | None, str | None]:
    """(min, max, min's setting, max's setting) of a group config under the broker's settings."""
    spec = GROUP_CONFIGS[name]
    if spec.bounds is None or spec.bound_defaults is None:
        return None, None, None, None
    (low_name, high_name), (low_default, high_default) = spec.bounds, spec.bound_defaults
    low = settings.get(low_name, low_default) if low_name is not None else None
    return low, settings.get(high_name, high_default), low_name, high_name


def broker_default(name: str, settings: Mapping[str, Any]) -> Any:
    """What a group config is without an override: the broker's `group.<name>` setting, else Kafka's default."""
    return settings.get(broker_name(name), GROUP_CONFIGS[name].default)


def checked_configs(configs: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, str]:
    """A group's overrides checked as Kafka's GroupConfig.validate checks them over the broker's values, in its
    order (names, each value, the broker's bounds, sessions above heartbeats); Kafka's text of each value.
    InvalidConfigError with Kafka's message on the first failure."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise InvalidConfigError(f"Unknown group config name: {name}")
    parsed = {name: parse_value(name, configs[name]) for name in GROUP_CONFIGS if name in configs}
    merged = {name: parsed[name] if name in parsed else broker_default(name, settings) for name in GROUP_CONFIGS}
    for name in _BOUNDS_ORDER:
        low, high, low_name, high_name = _bounds(name, settings)
        if low is not None and merged[name] < low:
            raise InvalidConfigError(f"{name} must be greater than or equal to {low_name}")
        if high is not None and merged[name] > high:
            raise InvalidConfigError(f"{name} must be less than or equal to {high_name}")
    for session, heartbeat in _SESSION_PAIRS:
        if merged[session] <= merged[heartbeat]:
            raise InvalidConfigError(f"{session} must be greater than {heartbeat}")
    return {name: text_of(value) for name, value in parsed.items()}


def _read_copy(path: str, fs: FileSystem) -> tuple[int, dict[str, dict[str, str]]]:
    generation, body = GROUP_CONFIGS_COPIES.read(path, fs)
    for group_id, configs in body.items():
        if not group_id:
            raise CorruptCheckpointError(path, 1, "a group with an empty id")
        if not isinstance(configs, dict) or not configs:
            raise CorruptCheckpointError(path, 1, f"group {group_id!r}: expected a non-empty object of configs")
        for name, value in configs.items():
            if not isinstance(value, str):
                raise CorruptCheckpointError(path, 1, f"group {group_id!r}: {name}={value!r} is not text")
    return generation, body


class GroupConfigStore:
    """Every group's config overrides, kept in `group-configs` in every log dir.

    Readers (`value`, `overrides`, `stored`) take no lock: they read a frozen
    mapping that a change replaces whole once it is durable, so the group
    coordinator may read under its own lock while a change waits for its
    fsync. Changes run one at a time under the store's write lock (a leaf:
    nothing else is taken under it); listeners are called after it is
    released, from the changing thread, with the group id. Task-safe; times
    are ms.
    """

    def __init__(self, log_dirs: Sequence[str], settings: Callable[[], Mapping[str, Any]], fs: FileSystem = OS):
        self._log_dirs = list(log_dirs)
        self._settings = settings
        self._fs = fs
        self._write_lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []
        found = GROUP_CONFIGS_COPIES.read_newest(self._log_dirs, lambda path: _read_copy(path, fs))
        self._generation, body = found or (0, {})
        self._groups: Mapping[str, Mapping[str, str]] = self._usable(body)

    def _usable(self, body: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        """The stored configs this broker can take (known names, values of their type); each other one is left
        out with a warning. Bounds are not checked here: `value` clamps to the broker's current ones."""
        usable: dict[str, dict[str, str]] = {}
        for group_id, configs in body.items():
            kept: dict[str, str] = {}
            for name, value in configs.items():
                try:
                    if name not in GROUP_CONFIGS:
                        raise InvalidConfigError(f"Unknown group config name: {name}")
                    kept[name] = text_of(parse_value(name, value))
                except InvalidConfigError as exc:
                    log.warning("group-configs: group %r: %s=%s left out: %s", group_id, name, value, exc)
            if kept:
                usable[group_id] = kept
        return usable

    # -- what the coordinators read ------------------------------------------------------------

    def value(self, group_id: str, name: str) -> Any:
        """The value group `group_id` runs with for config `name` (int, str or bool): its override, clamped to
        the broker's current bounds as Kafka's evaluate does, else the broker's default."""
        settings = self._settings()
        stored = self._groups.get(group_id, {}).get(name)
        if stored is None:
            return broker_default(name, settings)
        value = parse_value(name, stored)
        low, high, _, _ = _bounds(name, settings)
        if low is not None and value < low:
            return low
        if high is not None and value > high:
            return high
        return value

    def overrides(self, group_id: str) -> dict[str, Any]:
        """The group's overrides, typed as `value` gives them (clamped); {} if it has none."""
        return {name: self.value(group_id, name) for name in self._groups.get(group_id, {})}

    def stored(self, group_id: str) -> dict[str, str]:
        """The group's overrides as kept (Kafka's text); {} if it has none."""
        return dict(self._groups.get(group_id, {}))

    def group_ids(self) -> list[str]:
        """The groups that hold configs, sorted."""
        return sorted(self._groups)

    def listen(self, callback: Callable[[str], None]) -> None:
        """Call `callback(group_id)` after each change of a group's configs is durable (from that thread)."""
        self._listeners.append(callback)

    # -- changes -------------------------------------------------------------------------------

    def alter(self, group_id: str, change: Callable[[dict[str, str]], Mapping[str, str]], *,
              validate_only: bool = False) -> dict[str, str]:
        """Replace the group's overrides with `change(current)`, checked as Kafka checks them (InvalidConfigError,
        nothing changed), written to every copy, then applied and told to the listeners; the overrides kept.
        `validate_only` stops after the checks."""
        with self._write_lock:
            current = self.stored(group_id)
            configs = checked_configs(change(dict(current)), self._settings())
            if validate_only or configs == current:
                return configs
            self._replace(group_id, configs)
        self._tell(group_id)
        return configs

    def remove_group(self, group_id: str) -> bool:
        """Drop every config of a group (its deletion); whether it had any."""
        with self._write_lock:
            if group_id not in self._groups:
                return False
            self._replace(group_id, {})
        self._tell(group_id)
        return True

    def _replace(self, group_id: str, configs: Mapping[str, str]) -> None:
        groups = {g: dict(c) for g, c in self._groups.items() if g != group_id}
        if configs:
            groups[group_id] = dict(configs)
        try:
            self._write(groups)
        except BaseException:
            # A copy written before the failure holds the change under a newer generation: the old configs go
            # back over it, so a restart never finds a change that was refused.
            try:
                self._write(self._groups)
            except (OSError, StorageError) as again:
                log.warning("%s not restored after a failed write (%s): a copy may hold the change",
                            GROUP_CONFIGS_FILE, again)
            raise
        self._groups = groups

    def _write(self, groups: Mapping[str, Mapping[str, str]]) -> None:
        # Raised first: a generation a failed write half-wrote is never written again with other contents.
        self._generation += 1
        GROUP_CONFIGS_COPIES.write(self._log_dirs, self._generation, {g: dict(c) for g, c in groups.items()},
                                   self._fs)

    def _tell(self, group_id: str) -> None:
        for callback in list(self._listeners):
            try:
                callback(group_id)
            except Exception:  # noqa: BLE001 - a listener's failure must not undo a durable change
                log.exception("group %r: a listener of its config change failed", group_id)
