"""`logstore share-groups`: list, describe, reset and delete KIP-932 share groups, as kafka-share-groups.sh.

Kafka's flags (`share_groups_args.py`): `--list [--state [S,...]]`,
`--describe (--group G ... | --all-groups) [--offsets | --members | --state]
[--verbose]`, `--delete (--group G ... | --all-groups)`, `--delete-offsets
--group G --topic T ...`, `--reset-offsets --group G (--topic T[:P,...] ... |
--all-topics) (--to-earliest | --to-latest | --to-datetime D | --to-offset N)
(--dry-run | --execute)`. `run(args)` does the work over one `AdminClient`
connection to `--bootstrap-server`, the coordinator of every group.

- list: ListGroups (v5, type "share"); the names, one a line, or with
  `--state` a table of GROUP and STATE.
- describe: ShareGroupDescribe; by default DescribeShareGroupOffsets (all
  the group's share-partitions): GROUP TOPIC PARTITION START-OFFSET LAG
  (`--verbose`: LEADER-EPOCH before START-OFFSET). `--members`: GROUP
  CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT (`--verbose`:
  MEMBER-EPOCH before ASSIGNMENT). `--state`: GROUP, COORDINATOR (ID),
  STATE, #MEMBERS (`--verbose`: GROUP-EPOCH and ASSIGNMENT-EPOCH before
  #MEMBERS). A group with no members is noted on stderr; one that does not
  exist is an error.
- delete: DeleteGroups of share groups that are Empty (another kind of group,
  or one with members, is refused before asking, as Kafka's tool does).
- delete-offsets: DeleteShareGroupOffsets; a TOPIC STATUS table.
- reset-offsets: the new start offsets (ListOffsets for earliest, latest or
  a time; `--to-offset` moved into [earliest, latest]) of an Empty (or not
  yet existing) group, printed as GROUP TOPIC PARTITION NEW-OFFSET and set
  with AlterShareGroupOffsets under `--execute`.

Tables are printed as `logstore groups` prints them ("-" for what is
unknown). `--json` prints one JSON document instead (null for "-"):

    list:           {"groups": [{"groupId": str, "state": str}]}
    describe:       {"groups": [{"groupId": str, "state": str, "groupEpoch": int, "assignmentEpoch": int,
                                 "members": [{"memberId": str, "clientId": str, "host": str, "memberEpoch": int,
                                              "assignment": [{"topic": str, "partition": int}]}],
                                 "offsets": [{"topic": str, "partition": int, "leaderEpoch": int | null,
                                              "startOffset": int | null, "lag": int | null}]}]}
    delete:         {"results": [{"groupId": str, "error": str | null}]}
    delete-offsets: {"groupId": str, "error": str | null, "topics": [{"topic": str, "error": str | null}]}
    reset-offsets:  {"groupId": str, "executed": bool,
                     "offsets": [{"topic": str, "partition": int, "newOffset": int}]}

Exit status: 0 done; 1 the broker answered with an error (named on stderr),
a group does not exist or is not empty; 2 bad arguments, or no broker at
--bootstrap-server.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0.request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.admin_queries import (
    EARLIEST,
    LATEST,
    TopicPartition,
    check,
    named_partitions,
    offsets_at,
    parse_partitions,
)
from logstore.broker.groups_cli import print_deletions, print_json, print_rows
from logstore.broker.groups_reset import parse_datetime
from logstore.broker.share_groups_args import check_arguments
from logstore.broker.transactions_cli import run_command

if TYPE_CHECKING:
    from kio.schema.alter_share_group_offsets.v0.response import AlterShareGroupOffsetsResponse
    from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
    from kio.schema.delete_share_group_offsets.v0.response import DeleteShareGroupOffsetsResponse
    from kio.schema.describe_share_group_offsets.v1.response import DescribeShareGroupOffsetsResponse
    from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
    from kio.schema.list_groups.v5.response import ListGroupsResponse
    from kio.schema.share_group_describe.v1.response import DescribedGroup, Member, ShareGroupDescribeResponse

__all__ = ["run"]

PROG = "logstore share-groups"
SHARE = "share"
GROUP_KEY = i8(0)
STATE_LIST_HEADERS = ["GROUP", "STATE"]
RESET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
DELETE_OFFSETS_HEADERS = ["TOPIC", "STATUS"]


# -- what the broker is asked ---------------------------------------------------------------------------------


def _listed(client: AdminClient, states: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Every share group (in `states`, if given): (group id, state), sorted."""
    response: ListGroupsResponse = client.request(ListGroupsRequest(states_filter=tuple(states),
                                                                    types_filter=(SHARE,)))
    check(response.error_code, "Failed to list share groups")
    return sorted((g.group_id, g.group_state) for g in response.groups)


def _described(client: AdminClient, group_ids: list[str]) -> list[DescribedGroup]:
    response: ShareGroupDescribeResponse = client.request(ShareGroupDescribeRequest(
        group_ids=tuple(GroupId(g) for g in group_ids), include_authorized_operations=False))
    return list(response.groups)


@dataclass(frozen=True)
class OffsetRow:
    """One share-partition as DescribeShareGroupOffsets shows it (None: unknown)."""

    topic: str
    partition: int
    leader_epoch: int | None
    start_offset: int | None
    lag: int | None


def _offsets(client: AdminClient, group_id: str) -> list[OffsetRow]:
    """Every share-partition of the group, sorted by topic and partition."""
    response: DescribeShareGroupOffsetsResponse = client.request(DescribeShareGroupOffsetsRequest(groups=(
        DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group_id), topics=None),)))
    rows: list[OffsetRow] = []
    for group in response.groups:
        check(group.error_code, f"Failed to describe the offsets of share group '{group_id}'")
        for t in group.topics:
            for p in t.partitions:
                check(p.error_code, f"Failed to describe the offset of share group '{group_id}' for "
                                     f"{t.topic_name}-{p.partition_index}")
                known = p.start_offset >= 0
                rows.append(OffsetRow(t.topic_name, p.partition_index, p.leader_epoch if known else None,
                                      p.start_offset if known else None, p.lag if p.lag >= 0 else None))
    return sorted(rows, key=lambda r: (r.topic, r.partition))


def _coordinator(client: AdminClient, group_id: str) -> str:
    """Kafka's `host:port  (id)` of the group's coordinator."""
    response: FindCoordinatorResponse = client.request(FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY))
    check(response.error_code, f"Failed to find the coordinator of share group '{group_id}'")
    return f"{response.host}:{response.port}  ({response.node_id})"


def _assignment(member: Member) -> list[TopicPartition]:
    return sorted((t.topic_name, p) for t in member.assignment.topic_partitions for p in t.partitions)


def _assignment_text(assignment: list[TopicPartition]) -> str | None:
    """Kafka's `topic:0,1;other:2`."""
    grouped: defaultdict[str, list[int]] = defaultdict(list)
    for topic, p in assignment:
        grouped[topic].append(p)
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(grouped.items())) or None


# -- the commands ---------------------------------------------------------------------------------------------


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    groups = _listed(client, args.states or ())
    if args.as_json:
        print_json({"groups": [{"groupId": g, "state": s} for g, s in groups]}, out)
    elif args.list_state is None:
        for group_id, _ in groups:
            print(group_id, file=out)
    else:
        print_rows(STATE_LIST_HEADERS, groups, out)
    return 0


def _group_ids(client: AdminClient, args: argparse.Namespace) -> list[str]:
    return [g for g, _ in _listed(client)] if args.all_groups else list(dict.fromkeys(args.group_ids))


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    group_ids = _group_ids(client, args)
    if not group_ids:
        return 0
    found = sorted(_described(client, group_ids), key=lambda g: g.group_id)
    missing = [g for g in found if g.error_code == ErrorCode.group_id_not_found]
    for g in found:
        if g.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
            check(g.error_code, f"Failed to describe share group '{g.group_id}'")
    present = [g for g in found if g.error_code == ErrorCode.none]
    if args.as_json:
        print_json({"groups": [_describe_document(client, g) for g in present]}, out)
    else:
        printed = False
        for g in present:
            if not g.members:
                print(f"{PROG}: Share group '{g.group_id}' has no active members.", file=sys.stderr)
            if printed:
                print(file=out)
            printed = True
            _print_group(client, g, args, out)
    for g in missing:
        print(f"{PROG}: Error: Share group '{g.group_id}' does not exist.", file=sys.stderr)
    return 1 if missing else 0


def _print_group(client: AdminClient, g: DescribedGroup, args: argparse.Namespace, out: TextIO) -> None:
    verbose = args.verbose
    if args.view == "members":
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", *(["MEMBER-EPOCH"] if verbose else []),
                   "ASSIGNMENT"]
        rows = []
        for m in sorted(g.members, key=lambda m: m.member_id):
            assignment = _assignment(m)
            rows.append([g.group_id, m.member_id, m.client_host, m.client_id, len(assignment),
                         *([m.member_epoch] if verbose else []), _assignment_text(assignment)])
        print_rows(headers, rows, out)
    elif args.view == "state":
        epochs = [g.group_epoch, g.assignment_epoch] if verbose else []
        print_rows(["GROUP", "COORDINATOR (ID)", "STATE", *(["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else []),
                "#MEMBERS"], [[g.group_id, _coordinator(client, g.group_id), g.group_state, *epochs,
                               len(g.members)]], out)
    else:
        headers = ["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if verbose else []), "START-OFFSET", "LAG"]
        print_rows(headers, [[g.group_id, r.topic, r.partition, *([r.leader_epoch] if verbose else []), r.start_offset,
                          r.lag] for r in _offsets(client, g.group_id)], out)


def _describe_document(client: AdminClient, g: DescribedGroup) -> dict[str, object]:
    return {"groupId": g.group_id, "state": g.group_state, "groupEpoch": g.group_epoch,
            "assignmentEpoch": g.assignment_epoch,
            "members": [{"memberId": m.member_id, "clientId": m.client_id, "host": m.client_host,
                         "memberEpoch": m.member_epoch,
                         "assignment": [{"topic": t, "partition": p} for t, p in _assignment(m)]}
                        for m in sorted(g.members, key=lambda m: m.member_id)],
            "offsets": [{"topic": r.topic, "partition": r.partition, "leaderEpoch": r.leader_epoch,
                         "startOffset": r.start_offset, "lag": r.lag} for r in _offsets(client, g.group_id)]}


def _delete(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    shares = dict(_listed(client))
    group_ids = list(shares) if args.all_groups else list(dict.fromkeys(args.group_ids))
    # Kafka's tool checks each group before asking: a share group, and an empty one.
    results: dict[str, str | None] = {}
    for g in group_ids:
        if g not in shares:
            results[g] = f"Group '{g}' is not a share group."
        elif shares[g] != "Empty":
            results[g] = f"Share group '{g}' is not EMPTY."
    asked = [g for g in group_ids if g not in results]
    if asked:
        response: DeleteGroupsResponse = client.request(DeleteGroupsRequest(
            groups_names=tuple(GroupId(g) for g in asked)))
        results.update({r.group_id: None if r.error_code == ErrorCode.none else error_name(r.error_code)
                        for r in response.results})
    return print_deletions([(g, results.get(g)) for g in group_ids], SHARE,
                           f"{PROG}: Error: Deletion of some share groups failed:", as_json=args.as_json, out=out)


def _delete_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    (group_id,) = args.group_ids
    topics = list(dict.fromkeys(parse_partitions(spec)[0] for spec in args.topics))
    response: DeleteShareGroupOffsetsResponse = client.request(DeleteShareGroupOffsetsRequest(
        group_id=GroupId(group_id), topics=tuple(DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t))
                                                 for t in topics)))
    top = None if response.error_code == ErrorCode.none else error_name(response.error_code)
    results = sorted((t.topic_name, None if t.error_code == ErrorCode.none else error_name(t.error_code),
                      t.error_message) for t in response.responses)
    if args.as_json:
        print_json({"groupId": group_id, "error": top,
                    "topics": [{"topic": t, "error": e} for t, e, _ in results]}, out)
    else:
        if top:
            print(f"{PROG}: Error: {response.error_message or top} ({top})", file=sys.stderr)
        print_rows(DELETE_OFFSETS_HEADERS, [[t, "Successful" if e is None else f"Error: {m or e} ({e})"]
                                        for t, e, m in results], out)
    return 1 if top or any(e for _, e, _ in results) else 0


def _reset_partitions(client: AdminClient, group_id: str, args: argparse.Namespace) -> list[TopicPartition]:
    """--all-topics: the partitions the group has share state for; else those --topic names, which must exist."""
    if args.all_topics:
        return [(r.topic, r.partition) for r in _offsets(client, group_id)]
    return named_partitions(client, args.topics)


def _new_offsets(client: AdminClient, args: argparse.Namespace, partitions: list[TopicPartition]
                 ) -> dict[TopicPartition, int]:
    if args.target == "to_earliest":
        return offsets_at(client, partitions, EARLIEST)
    latest = offsets_at(client, partitions, LATEST)
    if args.target == "to_latest":
        return latest
    if args.target == "to_datetime":
        found = offsets_at(client, partitions, parse_datetime(args.to_datetime))
        # No record that late: the log end, as Kafka's getLogTimestampOffsets falls back.
        return {tp: offset if offset >= 0 else latest[tp] for tp, offset in found.items()}
    earliest = offsets_at(client, partitions, EARLIEST)
    return {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in partitions}


def _reset_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    (group_id,) = args.group_ids
    (described,) = _described(client, [group_id])
    if described.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
        check(described.error_code, f"Failed to describe share group '{group_id}'")
    if described.error_code == ErrorCode.none and described.members:
        print(f"{PROG}: Error: Share group '{group_id}' is not empty.", file=sys.stderr)
        return 1
    partitions = _reset_partitions(client, group_id, args)
    new = _new_offsets(client, args, partitions)
    if args.execute and new:
        by_topic: defaultdict[str, list[AlterShareGroupOffsetsRequestPartition]] = defaultdict(list)
        for (topic, p), offset in sorted(new.items()):
            by_topic[topic].append(AlterShareGroupOffsetsRequestPartition(partition_index=i32(p),
                                                                          start_offset=i64(offset)))
        response: AlterShareGroupOffsetsResponse = client.request(AlterShareGroupOffsetsRequest(
            group_id=GroupId(group_id), topics=tuple(
                AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(ps))
                for t, ps in by_topic.items())))
        check(response.error_code, f"Failed to reset the offsets of share group '{group_id}'")
        for t in response.responses:
            for answered in t.partitions:
                check(answered.error_code, f"Failed to reset the offset of share group '{group_id}' for "
                                            f"{t.topic_name}-{answered.partition_index}")
    if args.as_json:
        print_json({"groupId": group_id, "executed": bool(args.execute and new),
               "offsets": [{"topic": t, "partition": p, "newOffset": o} for (t, p), o in sorted(new.items())]}, out)
    else:
        print_rows(RESET_HEADERS, [[group_id, t, p, o] for (t, p), o in sorted(new.items())], out)
    return 0


COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace, TextIO], int]] = {
    "list": _list, "describe": _describe, "delete": _delete, "delete-offsets": _delete_offsets,
    "reset-offsets": _reset_offsets}


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore share-groups` command; the exit status (0 ok, 1 broker error, 2 usage or no broker)."""
    return run_command(PROG, args, check_arguments, lambda client, a, o: COMMANDS[a.command](client, a, o), out)
