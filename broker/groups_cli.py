"""`logstore groups`: list, describe and delete consumer groups and their offsets, as kafka-consumer-groups.sh.

The arguments are registered in `logstore/cli.py`; `run(args)` does the
work over one `AdminClient` connection to `--bootstrap-server`, which in
logstore is the coordinator of every group and the leader of every
partition.

- `list [--state S ...]`: ListGroups (v4, the states filter). Every group
  the coordinator has, whatever its protocol type.
- `describe GROUP ... [--members | --state]`: DescribeGroups, OffsetFetch
  of all the group's offsets and ListOffsets (latest, read_uncommitted, as
  Kafka's tool) for the log end offsets. Default: one row per partition
  that a member owns or the group has an offset for, with the committed
  offset, the log end offset, the LAG between them and the owner ("-" for
  what is unknown or unowned). `--members`: one row per member, with its
  assignment decoded from the ConsumerProtocol bytes the group's leader
  chose. `--state`: the coordinator, assignor, state and member count. As
  in Kafka, assignments are known only while the group is Stable, an Empty
  group and a rebalancing one are noted on stderr, and a group the
  coordinator does not have (Dead) is an error.
- `delete GROUP ...`: DeleteGroups. A group with members is refused
  (NON_EMPTY_GROUP).
- `delete-offsets GROUP TOPIC[:P,...] ...`: OffsetDelete. A bare topic
  means all its partitions; a topic the group's members subscribe to is
  refused (GROUP_SUBSCRIBED_TO_TOPIC).
- `reset-offsets GROUP (--topic TOPIC[:P,...] ... | --all-topics)
  (--to-earliest | --to-latest | --to-offset N) [--execute]`: the new
  offsets, committed (OffsetCommit with generation -1, as an admin client
  does) only with --execute; like Kafka's tool the default is a dry run,
  the group must be inactive (Empty or Dead), --to-offset is clamped to
  the partition's [earliest, latest] with a warning, and --all-topics
  means the partitions the group has offsets for.

Text output is a table, as `logstore transactions` prints them: each
column padded to its widest cell and followed by a tab (none after the
last), Kafka's column names and "-" where Kafka's tool prints it. Two
columns are always there that Kafka's tool shows only sometimes: the
members' GROUP-INSTANCE-ID (Kafka: when a member has one) and ASSIGNMENT
(Kafka: with --verbose), and `list` always shows PROTOCOL-TYPE and STATE.
describe prints one table per group, separated by a blank line. `--json`
prints one JSON document instead (null for "-"):

    list:           {"groups": [{"groupId": str, "protocolType": str, "state": str}]}
    describe:       {"groups": [{"groupId": str, "state": str, "protocolType": str,
                                 "assignmentStrategy": str | null,
                                 "coordinator": {"id": int, "host": str, "port": int},
                                 "members": [{"memberId": str, "groupInstanceId": str | null,
                                              "clientId": str, "host": str,
                                              "assignment": [{"topic": str, "partition": int}] | null}],
                                 "offsets": [{"topic": str, "partition": int, "currentOffset": int | null,
                                              "leaderEpoch": int | null, "logEndOffset": int | null,
                                              "lag": int | null, "memberId": str | null, "host": str | null,
                                              "clientId": str | null}]}]}
                    (every section whatever --members/--state say; a Dead group is listed
                    with no members and no offsets, and the exit status is 1)
    delete:         {"results": [{"groupId": str, "error": str | null}]}
    delete-offsets: {"groupId": str, "error": str | null,
                     "partitions": [{"topic": str, "partition": int | null, "error": str | null}]}
    reset-offsets:  {"groupId": str, "executed": bool,
                     "offsets": [{"topic": str, "partition": int, "newOffset": int}]}

Exit status: 0 done; 1 the broker answered with an error (its Kafka name
on stderr), or a group to describe does not exist, or a reset was refused;
2 bad arguments, or no broker to talk to at --bootstrap-server.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO, TypedDict

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.coordinator.consumer_protocol import decode_assignment
from logstore.broker.transactions_cli import BrokerError, UsageError, print_table, run_command
from logstore.errors import CorruptRecordError

if TYPE_CHECKING:
    # The classes of the responses the requests below get (AdminClient.request returns them as Any).
    from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
    from kio.schema.describe_groups.v5.response import DescribedGroupMember, DescribeGroupsResponse
    from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
    from kio.schema.list_groups.v4.response import ListGroupsResponse
    from kio.schema.list_offsets.v7.response import ListOffsetsResponse
    from kio.schema.metadata.v9.response import MetadataResponse
    from kio.schema.offset_commit.v8.response import OffsetCommitResponse
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
    from kio.schema.offset_fetch.v8.response import OffsetFetchResponse

__all__ = ["run", "BrokerError", "UsageError", "GROUP_STATES", "parse_partitions"]

PROG = "logstore groups"
GROUP_KEY = i8(0)
CONSUMER_PROTOCOL = "consumer"
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
READ_UNCOMMITTED = i8(0)
MISSING = "-"
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
INACTIVE = ("Empty", "Dead")

LIST_HEADERS = ["GROUP", "PROTOCOL-TYPE", "STATE"]
OFFSET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]
MEMBER_HEADERS = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
STATE_HEADERS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
DELETE_OFFSETS_HEADERS = ["TOPIC", "PARTITION", "STATUS"]
RESET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]

TopicPartition = tuple[str, int]


def _text(value: object) -> str:
    return MISSING if value is None else str(value)


def _table(headers: list[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    print_table(headers, [[_text(v) for v in row] for row in rows], out)


def _check(code: int, what: str) -> None:
    if code != ErrorCode.none:
        raise BrokerError(f"{what}: {error_name(code)}")


def _dump(document: object, out: TextIO) -> None:
    json.dump(document, out)
    print(file=out)


def parse_partitions(spec: str) -> tuple[str, list[int] | None]:
    """`TOPIC` (all partitions: None) or `TOPIC:P[,P...]`, as Kafka's --topic; ValueError if malformed."""
    topic, sep, partitions = spec.partition(":")
    if not topic:
        raise ValueError(f"{spec!r}: no topic name")
    if not sep:
        return topic, None
    try:
        numbers = [int(p) for p in partitions.split(",")]
    except ValueError:
        raise ValueError(f"{spec!r}: partitions must be comma-separated numbers") from None
    if any(p < 0 for p in numbers):
        raise ValueError(f"{spec!r}: a partition must be >= 0")
    return topic, sorted(set(numbers))


# -- what the broker is asked ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DescribedMember:
    """A member as DescribeGroups shows it; `assignment` None when unknown (not Stable, not a consumer group)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...] | None


@dataclass(frozen=True)
class DescribedGroup:
    """A group as DescribeGroups shows it."""

    group_id: str
    state: str
    protocol_type: str
    assignor: str
    members: tuple[DescribedMember, ...]


def _assignment(group_id: str, protocol_type: str, member: DescribedGroupMember) -> tuple[TopicPartition, ...] | None:
    if protocol_type != CONSUMER_PROTOCOL or not member.member_assignment:
        # Only Stable groups carry assignments, and only "consumer" ones are ConsumerProtocol bytes.
        return None
    try:
        decoded = decode_assignment(member.member_assignment)
    except CorruptRecordError as exc:
        print(f"{PROG}: group '{group_id}' member {member.member_id}: unreadable assignment ({exc})",
              file=sys.stderr)
        return None
    return tuple(sorted((topic, p) for topic, partitions in decoded.partitions for p in partitions))


def _describe_groups(client: AdminClient, group_ids: list[str]) -> list[DescribedGroup]:
    response: DescribeGroupsResponse = client.request(DescribeGroupsRequest(
        groups=tuple(GroupId(g) for g in group_ids), include_authorized_operations=False))
    groups: list[DescribedGroup] = []
    for g in response.groups:
        _check(g.error_code, f"Failed to describe group '{g.group_id}'")
        members = tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               _assignment(g.group_id, g.protocol_type, m)) for m in g.members)
        groups.append(DescribedGroup(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members))
    return groups


def _committed(client: AdminClient, group_id: str) -> dict[TopicPartition, tuple[int, int | None]]:
    """Every offset the group has: (offset, leader epoch or None)."""
    response: OffsetFetchResponse = client.request(OffsetFetchRequest(
        groups=(OffsetFetchRequestGroup(group_id=GroupId(group_id), topics=None),), require_stable=False))
    found: dict[TopicPartition, tuple[int, int | None]] = {}
    for group in response.groups:
        _check(group.error_code, f"Failed to fetch the offsets of group '{group_id}'")
        for topic in group.topics:
            for p in topic.partitions:
                _check(p.error_code, f"Failed to fetch the offset of group '{group_id}' for {topic.name}-"
                                     f"{p.partition_index}")
                if p.committed_offset >= 0:
                    epoch = p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None
                    found[(topic.name, p.partition_index)] = (p.committed_offset, epoch)
    return found


def _list_offsets(client: AdminClient, partitions: Iterable[TopicPartition],
                  timestamp: int) -> dict[TopicPartition, int | ErrorCode]:
    """Each partition's offset for `timestamp` (EARLIEST, LATEST), or the error the broker gave."""
    by_topic: defaultdict[str, list[ListOffsetsPartition]] = defaultdict(list)
    for topic, p in sorted(set(partitions)):
        by_topic[topic].append(ListOffsetsPartition(partition_index=i32(p), timestamp=i64(timestamp)))
    if not by_topic:
        return {}
    response: ListOffsetsResponse = client.request(ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=READ_UNCOMMITTED, topics=tuple(
            ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    return {(t.name, p.partition_index): p.offset if p.error_code == ErrorCode.none else p.error_code
            for t in response.topics for p in t.partitions}


def _topic_partitions(client: AdminClient, topics: Iterable[str]) -> dict[str, int | ErrorCode]:
    """Each topic's partition count, or the error Metadata gave for it (UNKNOWN_TOPIC_OR_PARTITION, ...)."""
    response: MetadataResponse = client.request(MetadataRequest(
        topics=tuple(MetadataRequestTopic(name=TopicName(t)) for t in sorted(set(topics))),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    return {t.name: len(t.partitions) if t.error_code == ErrorCode.none else t.error_code for t in response.topics}


class _Coordinator(TypedDict):
    id: int
    host: str
    port: int


def _coordinator(client: AdminClient, group_id: str) -> _Coordinator:
    response: FindCoordinatorResponse = client.request(FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY))
    _check(response.error_code, f"Failed to find the coordinator of group '{group_id}'")
    return {"id": response.node_id, "host": response.host, "port": response.port}


# -- the commands ---------------------------------------------------------------------------------------------


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    response: ListGroupsResponse = client.request(ListGroupsRequest(states_filter=tuple(args.states or ())))
    _check(response.error_code, "Failed to list groups")
    rows = sorted([g.group_id, g.protocol_type, g.group_state] for g in response.groups)
    if args.as_json:
        _dump({"groups": [dict(zip(("groupId", "protocolType", "state"), row)) for row in rows]}, out)
    else:
        print_table(LIST_HEADERS, rows, out)
    return 0


class _OffsetRow(TypedDict):
    topic: str
    partition: int
    currentOffset: int | None
    leaderEpoch: int | None
    logEndOffset: int | None
    lag: int | None
    memberId: str | None
    host: str | None
    clientId: str | None


def _offset_rows(client: AdminClient, group: DescribedGroup) -> list[_OffsetRow]:
    """Kafka's describe rows: owned partitions (members with the most first), then the other committed ones."""
    committed = _committed(client, group.group_id)
    owned: list[tuple[TopicPartition, DescribedMember | None]] = []
    members = sorted((m for m in group.members if m.assignment),
                     key=lambda m: (-len(m.assignment or ()), m.member_id))
    for member in members:
        owned += [(tp, member) for tp in member.assignment or ()]
    owners = dict(owned)
    rows = owned + [(tp, None) for tp in sorted(committed) if tp not in owners]
    ends = _list_offsets(client, [tp for tp, _ in rows], LATEST)
    result: list[_OffsetRow] = []
    for tp, m in rows:
        offset, epoch = committed.get(tp, (None, None))
        asked = ends.get(tp)
        end = None if isinstance(asked, ErrorCode) else asked  # Kafka's tool shows "-" for a partition it cannot ask
        result.append({"topic": tp[0], "partition": tp[1], "currentOffset": offset, "leaderEpoch": epoch,
                       "logEndOffset": end, "lag": end - offset if end is not None and offset is not None else None,
                       "memberId": m.member_id if m else None, "host": m.host if m else None,
                       "clientId": m.client_id if m else None})
    return result


def _assignment_text(assignment: tuple[TopicPartition, ...] | None) -> str | None:
    """Kafka's `topic:0,1;other:2`."""
    if not assignment:
        return None
    grouped: defaultdict[str, list[int]] = defaultdict(list)
    for topic, p in assignment:
        grouped[topic].append(p)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(grouped.items()))


def _note_state(group: DescribedGroup) -> bool:
    """Kafka's notes on a group's state (stderr); False for a group that does not exist."""
    if group.state == "Dead":
        print(f"{PROG}: Consumer group '{group.group_id}' does not exist.", file=sys.stderr)
        return False
    if group.state == "Empty":
        print(f"{PROG}: Consumer group '{group.group_id}' has no active members.", file=sys.stderr)
    elif group.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"{PROG}: Warning: Consumer group '{group.group_id}' is rebalancing.", file=sys.stderr)
    return True


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    groups = _describe_groups(client, list(dict.fromkeys(args.groups)))
    missing = [g for g in groups if g.state == "Dead"]
    if args.as_json:
        documents: list[dict[str, object]] = []
        for g in groups:
            dead = g.state == "Dead"
            documents.append({
                "groupId": g.group_id, "state": g.state, "protocolType": g.protocol_type,
                "assignmentStrategy": g.assignor or None, "coordinator": _coordinator(client, g.group_id),
                "members": [{"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                             "clientId": m.client_id, "host": m.host,
                             "assignment": None if m.assignment is None else
                             [{"topic": t, "partition": p} for t, p in m.assignment]} for m in g.members],
                "offsets": [] if dead else _offset_rows(client, g)})
        _dump({"groups": documents}, out)
        for g in missing:
            print(f"{PROG}: Consumer group '{g.group_id}' does not exist.", file=sys.stderr)
        return 1 if missing else 0
    printed = False
    for g in groups:
        if not _note_state(g):
            continue
        if printed:
            print(file=out)
        printed = True
        if args.members:
            rows = [[g.group_id, m.member_id, m.group_instance_id, m.host, m.client_id,
                     len(m.assignment or ()), _assignment_text(m.assignment)] for m in g.members]
            _table(MEMBER_HEADERS, rows, out)
        elif args.state:
            c = _coordinator(client, g.group_id)
            _table(STATE_HEADERS, [[g.group_id, f"{c['host']}:{c['port']}  ({c['id']})", g.assignor or None,
                                    g.state, len(g.members)]], out)
        else:
            rows = [[g.group_id, r["topic"], r["partition"], r["currentOffset"], r["logEndOffset"], r["lag"],
                     r["memberId"], r["host"], r["clientId"]] for r in _offset_rows(client, g)]
            _table(OFFSET_HEADERS, rows, out)
    return 1 if missing else 0


def _delete(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    response: DeleteGroupsResponse = client.request(DeleteGroupsRequest(groups_names=tuple(dict.fromkeys(args.groups))))
    results = [(r.group_id, None if r.error_code == ErrorCode.none else error_name(r.error_code))
               for r in response.results]
    failed = [(g, e) for g, e in results if e]
    deleted = ", ".join(f"'{g}'" for g, e in results if not e)
    if args.as_json:
        _dump({"results": [{"groupId": g, "error": e} for g, e in results]}, out)
    elif not failed:
        print(f"Deletion of requested consumer groups ({deleted}) was successful.", file=out)
    else:
        print(f"{PROG}: Deletion of some consumer groups failed:", file=sys.stderr)
        for g, e in failed:
            print(f"* Group '{g}' could not be deleted due to: {e}", file=sys.stderr)
        if deleted:
            print(f"These consumer groups were deleted successfully: {deleted}", file=out)
    return 1 if failed else 0


def _partitions_of(client: AdminClient, specs: list[str]) -> tuple[list[TopicPartition], dict[str, ErrorCode]]:
    """The partitions the TOPIC[:P,...] arguments name, and an error for each bare topic Metadata refused."""
    parsed = [parse_partitions(s) for s in specs]
    bare = [t for t, ps in parsed if ps is None]
    counts = _topic_partitions(client, bare) if bare else {}
    partitions: list[TopicPartition] = []
    errors: dict[str, ErrorCode] = {}
    for topic, ps in parsed:
        count = counts.get(topic, 0)
        if ps is not None:
            partitions += [(topic, p) for p in ps]
        elif isinstance(count, ErrorCode):
            errors[topic] = count
        else:
            partitions += [(topic, p) for p in range(count)]
    return sorted(set(partitions)), errors


def _delete_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    group_id = args.group
    partitions, topic_errors = _partitions_of(client, args.topics)
    by_topic: defaultdict[str, list[OffsetDeleteRequestPartition]] = defaultdict(list)
    for topic, p in partitions:
        by_topic[topic].append(OffsetDeleteRequestPartition(partition_index=i32(p)))
    error = ErrorCode.none
    codes: dict[tuple[str, int | None], ErrorCode] = {(t, None): e for t, e in topic_errors.items()}
    if by_topic:
        response: OffsetDeleteResponse = client.request(OffsetDeleteRequest(group_id=GroupId(group_id), topics=tuple(
            OffsetDeleteRequestTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
        error = response.error_code
        if error != ErrorCode.none:
            # A group-level refusal is every partition's, as Kafka's admin client reports it.
            codes.update(dict.fromkeys(partitions, error))
        else:
            codes.update({(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions})
    rows = sorted(codes.items(), key=lambda item: (item[0][0], -1 if item[0][1] is None else item[0][1]))
    failed = any(code != ErrorCode.none for _, code in rows)
    top = None if error == ErrorCode.none else error_name(error)
    if args.as_json:
        _dump({"groupId": group_id, "error": top,
               "partitions": [{"topic": t, "partition": p, "error": None if c == ErrorCode.none else error_name(c)}
                              for (t, p), c in rows]}, out)
    else:
        if top:
            print(f"{PROG}: Failed to delete the offsets of group '{group_id}': {top}", file=sys.stderr)
        elif failed:
            print(f"{PROG}: Some offsets of group '{group_id}' were not deleted (see the table).", file=sys.stderr)
        else:
            print(f"Request succeeded for deleting offsets from group {group_id}.", file=out)
        _table(DELETE_OFFSETS_HEADERS, [[t, p, "Successful" if c == ErrorCode.none else f"Error: {error_name(c)}"]
                                        for (t, p), c in rows], out)
    return 1 if failed else 0


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


def _offsets_of(client: AdminClient, partitions: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
    found = _list_offsets(client, partitions, timestamp)
    offsets: dict[TopicPartition, int] = {}
    for tp in partitions:
        value = found.get(tp, ErrorCode.unknown_topic_or_partition)
        if isinstance(value, ErrorCode):
            raise BrokerError(f"Failed to list the offsets of {tp[0]}-{tp[1]}: {error_name(value)}")
        offsets[tp] = value
    return offsets


def _reset_partitions(client: AdminClient, args: argparse.Namespace) -> list[TopicPartition]:
    """--all-topics: the partitions the group has offsets for; else those --topic names, all of which must exist."""
    if args.all_topics:
        return sorted(_committed(client, args.group))
    parsed = [parse_partitions(spec) for spec in args.topics]
    counts = _topic_partitions(client, {topic for topic, _ in parsed})
    partitions: set[TopicPartition] = set()
    for topic, asked in parsed:
        count = counts.get(topic, ErrorCode.unknown_topic_or_partition)
        if isinstance(count, ErrorCode):
            raise BrokerError(f"Failed to describe topic {topic}: {error_name(count)}")
        beyond = [p for p in asked or () if p >= count]
        if beyond:
            raise BrokerError(f"Failed to describe partitions {', '.join(f'{topic}-{p}' for p in beyond)}: "
                              f"{error_name(ErrorCode.unknown_topic_or_partition)}")
        partitions |= {(topic, p) for p in (range(count) if asked is None else asked)}
    return sorted(partitions)


def _reset_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    group_id = args.group
    (group,) = _describe_groups(client, [group_id])
    if group.state not in INACTIVE:
        raise BrokerError(f"Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                          f"state is {group.state}.")
    partitions = _reset_partitions(client, args)
    if args.to_earliest:
        new = _offsets_of(client, partitions, EARLIEST)
    elif args.to_latest:
        new = _offsets_of(client, partitions, LATEST)
    else:
        earliest, latest = _offsets_of(client, partitions, EARLIEST), _offsets_of(client, partitions, LATEST)
        new = {tp: _clamp(tp, args.to_offset, earliest[tp], latest[tp]) for tp in partitions}
    new = {tp: new[tp] for tp in partitions}
    if args.execute and new:
        by_topic: defaultdict[str, list[OffsetCommitRequestPartition]] = defaultdict(list)
        for (topic, p), offset in new.items():
            by_topic[topic].append(OffsetCommitRequestPartition(
                partition_index=i32(p), committed_offset=i64(offset), committed_metadata=""))
        # Generation -1 and no member id: a commit from outside the group, which only an Empty group accepts.
        response: OffsetCommitResponse = client.request(OffsetCommitRequest(
            group_id=GroupId(group_id), generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
            topics=tuple(OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(ps))
                         for t, ps in by_topic.items())))
        for t in response.topics:
            for committed in t.partitions:
                _check(committed.error_code, f"Failed to commit the offset of group '{group_id}' for {t.name}-"
                                             f"{committed.partition_index}")
    elif not args.execute and not args.dry_run and not args.as_json:
        print(f"{PROG}: a dry run: nothing was committed (add --execute to commit these offsets)", file=sys.stderr)
    if args.as_json:
        _dump({"groupId": group_id, "executed": bool(args.execute and new),
               "offsets": [{"topic": t, "partition": p, "newOffset": o} for (t, p), o in new.items()]}, out)
    else:
        _table(RESET_HEADERS, [[group_id, t, p, o] for (t, p), o in new.items()], out)
    return 0


COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace, TextIO], int]] = {
    "list": _list, "describe": _describe, "delete": _delete, "delete-offsets": _delete_offsets,
    "reset-offsets": _reset_offsets}


def _check_arguments(args: argparse.Namespace) -> None:
    command = args.groups_command
    if command == "list" and args.states:
        wanted = [s.strip() for item in args.states for s in item.split(",") if s.strip()]
        by_name = {s.lower(): s for s in GROUP_STATES}
        unknown = [s for s in wanted if s.lower() not in by_name]
        if unknown:
            raise UsageError(f"list: no group state {', '.join(unknown)} (states: {', '.join(GROUP_STATES)})")
        args.states = list(dict.fromkeys(by_name[s.lower()] for s in wanted))
    for spec in getattr(args, "topics", None) or ():
        try:
            parse_partitions(spec)
        except ValueError as exc:
            raise UsageError(f"{command}: {exc}") from None
    if command == "reset-offsets":
        if bool(args.topics) == args.all_topics:
            raise UsageError("reset-offsets: give --topic (repeatable) or --all-topics")
        if args.to_offset is not None and args.to_offset < 0:
            raise UsageError(f"reset-offsets: --to-offset must be >= 0, not {args.to_offset}")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore groups` command; the exit status (0 ok, 1 broker error, 2 usage or no broker)."""
    return run_command(PROG, args, _check_arguments, COMMANDS[args.groups_command], out)
