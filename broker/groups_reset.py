"""`logstore groups --reset-offsets` (and `reset-offsets`): an inactive group's new offsets, as kafka-consumer-groups.

Which partitions: `--topic T` (all its partitions, which must exist) or
`--topic T:0,1`, repeatable, or `--all-topics` (the partitions the group
has offsets for). Where to (exactly one):

- `--to-earliest`, `--to-latest`: the log start or end offset;
- `--to-offset N`: N, moved into [earliest, latest] with a warning;
- `--shift-by N`: the committed offset plus N (negative moves back), moved
  into [earliest, latest]; a partition without a committed offset is an error;
- `--to-current`: the committed offset, or the log end offset where none;
- `--to-datetime YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]` (UTC without a zone, as
  Kafka's Utils.getDateTime) and `--by-duration PnDTnHnMnS` (that long before
  now; Java's Duration syntax): the first offset whose timestamp is at least
  that time, or the log end offset (with a warning) when no record is so late.

The offsets are committed (OffsetCommit, generation -1 and no member, as an
admin client does) only with `--execute`; the default is a dry run. The
group must be inactive (Empty, or Dead: unknown to the coordinator).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, TextIO

from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from logstore.broker.admin_client import AdminClient
from logstore.broker.admin_queries import (
    EARLIEST,
    LATEST,
    TopicPartition,
    check,
    committed_offsets,
    named_partitions,
    offsets_at,
)
from logstore.broker.transactions_cli import BrokerError, UsageError, print_table

if TYPE_CHECKING:
    from kio.schema.offset_commit.v8.response import OffsetCommitResponse

__all__ = ["TARGETS", "parse_datetime", "parse_duration", "reset_offsets", "target_of"]

PROG = "logstore groups"
INACTIVE = ("Empty", "Dead")
RESET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
TARGETS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "by_duration", "shift_by", "to_current")
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?")
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?"
                       r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_datetime(text: str) -> int:
    """Kafka's `YYYY-MM-DDTHH:mm:SS.sss` with an optional zone (UTC without one), in ms since the epoch."""
    match = _DATETIME.fullmatch(text)
    if match is None:
        raise UsageError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone "
                         "(Z, +hh:mm)")
    year, month, day, hour, minute, second, millis = (int(g) for g in match.groups()[:7])
    zone = match.group(8) or "Z"
    offset = timedelta(0)
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        offset = -offset if zone[0] == "-" else offset
    try:
        moment = datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=timezone(offset))
    except ValueError as exc:
        raise UsageError(f"--to-datetime {text!r}: {exc}") from None
    return round(moment.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """Java's Duration.parse (`PnDTnHnMn.nS`, signs allowed) in ms."""
    match = _DURATION.fullmatch(text)
    if match is None or text.upper().endswith("T") or not any(match.groups()[1:]):
        raise UsageError(f"--by-duration {text!r}: expected PnDTnHnMnS (e.g. P1DT2H, PT30M, PT0.5S)")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
          + int(seconds or 0) * 1000)
    if fraction:
        part = int(fraction.ljust(3, "0")[:3])
        ms += -part if (seconds or "").startswith("-") else part
    return -ms if sign == "-" else ms


def target_of(args: argparse.Namespace) -> str:
    """The one reset target the arguments give; a UsageError without exactly one."""
    given = [t for t in TARGETS if getattr(args, t, None) not in (None, False)]
    if len(given) != 1:
        raise UsageError("--reset-offsets needs exactly one of " + ", ".join("--" + t.replace("_", "-")
                                                                          for t in TARGETS))
    if args.to_offset is not None and args.to_offset < 0:
        raise UsageError(f"--to-offset must be >= 0, not {args.to_offset}")
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)
    if args.by_duration is not None:
        parse_duration(args.by_duration)
    return given[0]


def _clamp(tp: TopicPartition, offset: int, earliest: int, latest: int) -> int:
    """Kafka's checkOffsetsRange: an offset outside [earliest, latest] becomes the nearer end, with a warning."""
    if offset > latest:
        print(f"{PROG}: New offset ({offset}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. "
              f"Value will be set to {latest}", file=sys.stderr)
        return latest
    if offset < earliest:
        print(f"{PROG}: New offset ({offset}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. "
              f"Value will be set to {earliest}", file=sys.stderr)
        return earliest
    return offset


def _partitions(client: AdminClient, group_id: str, args: argparse.Namespace) -> list[TopicPartition]:
    """--all-topics: the partitions the group has offsets for; else those --topic names, all of which must exist."""
    if args.all_topics:
        return sorted(committed_offsets(client, group_id))
    return named_partitions(client, args.topics)


def _by_time(client: AdminClient, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
    """Kafka's getLogTimestampOffsets: the first offset at or after `timestamp`, else the log end offset."""
    found = offsets_at(client, partitions, timestamp)
    empty = [tp for tp, offset in found.items() if offset < 0]
    for topic, p in empty:
        print(f"{PROG}: Warn: Partition {p} from topic {topic} is empty. Falling back to latest known offset.",
              file=sys.stderr)
    return {**found, **offsets_at(client, empty, LATEST)}


def _new_offsets(client: AdminClient, group_id: str, target: str, args: argparse.Namespace,
                 partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    if target == "to_earliest":
        return offsets_at(client, partitions, EARLIEST)
    if target == "to_latest":
        return offsets_at(client, partitions, LATEST)
    if target == "to_datetime":
        return _by_time(client, partitions, parse_datetime(args.to_datetime))
    if target == "by_duration":
        return _by_time(client, partitions, int(time.time() * 1000) - parse_duration(args.by_duration))
    if target == "to_current":
        committed = committed_offsets(client, group_id)
        ends = offsets_at(client, [tp for tp in partitions if tp not in committed], LATEST)
        return {tp: committed[tp][0] if tp in committed else ends[tp] for tp in partitions}
    if target == "shift_by":
        committed = committed_offsets(client, group_id)
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise BrokerError(f"Cannot shift offset for partition {missing[0][0]}-{missing[0][1]} since there is no "
                              "current committed offset")
        asked = {tp: committed[tp][0] + args.shift_by for tp in partitions}
    else:
        asked = dict.fromkeys(partitions, args.to_offset)
    earliest, latest = offsets_at(client, partitions, EARLIEST), offsets_at(client, partitions, LATEST)
    return {tp: _clamp(tp, offset, earliest[tp], latest[tp]) for tp, offset in asked.items()}


def _commit(client: AdminClient, group_id: str, offsets: dict[TopicPartition, int]) -> None:
    by_topic: defaultdict[str, list[OffsetCommitRequestPartition]] = defaultdict(list)
    for (topic, p), offset in offsets.items():
        by_topic[topic].append(OffsetCommitRequestPartition(
            partition_index=i32(p), committed_offset=i64(offset), committed_metadata=""))
    # Generation -1 and no member id: a commit from outside the group, which only an Empty group accepts.
    response: OffsetCommitResponse = client.request(OffsetCommitRequest(
        group_id=GroupId(group_id), generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
        topics=tuple(OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    for t in response.topics:
        for committed in t.partitions:
            check(committed.error_code, f"Failed to commit the offset of group '{group_id}' for {t.name}-"
                                        f"{committed.partition_index}")


def reset_offsets(client: AdminClient, groups: Sequence[tuple[str, str]], args: argparse.Namespace,
                  out: TextIO) -> int:
    """Work out (and with --execute commit) each group's new offsets, given its state; print Kafka's one table
    (or a JSON document per group, a line each); 1 if a group was not inactive (said on stderr), else 0."""
    rows: list[list[object]] = []
    refused = committed = 0
    for group_id, state in groups:
        if state not in INACTIVE:
            # As Kafka's tool: this group is left as it is, the others are still reset.
            print(f"{PROG}: Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                  f"state is {state}.", file=sys.stderr)
            refused += 1
            continue
        partitions = _partitions(client, group_id, args)
        found = _new_offsets(client, group_id, target_of(args), args, partitions)
        new = {tp: found[tp] for tp in partitions}
        if args.execute and new:
            _commit(client, group_id, new)
            committed += 1
        if args.as_json:
            json.dump({"groupId": group_id, "executed": bool(args.execute and new),
                       "offsets": [{"topic": t, "partition": p, "newOffset": o} for (t, p), o in new.items()]}, out)
            print(file=out)
        rows += [[group_id, t, p, o] for (t, p), o in new.items()]
    if not args.execute and not args.dry_run and not args.as_json and refused < len(groups):
        print(f"{PROG}: a dry run: nothing was committed (add --execute to commit these offsets)", file=sys.stderr)
    if not args.as_json and refused < len(groups):
        print_table(RESET_HEADERS, rows, out)
    return 1 if refused else 0
