"""The `logstore` command: one argparse front, one subcommand per job.

The only module allowed to sit above every layer (DESIGN.md). Each subcommand
registers its arguments here and calls a `run(...) -> exit status` function in
its own module; the logic stays importable and testable without a process.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from logstore import __version__

if TYPE_CHECKING:
    from logstore.dump import RecordDecoder

    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]

def _add_dump(commands: _Commands) -> None:
    parser = commands.add_parser(
        "dump",
        help="print the files of a log dir: segments, indexes, snapshots, checkpoints (like kafka-dump-log.sh)",
        description="Print Kafka log-dir files the way kafka-dump-log.sh does: .log segments and KRaft "
                    ".checkpoint snapshots (every batch, and with --deep-iteration every record), .index "
                    "and .timeindex (each entry, checked against the .log beside them), .txnindex (the "
                    "aborted transactions), producer .snapshot files, and the text checkpoints "
                    "(leader-epoch-checkpoint, *-offset-checkpoint). Keys and values that are not "
                    "printable UTF-8 are shown as 0x-prefixed hex.",
        epilog="Exit status: 0 all data intact (a partial entry at the end of a file, which "
               "Kafka's recovery would truncate, is reported but is not an error; so is a file skipped "
               "as unknown); 1 corrupt data found (bad CRC, an entry the decoder refuses, unreadable "
               "framing, an index entry the log contradicts, a record the chosen decoder cannot read, a "
               "snapshot or checkpoint its reader refuses); 2 bad arguments, or a path that is missing, "
               "unreadable, a directory without .log files, or an index without its .log. Problems are "
               "reported on stderr, one line each, with the byte position where there is one. The --json "
               "schemas are documented in `python -m pydoc logstore.dump` and the modules it names.")
    parser.add_argument(
        "paths", nargs="*", metavar="PATH",
        help="a file to dump, or a partition directory (<topic>-<partition>/) whose *.log files are "
             "dumped in base-offset order")
    parser.add_argument(
        "--files", action="append", default=[], metavar="FILE1,FILE2,...",
        help="comma-separated files to dump, after the PATHs (Kafka's spelling; repeatable)")
    parser.add_argument(
        "--print-data-log", "--deep", dest="print_data", action="store_true",
        help="print every record with its key and payload (implies --deep-iteration; set by any decoder)")
    parser.add_argument(
        "--deep-iteration", dest="deep", action="store_true",
        help="print a line per record: offset, timestamp, sizes, sequence, header keys, and the marker "
             "of control records")
    parser.add_argument(
        "--skip-record-metadata", action="store_true",
        help="with --print-data-log, print only each record's key and payload, and no control records")
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument(
        "--offsets-decoder", dest="decoder", action="store_const", const="offsets",
        help="decode records as __consumer_offsets records (offset commits, group metadata, KIP-848 "
             "consumer groups, share groups) and print them as JSON")
    decoders.add_argument(
        "--transaction-log-decoder", dest="decoder", action="store_const", const="transactions",
        help="decode records as __transaction_state records and print them as JSON")
    decoders.add_argument(
        "--cluster-metadata-decoder", dest="decoder", action="store_const", const="cluster-metadata",
        help="decode records as KRaft cluster metadata records (__cluster_metadata, .checkpoint "
             "snapshots) and print them as JSON")
    parser.add_argument(
        "--max-bytes", type=_non_negative, metavar="SIZE",
        help="read only the whole batches in the first SIZE bytes of each .log or .checkpoint file")
    parser.add_argument(
        "--verify-index-only", action="store_true",
        help="check .index and .timeindex entries against the .log without printing them")
    parser.add_argument(
        "--index-sanity-check", action="store_true",
        help="only run the sanity check that decides at startup whether an index is rebuilt")
    parser.add_argument(
        "--json", dest="as_json", action="store_true",
        help="print one JSON document per file, one per line, instead of Kafka's text layout "
             "(bytes as {\"hex\": ..., \"utf8\": ...}, utf8 only when printable)")
    parser.set_defaults(run=_run_dump, dump_parser=parser)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}")
    return value


def _dump_decoder(name: str | None) -> RecordDecoder | None:
    """The record decoder a --*-decoder flag names; the broker's record schemas live in its layer."""
    from logstore import dump
    if name is None:
        return None
    if name == "cluster-metadata":
        return dump.cluster_metadata_decoder()
    from logstore.broker.coordinator import record_json
    if name == "offsets":
        return dump.RecordDecoder("offsets decoder", record_json.offsets_record)
    return dump.RecordDecoder("transaction log decoder", record_json.transaction_record)


def _run_dump(args: argparse.Namespace) -> int:
    from logstore import dump
    paths = list(args.paths) + [f for group in args.files for f in group.split(",") if f]
    if not paths:
        args.dump_parser.error("no files to dump: give PATHs or --files")
    options = dump.DumpOptions(
        print_data=args.print_data, deep=args.deep, skip_record_metadata=args.skip_record_metadata,
        decoder=_dump_decoder(args.decoder), max_bytes=args.max_bytes, verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check, as_json=args.as_json)
    return dump.run(paths, options)


def _add_broker(commands: _Commands) -> None:
    parser = commands.add_parser(
        "broker",
        help="run a single-node Kafka broker over a logstore store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Serve the Kafka wire protocol on the first entry of `listeners` that is not a\n"
                    "controller listener (default PLAINTEXT://127.0.0.1:9092), with the partitions in\n"
                    "`log.dirs` (default ./data). SIGTERM or SIGINT shut down cleanly.",
        epilog="""\
Settings use Kafka's names, as in server.properties: listeners, advertised.listeners,
log.dirs, num.partitions, log.segment.bytes, log.retention.hours, message.max.bytes, ...
Kafka's stock config/server.properties works as it is. Each source wins over the one before:
  1. the config file, in Java .properties syntax (escapes, \\ continuations, = : or space);
  2. the environment, as Kafka's container image reads it: KAFKA_LOG_DIRS=/data is
     log.dirs=/data (drop KAFKA_, lower-case, _ is ., __ is _, ___ is -); LOGSTORE_LOG_DIRS
     by the same rule, winning over KAFKA_LOG_DIRS;
  3. --override KEY=VALUE.
Kafka settings that mean nothing on one node (replication, controller quorum, ZooKeeper,
thread counts, socket buffers) are accepted and named in one warning, and controller
listeners are not opened. Any other unknown setting is an error (a stray KAFKA_ or
LOGSTORE_ variable only a warning).

Log levels: --log-level LEVEL sets every logger, --log-level LOGGER=LEVEL one logger and
those below it, e.g. --log-level WARN --log-level logstore.cleaner=DEBUG (a comma-separated
list works too). Levels: TRACE, DEBUG, INFO (the default), WARN, ERROR, FATAL, OFF.
KAFKA_LOG4J_ROOT_LOGLEVEL and KAFKA_LOG4J_LOGGERS are read the same way, before --log-level.

Exit status: 0 after a clean shutdown, or after --print-config; 1 the broker could not run
(a port in use, a log dir locked by another process or not writable, an I/O error); 2 bad
arguments or configuration (an unknown setting, a bad value, an unreadable config file).
Failures are one or two lines on stderr; at --log-level DEBUG with the traceback.""")
    parser.add_argument("config_file", nargs="?", metavar="server.properties",
                        help="a server.properties file, as kafka-server-start.sh takes it (or --config)")
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="a setting that wins over the file and the environment (repeatable)")
    parser.add_argument("--log-level", metavar="[LOGGER=]LEVEL", action="append", default=[],
                        help="the level of every logger, or of one (repeatable; the default is INFO)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the settings the broker would run with, one `name = value` a line, "
                             "and exit (the log dir is not opened)")
    parser.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from logstore.broker import startup
    if args.config_file is not None and args.config is not None:
        sys.stderr.write("logstore broker: give the config file once: as an argument or as --config\n")
        return 2
    return startup.run(args.config if args.config is not None else args.config_file, args.override,
                       log_levels=args.log_level, print_config=args.print_config)


def _add_cleaner(commands: _Commands) -> None:
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


COMMAND_CONFIG_HELP = ("Kafka client properties for a secured listener: security.protocol, ssl.truststore.location "
                       "(PEM), sasl.mechanism, sasl.jaas.config with username and password")


def _admin_commands(parser: argparse.ArgumentParser, dest: str) -> tuple[_Commands, argparse.ArgumentParser]:
    """What the admin commands share: --bootstrap-server, a required COMMAND stored in `dest`, and a
    parent parser with --json for the subcommands; returns (subparsers, that parent)."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="the broker to ask (comma-separated entries: the first that answers)")
    parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", dest="as_json", action="store_true",
                        help="print one JSON document instead of a table")
    actions = parser.add_subparsers(title="commands", dest=dest, metavar="COMMAND")
    actions.required = True
    return actions, common


def _add_transactions(commands: _Commands) -> None:
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


def _add_groups(commands: _Commands) -> None:
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


def _add_acls(commands: _Commands) -> None:
    parser = commands.add_parser(
        "acls",
        help="add, remove and list ACLs on a running broker (like kafka-acls.sh)",
        description="Manage the ACLs of a broker running Kafka's StandardAuthorizer, with CreateAcls, "
                    "DescribeAcls and DeleteAcls and kafka-acls' flags and output.",
        epilog="Exit status: 0 done; 1 the broker refused (its Kafka error on stderr); 2 bad arguments, or no "
               "broker at --bootstrap-server. See `python -m pydoc logstore.broker.acls_cli`.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    for flag, what in (("--topic", "topic"), ("--group", "group"), ("--transactional-id", "transactional id")):
        parser.add_argument(flag, action="append", default=[], metavar=what.upper().replace(" ", "-"),
                            help=f"a {what} ('*': every one; repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", default="literal", type=str.lower,
                        choices=["literal", "prefixed", "any", "match"])
    parser.add_argument("--operation", action="append", default=[], help="an operation (Read, Write, ...; "
                                                                          "repeatable; default All)")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                        help="with --list: only this principal's ACLs")
    parser.add_argument("--producer", action="store_true", help="ACLs a producer needs")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite too")
    parser.add_argument("--consumer", action="store_true", help="ACLs a consumer needs")
    parser.add_argument("--force", action="store_true", help="remove without asking")
    parser.set_defaults(run=_run_acls)


def _run_acls(args: argparse.Namespace) -> int:
    from logstore.broker import acls_cli
    return acls_cli.run(args)


def _add_users(commands: _Commands) -> None:
    parser = commands.add_parser(
        "users",
        help="add, list and delete SCRAM credentials in data directories, offline (like kafka-storage "
             "format --add-scram)",
        description="Change the SCRAM credentials (SCRAM-SHA-256, SCRAM-SHA-512) kept in the log dirs of a "
                    "broker that is not running: salt, iterations and keys, never the password. A running "
                    "broker's credentials change with AlterUserScramCredentials (kafka-configs).",
        epilog="Exit status: 0 done; 1 refused (a log dir in use by a broker, nothing to delete, an unreadable "
               "file); 2 bad arguments. The --json schema is documented in "
               "`python -m pydoc logstore.broker.users_cli`.")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--log-dirs", metavar="DIR[,DIR]", help="the broker's log.dirs")
    where.add_argument("--config", metavar="FILE", help="a server.properties whose log.dirs to use")
    actions = parser.add_subparsers(title="commands", dest="users_command", metavar="COMMAND")
    actions.required = True
    add = actions.add_parser("add", parents=[where], help="store a user's credential for a mechanism (replacing "
                                                          "one it has)")
    add.add_argument("--mechanism", required=True, metavar="MECHANISM", help="SCRAM-SHA-256 or SCRAM-SHA-512")
    add.add_argument("--user", required=True)
    add.add_argument("--password", help="the password (default: asked on the terminal, or one line of stdin)")
    add.add_argument("--password-file", metavar="FILE", help="read the password from FILE (one final newline "
                                                              "dropped)")
    add.add_argument("--iterations", type=int, default=4096, metavar="N",
                     help="PBKDF2 iterations, 4096..16384 (default 4096, Kafka's)")
    listing = actions.add_parser("list", parents=[where], help="the users and their mechanisms and iterations")
    listing.add_argument("--json", dest="as_json", action="store_true", help="print one JSON document")
    delete = actions.add_parser("delete", parents=[where], help="delete a user's credential (all its mechanisms "
                                                                "unless --mechanism)")
    delete.add_argument("--user", required=True)
    delete.add_argument("--mechanism", metavar="MECHANISM", help="SCRAM-SHA-256 or SCRAM-SHA-512")
    parser.set_defaults(run=_run_users)


def _run_users(args: argparse.Namespace) -> int:
    from logstore.broker import users_cli
    return users_cli.run(args)


def _add_configs(commands: _Commands) -> None:
    from logstore.broker.configs_cli import ENTITY_KINDS, EntityNameAction
    parser = commands.add_parser(
        "configs",
        help="describe and alter client quotas of users and client ids on a running broker (like kafka-configs.sh)",
        description="Describe and alter entity configs with DescribeClientQuotas and AlterClientQuotas, with "
                    "kafka-configs' flags and output: producer_byte_rate, consumer_byte_rate, request_percentage "
                    "of users, client ids, or a user's client id.",
        epilog="Exit status: 0 done; 1 the broker refused (its Kafka error on stderr); 2 bad arguments, or no "
               "broker at --bootstrap-server. See `python -m pydoc logstore.broker.configs_cli`.")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list the configs of the entities")
    action.add_argument("--alter", action="store_true", help="change the configs of one entity")
    parser.add_argument("--entity-type", action="append", choices=sorted(ENTITY_KINDS),
                        help="users or clients (both, in turn, for a user's client id)")
    parser.add_argument("--entity-name", action=EntityNameAction, dest="entities", metavar="NAME",
                        help="the name of the --entity-type before it")
    parser.add_argument("--entity-default", action=EntityNameAction, dest="entities", default_entity=True,
                        help="the default entity of the --entity-type before it")
    parser.add_argument("--user", action=EntityNameAction, dest="entities", kind="users", metavar="NAME",
                        help="--entity-type users --entity-name NAME")
    parser.add_argument("--client", action=EntityNameAction, dest="entities", kind="clients", metavar="NAME",
                        help="--entity-type clients --entity-name NAME")
    parser.add_argument("--user-defaults", action=EntityNameAction, dest="entities", kind="users",
                        default_entity=True, help="the default user")
    parser.add_argument("--client-defaults", action=EntityNameAction, dest="entities", kind="clients",
                        default_entity=True, help="the default client id")
    parser.add_argument("--add-config", metavar="K=V[,K=V]", help="configs to set, e.g. 'producer_byte_rate=1048576'")
    parser.add_argument("--delete-config", metavar="K[,K]", help="configs to remove")
    parser.set_defaults(run=_run_configs)


def _run_configs(args: argparse.Namespace) -> int:
    from logstore.broker import configs_cli
    return configs_cli.run(args)


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
    _add_acls(commands)
    _add_cleaner(commands)
    _add_users(commands)
    _add_configs(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `logstore` command line; return the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Python's docs advise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    return status
