"""`logstore get-offsets`: partitions' offsets for a time, as kafka-get-offsets.sh (GetOffsetShell).

The arguments are registered in `broker/admin_commands.py`; `run(args)` asks
`--bootstrap-server` with Metadata (which partitions exist) and ListOffsets.

- Which partitions: `--topic REGEX` (whole names, `,` is `|`; default every
  topic) with `--partitions 0,1` (default every partition), or
  `--topic-partitions 'REGEX:0-2,other:3,:1-'`: Kafka's patterns, a partition
  being N, N-M (M excluded), N- or -M. `--exclude-internal-topics` leaves out
  `__consumer_offsets` and `__transaction_state`.
- `--time`: `latest`/-1 (the log end offset, the default), `earliest`/-2 (the
  log start offset), `max-timestamp`/-3 (the offset of the record with the
  largest timestamp), `earliest-local`/-4 (the earliest offset on local disk:
  here all of the log is, so the log start offset), `latest-tiered`/-5 (the
  last offset in tiered storage: logstore has none, so no partition has one),
  or ms since the epoch (the first offset whose timestamp is at least that).

Output: one `topic:partition:offset` line per partition, sorted as Kafka sorts
them (by `topic-partition` as text); a partition without such an offset (a
time later than every record) is left out, as in Kafka, and a partition the
broker answered with an error is noted on stderr (`Skip getting offsets for
topic-partition t-0 due to error: ...`) and left out. `--json`:
`{"offsets": [{"topic": str, "partition": int, "offset": int}]}`.

Exit status: 0 done; 1 nothing matched the filters; 2 bad arguments, or no
broker at --bootstrap-server.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from typing import TextIO

from kio.schema.errors import ErrorCode

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.admin_queries import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    TopicFilter,
    TopicInfo,
    describe_topics,
    list_offsets,
)
from logstore.broker.transactions_cli import BrokerError, UsageError, run_command

__all__ = ["parse_time", "run"]

PROG = "logstore get-offsets"
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
TIMES = {"latest": LATEST, "earliest": EARLIEST, "max-timestamp": MAX_TIMESTAMP, "earliest-local": EARLIEST_LOCAL,
         "latest-tiered": LATEST_TIERED}
_PATTERN = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


def parse_time(text: str) -> int:
    """`--time` as ListOffsets' timestamp: a name, or a number (-1..-5 or ms since the epoch)."""
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
                         "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long format "
                         "timestamp") from None
    if value < LATEST_TIERED:
        raise UsageError(f"--time {text}: a timestamp is >= 0 ms, or one of -1..-5")
    return value


@dataclass(frozen=True)
class _Rule:
    """One topic pattern and the partitions it takes: a set, or a range [low, high)."""

    topics: TopicFilter
    ids: frozenset[int] | None
    low: int = 0
    high: int = 2**31 - 1

    def allows(self, partition: int) -> bool:
        if self.ids is not None:
            return not self.ids or partition in self.ids
        return self.low <= partition < self.high


def _rules(args: argparse.Namespace) -> list[_Rule]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
        rules = []
        for spec in args.topic_partitions.split(","):
            match = _PATTERN.fullmatch(spec)
            if match is None:
                raise UsageError(f"Invalid rule specification: {spec}")
            topic, one, low, high = (g or None for g in match.groups())
            topics = TopicFilter(topic or ".*")
            if one is not None:
                rules.append(_Rule(topics, frozenset({int(one)})))
            else:
                rules.append(_Rule(topics, None, int(low or 0), int(high) if high else 2**31 - 1))
        return rules
    ids: frozenset[int] = frozenset()
    if args.partitions:
        try:
            ids = frozenset(int(p) for p in args.partitions.split(","))
        except ValueError:
            raise UsageError(f"--partitions expects a comma separated list of numeric partition ids, but received: "
                             f"{args.partitions}") from None
    return [_Rule(TopicFilter(args.topic or ".*"), ids)]


def _check(args: argparse.Namespace) -> None:
    args.timestamp = parse_time(args.time)
    args.rules = _rules(args)


def _get_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    rules: list[_Rule] = args.rules
    exclude = args.exclude_internal_topics
    topics = [info for info in describe_topics(client).values() if isinstance(info, TopicInfo)]
    chosen = sorted({(t.name, p.partition) for t in topics for p in t.partitions for rule in rules
                     if rule.topics.allows(t.name, exclude) and rule.allows(p.partition)})
    if not chosen:
        raise BrokerError("Could not match any topic-partitions with the specified filters")
    timestamp = EARLIEST if args.timestamp == EARLIEST_LOCAL else args.timestamp
    # No tiered storage: no partition has a tiered offset, which Kafka answers with -1 (left out below).
    found = {} if timestamp == LATEST_TIERED else list_offsets(client, chosen, timestamp)
    offsets: list[tuple[str, int, int]] = []
    for topic, partition in sorted(chosen, key=lambda tp: f"{tp[0]}-{tp[1]}"):
        offset = found.get((topic, partition), -1)
        if isinstance(offset, ErrorCode):
            print(f"Skip getting offsets for topic-partition {topic}-{partition} due to error: {error_name(offset)}",
                  file=sys.stderr)
        elif offset >= 0:
            offsets.append((topic, partition, offset))
    if args.as_json:
        json.dump({"offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in offsets]}, out)
        print(file=out)
    else:
        for t, p, o in offsets:
            print(f"{t}:{p}:{o}", file=out)
    return 0


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run `logstore get-offsets`; the exit status (0 ok, 1 nothing matched, 2 usage or no broker)."""
    return run_command(PROG, args, _check, _get_offsets, out)
