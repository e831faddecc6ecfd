"""The arguments of the `logstore` commands that talk to a running broker, as Kafka's tools take them.

`logstore/cli.py` calls `add_admin_commands`; each command's `run` imports
its module (`topics_cli`, `groups_cli`, ...) only when it runs. The options
every one of them shares: `--bootstrap-server` (default: the broker `make
run` starts), `--command-config` and `--json`, accepted before or after a
subcommand.
"""
from __future__ import annotations

import argparse
from argparse import ArgumentParser
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    _Commands = argparse._SubParsersAction

__all__ = ["ADMIN_COMMANDS", "COMMAND_CONFIG_HELP", "DEFAULT_BOOTSTRAP", "add_admin_commands"]

P = TypeVar("P", bound=ArgumentParser)

# The commands registered here, in the order `logstore --help` lists them.
ADMIN_COMMANDS = ("transactions", "groups", "share-groups", "acls", "configs", "topics", "get-offsets")

COMMAND_CONFIG_HELP = ("Kafka client properties for a secured listener: security.protocol, ssl.truststore.location "
                       "(PEM), sasl.mechanism, sasl.jaas.config with username and password")

# The broker `make run` starts: broker/config.py's default `listeners` (a test holds them equal).
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _connection_options(parser: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """--bootstrap-server, --command-config and --json. A subcommand's copies (`nested`) set a value only when
    given, so the options work before or after the subcommand."""
    def default(value: object) -> object:
        return argparse.SUPPRESS if nested else value
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", default=default(DEFAULT_BOOTSTRAP),
                        help=f"the broker to ask (comma-separated entries: the first that answers; default "
                             f"{DEFAULT_BOOTSTRAP}, the broker `make run` starts)")
    parser.add_argument("--command-config", metavar="FILE", default=default(None), help=COMMAND_CONFIG_HELP)
    parser.add_argument("--json", dest="as_json", action="store_true", default=default(False),
                        help="print one JSON document instead of Kafka's text")


def _admin_commands(parser: P, dest: str, *, required: bool = True) -> tuple[_Commands[P], P]:
    """What the admin commands with subcommands share: the connection options (before or after the
    subcommand) and a COMMAND stored in `dest`; returns (subparsers, the parent parser of each subcommand)."""
    _connection_options(parser)
    common = type(parser)(add_help=False)   # the parent of each subcommand, of the subcommands' class
    _connection_options(common, nested=True)
    actions = parser.add_subparsers(title="commands", dest=dest, metavar="COMMAND")
    actions.required = required
    return actions, common


def _add_transactions(commands: _Commands[P]) -> None:
    parser = commands.add_parser(
        "transactions",
        help="list and describe transactions, find, abort and force-terminate hanging ones (like "
             "kafka-transactions.sh)",
        description="Ask a running broker about transactions, with Kafka's admin APIs "
                    "(ListTransactions, DescribeTransactions, DescribeProducers), print "
                    "Kafka's tables, and end hanging ones (WriteTxnMarkers, InitProducerId).",
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
    abort = actions.add_parser("abort", parents=[common],
                               help="abort a hanging transaction (requires CLUSTER_ACTION on the cluster), or "
                                    "the open transaction of a transactional id (a prepared 2PC one included)")
    abort.add_argument("--transactional-id", metavar="ID",
                       help="instead of --topic/--partition: abort this id's open transaction through its "
                            "coordinator, fencing its producer (as force-terminate)")
    abort.add_argument("--topic")
    abort.add_argument("--partition", type=int)
    abort.add_argument("--start-offset", type=int, metavar="OFFSET",
                       help="the first offset of the transaction to abort (its producer is looked up)")
    abort.add_argument("--producer-id", type=int, metavar="ID", help="instead of --start-offset: the producer id")
    abort.add_argument("--producer-epoch", type=int, metavar="EPOCH", help="and its epoch")
    abort.add_argument("--coordinator-epoch", type=int, metavar="EPOCH",
                       help="and the coordinator epoch of its last marker (DescribeProducers shows it)")
    terminate = actions.add_parser(
        "force-terminate", parents=[common],
        help="fence a transactional id's producer and abort its open transaction")
    terminate.add_argument("--transactional-id", required=True, metavar="ID")
    hanging = actions.add_parser(
        "find-hanging", parents=[common],
        help="open transactions older than the timeout that their coordinator does not know of")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="the largest transaction timeout in use, in minutes (default 15)")
    hanging.add_argument("--topic", help="search this topic only (default: every topic)")
    hanging.add_argument("--partition", type=int, help="search this partition of --topic only")
    hanging.add_argument("--broker-id", type=int, metavar="ID",
                         help="search the partitions this broker leads (here: every partition, if ID is its id)")
    parser.set_defaults(run=_run_transactions)


def _run_transactions(args: argparse.Namespace) -> int:
    from logstore.broker import transactions_cli
    return transactions_cli.run(args)


def _reset_targets(parser: argparse.ArgumentParser, *, nested: bool) -> None:
    """kafka-consumer-groups' reset targets and run mode (one target is required, checked when run)."""
    def default(value: object) -> object:
        return argparse.SUPPRESS if nested else value
    parser.add_argument("--to-earliest", action="store_true", default=default(False),
                        help="each partition's log start offset")
    parser.add_argument("--to-latest", action="store_true", default=default(False),
                        help="each partition's log end offset")
    parser.add_argument("--to-current", action="store_true", default=default(False),
                        help="the committed offset (the log end offset where the group has none)")
    parser.add_argument("--to-offset", type=int, metavar="N", default=default(None),
                        help="offset N, moved into [earliest, latest] if outside")
    parser.add_argument("--shift-by", type=int, metavar="N", default=default(None),
                        help="the committed offset plus N (negative: back), moved into [earliest, latest]")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", default=default(None),
                        help="the first offset at or after that time (UTC unless a zone follows: Z, +hh:mm)")
    parser.add_argument("--by-duration", metavar="PnDTnHnMnS", default=default(None),
                        help="the first offset at or after that long ago (e.g. P1DT2H, PT30M)")
    parser.add_argument("--execute", action="store_true", default=default(False), help="commit the new offsets")
    parser.add_argument("--dry-run", action="store_true", default=default(False),
                        help="only print them (the default)")


def _add_groups(commands: _Commands[P]) -> None:
    parser = commands.add_parser(
        "groups",
        help="list, describe and delete consumer groups, show lag, reset offsets (like kafka-consumer-groups.sh)",
        description="Ask a running broker about consumer groups, with Kafka's admin APIs (ListGroups, "
                    "DescribeGroups, OffsetFetch, ListOffsets, DeleteGroups, OffsetDelete, OffsetCommit), "
                    "and print Kafka's tables. Kafka's flags (--list, --describe --group G, --all-groups, "
                    "--delete, --delete-offsets, --reset-offsets) or a subcommand.",
        epilog="Exit status: 0 done; 1 the broker answered with an error (named on stderr), a group to "
               "describe does not exist, or a reset was refused; 2 bad arguments, or no broker at "
               "--bootstrap-server. The --json schema is documented in "
               "`python -m pydoc logstore.broker.groups_cli`.")
    actions, common = _admin_commands(parser, "groups_command", required=False)
    for flag, what in (("--list", "list the groups (with --state [S,...]: and their states)"),
                       ("--describe", "describe --group G (repeatable) or --all-groups"),
                       ("--delete", "delete --group G (repeatable) or --all-groups, which must have no members"),
                       ("--delete-offsets", "delete one --group's offsets of --topic T[:P,...]"),
                       ("--reset-offsets", "reset --group G's offsets (repeatable, or --all-groups; a dry run unless "
                                            "--execute)")):
        parser.add_argument(flag, dest="do_" + flag[2:].replace("-", "_"), action="store_true", help=what)
    parser.add_argument("--group", dest="group_ids", action="append", default=[], metavar="GROUP",
                        help="the group to act on (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every group (--describe, --delete, "
                                                                    "--reset-offsets)")
    parser.add_argument("--topic", dest="topics", action="append", default=None, metavar="TOPIC[:PARTITION,...]",
                        help="a topic (all its partitions) or some of its partitions (repeatable)")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every partition the group has an offset for")
    parser.add_argument("--members", dest="view_members", action="store_true",
                        help="with --describe: one row per member")
    parser.add_argument("--offsets", dest="view_offsets", action="store_true",
                        help="with --describe: one row per partition, with its lag (the default)")
    parser.add_argument("--state", dest="list_state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                        help="with --describe: the coordinator, assignor, state and member count; with --list: "
                             "the groups' states, only those in STATEs if given")
    parser.add_argument("--verbose", action="store_true", help="accepted for Kafka's sake: members' assignments "
                                                                "are always shown")
    parser.add_argument("--timeout", type=int, metavar="MS", help="accepted for Kafka's sake")
    _reset_targets(parser, nested=False)
    listing = actions.add_parser("list", parents=[common], help="list groups, their protocol types and states")
    listing.add_argument("--state", dest="states", action="append", metavar="STATE",
                         help="only groups in this state (Kafka's names: PreparingRebalance, CompletingRebalance, "
                              "Stable, Dead, Empty; comma-separated or repeated)")
    describe = actions.add_parser(
        "describe", parents=[common],
        help="committed offsets, log end offsets, lag and owner of each partition (default), or the members, "
             "or the state")
    describe.add_argument("group_ids", nargs="+", metavar="GROUP")
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true",
                       help="one row per member: ids, host, client id, assigned partitions")
    shown.add_argument("--state", action="store_true",
                       help="the coordinator, assignment strategy, state and number of members")
    delete = actions.add_parser("delete", parents=[common], help="delete groups that have no members")
    delete.add_argument("group_ids", nargs="+", metavar="GROUP")
    delete_offsets = actions.add_parser(
        "delete-offsets", parents=[common],
        help="delete a group's offsets for topics its members do not subscribe to")
    delete_offsets.add_argument("group", metavar="GROUP")
    delete_offsets.add_argument("topics", nargs="+", metavar="TOPIC[:PARTITION,...]",
                                help="a topic (all its partitions) or some of its partitions")
    reset = actions.add_parser(
        "reset-offsets", parents=[common],
        help="set an inactive group's offsets (earliest, latest, an offset, a time, a shift; a dry run "
             "unless --execute)")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", dest="topics", action="append", default=argparse.SUPPRESS,
                       metavar="TOPIC[:PARTITION,...]",
                       help="a topic (all its partitions) or some of its partitions (repeatable)")
    reset.add_argument("--all-topics", action="store_true", default=argparse.SUPPRESS,
                       help="every partition the group has an offset for")
    _reset_targets(reset, nested=True)
    parser.set_defaults(run=_run_groups)


def _run_groups(args: argparse.Namespace) -> int:
    from logstore.broker import groups_cli
    return groups_cli.run(args)


def _add_share_groups(commands: _Commands[P]) -> None:
    from logstore.broker.share_groups_args import add_arguments
    parser = commands.add_parser(
        "share-groups",
        help="list, describe, reset and delete share groups and their start offsets (like kafka-share-groups.sh)",
        description="Ask a running broker about KIP-932 share groups, with Kafka's admin APIs (ListGroups, "
                    "ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets, "
                    "DeleteShareGroupOffsets, DeleteGroups), with kafka-share-groups' flags and tables.",
        epilog="Exit status: 0 done; 1 the broker answered with an error (named on stderr), a group does not "
               "exist or is not empty; 2 bad arguments, or no broker at --bootstrap-server. The --json schema "
               "is documented in `python -m pydoc logstore.broker.share_groups_cli`.")
    _connection_options(parser)
    add_arguments(parser)
    parser.set_defaults(run=_run_share_groups)


def _run_share_groups(args: argparse.Namespace) -> int:
    from logstore.broker import share_groups_cli
    return share_groups_cli.run(args)


def _add_acls(commands: _Commands[P]) -> None:
    parser = commands.add_parser(
        "acls",
        help="add, remove and list ACLs on a running broker (like kafka-acls.sh)",
        description="Manage the ACLs of a broker running Kafka's StandardAuthorizer, with CreateAcls, "
                    "DescribeAcls and DeleteAcls and kafka-acls' flags and output.",
        epilog="Exit status: 0 done; 1 the broker refused (its Kafka error on stderr); 2 bad arguments, or no "
               "broker at --bootstrap-server. See `python -m pydoc logstore.broker.acls_cli`.")
    _connection_options(parser)
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


def _add_topics(commands: _Commands[P]) -> None:
    from logstore.broker.topics_cli import ACTIONS
    parser = commands.add_parser(
        "topics",
        help="create, list, describe, grow and delete topics (like kafka-topics.sh)",
        description="Manage the topics of a running broker with CreateTopics, Metadata, DescribeConfigs, "
                    "CreatePartitions and DeleteTopics, with kafka-topics' flags and output. The action is "
                    "Kafka's flag (--create, --list, --describe, --alter, --delete) or the same word as a "
                    "subcommand (`logstore topics describe --topic t`).",
        epilog="Exit status: 0 done; 1 the broker refused (its Kafka error on stderr) or --topic matched no "
               "topic; 2 bad arguments, or no broker at --bootstrap-server. See "
               "`python -m pydoc logstore.broker.topics_cli`.")
    parser.add_argument("topics_command", nargs="?", choices=ACTIONS, metavar="COMMAND",
                        help="the action, instead of its flag: " + ", ".join(ACTIONS))
    _connection_options(parser)
    for action, what in (("create", "create a topic"), ("list", "list the topics"),
                         ("describe", "describe the topics (all, or those --topic matches)"),
                         ("alter", "grow a topic to --partitions N"), ("delete", "delete the topics --topic matches")):
        parser.add_argument("--" + action, dest="do_" + action, action="store_true", help=what)
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic; a regular expression except with --create (e.g. 'orders.*')")
    parser.add_argument("--topic-id", metavar="ID", help="with --describe: the topic of this id (Kafka's base64 "
                                                         "form, as --describe prints it)")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="the number of partitions to create, or to grow to (default: num.partitions)")
    parser.add_argument("--replication-factor", type=int, metavar="R",
                        help="the replication factor (one node: 1; default: default.replication.factor)")
    parser.add_argument("--replica-assignment", metavar="B1:B2,B1:B2",
                        help="the broker ids of each partition's replicas, partitions comma-separated")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config of the topic to create (repeatable)")
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter, --delete, --describe: no error when --topic matches nothing")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: no error when the topic exists")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="with --list, --describe: leave out internal topics")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions with fewer in-sync replicas than replicas")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions without a leader")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions with fewer in-sync replicas than min.insync.replicas")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions with exactly min.insync.replicas in sync")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics with configs of their own, without partitions")
    parser.add_argument("--partition-size-limit-per-response", type=int, metavar="N",
                        help="accepted for Kafka's sake: one answer holds every partition here")
    parser.set_defaults(run=_run_topics)


def _run_topics(args: argparse.Namespace) -> int:
    from logstore.broker import topics_cli
    return topics_cli.run(args)


def _add_get_offsets(commands: _Commands[P]) -> None:
    parser = commands.add_parser(
        "get-offsets",
        help="partitions' offsets for a time: earliest, latest, max-timestamp or a timestamp "
             "(like kafka-get-offsets.sh)",
        description="Print `topic:partition:offset` for the partitions chosen, with ListOffsets.",
        epilog="Exit status: 0 done; 1 no partition matched; 2 bad arguments, or no broker at --bootstrap-server. "
               "See `python -m pydoc logstore.broker.get_offsets_cli`.")
    _connection_options(parser)
    parser.add_argument("--topic", metavar="REGEX", help="the topics (a regular expression; default: all)")
    parser.add_argument("--partitions", metavar="P,P", help="the partition ids (default: all)")
    parser.add_argument("--topic-partitions", metavar="REGEX:P,REGEX:N-M",
                        help="topic-partition patterns, comma-separated: a partition is N, N-M (M excluded), N- or "
                             "-M (instead of --topic and --partitions)")
    parser.add_argument("--time", default="latest", metavar="TIME",
                        help="latest/-1 (default), earliest/-2, max-timestamp/-3, earliest-local/-4, "
                             "latest-tiered/-5, or ms since the epoch")
    parser.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    parser.set_defaults(run=_run_get_offsets)


def _run_get_offsets(args: argparse.Namespace) -> int:
    from logstore.broker import get_offsets_cli
    return get_offsets_cli.run(args)


def _add_configs(commands: _Commands[P]) -> None:
    from logstore.broker.configs_cli import ENTITY_KINDS, EntityNameAction
    parser = commands.add_parser(
        "configs",
        help="describe and alter configs of topics, the broker, groups, and quotas of users and client ids on a "
             "running broker (like kafka-configs.sh)",
        description="Describe and alter entity configs with kafka-configs' flags and output: topic, broker and "
                    "group configs with DescribeConfigs and IncrementalAlterConfigs; producer_byte_rate, "
                    "consumer_byte_rate, request_percentage of users, client ids, or a user's client id with "
                    "DescribeClientQuotas and AlterClientQuotas. The action is Kafka's flag (--describe, --alter) "
                    "or the same word as a subcommand.",
        epilog="Exit status: 0 done; 1 the broker refused (its Kafka error on stderr); 2 bad arguments, or no "
               "broker at --bootstrap-server. See `python -m pydoc logstore.broker.configs_cli`.")
    parser.add_argument("configs_command", nargs="?", choices=("describe", "alter"), metavar="COMMAND",
                        help="the action, instead of its flag: describe, alter")
    _connection_options(parser)
    parser.add_argument("--describe", action="store_true", help="list the configs of the entities")
    parser.add_argument("--alter", action="store_true", help="change the configs of one entity")
    parser.add_argument("--all", action="store_true",
                        help="with --describe of topics, brokers or groups: every config, not only the entity's own")
    parser.add_argument("--entity-type", action="append", choices=sorted(ENTITY_KINDS),
                        help="topics, brokers, groups, users or clients (users then clients for a user's client id)")
    parser.add_argument("--entity-name", action=EntityNameAction, dest="entities", metavar="NAME",
                        help="the name of the --entity-type before it")
    parser.add_argument("--entity-default", action=EntityNameAction, dest="entities", default_entity=True,
                        help="the default entity of the --entity-type before it")
    for flag, kind, what in (("--topic", "topics", "topic"), ("--broker", "brokers", "broker id"),
                             ("--group", "groups", "group id"), ("--user", "users", "user"),
                             ("--client", "clients", "client id")):
        parser.add_argument(flag, action=EntityNameAction, dest="entities", kind=kind, metavar="NAME",
                            help=f"the {what}: --entity-type {kind} --entity-name NAME")
    for flag, kind, what in (("--broker-defaults", "brokers", "the cluster-wide broker defaults"),
                             ("--user-defaults", "users", "the default user"),
                             ("--client-defaults", "clients", "the default client id")):
        parser.add_argument(flag, action=EntityNameAction, dest="entities", kind=kind, default_entity=True,
                            help=what)
    parser.add_argument("--add-config", metavar="K=V[,K=V]",
                        help="configs to set, e.g. 'retention.ms=86400000,cleanup.policy=[compact,delete]' or "
                             "'producer_byte_rate=1048576'")
    parser.add_argument("--delete-config", metavar="K[,K]", help="configs to remove")
    parser.set_defaults(run=_run_configs)


def _run_configs(args: argparse.Namespace) -> int:
    from logstore.broker import configs_cli
    return configs_cli.run(args)


def add_admin_commands(commands: _Commands[P]) -> None:
    """Register every admin command with the `logstore` command's subparsers."""
    _add_transactions(commands)
    _add_groups(commands)
    _add_share_groups(commands)
    _add_acls(commands)
    _add_configs(commands)
    _add_topics(commands)
    _add_get_offsets(commands)
