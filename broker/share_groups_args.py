"""`logstore share-groups`' arguments: kafka-share-groups.sh's flags, and the checks its tool makes of them.

`add_arguments(parser)` registers the flags (`broker/admin_commands.py`
calls it); `check_arguments(args)` leaves the namespace with `command`
(list, describe, delete, delete-offsets, reset-offsets), `view` (offsets,
members or state) for describe, `states` (None, or Kafka's state names) for
list, and `target` (to_earliest, to_latest, to_datetime or to_offset) for
reset-offsets. A combination Kafka's tool refuses is a `UsageError` (exit
status 2), with its wording where it has one.
"""
from __future__ import annotations

import argparse

from logstore.broker.admin_queries import parse_partitions
from logstore.broker.groups_reset import parse_datetime
from logstore.broker.transactions_cli import UsageError

__all__ = ["ACTIONS", "SHARE_GROUP_STATES", "TARGETS", "add_arguments", "check_arguments"]

ACTIONS = ("list", "describe", "delete", "delete-offsets", "reset-offsets")
SHARE_GROUP_STATES = ("Empty", "Stable", "Dead")
TARGETS = ("to_earliest", "to_latest", "to_datetime", "to_offset")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """kafka-share-groups.sh's flags (the connection options --bootstrap-server, --command-config and --json
    are the caller's)."""
    for flag, what in (("--list", "list the share groups (with --state [S,...]: and their states)"),
                       ("--describe", "describe --group G (repeatable) or --all-groups: start offsets and lag "
                                      "(default), --members or --state"),
                       ("--delete", "delete --group G (repeatable) or --all-groups, which must be empty"),
                       ("--delete-offsets", "forget one empty --group's share state of --topic T (repeatable)"),
                       ("--reset-offsets", "set one empty --group's start offsets (--dry-run or --execute)")):
        parser.add_argument(flag, dest="do_" + flag[2:].replace("-", "_"), action="store_true", help=what)
    parser.add_argument("--group", dest="group_ids", action="append", default=[], metavar="GROUP",
                        help="the share group to act on (repeatable with --describe and --delete)")
    parser.add_argument("--all-groups", action="store_true", help="every share group (--describe, --delete)")
    parser.add_argument("--topic", dest="topics", action="append", default=None, metavar="TOPIC[:PARTITION,...]",
                        help="a topic (all its partitions; with --reset-offsets also some of them), repeatable")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every partition the group has share state for")
    parser.add_argument("--members", dest="view_members", action="store_true",
                        help="with --describe: one row per member")
    parser.add_argument("--offsets", dest="view_offsets", action="store_true",
                        help="with --describe: one row per share-partition, its start offset and lag (the default)")
    parser.add_argument("--state", dest="list_state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                        help="with --describe: the coordinator, state and member count; with --list: the groups' "
                             "states, only those in STATEs if given (Empty, Stable, Dead)")
    parser.add_argument("--verbose", action="store_true",
                        help="with --describe: leader epochs, member epochs, group and assignment epochs too")
    parser.add_argument("--timeout", type=int, metavar="MS", help="accepted for Kafka's sake")
    parser.add_argument("--to-earliest", action="store_true", help="each partition's log start offset")
    parser.add_argument("--to-latest", action="store_true", help="each partition's log end offset")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="the first offset at or after that time (UTC unless a zone follows: Z, +hh:mm)")
    parser.add_argument("--to-offset", type=int, metavar="N", help="offset N, moved into [earliest, latest]")
    parser.add_argument("--dry-run", action="store_true", help="only print the new start offsets")
    parser.add_argument("--execute", action="store_true", help="set the new start offsets")


def _states(text: str) -> list[str]:
    """Share-group state names, comma-separated, any case, in Kafka's spelling."""
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    by_name = {s.lower(): s for s in SHARE_GROUP_STATES}
    unknown = [s for s in wanted if s.lower() not in by_name]
    if unknown:
        raise UsageError(f"Invalid state list '{text}'. Valid states are: {', '.join(SHARE_GROUP_STATES)}")
    return list(dict.fromkeys(by_name[s.lower()] for s in wanted))


def _check_reset(args: argparse.Namespace) -> None:
    if args.dry_run and args.execute:
        raise UsageError("Option --reset-offsets only accepts one of --execute and --dry-run")
    if not args.dry_run and not args.execute:
        raise UsageError("Option --reset-offsets takes the option: --execute or --dry-run")
    if len(args.group_ids) != 1:
        raise UsageError("Option --reset-offsets takes the option: --group (one group at a time)")
    if not args.topics and not args.all_topics:
        raise UsageError("Option --reset-offsets takes one of these options: --all-topics, --topic")
    if args.topics and args.all_topics:
        raise UsageError("Option --reset-offsets takes --all-topics or --topic, not both")
    given = [t for t in TARGETS if getattr(args, t) not in (None, False)]
    if len(given) != 1:
        raise UsageError("Option --reset-offsets takes one of these options: --to-datetime, --to-earliest, "
                         "--to-latest, --to-offset")
    if args.to_offset is not None and args.to_offset < 0:
        raise UsageError(f"--to-offset must be >= 0, not {args.to_offset}")
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)
    args.target = given[0]


def check_arguments(args: argparse.Namespace) -> None:
    """Read Kafka's flags into one shape; a UsageError for what kafka-share-groups.sh refuses."""
    chosen = [a for a in ACTIONS if getattr(args, "do_" + a.replace("-", "_"))]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets")
    command = args.command = chosen[0]
    views = [v for v, given in (("members", args.view_members), ("offsets", args.view_offsets),
                                ("state", command == "describe" and args.list_state is not None)) if given]
    if (views or args.verbose) and command != "describe":
        raise UsageError(f"--{views[0] if views else 'verbose'} goes with --describe")
    if len(views) > 1:
        raise UsageError("Option --describe takes at most one of these options: --members, --offsets, --state")
    if command == "describe" and args.list_state:
        raise UsageError("Option --describe does not take a value for --state")
    args.view = views[0] if views else "offsets"
    args.states = _states(args.list_state) if command == "list" and args.list_state else None
    if args.list_state is not None and command not in ("list", "describe"):
        raise UsageError("--state goes with --list or --describe")
    if args.group_ids and args.all_groups:
        raise UsageError(f"Option --{command} takes either --group or --all-groups, not both.")
    if command == "list" and (args.group_ids or args.all_groups):
        raise UsageError("Option --list does not take --group or --all-groups")
    if command in ("describe", "delete") and not args.group_ids and not args.all_groups:
        raise UsageError(f"Option --{command} takes one of these options: --all-groups, --group")
    if command in ("delete-offsets", "reset-offsets") and args.all_groups:
        raise UsageError(f"Option --{command} works on one --group at a time")
    if command == "delete-offsets" and (len(args.group_ids) != 1 or not args.topics):
        raise UsageError("Option --delete-offsets takes the following options: --group, --topic")
    if args.topics and command not in ("delete-offsets", "reset-offsets"):
        raise UsageError(f"Option --{command} does not take the option: --topic")
    if args.all_topics and command != "reset-offsets":
        raise UsageError("--all-topics goes with --reset-offsets")
    for spec in args.topics or ():
        try:
            topic, partitions = parse_partitions(spec)
        except ValueError as exc:
            raise UsageError(f"--topic {exc}") from None
        if partitions is not None and command == "delete-offsets":
            raise UsageError(f"--delete-offsets forgets whole topics: --topic {spec!r} names partitions")
    if command == "reset-offsets":
        _check_reset(args)
    elif any(getattr(args, t) not in (None, False) for t in TARGETS) or args.dry_run or args.execute:
        raise UsageError("--to-*, --dry-run and --execute go with --reset-offsets")
