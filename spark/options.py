"""The source's options, named as Spark's Kafka source names them, parsed into one typed object.

Offsets per partition are JSON as Spark writes them: `{"orders": {"0": 23, "1": -2}}` with -2 for
the earliest offset and -1 for the latest; `earliest` / `latest` stand for every partition.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from logstore.read_committed import ISOLATION_LEVELS, READ_COMMITTED

EARLIEST = -2
LATEST = -1

SUBSCRIBE_OPTIONS = ("subscribe", "subscribePattern", "assign")

Getter = Callable[[str], str | None]
"""An option's value by its name, case-insensitively; None when it is not given."""


class OptionError(ValueError):
    """An option missing, malformed, or not allowed for this kind of query."""


@dataclass(frozen=True)
class Bound:
    """Where a scan starts or ends in every partition: a default, per-partition overrides, and
    whether the numbers are offsets or timestamps (ms)."""

    default: int | None
    """EARLIEST, LATEST, a timestamp, or None when only `per_partition` says."""
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    by_timestamp: bool = False


@dataclass(frozen=True)
class SourceOptions:
    """Every option the source understands."""

    paths: tuple[str, ...]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: Bound = Bound(EARLIEST)
    ending: Bound = Bound(LATEST)
    starting_strategy_latest: bool = False
    """startingOffsetsByTimestampStrategy=latest: a partition with no record that late starts at its end."""
    isolation: str = READ_COMMITTED
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None

    def selects(self, topic: str, partition: int) -> bool:
        """Whether the subscription covers this partition."""
        if self.assign:
            return (topic, partition) in self.assign
        if self.subscribe:
            return topic in self.subscribe
        # Kafka's pattern subscriptions leave internal topics out (exclude.internal.topics). parse_options
        # sets exactly one of assign, subscribe and pattern, so pattern is set here.
        return (not topic.startswith("__") and self.pattern is not None
                and re.fullmatch(self.pattern, topic) is not None)


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check and type the options of one query; OptionError names what is wrong."""
    opts = {k.lower(): v for k, v in options.items()}

    def get(name: str) -> str | None:
        return opts.get(name.lower())

    raw_paths = get("path") or get("paths")
    if not raw_paths:
        raise OptionError("option 'path' (a logstore or Kafka log dir; several separated by commas) is required")
    if raw_paths.startswith("["):
        paths = tuple(json.loads(raw_paths))
    else:
        paths = tuple(p.strip() for p in raw_paths.split(",") if p.strip())

    subscriptions = {name: given_value for name in SUBSCRIBE_OPTIONS if (given_value := get(name))}
    given = list(subscriptions)
    if len(given) != 1:
        raise OptionError(f"exactly one of {', '.join(SUBSCRIBE_OPTIONS)} must be given, found {given or 'none'}")
    kind, value = next(iter(subscriptions.items()))
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    if kind == "subscribe":
        subscribe = tuple(t.strip() for t in value.split(",") if t.strip())
        if not subscribe:
            raise OptionError("option 'subscribe' lists no topic")
    elif kind == "subscribePattern":
        pattern = value
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"subscribePattern {pattern!r} is not a regular expression: {exc}") from None
    else:
        assign = tuple(sorted(_parse_assign(value)))

    isolation = get("isolation.level") or get("kafka.isolation.level") or READ_COMMITTED
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(f"isolation.level must be one of {ISOLATION_LEVELS}, got {isolation!r}")

    starting = _bound(get, "starting", EARLIEST if not streaming else LATEST)
    ending = _bound(get, "ending", LATEST)
    if streaming and (get("endingOffsets") or get("endingTimestamp") or get("endingOffsetsByTimestamp")):
        raise OptionError("ending offsets and timestamps are for batch queries only")
    if not streaming:
        if not starting.by_timestamp and (starting.default == LATEST or LATEST in starting.per_partition.values()):
            raise OptionError("startingOffsets cannot be 'latest' (-1) in a batch query")
        if not ending.by_timestamp and (ending.default == EARLIEST or EARLIEST in ending.per_partition.values()):
            raise OptionError("endingOffsets cannot be 'earliest' (-2) in a batch query")
    strategy = (get("startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}")

    return SourceOptions(
        paths=paths, subscribe=subscribe, pattern=pattern, assign=assign,
        starting=starting, ending=ending, starting_strategy_latest=strategy == "latest",
        isolation=isolation,
        min_partitions=_positive_int(get, "minPartitions"),
        fail_on_data_loss=_boolean(get, "failOnDataLoss", True),
        include_headers=_boolean(get, "includeHeaders", False),
        max_offsets_per_trigger=_positive_int(get, "maxOffsetsPerTrigger"),
    )


def _bound(get: Getter, side: str, default: int) -> Bound:
    # Spark's precedence: one timestamp for all, then timestamps per partition, then offsets.
    timestamp = get(f"{side}Timestamp")
    if timestamp is not None:
        return Bound(_integer(f"{side}Timestamp", timestamp, minimum=0), by_timestamp=True)
    by_timestamp = get(f"{side}OffsetsByTimestamp")
    if by_timestamp is not None:
        return Bound(None, _partition_json(f"{side}OffsetsByTimestamp", by_timestamp, minimum=0),
                     by_timestamp=True)
    offsets = get(f"{side}Offsets")
    if offsets is None:
        return Bound(default)
    word = offsets.strip().lower()
    if word in ("earliest", "latest"):
        return Bound(EARLIEST if word == "earliest" else LATEST)
    return Bound(None, _partition_json(f"{side}Offsets", offsets, minimum=EARLIEST))


def _partition_json(name: str, text: str, *, minimum: int) -> dict[tuple[str, int], int]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{name} is neither 'earliest', 'latest' nor JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"{name} must be a JSON object of topic → {{partition: value}}")
    found: dict[tuple[str, int], int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"{name}: topic {topic!r} must map partition numbers to values")
        for partition, value in partitions.items():
            found[(topic, _integer(f"{name} partition", partition, minimum=0))] = \
                _integer(f"{name} of {topic}-{partition}", value, minimum=minimum)
    return found


def _parse_assign(text: str) -> set[tuple[str, int]]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"assign must be JSON like {{\"topicA\": [0, 1]}}: {exc}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
        raise OptionError("assign must be JSON like {\"topicA\": [0, 1]}")
    found = {(topic, _integer("assign partition", p, minimum=0)) for topic, ps in parsed.items() for p in ps}
    if not found:
        raise OptionError("assign lists no partition")
    return found


def _integer(name: str, value: object, *, minimum: int) -> int:
    # `value` is an option string or a decoded JSON value: only a number or a string can be an integer.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise OptionError(f"{name} must be an integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"{name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise OptionError(f"{name} must be at least {minimum}, got {number}")
    return number


def _positive_int(get: Getter, name: str) -> int | None:
    value = get(name)
    return None if value is None else _integer(name, value, minimum=1)


def _boolean(get: Getter, name: str, default: bool) -> bool:
    value = get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, got {value!r}")
    return value.strip().lower() == "true"
