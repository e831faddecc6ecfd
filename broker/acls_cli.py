"""`logstore acls`: add, remove and list ACLs on a running broker, with kafka-acls.sh's flags and output.

The arguments are registered in `broker/admin_commands.py`.

    logstore acls --bootstrap-server HOST:PORT --add --allow-principal User:alice --operation Read \\
        --topic t --resource-pattern-type prefixed
    logstore acls --bootstrap-server HOST:PORT --list [--topic t] [--principal User:alice]
    logstore acls --bootstrap-server HOST:PORT --remove --topic t [--force]

As Kafka's AclCommand: exactly one of --add/--remove/--list; resources from
--topic, --group, --transactional-id (repeatable) and --cluster; each
--operation (repeatable, default All) for each --allow-principal and
--deny-principal, on each --allow-host / --deny-host (default `*`);
--producer (Write, Describe, Create on topics; Write, Describe on
transactional ids; IdempotentWrite on the cluster with --idempotent) and
--consumer (Read, Describe on topics; Read on groups); --resource-pattern-type
literal (default) or prefixed to add, also any or match to list and remove.
--remove without principals removes every ACL of the resource filter; it
asks first ("y" to go on) unless --force, and refuses to ask when stdin is
not a terminal. Output is kafka-acls' ("Adding ACLs for resource ...",
"Current ACLs for resource ...", ResourcePattern and entry as Kafka prints
them).

--command-config FILE is Kafka's client properties for a secured listener
(TLS, SASL PLAIN or SCRAM: `logstore.broker.client_security`).

--json prints one document instead: `{"acls": [binding, ...]}` for --list
(every matching ACL, or a principal's with --principal), `{"added": [...]}`
and `{"removed": [...]}` (what DeleteAcls matched; --json --remove needs
--force), each binding `{"resourceType", "resourceName", "patternType",
"principal", "host", "operation", "permissionType"}` with Kafka's enum names.

Exit status: 0 done; 1 the broker refused (its Kafka error on stderr);
2 bad arguments, or no broker at --bootstrap-server.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, TextIO

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.static.primitive import i8

from logstore.broker.acls import (
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    name_of,
    operation_named,
    parse_principal,
    pattern_text,
)
from logstore.broker.admin_client import AdminClient, error_name
from logstore.broker.authorizer import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from logstore.broker.transactions_cli import BrokerError, UsageError, run_command

if TYPE_CHECKING:
    from kio.schema.create_acls.v3.response import CreateAclsResponse
    from kio.schema.delete_acls.v3.response import DeleteAclsResponse
    from kio.schema.describe_acls.v3.response import DescribeAclsResponse

__all__ = ["run"]

PROG = "logstore acls"
Pattern = tuple[ResourceType, str, PatternType]
Entry = tuple[str, str, AclOperation, AclPermissionType]


def _check(args: argparse.Namespace) -> None:
    if args.list and (args.producer or args.consumer or args.allow_principal or args.deny_principal
                      or args.allow_host or args.deny_host):
        raise UsageError("--list takes no --producer, --consumer, --allow-*, --deny-* options")
    if (args.producer or args.consumer) and (args.operation or args.deny_principal or args.deny_host):
        raise UsageError("--producer and --consumer take no --operation, --deny-principal or --deny-host")
    if args.principal and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise UsageError("With --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified.")
    if args.add and args.resource_pattern_type in ("any", "match"):
        raise UsageError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' is not "
                         "valid when adding acls.")
    for principal in (*args.allow_principal, *args.deny_principal, *args.principal):
        try:
            parse_principal(principal.strip())
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.add or args.remove:
        acls = _resource_acls(args)
        if not acls:
            raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group>")
        if args.add and any(not entries for entries in acls.values()):
            raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    if args.remove and args.as_json and not args.force:
        raise UsageError("--json with --remove needs --force: there is no terminal dialogue in a JSON document")
    if args.remove and not args.force and not sys.stdin.isatty():
        raise UsageError("not removing without --force: stdin is not a terminal to confirm on")


def _filters(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    """The resources named, as (type, name) (Kafka's getResourceFilter)."""
    named = [(ResourceType.TOPIC, t.strip()) for t in args.topic]
    if args.resource_pattern_type == "literal" and (args.cluster or args.idempotent):
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    named += [(ResourceType.GROUP, g.strip()) for g in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    return list(dict.fromkeys(named))


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> set[Entry]:
    """Kafka's getAcl: every (principal, host, operation) of the allow and deny options."""
    allow_hosts = [h.strip() for h in args.allow_host] or (["*"] if args.allow_principal else [])
    deny_hosts = [h.strip() for h in args.deny_host] or (["*"] if args.deny_principal else [])
    entries: set[Entry] = set()
    for principals, hosts, permission in ((args.allow_principal, allow_hosts, AclPermissionType.ALLOW),
                                          (args.deny_principal, deny_hosts, AclPermissionType.DENY)):
        for principal in principals:
            for operation in operations:
                for host in hosts:
                    entries.add((principal.strip(), host, operation, permission))
    return entries


def _resource_acls(args: argparse.Namespace) -> dict[tuple[ResourceType, str], set[Entry]]:
    """What to add or remove per resource (Kafka's getResourceFilterToAcls)."""
    resources = _filters(args)
    acls: dict[tuple[ResourceType, str], set[Entry]] = {}
    if not args.producer and not args.consumer:
        try:
            operations = [operation_named(o) for o in args.operation] or [AclOperation.ALL]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        acls = {r: _entries(args, operations) for r in resources}
    if args.producer:
        for r in resources:
            if r[0] == ResourceType.TOPIC:
                acls[r] = _entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE))
            elif r[0] == ResourceType.TRANSACTIONAL_ID:
                acls[r] = _entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE))
        if args.idempotent:
            acls[(ResourceType.CLUSTER, CLUSTER_NAME)] = _entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for r in resources:
            if r[0] == ResourceType.TOPIC:
                acls[r] = acls.get(r, set()) | _entries(args, (AclOperation.READ, AclOperation.DESCRIBE))
            elif r[0] == ResourceType.GROUP:
                acls[r] = acls.get(r, set()) | _entries(args, (AclOperation.READ,))
    for (resource_type, _), entries in acls.items():
        valid = SUPPORTED_OPERATIONS[resource_type] | {AclOperation.ALL}
        if {e[2] for e in entries} - valid:
            raise UsageError(f"ResourceType {name_of(resource_type)} only supports operations "
                             f"{', '.join(sorted(name_of(o) for o in valid))}")
    return acls


def _entry_text(entry: Entry) -> str:
    principal, host, operation, permission = entry
    return f"(principal={principal}, host={host}, operation={operation.name}, permissionType={permission.name})"


def _lines(entries: Iterable[Entry]) -> str:
    return "\n".join(f"\t{_entry_text(e)}" for e in sorted(entries))


class _Answer(Protocol):
    """A response, or an entry of one, that carries an error."""

    @property
    def error_code(self) -> int: ...

    @property
    def error_message(self) -> str | None: ...


def _check_errors(*answers: _Answer) -> None:
    """BrokerError for the first answer that carries an error."""
    for answer in answers:
        if answer.error_code:
            raise BrokerError(f"Error while executing ACL command: {error_name(answer.error_code)}"
                              + (f": {answer.error_message}" if answer.error_message else ""))


def _describe(client: AdminClient, wanted: AclBindingFilter) -> list[AclBinding]:
    response: DescribeAclsResponse = client.request(DescribeAclsRequest(
        resource_type_filter=i8(wanted.resource_type), resource_name_filter=wanted.name,
        pattern_type_filter=i8(wanted.pattern_type), principal_filter=None, host_filter=None,
        operation=i8(AclOperation.ANY), permission_type=i8(AclPermissionType.ANY)))
    _check_errors(response)
    return [AclBinding(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type), a.principal,
                       a.host, AclOperation(a.operation), AclPermissionType(a.permission_type))
            for r in response.resources for a in r.acls]


def _binding_json(pattern: Pattern, entry: Entry) -> dict[str, str]:
    resource_type, name, pattern_type = pattern
    principal, host, operation, permission = entry
    return {"resourceType": resource_type.name, "resourceName": name, "patternType": pattern_type.name,
            "principal": principal, "host": host, "operation": operation.name, "permissionType": permission.name}


def _dump(key: str, bindings: Iterable[tuple[Pattern, Entry]], out: TextIO) -> None:
    json.dump({key: [_binding_json(pattern, entry) for pattern, entry in bindings]}, out)
    out.write("\n")


def _add(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    added: list[tuple[Pattern, Entry]] = []
    for (resource_type, name), entries in _resource_acls(args).items():
        if not args.as_json:
            out.write(f"Adding ACLs for resource `{pattern_text(resource_type, name, pattern_type)}`: \n"
                      f"{_lines(entries)} \n\n")
        response: CreateAclsResponse = client.request(CreateAclsRequest(creations=tuple(AclCreation(
            resource_type=i8(resource_type), resource_name=name, resource_pattern_type=i8(pattern_type),
            principal=principal, host=host, operation=i8(operation), permission_type=i8(permission))
            for principal, host, operation, permission in sorted(entries))))
        _check_errors(*response.results)
        added += [((resource_type, name, pattern_type), entry) for entry in sorted(entries)]
    if args.as_json:
        _dump("added", added, out)
    return 0


def _remove(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    removed: list[tuple[Pattern, Entry]] = []
    for (resource_type, name), entries in _resource_acls(args).items():
        where = pattern_text(resource_type, name, pattern_type)
        question = (f"Are you sure you want to delete all ACLs for resource filter `{where}`? (y/n)" if not entries
                    else f"Are you sure you want to remove ACLs: \n{_lines(entries)} \n from resource filter "
                         f"`{where}`? (y/n)")
        if not args.force:
            out.write(question + "\n")
            out.flush()
            if sys.stdin.readline().strip().lower() != "y":
                continue
        filters = sorted(entries) if entries else [(None, None, AclOperation.ANY, AclPermissionType.ANY)]
        response: DeleteAclsResponse = client.request(DeleteAclsRequest(filters=tuple(DeleteAclsFilter(
            resource_type_filter=i8(resource_type), resource_name_filter=name, pattern_type_filter=i8(pattern_type),
            principal_filter=principal, host_filter=host, operation=i8(operation), permission_type=i8(permission))
            for principal, host, operation, permission in filters)))
        _check_errors(*response.filter_results)
        removed += [((ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type)),
                     (m.principal, m.host, AclOperation(m.operation), AclPermissionType(m.permission_type)))
                    for result in response.filter_results for m in result.matching_acls]
    if args.as_json:
        _dump("removed", removed, out)
    return 0


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    resources = _filters(args)
    wanted = [AclBindingFilter(t, n, pattern_type) for t, n in resources] or [AclBindingFilter()]
    grouped: dict[Pattern, set[Entry]] = {}
    for binding_filter in wanted:
        for b in _describe(client, binding_filter):
            grouped.setdefault(b.pattern, set()).add((b.principal, b.host, b.operation, b.permission))
    if args.as_json:
        wanted_principals = {p.strip() for p in args.principal}
        _dump("acls", ((pattern, entry) for pattern, entries in grouped.items() for entry in sorted(entries)
                       if not wanted_principals or entry[0] in wanted_principals), out)
        return 0
    sections = [("", grouped)] if not args.principal else [
        (f"ACLs for principal `{p.strip()}`\n", {k: {e for e in v if e[0] == p.strip()} for k, v in grouped.items()})
        for p in args.principal]
    for heading, by_pattern in sections:
        out.write(heading)
        for pattern, entries in by_pattern.items():
            if entries:
                out.write(f"Current ACLs for resource `{pattern_text(*pattern)}`: \n{_lines(entries)} \n\n")
    return 0


def _command(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.add:
        return _add(client, args, out)
    if args.remove:
        return _remove(client, args, out)
    return _list(client, args, out)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """`logstore acls`: the exit status (0 done, 1 the broker refused, 2 usage or no broker)."""
    return run_command(PROG, args, _check, _command, out)
