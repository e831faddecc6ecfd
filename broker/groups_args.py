"""`logstore groups`' two forms of arguments, Kafka's flags and the subcommands, read as one.

Both leave the namespace with `command` (list, describe, delete,
delete-offsets, reset-offsets), `group_ids`, `all_groups`, `topics`
(TOPIC[:P,...] specs or None), `states` and `list_style` (names, states or
table) for list, and `view` (offsets, members or state) for describe, so the
commands in `groups_cli` read one shape. A combination Kafka's tool refuses
is a `UsageError` here (exit status 2).
"""
from __future__ import annotations

import argparse

from logstore.broker.admin_queries import parse_partitions
from logstore.broker.groups_reset import TARGETS, target_of
from logstore.broker.transactions_cli import UsageError

__all__ = ["ACTIONS", "GROUP_STATES", "check_arguments"]

GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
ACTIONS = ("list", "describe", "delete", "delete-offsets", "reset-offsets")


def _states(items: list[str]) -> list[str]:
    """Group state names as given (comma-separated or repeated, any case), in Kafka's spelling."""
    wanted = [s.strip() for item in items for s in item.split(",") if s.strip()]
    by_name = {s.lower(): s for s in GROUP_STATES}
    unknown = [s for s in wanted if s.lower() not in by_name]
    if unknown:
        raise UsageError(f"no group state {', '.join(unknown)} (states: {', '.join(GROUP_STATES)})")
    return list(dict.fromkeys(by_name[s.lower()] for s in wanted))


def _from_flags(args: argparse.Namespace) -> str:
    """The command Kafka's flags name (`--describe --group g`), with the namespace filled as a subcommand's."""
    chosen = [a for a in ACTIONS if getattr(args, "do_" + a.replace("-", "_"))]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets (or one of the subcommands " + ", ".join(ACTIONS) + ")")
    command = chosen[0]
    views = [v for v, given in (("members", args.view_members), ("offsets", args.view_offsets),
                                ("state", command == "describe" and args.list_state is not None)) if given]
    if views and command != "describe":
        raise UsageError(f"--{views[0]} goes with --describe")
    if len(views) > 1:
        raise UsageError("give one of --members, --state, --offsets")
    args.view = views[0] if views else "offsets"
    if command == "list":
        args.states = _states([args.list_state]) if args.list_state else None
        args.list_style = "names" if args.list_state is None else "states"
    elif args.list_state:
        raise UsageError("--state takes a value only with --list")
    with_all = ("describe", "delete", "reset-offsets")
    if args.all_groups and command not in with_all:
        raise UsageError(f"--all-groups goes with --describe, --delete or --reset-offsets, not --{command}")
    if command != "list" and not args.all_groups and not args.group_ids:
        raise UsageError(f"--{command} needs --group" + (" or --all-groups" if command in with_all else ""))
    if command == "delete-offsets" and len(args.group_ids) != 1:
        raise UsageError(f"--{command} works on one --group at a time")
    if command == "delete-offsets" and not args.topics:
        raise UsageError("--delete-offsets needs --topic")
    return command


def _from_subcommand(args: argparse.Namespace) -> str:
    """The subcommand form (`describe g --members`), with the namespace filled as the flags fill it."""
    command: str = args.groups_command
    flags = [a for a in ACTIONS if getattr(args, "do_" + a.replace("-", "_"))]
    if flags:
        raise UsageError(f"give the subcommand {command} or --{flags[0]}, not both")
    if command == "list":
        args.states = _states(args.states) if args.states else None
        args.list_style = "table"
    args.view = "members" if getattr(args, "members", False) else "state" if getattr(args, "state", False) \
        else "offsets"
    if getattr(args, "group", None) is not None:
        args.group_ids = [args.group]
    return command


def check_arguments(args: argparse.Namespace) -> None:
    """Read either form into the one shape the commands take; a UsageError for what cannot work."""
    command = _from_flags(args) if args.groups_command is None else _from_subcommand(args)
    args.command = command
    for spec in args.topics or ():
        try:
            parse_partitions(spec)
        except ValueError as exc:
            raise UsageError(f"{command}: {exc}") from None
    given = [t for t in TARGETS if getattr(args, t, None) not in (None, False)]
    if command == "reset-offsets":
        if bool(args.topics) == args.all_topics:
            raise UsageError("reset-offsets: give --topic (repeatable) or --all-topics")
        target_of(args)
        if args.execute and args.dry_run:
            raise UsageError("reset-offsets: --execute or --dry-run, not both")
    elif given or args.execute:
        raise UsageError(f"--{(given or ['execute'])[0].replace('_', '-')} goes with --reset-offsets")
