"""ACLs as Kafka writes them: a binding (resource pattern + access control entry), a filter, and their rules.

A binding says: `principal` connected from `host` may (ALLOW) or may not
(DENY) perform `operation` on the resources a pattern covers: one resource
(LITERAL), every resource of the type (LITERAL `*`), or every resource whose
name starts with the pattern's name (PREFIXED). A filter (DescribeAcls,
DeleteAcls) matches bindings: ANY or None in a field matches every value;
pattern type MATCH matches the patterns that would apply to the filter's
name (its LITERAL, the wildcard, and PREFIXED patterns it starts with), as
Kafka's `ResourcePatternFilter` and `AccessControlEntryFilter` do.

Validation follows Kafka's AclApis and the controller's
`AclControlManager.validateNewAcl`, with their messages: a binding needs a
concrete resource type, pattern type, operation and permission, a non-empty
name (`kafka-cluster` for the CLUSTER) and a `type:name` principal. Kafka
accepts a PREFIXED `*` (it covers names starting with `*`), and so does this.

Plain values, immutable, safe to share between threads.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Any, TypeVar

from logstore.broker.authorizer import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from logstore.broker.protocol import ErrorCode

__all__ = ["AclBinding", "AclBindingFilter", "AclError", "WILDCARD", "WILDCARD_PRINCIPAL", "SUPPORTED_OPERATIONS",
           "enum_of", "java_host", "name_of", "operation_named", "parse_principal", "validate_binding",
           "validate_filter"]

WILDCARD = "*"                      # a LITERAL resource name, or a host, that matches every one
WILDCARD_PRINCIPAL = "User:*"
E = TypeVar("E", bound=IntEnum)

# The operations an ACL on each resource type may name (Kafka's AclEntry.supportedOperations), ALL aside.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE,
                                              AclOperation.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


@dataclass(frozen=True)
class AclError:
    """Why a binding or filter was refused: Kafka's error code and message."""

    error: ErrorCode
    message: str


def enum_of(cls: type[E], code: int) -> E:
    """The member of a Kafka enum with the wire code; UNKNOWN (0) for a code it does not have, as Kafka's
    fromCode answers."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


def name_of(member: IntEnum) -> str:
    """Kafka's display name of an operation or resource type: `IdempotentWrite`, `TransactionalId`."""
    return "".join(part.capitalize() for part in member.name.split("_"))


def operation_named(text: str) -> AclOperation:
    """The operation a person names (`Read`, `IDEMPOTENT_WRITE`, `idempotentwrite`); ValueError if none."""
    wanted = text.strip().replace("_", "").replace("-", "").lower()
    for operation in AclOperation:
        if operation.name.replace("_", "").lower() == wanted and operation not in (AclOperation.UNKNOWN,
                                                                                    AclOperation.ANY):
            return operation
    raise ValueError(f"Unknown operation: {text}")


def java_host(host: str) -> str:
    """A host as Kafka's ACLs compare it: an IP as Java's InetAddress.getHostAddress prints it (IPv6 in eight
    groups, lower-case, uncompressed: `0:0:0:0:0:0:0:1`; an IPv4-mapped one as the IPv4 address), anything
    else (`*`, an IPv4 address, a name) as given."""
    if ":" not in host:
        return host
    return _java_ipv6(host)


@lru_cache(maxsize=4096)
def _java_ipv6(host: str) -> str:
    address, sep, scope = host.partition("%")
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return host
    if ip.ipv4_mapped is not None:
        # Java hands a mapped address back as the Inet4Address it stands for.
        return str(ip.ipv4_mapped)
    groups = ":".join(format(int(group, 16), "x") for group in ip.exploded.split(":"))
    return f"{groups}{sep}{scope}"


def parse_principal(text: str) -> tuple[str, str]:
    """(type, name) of `type:name` (Kafka's SecurityUtils.parseKafkaPrincipal); ValueError otherwise."""
    principal_type, sep, name = text.partition(":")
    if not text or not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return principal_type, name


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal `type:name`,
    host or `*`, operation, ALLOW or DENY)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @property
    def pattern(self) -> tuple[ResourceType, str, PatternType]:
        """The resource pattern, the key bindings are grouped by."""
        return self.resource_type, self.name, self.pattern_type

    def pattern_text(self) -> str:
        """The pattern as Kafka prints a ResourcePattern."""
        return pattern_text(self.resource_type, self.name, self.pattern_type)

    def entry_text(self) -> str:
        """The entry as Kafka prints an AccessControlEntry."""
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")

    def __str__(self) -> str:
        return f"(pattern={self.pattern_text()}, entry={self.entry_text()})"

    def to_json(self) -> dict[str, Any]:
        """The binding as the `acls` file keeps it (Kafka's AccessControlEntryRecord fields, names as codes)."""
        return {"resourceType": self.resource_type.name, "resourceName": self.name,
                "patternType": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permissionType": self.permission.name}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> AclBinding:
        """A binding from `to_json`'s form; ValueError (naming what) if it is not one, or not valid."""
        if not isinstance(doc, Mapping) or set(doc) != {"resourceType", "resourceName", "patternType", "principal",
                                                        "host", "operation", "permissionType"}:
            raise ValueError(f"expected an object of the seven ACL fields, found {doc!r}")
        for key in doc:
            if not isinstance(doc[key], str):
                raise ValueError(f"{key} is not a string: {doc[key]!r}")
        try:
            binding = cls(ResourceType[doc["resourceType"]], doc["resourceName"], PatternType[doc["patternType"]],
                          doc["principal"], doc["host"], AclOperation[doc["operation"]],
                          AclPermissionType[doc["permissionType"]])
        except KeyError as exc:
            raise ValueError(f"unknown value {exc}") from None
        error = validate_binding(binding)
        if error is not None:
            raise ValueError(error.message)
        return binding


def pattern_text(resource_type: ResourceType, name: str | None, pattern_type: PatternType) -> str:
    """Kafka's ResourcePattern (and ResourcePatternFilter: `<any>` for no name) as text."""
    return (f"ResourcePattern(resourceType={resource_type.name}, name={'<any>' if name is None else name}, "
            f"patternType={pattern_type.name})")


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: each field a value to equal, or ANY / None for every value;
    pattern type MATCH selects the patterns that apply to `name`."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        """Whether the filter selects `binding` (Kafka's AclBindingFilter.matches)."""
        return self.matches_pattern(binding) and self.matches_entry(binding)

    def matches_pattern(self, binding: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != binding.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != binding.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, binding.pattern_type):
            return self.name == binding.name
        if binding.pattern_type == PatternType.LITERAL:
            return self.name == binding.name or binding.name == WILDCARD
        return self.name.startswith(binding.name)

    def matches_entry(self, binding: AclBinding) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        return ((self.principal is None or self.principal == binding.principal)
                and (self.host is None or self.host == binding.host)
                and (self.operation == AclOperation.ANY or self.operation == binding.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == binding.permission))

    def __str__(self) -> str:
        entry = (f"(principal={'<any>' if self.principal is None else self.principal}, "
                 f"host={'<any>' if self.host is None else self.host}, operation={self.operation.name}, "
                 f"permissionType={self.permission.name})")
        return f"(patternFilter={pattern_text(self.resource_type, self.name, self.pattern_type)}, entryFilter={entry})"


def _invalid(message: str) -> AclError:
    return AclError(ErrorCode.invalid_request, message)


def validate_binding(binding: AclBinding) -> AclError | None:
    """None for a binding Kafka would create, else INVALID_REQUEST with Kafka's message (AclApis's checks,
    then AclControlManager.validateNewAcl's, in that order)."""
    if binding.resource_type == ResourceType.CLUSTER and binding.name != CLUSTER_NAME:
        return _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not binding.name:
        return _invalid("Invalid empty resource name")
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return _invalid(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return _invalid(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return _invalid(f"Invalid operation {binding.operation.name}")
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return _invalid(f"Invalid permissionType {binding.permission.name}")
    if ":" not in binding.principal:
        return _invalid(f"Could not parse principal from `{binding.principal}` (no colon is present separating the "
                        "principal type from the principal name)")
    return None


def validate_filter(binding_filter: AclBindingFilter) -> AclError | None:
    """None for a filter Kafka would apply, else INVALID_REQUEST with its message (a filter with an UNKNOWN
    resource or pattern type, operation or permission)."""
    if PatternType.UNKNOWN == binding_filter.pattern_type or ResourceType.UNKNOWN == binding_filter.resource_type:
        return _invalid("Unknown patternFilter.")
    if AclOperation.UNKNOWN == binding_filter.operation or AclPermissionType.UNKNOWN == binding_filter.permission:
        return _invalid("Unknown entryFilter.")
    return None
