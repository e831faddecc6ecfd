"""`logstore configs`: describe and alter entity configs of a running broker, as kafka-configs.sh.

The arguments are registered in `broker/admin_commands.py`; `run(args)` does the work
over one `AdminClient` connection to `--bootstrap-server`. The action is
Kafka's flag (`--describe`, `--alter`) or the same word as a subcommand.

Entities: `--entity-type T` each followed by its `--entity-name N` or
`--entity-default` (paired in order, as kafka-configs pairs them); `--user
N`, `--client N`, `--topic N`, `--broker N`, `--user-defaults`,
`--client-defaults`, `--broker-defaults` are the shorthands. Each entity
type is an `EntityKind` in `ENTITY_KINDS`:

- users and clients are client quota entities (DescribeClientQuotas /
  AlterClientQuotas): a user, a client id, or both (the quota of that
  user's client). `--describe` prints Kafka's line per entity:
  `Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1048576.0`
  (a default entity prints as `the default user-principal`).
- topics, brokers and groups are config resources (DescribeConfigs /
  IncrementalAlterConfigs; a group's are its group configs, such as
  `consumer.session.timeout.ms` or `share.record.lock.duration.ms`, which a
  group may hold before it exists). `--describe` prints, per entity, Kafka's
  `Dynamic configs for topic t are:` (with `--all`: `All configs for ...`;
  the broker default: `Default configs for brokers in the cluster are:`) and
  one line per config, sorted by name:
  `  name=value sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:name=value, DEFAULT_CONFIG:log.name=value}`.
  Without `--all` only the entity's own dynamic configs are listed (a
  topic's overrides; a broker's, or the cluster default's, dynamic
  configs, a group's overrides). Without a name, every topic (internal ones
  too), this broker and the cluster default, or every group the broker lists.
- `--alter --add-config 'k1=v1,k2=[a,b]' --delete-config k3,k4`: one
  AlterClientQuotas, or one IncrementalAlterConfigs (SET, DELETE) for a topic
  broker or group, where deleting a config the entity does not have is refused
  before anything is sent (`Invalid config(s): k3`), as Kafka's tool does;
  prints `Completed updating config for <entity>.` (Kafka's wording: `topic
  t`, `broker 1`, `group g`, `Completed updating default config for brokers in the
  cluster.`).

`--json` prints one document instead: describe `{"entities": [{"entityType":
str, "entityName": str | null, "configs": [...]}]}` where a config is
`{"name": str, "value": str | null, "source": str, "sensitive": bool,
"readOnly": bool, "synonyms": [{"name": str, "value": str | null, "source":
str}]}` for topics and brokers, and quota entities are `{"entity": [{"entityType":
str, "entityName": str | null}], "configs": {str: float}}`; alter
`{"altered": true}`.

Exit status: 0 done; 1 the broker refused (its Kafka error and message on
stderr); 2 bad arguments, or no broker at --bootstrap-server.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.static.primitive import f64, i8

from logstore.broker import config_resources_cli
from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.transactions_cli import BrokerError, UsageError, run_command

__all__ = ["ENTITY_KINDS", "EntityKind", "EntityNameAction", "run"]

PROG = "logstore configs"
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


@dataclass(frozen=True)
class EntityKind:
    """One `--entity-type`: its name in Kafka's entity model and how it is described and altered."""

    quota_type: str | None        # the client quota entity type, or None for a config resource
    label: str                    # as kafka-configs prints it
    resource_type: int | None = None   # a config resource's type in DescribeConfigs (TOPIC 2, BROKER 4, GROUP 32)


ENTITY_KINDS: dict[str, EntityKind] = {
    "users": EntityKind("user", "user-principal"),
    "clients": EntityKind("client-id", "client-id"),
    "topics": EntityKind(None, "topic", config_resources_cli.TOPIC),
    "brokers": EntityKind(None, "broker", config_resources_cli.BROKER),
    "groups": EntityKind(None, "group", config_resources_cli.GROUP),
}


class EntityNameAction(argparse.Action):
    """`--entity-name N` / `--entity-default` (and the shorthands): appended to `entities` in order, each
    paired with the `--entity-type` at its place."""

    def __init__(self, option_strings: Sequence[str], dest: str, kind: str | None = None, default_entity: bool = False,
                 **kwargs: Any):
        self.kind, self.default_entity = kind, default_entity
        super().__init__(option_strings, dest, nargs=0 if default_entity else None, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        entities = list(getattr(namespace, "entities", None) or [])
        entities.append((self.kind, None if self.default_entity else values))
        namespace.entities = entities


def _entities(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """(entity type, name, whether a name or default was given) in kafka-configs' pairing."""
    types = list(args.entity_type or [])
    pairs = list(getattr(args, "entities", None) or [])
    named: list[tuple[str, str | None, bool]] = []
    for kind, name in pairs:
        if kind is not None:         # a shorthand names its own type
            named.append((kind, name, True))
        elif types:
            named.append((types.pop(0), name, True))
        else:
            raise UsageError("--entity-name/--entity-default must follow an --entity-type")
    named.extend((kind, None, False) for kind in types)
    for kind, _, _ in named:
        if kind not in ENTITY_KINDS:
            raise UsageError(f"--entity-type {kind}: expected one of {', '.join(ENTITY_KINDS)}")
    if not named:
        raise UsageError("an --entity-type (or --user, --client, --topic, --broker) is required")
    if len({kind for kind, _, _ in named}) != len(named):
        raise UsageError("each entity type may be given once")
    return named


def _parse_add(text: str | None) -> dict[str, float]:
    configs: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        try:
            configs[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--add-config: {item!r} is not key=number") from None
        if not sep:
            raise UsageError(f"--add-config: {item!r} is not key=number")
    return configs


def _action(args: argparse.Namespace) -> str:
    chosen: list[str] = list(dict.fromkeys([a for a in ("describe", "alter") if getattr(args, a)]
                                           + ([args.configs_command] if args.configs_command else [])))
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    return chosen[0]


def _resource(entities: list[tuple[str, str | None, bool]]) -> tuple[str, str | None] | None:
    """(kind, name) when the entity is a config resource (topics, brokers, groups), else None; "" names the
    broker default."""
    kinds = [kind for kind, _, _ in entities if ENTITY_KINDS[kind].resource_type is not None]
    if not kinds:
        return None
    if len(entities) != 1:
        raise UsageError(f"--entity-type {kinds[0]} goes alone (one entity type at a time)")
    ((kind, name, given),) = entities
    if kind in ("topics", "groups") and given and name is None:
        raise UsageError(f"--entity-default does not go with --entity-type {kind}")
    config_resources_cli.validate_name(kind, name)
    return kind, ("" if given and name is None else name)


def _check(args: argparse.Namespace) -> None:
    args.action = _action(args)
    entities = _entities(args)
    resource = _resource(entities)
    if args.all and (args.action != "describe" or resource is None):
        raise UsageError("--all goes with --describe of topics or brokers, or of groups")
    if args.action == "alter":
        if not all(given for _, _, given in entities):
            raise UsageError("--alter needs an --entity-name or --entity-default for every --entity-type")
        if not args.add_config and not args.delete_config:
            raise UsageError("--alter needs --add-config or --delete-config")
        # Refused here, before any request, if malformed.
        if resource is None:
            _parse_add(args.add_config)
        else:
            config_resources_cli.parse_configs(args.add_config)
    elif args.add_config or args.delete_config:
        raise UsageError("--add-config and --delete-config go with --alter")


def _entity_text(entity: Sequence[tuple[str, str | None]]) -> str:
    label = {kind.quota_type: kind.label for kind in ENTITY_KINDS.values()}
    order = {"user": 0, "client-id": 1}
    return ", ".join(f"the default {label.get(kind, kind)}" if name is None else f"{label.get(kind, kind)} '{name}'"
                     for kind, name in sorted(entity, key=lambda pair: order.get(pair[0], 2)))


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    entities = _entities(args)
    resource = _resource(entities)
    if resource is not None:
        return config_resources_cli.describe(client, *resource, args, out)
    components = []
    for kind, name, given in entities:
        quota_type = ENTITY_KINDS[kind].quota_type
        assert quota_type is not None   # not a config resource: a client quota entity
        match_type = (EXACT if name is not None else DEFAULT) if given else SPECIFIED
        components.append(describe_v1.ComponentData(entity_type=quota_type, match_type=i8(match_type), match=name))
    response = client.request(describe_v1.DescribeClientQuotasRequest(components=tuple(components), strict=True))
    if response.error_code != 0:
        raise BrokerError(f"{error_name(response.error_code)}: {response.error_message}")
    if args.as_json:
        json.dump({"entities": [{"entity": [{"entityType": e.entity_type, "entityName": e.entity_name}
                                            for e in entry.entity],
                                 "configs": {v.key: v.value for v in sorted(entry.values, key=lambda v: v.key)}}
                                for entry in response.entries]}, out)
        print(file=out)
        return 0
    for entry in response.entries:
        values = ", ".join(f"{v.key}={v.value!r}" for v in sorted(entry.values, key=lambda v: v.key))
        out.write(f"Quota configs for {_entity_text([(e.entity_type, e.entity_name) for e in entry.entity])} "
                  f"are {values}\n")
    return 0


def _alter(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    resource = _resource(_entities(args))
    if resource is not None:
        kind, name = resource
        assert name is not None   # _check: --alter names its entity
        return config_resources_cli.alter(client, kind, name, args, out)
    entity = [(ENTITY_KINDS[kind].quota_type or kind, name) for kind, name, _ in _entities(args)]
    ops = [alter_v1.OpData(key=key, value=f64(value), remove=False)
           for key, value in _parse_add(args.add_config).items()]
    ops += [alter_v1.OpData(key=key.strip(), value=f64(0.0), remove=True)
            for key in (args.delete_config or "").split(",") if key.strip()]
    request = alter_v1.AlterClientQuotasRequest(entries=(alter_v1.EntryData(
        entity=tuple(alter_v1.EntityData(entity_type=kind, entity_name=name) for kind, name in entity),
        ops=tuple(ops)),), validate_only=False)
    response = client.request(request)
    for entry in response.entries:
        if entry.error_code != 0:
            raise BrokerError(f"{error_name(entry.error_code)}: {entry.error_message}")
    if args.as_json:
        json.dump({"altered": True}, out)
        print(file=out)
    else:
        out.write(f"Completed updating config for {_entity_text(entity)}.\n")
    return 0


COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace, TextIO], int]] = {"describe": _describe,
                                                                                  "alter": _alter}


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore configs` command; the exit status (0 ok, 1 broker error, 2 usage or no broker)."""
    return run_command(PROG, args, _check, lambda client, a, o: COMMANDS[a.action](client, a, o), out)
