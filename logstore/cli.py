"""The `logstore` command: one argparse front, one subcommand per job.

The only module allowed to sit above every layer (DESIGN.md). Each subcommand
registers its arguments here and calls a `run(...) -> exit status` function in
its own module; the logic stays importable and testable without a process.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from logstore import __version__

def _add_dump(commands) -> None:
    parser = commands.add_parser(
        "dump",
        help="print the batches of .log segment files (like kafka-dump-log.sh)",
        description="Print every batch of Kafka .log segment files the way "
                    "kafka-dump-log.sh --print-data-log does. Keys and values that are not "
                    "printable UTF-8 are shown as 0x-prefixed hex.",
        epilog="Exit status: 0 all data intact (a partial entry at the end of a file, which "
               "Kafka's recovery would truncate, is reported but is not an error); 1 corrupt "
               "data found (bad CRC, an entry the decoder refuses, unreadable framing); 2 bad "
               "arguments, or a path that is missing, unreadable, or a directory without .log "
               "files. Problems are reported on stderr, one line each, with the byte position. "
               "The --json schema is documented in `python -m pydoc logstore.dump`.")
    parser.add_argument(
        "paths", nargs="+", metavar="PATH",
        help="a .log segment file, or a partition directory (<topic>-<partition>/) whose "
             "*.log files are dumped in base-offset order")
    parser.add_argument(
        "--deep", "--deep-iteration", "--print-data-log", dest="deep", action="store_true",
        help="also print every record: offset, timestamp, sizes, sequence, header keys, key "
             "and payload (non-UTF-8 bytes as 0x-prefixed hex), and the marker of control records")
    parser.add_argument(
        "--json", dest="as_json", action="store_true",
        help="print one JSON document per file, one per line, instead of Kafka's text layout "
             "(bytes as {\"hex\": ..., \"utf8\": ...}, utf8 only when printable)")
    parser.set_defaults(run=_run_dump)


def _run_dump(args: argparse.Namespace) -> int:
    from logstore import dump
    return dump.run(args.paths, deep=args.deep, as_json=args.as_json)


def _add_broker(commands) -> None:
    parser = commands.add_parser(
        "broker",
        help="run a single-node Kafka broker over a logstore store",
        description="Serve the Kafka wire protocol on the first of `listeners` (default "
                    "127.0.0.1:9092) with the partitions in `log.dirs` (default ./data). "
                    "SIGTERM or SIGINT shut down cleanly.",
        epilog="Settings use Kafka's names, as in server.properties: listeners, "
               "advertised.listeners, log.dirs, num.partitions, auto.create.topics.enable, "
               "log.segment.bytes, log.retention.ms, message.max.bytes, socket.request.max.bytes, ...")
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="a setting that wins over the file (repeatable)")
    parser.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from logstore.broker import server
    return server.run(args.config, args.override)


def _add_cleaner(commands) -> None:
    parser = commands.add_parser(
        "cleaner",
        help="show the log cleaner's state per compacted partition of data directories",
        description="Read the files of log dirs (no lock taken: safe beside a running broker) and print, "
                    "for every partition whose cleanup.policy has `compact`, where the next cleaning "
                    "starts, the clean and dirty bytes and ratio, and the last round's time and bytes "
                    "reclaimed. The cleaner cleans a log once its dirty ratio passes "
                    "min.cleanable.dirty.ratio (default 0.5).",
        epilog="Exit status: 0, or 2 if a path is not a readable log dir.")
    parser.add_argument("paths", nargs="+", metavar="DIR", help="a log dir (the broker's log.dirs entry)")
    parser.add_argument("--default-policy", default="delete", metavar="POLICY",
                        help="cleanup.policy of topics without an override (the broker's log.cleanup.policy; "
                             "default: delete)")
    parser.add_argument("--json", dest="as_json", action="store_true", help="print one JSON document")
    parser.set_defaults(run=_run_cleaner)


def _run_cleaner(args: argparse.Namespace) -> int:
    from logstore import cleaner_report
    return cleaner_report.run(args.paths, default_policy=args.default_policy, as_json=args.as_json)


def _admin_commands(parser: argparse.ArgumentParser, dest: str):
    """What the admin commands share: --bootstrap-server, a required COMMAND stored in `dest`, and a
    parent parser with --json for the subcommands; returns (subparsers, that parent)."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="the broker to ask (comma-separated entries: the first that answers)")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", dest="as_json", action="store_true",
                        help="print one JSON document instead of a table")
    actions = parser.add_subparsers(title="commands", dest=dest, metavar="COMMAND")
    actions.required = True
    return actions, common


def _add_transactions(commands) -> None:
    parser = commands.add_parser(
        "transactions",
        help="list and describe transactions, find hanging ones (like kafka-transactions.sh)",
        description="Ask a running broker about transactions, with Kafka's admin APIs "
                    "(ListTransactions, DescribeTransactions, DescribeProducers), and print "
                    "Kafka's tables.",
        epilog="Exit status: 0 done; 1 the broker answered with an error (named on stderr); "
               "2 bad arguments, or no broker at --bootstrap-server. The --json schema is "
               "documented in `python -m pydoc logstore.broker.transactions_cli`.")
    actions, common = _admin_commands(parser, "transactions_command")
    listing = actions.add_parser("list", parents=[common], help="list transactional ids and their states")
    listing.add_argument("--state", dest="states", action="append", metavar="STATE",
                         help="only ids in this state (Kafka's names: Empty, Ongoing, PrepareCommit, "
                              "PrepareAbort, CompleteCommit, CompleteAbort; repeatable)")
    listing.add_argument("--producer-id", dest="producer_ids", action="append", type=int, metavar="N",
                         help="only ids with this producer id (repeatable)")
    listing.add_argument("--duration-filter", type=int, metavar="MS",
                         help="only transactions running longer than MS milliseconds (< 0: all)")
    describe = actions.add_parser("describe", parents=[common], help="describe one transactional id")
    describe.add_argument("--transactional-id", required=True, metavar="ID")
    producers = actions.add_parser("describe-producers", parents=[common],
                                   help="the producers a partition remembers and their open transactions")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", required=True, type=int)
    hanging = actions.add_parser(
        "find-hanging", parents=[common],
        help="open transactions older than the timeout that their coordinator does not know of")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="the largest transaction timeout in use, in minutes (default 15)")
    hanging.add_argument("--topic", help="search this topic only (default: every topic)")
    hanging.add_argument("--partition", type=int, help="search this partition of --topic only")
    parser.set_defaults(run=_run_transactions)


def _run_transactions(args: argparse.Namespace) -> int:
    from logstore.broker import transactions_cli
    return transactions_cli.run(args)


def _add_groups(commands) -> None:
    parser = commands.add_parser(
        "groups",
        help="list, describe and delete consumer groups, show lag, reset offsets (like kafka-consumer-groups.sh)",
        description="Ask a running broker about consumer groups, with Kafka's admin APIs (ListGroups, "
                    "DescribeGroups, OffsetFetch, ListOffsets, DeleteGroups, OffsetDelete, OffsetCommit), "
                    "and print Kafka's tables.",
        epilog="Exit status: 0 done; 1 the broker answered with an error (named on stderr), a group to "
               "describe does not exist, or a reset was refused; 2 bad arguments, or no broker at "
               "--bootstrap-server. The --json schema is documented in "
               "`python -m pydoc logstore.broker.groups_cli`.")
    actions, common = _admin_commands(parser, "groups_command")
    listing = actions.add_parser("list", parents=[common], help="list groups, their protocol types and states")
    listing.add_argument("--state", dest="states", action="append", metavar="STATE",
                         help="only groups in this state (Kafka's names: PreparingRebalance, CompletingRebalance, "
                              "Stable, Dead, Empty; comma-separated or repeated)")
    describe = actions.add_parser(
        "describe", parents=[common],
        help="committed offsets, log end offsets, lag and owner of each partition (default), or the members, "
             "or the state")
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true",
                       help="one row per member: ids, host, client id, assigned partitions")
    shown.add_argument("--state", action="store_true",
                       help="the coordinator, assignment strategy, state and number of members")
    delete = actions.add_parser("delete", parents=[common], help="delete groups that have no members")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete_offsets = actions.add_parser(
        "delete-offsets", parents=[common],
        help="delete a group's offsets for topics its members do not subscribe to")
    delete_offsets.add_argument("group", metavar="GROUP")
    delete_offsets.add_argument("topics", nargs="+", metavar="TOPIC[:PARTITION,...]",
                                help="a topic (all its partitions) or some of its partitions")
    reset = actions.add_parser(
        "reset-offsets", parents=[common],
        help="set an inactive group's offsets to the earliest, the latest or a given offset (a dry run "
             "unless --execute)")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", dest="topics", action="append", metavar="TOPIC[:PARTITION,...]",
                       help="a topic (all its partitions) or some of its partitions (repeatable)")
    reset.add_argument("--all-topics", action="store_true",
                       help="every partition the group has an offset for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="each partition's log end offset")
    target.add_argument("--to-offset", type=int, metavar="N",
                        help="offset N, moved into [earliest, latest] if outside")
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    run_mode.add_argument("--dry-run", action="store_true", help="only print them (the default)")
    parser.set_defaults(run=_run_groups)


def _run_groups(args: argparse.Namespace) -> int:
    from logstore.broker import groups_cli
    return groups_cli.run(args)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `logstore` command and all its subcommands."""
    parser = argparse.ArgumentParser(
        prog="logstore", description="logstore: a Kafka-compatible log storage engine.")
    parser.add_argument("--version", action="version", version=f"logstore {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True
    _add_dump(commands)
    _add_broker(commands)
    _add_transactions(commands)
    _add_groups(commands)
    _add_cleaner(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `logstore` command line; return the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Python's docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    return status
