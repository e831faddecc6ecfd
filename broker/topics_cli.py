"""`logstore topics`: create, list, describe, grow and delete topics of a running broker, as kafka-topics.sh.

The arguments are registered in `broker/admin_commands.py`; `run(args)` does the
work over one `AdminClient` connection to `--bootstrap-server`. The action
is Kafka's flag (`--create`, `--list`, `--describe`, `--alter`, `--delete`)
or the same word as a subcommand (`logstore topics create --topic t`);
exactly one is given.

- `--create --topic T [--partitions N] [--replication-factor R]
  [--replica-assignment 0:0,0:0] [--config k=v ...] [--if-not-exists]`:
  CreateTopics; without --partitions or --replication-factor the broker's
  defaults apply. Prints `Created topic T.`; an existing topic with
  --if-not-exists prints nothing and succeeds.
- `--list [--topic REGEX] [--exclude-internal]`: the topic names, one a
  line, sorted.
- `--describe [--topic REGEX | --topic-id ID] [--exclude-internal] [--if-exists]
  [--under-replicated-partitions | --unavailable-partitions |
  --under-min-isr-partitions | --at-min-isr-partitions |
  --topics-with-overrides]`: Metadata and DescribeConfigs. Kafka's lines:
  `Topic: T<TAB>TopicId: ...<TAB>PartitionCount: N<TAB>ReplicationFactor: R<TAB>Configs: k=v,...`
  (the configs whose source is not Kafka's default) and one line per
  partition, `<TAB>Topic: T<TAB>Partition: P<TAB>Leader: L<TAB>Replicas: ...<TAB>Isr: ...<TAB>Elr: <TAB>LastKnownElr: `.
  A report flag prints only the partitions it names (on one node a partition
  is never under-replicated; under or at min ISR compares its one in-sync
  replica with the topic's `min.insync.replicas`), and no topic lines;
  --topics-with-overrides prints only the topic lines of topics with configs.
- `--alter --topic REGEX --partitions N [--if-exists]`: CreatePartitions,
  growing each matching topic to N partitions. Prints nothing.
- `--delete --topic REGEX [--if-exists]`: DeleteTopics of every matching
  topic (internal ones too, as Kafka's tool: the broker refuses those).
  Prints nothing.

`--topic` is a regular expression except with --create, as in Kafka
(IncludeList: matched against the whole name, `,` is `|`); a --topic that
matches nothing is an error (`Topic 'T' does not exist as expected`) unless
--if-exists. `--json` prints one document instead (nothing for alter and
delete on success):

    create:   {"topic": str, "created": bool}
    list:     {"topics": [str]}
    describe: {"topics": [{"name": str, "topicId": str | null, "internal": bool, "partitionCount": int,
                           "replicationFactor": int, "configs": {str: str | null},
                           "partitions": [{"partition": int, "leader": int | null, "replicas": [int],
                                           "isr": [int]}]}]}
              (every partition, whatever the report flags say)

Exit status: 0 done; 1 the broker refused (its Kafka error and message on
stderr) or --topic matched nothing; 2 bad arguments, or no broker at
--bootstrap-server.
"""
from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, TextIO

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v5.request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.admin_queries import PartitionInfo, TopicFilter, TopicInfo, describe_topics
from logstore.broker.transactions_cli import BrokerError, UsageError, run_command

if TYPE_CHECKING:
    from kio.schema.create_partitions.v3.response import CreatePartitionsResponse
    from kio.schema.create_topics.v5.response import CreateTopicsResponse
    from kio.schema.delete_topics.v4.response import DeleteTopicsResponse
    from kio.schema.describe_configs.v4.response import DescribeConfigsResponse

__all__ = ["ACTIONS", "REPORTS", "run"]

PROG = "logstore topics"
ACTIONS = ("create", "list", "describe", "alter", "delete")
REPORTS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
           "at_min_isr_partitions")
TIMEOUT = i32Timedelta.parse(timedelta(seconds=30))  # how long the broker may take
TOPIC_RESOURCE = i8(2)
DEFAULT_CONFIG = 5  # Kafka's ConfigSource: what ConfigEntry.isDefault() means
COLLISION_WARNING = ("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                     "could collide. To avoid issues it is best to use either, but not both.")


def _action(args: argparse.Namespace) -> str:
    """The one action the flags or the subcommand name."""
    chosen = [a for a in ACTIONS if getattr(args, f"do_{a}", False)]
    if args.topics_command is not None:
        chosen.append(args.topics_command)
    chosen = list(dict.fromkeys(chosen))
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or "
                         "--delete")
    return chosen[0]


def _configs(items: list[str]) -> dict[str, str]:
    """Kafka's `--config k=v` (repeatable; spaces around `=` dropped)."""
    configs: dict[str, str] = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2 or not parts[0].strip():
            raise UsageError(f"--config {item!r}: Invalid topic config: all configs to be added must be in the "
                             "format \"key=val\".")
        configs[parts[0].strip()] = parts[1].strip()
    return configs


def _assignment(text: str) -> list[list[int]]:
    """Kafka's `--replica-assignment 0:1,0:1`: partition i's broker ids, one list per partition."""
    partitions: list[list[int]] = []
    for item in text.split(","):
        try:
            brokers = [int(b.strip()) for b in item.split(":")]
        except ValueError:
            raise UsageError(f"--replica-assignment {text!r}: broker ids must be numbers") from None
        if len(set(brokers)) != len(brokers):
            raise UsageError(f"--replica-assignment: Partition replica lists may not contain duplicate entries: "
                             f"{item}")
        if partitions and len(brokers) != len(partitions[0]):
            raise UsageError(f"--replica-assignment: Partition {len(partitions)} has different replication factor: "
                             f"{brokers}")
        partitions.append(brokers)
    return partitions


def _check(args: argparse.Namespace) -> None:
    action = _action(args)
    args.action = action
    only = {"config": ("create", "alter"), "replication_factor": ("create",), "if_not_exists": ("create",),
            "topic_id": ("describe",),
            "if_exists": ("alter", "delete", "describe"), "exclude_internal": ("list", "describe"),
            "replica_assignment": ("create", "alter"), "topics_with_overrides": ("describe",),
            **{report: ("describe",) for report in REPORTS}}
    for name, actions in only.items():
        if getattr(args, name) not in (None, False, []) and action not in actions:
            raise UsageError(f"--{name.replace('_', '-')} goes with {' or '.join('--' + a for a in actions)}, "
                             f"not --{action}")
    if action in ("create", "alter", "delete") and not args.topic:
        raise UsageError(f"--{action} needs --topic")
    if action == "alter" and args.config:
        raise UsageError("--alter changes partitions only (to alter topic configs, use `logstore configs`)")
    if action == "alter" and args.partitions is None:
        raise UsageError("--alter needs --partitions")
    if action == "create" and args.replica_assignment and (args.partitions or args.replication_factor):
        raise UsageError("--replica-assignment replaces --partitions and --replication-factor")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise UsageError("The replication factor must be between 1 and 32767 inclusive")
    if args.topics_with_overrides and any(getattr(args, r) for r in REPORTS):
        raise UsageError("--topics-with-overrides does not go with the partition report flags")
    _configs(args.config)
    if args.replica_assignment:
        _assignment(args.replica_assignment)
    if args.topic is not None and action != "create":
        TopicFilter(args.topic)


def _matching(client: AdminClient, args: argparse.Namespace) -> dict[str, TopicInfo]:
    """The topics --topic matches (every topic without it; with --topic-id, the topic of that id), sorted;
    an error if it matches none."""
    exclude = bool(getattr(args, "exclude_internal", False))
    found = {name: info for name, info in describe_topics(client).items() if isinstance(info, TopicInfo)}
    if args.topic_id is not None:
        # Kafka uses the id, not the name, when both are given.
        matched = {name: info for name, info in found.items() if _topic_id(info) == args.topic_id}
        if not matched and not args.if_exists:
            raise BrokerError(f"TopicId '{args.topic_id}' does not exist as expected")
        return matched
    chosen = TopicFilter(args.topic) if args.topic is not None else None
    matched = {name: found[name] for name in sorted(found)
               if (chosen.allows(name, exclude) if chosen else not (exclude and found[name].internal))}
    if args.topic and not matched and not args.if_exists:
        raise BrokerError(f"Topic '{args.topic}' does not exist as expected")
    return matched


def _dump(document: object, out: TextIO) -> None:
    json.dump(document, out)
    print(file=out)


def _create(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    name = args.topic
    if "." in name or "_" in name:
        print(COLLISION_WARNING, file=sys.stderr)
    assignment = _assignment(args.replica_assignment) if args.replica_assignment else []
    topic = CreatableTopic(
        name=TopicName(name), num_partitions=i32(-1 if assignment or args.partitions is None else args.partitions),
        replication_factor=i16(-1 if assignment or args.replication_factor is None else args.replication_factor),
        assignments=tuple(CreatableReplicaAssignment(partition_index=i32(p), broker_ids=tuple(BrokerId(b) for b in bs))
                          for p, bs in enumerate(assignment)),
        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in _configs(args.config).items()))
    response: CreateTopicsResponse = client.request(CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT,
                                                                        validate_only=False))
    (result,) = response.topics
    created = result.error_code == ErrorCode.none
    if not created and not (result.error_code == ErrorCode.topic_already_exists and args.if_not_exists):
        raise BrokerError(f"{error_name(result.error_code)}: {result.error_message or name}")
    if args.as_json:
        _dump({"topic": name, "created": created}, out)
    elif created:
        print(f"Created topic {name}.", file=out)
    return 0


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    names = list(_matching(client, args))
    if args.as_json:
        _dump({"topics": names}, out)
    else:
        for name in names:
            print(name, file=out)
    return 0


@dataclass(frozen=True)
class _Described:
    info: TopicInfo
    configs: dict[str, str | None]      # the non-default ones, in the broker's order
    min_isr: int


def _topic_configs(client: AdminClient, names: list[str]) -> dict[str, tuple[dict[str, str | None], int]]:
    """Each topic's configs that are not Kafka's defaults, and its min.insync.replicas."""
    if not names:
        return {}
    response: DescribeConfigsResponse = client.request(DescribeConfigsRequest(
        resources=tuple(DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=n, configuration_keys=None)
                        for n in names), include_synonyms=False, include_documentation=False))
    found: dict[str, tuple[dict[str, str | None], int]] = {}
    for result in response.results:
        if result.error_code != ErrorCode.none:
            raise BrokerError(f"Failed to describe the configs of topic {result.resource_name}: "
                              f"{error_name(result.error_code)}: {result.error_message}")
        overrides = {c.name: c.value for c in result.configs if c.config_source != DEFAULT_CONFIG}
        min_isr = next((int(c.value) for c in result.configs if c.name == "min.insync.replicas" and c.value), 1)
        found[result.resource_name] = (overrides, min_isr)
    return found


def _reported(args: argparse.Namespace, p: PartitionInfo, min_isr: int, replication_factor: int) -> bool:
    """Whether a partition line is printed: always without a report flag, else when one of them names it."""
    if not any(getattr(args, r) for r in REPORTS):
        return True
    return ((args.under_replicated_partitions and replication_factor > len(p.isr))
            or (args.unavailable_partitions and p.leader is None)
            or (args.under_min_isr_partitions and (p.leader is None or len(p.isr) < min_isr))
            or (args.at_min_isr_partitions and len(p.isr) == min_isr))


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids))


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    topics = _matching(client, args)
    configs = _topic_configs(client, list(topics))
    described = [_Described(info, *configs[name]) for name, info in topics.items() if name in configs]
    if args.as_json:
        _dump({"topics": [{
            "name": d.info.name, "topicId": _topic_id(d.info), "internal": d.info.internal,
            "partitionCount": len(d.info.partitions), "replicationFactor": _replication_factor(d.info),
            "configs": d.configs,
            "partitions": [{"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
                            "isr": list(p.isr)} for p in d.info.partitions]} for d in described]}, out)
        return 0
    reporting = any(getattr(args, r) for r in REPORTS)
    for d in described:
        name, rf = d.info.name, _replication_factor(d.info)
        if not reporting and (not args.topics_with_overrides or d.configs):
            topic_id = _topic_id(d.info)
            print(f"Topic: {name}" + (f"\tTopicId: {topic_id}" if topic_id else "")
                  + f"\tPartitionCount: {len(d.info.partitions)}\tReplicationFactor: {rf}\tConfigs: "
                  + ",".join(f"{k}={v}" for k, v in d.configs.items()), file=out)
        if args.topics_with_overrides:
            continue
        for p in d.info.partitions:
            if _reported(args, p, d.min_isr, rf):
                print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: "
                      f"{'none' if p.leader is None else p.leader}\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
                      "\tElr: \tLastKnownElr: ", file=out)
    return 0


def _topic_id(info: TopicInfo) -> str | None:
    """Kafka's base64 form of a topic id (URL-safe, no padding), as its tools print Uuid."""
    if info.topic_id is None:
        return None
    return base64.urlsafe_b64encode(info.topic_id.bytes).decode().rstrip("=")


def _replication_factor(info: TopicInfo) -> int:
    return len(info.partitions[0].replicas) if info.partitions else 0


def _alter(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    topics = list(_matching(client, args))
    if not topics:
        return 0
    response: CreatePartitionsResponse = client.request(CreatePartitionsRequest(
        topics=tuple(CreatePartitionsTopic(name=TopicName(t), count=i32(args.partitions), assignments=None)
                     for t in topics), timeout=TIMEOUT, validate_only=False))
    failed = [r for r in response.results if r.error_code != ErrorCode.none]
    for r in failed:
        print(f"{PROG}: Failed to add partitions to topic {r.name}: {error_name(r.error_code)}: {r.error_message}",
              file=sys.stderr)
    return 1 if failed else 0


def _delete(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    topics = list(_matching(client, args))
    if not topics:
        return 0
    response: DeleteTopicsResponse = client.request(DeleteTopicsRequest(
        topic_names=tuple(TopicName(t) for t in topics), timeout=TIMEOUT))
    failed = [r for r in response.responses if r.error_code != ErrorCode.none]
    for r in failed:
        print(f"{PROG}: Failed to delete topic {r.name}: {error_name(r.error_code)}", file=sys.stderr)
    return 1 if failed else 0


COMMANDS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore topics` command; the exit status (0 ok, 1 broker error, 2 usage or no broker)."""
    return run_command(PROG, args, _check, lambda client, a, o: COMMANDS[a.action](client, a, o), out)
