"""The `logstore` command: one argparse front, one subcommand per job.

The only module allowed to sit above every layer (DESIGN.md). Each subcommand
registers its arguments here (those that talk to a running broker in
`broker/admin_commands.py`) and calls a `run(...) -> exit status` function in
its own module; the logic stays importable and testable without a process.
The admin commands' usage errors are one line on stderr, as their other
errors are (exit status 2).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from logstore import __version__


class _Parser(argparse.ArgumentParser):
    """argparse's parser; with `brief_errors` a usage error is one line on stderr (and exit status 2)."""

    brief_errors = False

    def error(self, message: str) -> NoReturn:
        if not self.brief_errors:
            super().error(message)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


if TYPE_CHECKING:
    from logstore.dump import RecordDecoder

    _Commands = argparse._SubParsersAction[_Parser]


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
        "--share-group-state-decoder", dest="decoder", action="store_const", const="share-group-state",
        help="decode records as __share_group_state records (share snapshots and updates) and print them as JSON")
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
    if name == "share-group-state":
        return dump.RecordDecoder("share group state decoder", record_json.share_group_state_record)
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
    parser.add_argument("--log-format", choices=("text", "json"), default=None,
                        help="the log lines' form: text (the default) or json, one object a line "
                             "(also LOGSTORE_LOG_FORMAT)")
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
                       log_levels=args.log_level, print_config=args.print_config,
                       log_format=args.log_format)


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
    where = _Parser(add_help=False)
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


def _brief_errors(parser: argparse.ArgumentParser) -> None:
    """Make `parser` and every subcommand parser below it report usage errors in one line."""
    if isinstance(parser, _Parser):
        parser.brief_errors = True
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _brief_errors(sub)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the `logstore` command and all its subcommands."""
    from logstore.broker.admin_commands import add_admin_commands
    parser = _Parser(
        prog="logstore", description="logstore: a Kafka-compatible log storage engine.")
    parser.add_argument("--version", action="version", version=f"logstore {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    commands.required = True
    _add_dump(commands)
    _add_broker(commands)
    _add_cleaner(commands)
    _add_users(commands)
    add_admin_commands(commands)
    # The commands that talk to a broker: their usage errors are one line, as the errors they report.
    from logstore.broker.admin_commands import ADMIN_COMMANDS
    for name in ADMIN_COMMANDS:
        _brief_errors(commands.choices[name])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `logstore` command line; return the process exit status."""
    if list(sys.argv[1:] if argv is None else argv)[:1] == ["broker"] and "hypothesis" not in sys.modules:
        # kio registers Hypothesis strategies for its types whenever Hypothesis can be imported (wherever the
        # test extra is installed): 160 ms of every broker start for strategies a broker never draws. Before
        # the parser, whose admin commands import kio; None in sys.modules makes the import fail (Python's rule).
        sys.modules["hypothesis"] = None  # type: ignore[assignment]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        message = f"unrecognized arguments: {' '.join(extra)}"
        from logstore.broker.admin_commands import ADMIN_COMMANDS
        if args.command not in ADMIN_COMMANDS:
            parser.error(message)
        sys.stderr.write(f"logstore {args.command}: error: {message} (see logstore {args.command} --help)\n")
        return 2
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
