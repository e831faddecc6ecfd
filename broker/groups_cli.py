"""`logstore groups`: list, describe and delete consumer groups and their offsets, as kafka-consumer-groups.sh.

The arguments are registered in `broker/admin_commands.py` and read as one
of the two forms by `groups_args.py`: Kafka's flags (`--list`, `--describe
--group G [--members | --offsets | --state]`, `--all-groups`, `--delete
--group G`, `--delete-offsets --group G --topic T`, `--reset-offsets --group
G ...`) or the subcommands below. `run(args)` does the work over one
`AdminClient` connection to `--bootstrap-server`, which in logstore is the
coordinator of every group and the leader of every partition.

- `list [--state S ...]`: ListGroups (v4, the states filter). Every group
  the coordinator has, whatever its protocol type; a table of GROUP,
  PROTOCOL-TYPE and STATE. Kafka's `--list` prints the names alone, one a
  line, and `--list --state [S,...]` a table of GROUP and STATE.
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
  coordinator does not have (Dead) is an error. `--all-groups` describes
  every group ListGroups shows.
- `delete GROUP ...`: DeleteGroups (`--all-groups`: every group). A group
  with members is refused (NON_EMPTY_GROUP).
- `delete-offsets GROUP TOPIC[:P,...] ...`: OffsetDelete. A bare topic
  means all its partitions; a topic the group's members subscribe to is
  refused (GROUP_SUBSCRIBED_TO_TOPIC).
- `reset-offsets GROUP (--topic TOPIC[:P,...] ... | --all-topics) TARGET
  [--dry-run | --execute]`: `groups_reset.py` (the targets: --to-earliest,
  --to-latest, --to-offset, --to-current, --shift-by, --to-datetime,
  --by-duration).

Text output is a table, as `logstore transactions` prints them: each
column padded to its widest cell and followed by a tab (none after the
last), Kafka's column names and "-" where Kafka's tool prints it. Two
columns are always there that Kafka's tool shows only sometimes: the
members' GROUP-INSTANCE-ID (Kafka: when a member has one) and ASSIGNMENT
(Kafka: with --verbose), and the `list` subcommand shows PROTOCOL-TYPE and
STATE (Kafka's `--list` form prints what Kafka's tool prints).
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
                    (one document a line per group: --reset-offsets takes several
                    --group or --all-groups; a group that is not inactive is said on
                    stderr, left as it is, and makes the exit status 1)

Exit status: 0 done; 1 the broker answered with an error (its Kafka name
on stderr), or a group to describe does not exist, or a reset was refused;
2 bad arguments, or no broker to talk to at --bootstrap-server.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO, TypedDict

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.admin_queries import (
    LATEST,
    TopicPartition,
    committed_offsets,
    list_offsets,
    parse_partitions,
    topic_partitions,
)
from logstore.broker.coordinator.consumer_protocol import decode_assignment
from logstore.broker.groups_args import check_arguments
from logstore.broker.groups_reset import reset_offsets
from logstore.broker.transactions_cli import BrokerError, UsageError, print_table, run_command
from logstore.errors import CorruptRecordError

if TYPE_CHECKING:
    # The classes of the responses the requests below get (AdminClient.request returns them as Any).
    from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
    from kio.schema.describe_groups.v5.response import DescribedGroupMember, DescribeGroupsResponse
    from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
    from kio.schema.list_groups.v4.response import ListGroupsResponse
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse

__all__ = ["run", "BrokerError", "UsageError", "parse_partitions", "print_deletions", "print_json", "print_rows"]

PROG = "logstore groups"
GROUP_KEY = i8(0)
CONSUMER_PROTOCOL = "consumer"
MISSING = "-"

LIST_HEADERS = ["GROUP", "PROTOCOL-TYPE", "STATE"]
OFFSET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]
MEMBER_HEADERS = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
STATE_HEADERS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
DELETE_OFFSETS_HEADERS = ["TOPIC", "PARTITION", "STATUS"]
STATE_LIST_HEADERS = ["GROUP", "STATE"]


def _text(value: object) -> str:
    return MISSING if value is None else str(value)


def print_rows(headers: list[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    """A table, None shown as "-"."""
    print_table(headers, [[_text(v) for v in row] for row in rows], out)


def _check(code: int, what: str) -> None:
    if code != ErrorCode.none:
        raise BrokerError(f"{what}: {error_name(code)}")


def print_json(document: object, out: TextIO) -> None:
    """A JSON document on a line of its own."""
    json.dump(document, out)
    print(file=out)


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
        print_json({"groups": [dict(zip(("groupId", "protocolType", "state"), row)) for row in rows]}, out)
    elif args.list_style == "names":
        for group_id, _, _ in rows:
            print(group_id, file=out)
    elif args.list_style == "states":
        print_table(STATE_LIST_HEADERS, [[group_id, state] for group_id, _, state in rows], out)
    else:
        print_table(LIST_HEADERS, rows, out)
    return 0


def _all_groups(client: AdminClient) -> list[str]:
    response: ListGroupsResponse = client.request(ListGroupsRequest(states_filter=()))
    _check(response.error_code, "Failed to list groups")
    return sorted(g.group_id for g in response.groups)


def _group_ids(client: AdminClient, args: argparse.Namespace) -> list[str]:
    """The groups the command acts on: --all-groups, or those named, each once."""
    return _all_groups(client) if args.all_groups else list(dict.fromkeys(args.group_ids))


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
    committed = committed_offsets(client, group.group_id)
    owned: list[tuple[TopicPartition, DescribedMember | None]] = []
    members = sorted((m for m in group.members if m.assignment),
                     key=lambda m: (-len(m.assignment or ()), m.member_id))
    for member in members:
        owned += [(tp, member) for tp in member.assignment or ()]
    owners = dict(owned)
    rows = owned + [(tp, None) for tp in sorted(committed) if tp not in owners]
    ends = list_offsets(client, [tp for tp, _ in rows], LATEST)
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
    group_ids = _group_ids(client, args)
    if not group_ids:
        return 0
    groups = _describe_groups(client, group_ids)
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
        print_json({"groups": documents}, out)
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
        if args.view == "members":
            rows = [[g.group_id, m.member_id, m.group_instance_id, m.host, m.client_id,
                     len(m.assignment or ()), _assignment_text(m.assignment)] for m in g.members]
            print_rows(MEMBER_HEADERS, rows, out)
        elif args.view == "state":
            c = _coordinator(client, g.group_id)
            print_rows(STATE_HEADERS, [[g.group_id, f"{c['host']}:{c['port']}  ({c['id']})", g.assignor or None,
                                    g.state, len(g.members)]], out)
        else:
            rows = [[g.group_id, r["topic"], r["partition"], r["currentOffset"], r["logEndOffset"], r["lag"],
                     r["memberId"], r["host"], r["clientId"]] for r in _offset_rows(client, g)]
            print_rows(OFFSET_HEADERS, rows, out)
    return 1 if missing else 0


def _delete(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    group_ids = _group_ids(client, args)
    if not group_ids:
        print(f"{PROG}: No consumer group found to delete.", file=sys.stderr)
        return 0
    response: DeleteGroupsResponse = client.request(DeleteGroupsRequest(
        groups_names=tuple(GroupId(g) for g in group_ids)))
    results = [(r.group_id, None if r.error_code == ErrorCode.none else error_name(r.error_code))
               for r in response.results]
    return print_deletions(results, "consumer", f"{PROG}: Deletion of some consumer groups failed:",
                           as_json=args.as_json, out=out)


def print_deletions(results: Sequence[tuple[str, str | None]], kind: str, failed_heading: str, *, as_json: bool,
                    out: TextIO) -> int:
    """Report DeleteGroups' (group, error or None) results as Kafka's tools do (`kind`: "consumer", "share";
    `failed_heading` opens the errors, on stderr); the exit status: 1 if any failed."""
    failed = [(g, e) for g, e in results if e]
    deleted = ", ".join(f"'{g}'" for g, e in results if not e)
    if as_json:
        print_json({"results": [{"groupId": g, "error": e} for g, e in results]}, out)
    elif not failed:
        print(f"Deletion of requested {kind} groups ({deleted}) was successful.", file=out)
    else:
        print(failed_heading, file=sys.stderr)
        for g, e in failed:
            print(f"* Group '{g}' could not be deleted due to: {e}", file=sys.stderr)
        if deleted:
            print(f"These {kind} groups were deleted successfully: {deleted}", file=out)
    return 1 if failed else 0


def _partitions_of(client: AdminClient, specs: list[str]) -> tuple[list[TopicPartition], dict[str, ErrorCode]]:
    """The partitions the TOPIC[:P,...] arguments name, and an error for each bare topic Metadata refused."""
    parsed = [parse_partitions(s) for s in specs]
    bare = [t for t, ps in parsed if ps is None]
    counts = topic_partitions(client, bare) if bare else {}
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
    (group_id,) = args.group_ids
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
        print_json({"groupId": group_id, "error": top,
               "partitions": [{"topic": t, "partition": p, "error": None if c == ErrorCode.none else error_name(c)}
                              for (t, p), c in rows]}, out)
    else:
        if top:
            print(f"{PROG}: Failed to delete the offsets of group '{group_id}': {top}", file=sys.stderr)
        elif failed:
            print(f"{PROG}: Some offsets of group '{group_id}' were not deleted (see the table).", file=sys.stderr)
        else:
            print(f"Request succeeded for deleting offsets from group {group_id}.", file=out)
        print_rows(DELETE_OFFSETS_HEADERS, [[t, p, "Successful" if c == ErrorCode.none else f"Error: {error_name(c)}"]
                                        for (t, p), c in rows], out)
    return 1 if failed else 0


def _reset_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    return reset_offsets(client, [(g.group_id, g.state) for g in _describe_groups(client, _group_ids(client, args))],
                         args, out)


COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace, TextIO], int]] = {
    "list": _list, "describe": _describe, "delete": _delete, "delete-offsets": _delete_offsets,
    "reset-offsets": _reset_offsets}


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore groups` command; the exit status (0 ok, 1 broker error, 2 usage or no broker)."""
    return run_command(PROG, args, check_arguments, lambda client, a, o: COMMANDS[a.command](client, a, o), out)
