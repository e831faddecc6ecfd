"""The built-in ACL authorizer: Kafka's StandardAuthorizer (KRaft), its rules and its ACL store.

`authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`
switches it on. The rules are those of Kafka's `StandardAuthorizerData`:

1. A principal named in `super.users` (`;`-separated `type:name`) may do
   anything.
2. The ACLs that apply to a resource are those of its type whose pattern
   covers its name: LITERAL of the name, LITERAL `*`, and PREFIXED of any
   prefix of the name (the name itself included).
3. Of those, an ACL matches the request when its principal is the
   request's or `User:*`, its host is the client's IP or `*` (IPv6
   compared as Java prints it, `0:0:0:0:0:0:0:1`, whichever way either
   side wrote it: `acls.java_host`), and its
   operation is the one asked, or ALL, or, for an ALLOW ACL only, one that
   implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
   implies DESCRIBE_CONFIGS.
4. A matching DENY wins over any ALLOW; else a matching ALLOW allows; else,
   when no ACL applies to the resource at all (rule 2, whoever it names),
   `allow.everyone.if.no.acl.found` decides (default: deny); else deny.

Cost per request: the ACLs are indexed by (resource type, name) for
LITERAL ones and by (resource type, prefix) for PREFIXED ones, with the
distinct prefix lengths of each type kept sorted, so a name costs one
dictionary lookup per distinct prefix length rather than a pass over every
ACL; decisions are memoised per (principal, host, operation, resource)
until the ACLs next change. The index is immutable and replaced whole on a
change (Kafka's AclCache), so `authorize` on the event loop reads it without
a lock while a change is made in the broker's pool.

Changes (CreateAcls, DeleteAcls) are written to the `acls` file of every log
dir (`acl_store`) and fsynced before the new index is published and the
request answered; a change whose write fails changes nothing.

On a directory Kafka wrote, the ACLs of its metadata log seed the `acls` file
while it has none (`take_kafka_acls`, called by the broker once its store is
open and its log dirs locked): they become its first generation, once.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from logstore.broker.acl_store import AclStore, kafka_acls
from logstore.broker.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclError,
    java_host,
    parse_principal,
    validate_binding,
    validate_filter,
)
from logstore.broker.authorizer import AclOperation, AclPermissionType, KafkaPrincipal, PatternType, ResourceType
from logstore.filesystem import OS, FileSystem

if TYPE_CHECKING:
    from logstore.broker.config import BrokerConfig
    from logstore.cluster_metadata import MetadataAcl

__all__ = ["StandardAuthorizer", "SUPER_USERS", "ALLOW_IF_NO_ACL"]

log = logging.getLogger(__name__)

SUPER_USERS = "super.users"
ALLOW_IF_NO_ACL = "allow.everyone.if.no.acl.found"
# Decisions remembered per index before the memo is emptied (a bound on memory, not a tuning knob).
MEMO_LIMIT = 100_000

IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
# (principal, host, operation, permission) of one ACL, as the matching loop reads it.
Entry = tuple[str, str, AclOperation, AclPermissionType]


def _entry(binding: AclBinding) -> Entry:
    # The host as the request's is given: `::1` and `0:0:0:0:0:0:0:1` name one client.
    return binding.principal, java_host(binding.host), binding.operation, binding.permission


def acl_result(entry: Entry, principals: tuple[str, str], host: str, operation: AclOperation) -> \
        AclPermissionType | None:
    """ALLOW or DENY if the ACL matches the request (rule 3), None if it does not."""
    principal, acl_host, acl_operation, permission = entry
    if principal not in principals or (acl_host != WILDCARD and acl_host != host):
        return None
    if acl_operation != AclOperation.ALL and acl_operation != operation:
        if permission != AclPermissionType.ALLOW:
            return None
        if operation == AclOperation.DESCRIBE:
            if acl_operation not in IMPLIES_DESCRIBE:
                return None
        elif operation != AclOperation.DESCRIBE_CONFIGS or acl_operation not in IMPLIES_DESCRIBE_CONFIGS:
            return None
    return permission


@dataclass
class _Index:
    """One immutable set of ACLs, indexed for `decide`, with the decisions taken on it so far."""

    bindings: tuple[AclBinding, ...]
    literal: dict[tuple[ResourceType, str], tuple[Entry, ...]] = field(default_factory=dict)
    prefixed: dict[tuple[ResourceType, str], tuple[Entry, ...]] = field(default_factory=dict)
    prefix_lengths: dict[ResourceType, tuple[int, ...]] = field(default_factory=dict)
    memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = field(default_factory=dict)

    @classmethod
    def of(cls, bindings: Iterable[AclBinding]) -> _Index:
        """The index of `bindings` (duplicates dropped, order kept)."""
        ordered = tuple(dict.fromkeys(bindings))
        literal: dict[tuple[ResourceType, str], list[Entry]] = {}
        prefixed: dict[tuple[ResourceType, str], list[Entry]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        for binding in ordered:
            key = (binding.resource_type, binding.name)
            if binding.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(key, []).append(_entry(binding))
                lengths.setdefault(binding.resource_type, set()).add(len(binding.name))
            else:
                literal.setdefault(key, []).append(_entry(binding))
        return cls(ordered, {k: tuple(v) for k, v in literal.items()}, {k: tuple(v) for k, v in prefixed.items()},
                   {t: tuple(sorted(n)) for t, n in lengths.items()})

    def applying(self, resource_type: ResourceType, name: str) -> list[tuple[Entry, ...]]:
        """The ACLs whose pattern covers the resource (rule 2), in groups."""
        groups = []
        found = self.literal.get((resource_type, name))
        if found:
            groups.append(found)
        if name != WILDCARD:
            found = self.literal.get((resource_type, WILDCARD))
            if found:
                groups.append(found)
        for length in self.prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            found = self.prefixed.get((resource_type, name[:length]))
            if found:
                groups.append(found)
        return groups

    def decide(self, principals: tuple[str, str], host: str, operation: AclOperation, resource_type: ResourceType,
               name: str, default: bool) -> bool:
        """Whether the request may act on the resource (rules 2-4)."""
        allowed = False
        groups = self.applying(resource_type, name)
        for entries in groups:
            for entry in entries:
                result = acl_result(entry, principals, host, operation)
                if result == AclPermissionType.DENY:
                    return False
                if result == AclPermissionType.ALLOW:
                    allowed = True
        return allowed or (default and not groups)


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over the ACLs of an `AclStore`.

    Owns the current ACL index (replaced whole, never changed in place) and the store. `authorize`,
    `authorize_any` and `acls` are for the event loop and never block; `create_acls` and `delete_acls`
    block on fsyncs and are serialised by a lock (call them from the broker's pool).
    """

    def __init__(self, store: AclStore, super_users: Iterable[str] = (), allow_if_no_acl: bool = False):
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._index = _Index.of(store.load())
        self._changing = threading.Lock()
        log.info("StandardAuthorizer initialized with %d acl(s); super.users=%s, %s=%s", len(self._index.bindings),
                 ",".join(sorted(self.super_users)), ALLOW_IF_NO_ACL, str(allow_if_no_acl).lower())

    @classmethod
    def from_config(cls, config: BrokerConfig, fs: FileSystem = OS) -> StandardAuthorizer:
        """The authorizer of a broker's settings (`super.users`, `allow.everyone.if.no.acl.found`) over the
        `acls` files of its log dirs; ValueError for a super user that is not `type:name`."""
        super_users = [v.strip() for v in str(config.settings.get(SUPER_USERS, "") or "").split(";") if v.strip()]
        for user in super_users:
            try:
                parse_principal(user)
            except ValueError as exc:
                raise ValueError(f"{SUPER_USERS}: {exc}") from None
        allow = config.settings.get(ALLOW_IF_NO_ACL, False)
        allow = allow if isinstance(allow, bool) else str(allow).strip().lower() == "true"
        return cls(AclStore(config.log_dirs, fs), super_users, allow)

    def take_kafka_acls(self, kafka: Mapping[bytes, MetadataAcl] | None) -> int:
        """Seed the ACLs with Kafka's (`ClusterMetadata.acls`) when no `acls` copy exists yet, durably; how
        many were taken (0 once a copy exists: the file, not Kafka's log, then says which ACLs exist)."""
        if not kafka:
            return 0
        with self._changing:
            if self.store.found:
                return 0
            bindings = tuple(dict.fromkeys(kafka_acls(kafka)))
            if bindings:
                self._publish(bindings)
                log.info("%d acl(s) taken from Kafka's metadata log", len(bindings))
            return len(bindings)

    # -- decisions (event loop) -----------------------------------------------------------------------

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str], *, host: str = "") -> set[str]:
        """The names among `names` on which `principal`, connected from `host` (an IP), may perform
        `operation`."""
        who = str(principal)
        if who in self.super_users:
            return set(names)
        host = java_host(host)
        index = self._index
        memo = index.memo
        principals = (who, WILDCARD_PRINCIPAL)
        default = self.allow_if_no_acl
        allowed: set[str] = set()
        for name in names:
            key = (who, host, operation, resource_type, name)
            decision = memo.get(key)
            if decision is None:
                decision = index.decide(principals, host, operation, resource_type, name, default)
                if len(memo) >= MEMO_LIMIT:
                    memo.clear()
                memo[key] = decision
            if decision:
                allowed.add(name)
        return allowed

    def authorize_any(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                      *, host: str = "") -> bool:
        """Whether some resource of the type may be acted on, whatever its name (Kafka's
        Authorizer.authorizeByResourceType: an ALLOW, LITERAL or PREFIXED, that no DENY of a LITERAL of the
        same name, or of a PREFIXED of a prefix of it, cancels; a DENY on `*` cancels all)."""
        # A name no ACL is likely to cover: super users and allow.everyone.if.no.acl.found, as Kafka's "hardcode".
        if self.authorize(principal, operation, resource_type, ["hardcode"], host=host):
            return True
        principals = (str(principal), WILDCARD_PRINCIPAL)
        host = java_host(host)
        wildcard_allow = False
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        for binding in self._index.bindings:
            if binding.resource_type != resource_type or binding.principal not in principals:
                continue
            if java_host(binding.host) not in (host, WILDCARD) or binding.operation not in (operation,
                                                                                           AclOperation.ALL):
                continue
            literal = binding.pattern_type == PatternType.LITERAL
            if binding.permission == AclPermissionType.DENY:
                if literal and binding.name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(binding.name)
            elif literal and binding.name == WILDCARD:
                # Not at once: a DENY on `*` later in the list still wins.
                wildcard_allow = True
            else:
                (allow_literal if literal else allow_prefixed).add(binding.name)
        if wildcard_allow:
            return True
        for name in allow_literal - deny_literal:
            if not any(name[:n] in deny_prefixed for n in range(1, len(name) + 1)):
                return True
        return any(not any(name[:n] in deny_prefixed for n in range(1, len(name) + 1)) for name in allow_prefixed)

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs the filter matches, in the order they were created."""
        return [b for b in self._index.bindings if binding_filter.matches(b)]

    # -- changes (the broker's pool) ------------------------------------------------------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Add the valid bindings in one durable change; per binding None, or why it was refused (an I/O
        error writing the file raises, and nothing changes)."""
        results = [validate_binding(b) for b in bindings]
        with self._changing:
            current = self._index.bindings
            known = set(current)
            added = [b for b, error in zip(bindings, results, strict=True) if error is None and b not in known]
            if added:
                self._publish((*current, *dict.fromkeys(added)))
                log.info("added %d acl(s): %s", len(added), "; ".join(map(str, dict.fromkeys(added))))
        return results

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | AclError]:
        """Remove what each valid filter matches, all in one durable change; per filter the ACLs it matched,
        or why it was refused (an I/O error writing the file raises, and nothing changes)."""
        with self._changing:
            current = self._index.bindings
            results: list[list[AclBinding] | AclError] = []
            for binding_filter in filters:
                error = validate_filter(binding_filter)
                results.append(error if error is not None else [b for b in current if binding_filter.matches(b)])
            removed = {b for result in results if isinstance(result, list) for b in result}
            if removed:
                self._publish(tuple(b for b in current if b not in removed))
                log.info("removed %d acl(s): %s", len(removed), "; ".join(map(str, removed)))
        return results

    def _publish(self, bindings: tuple[AclBinding, ...]) -> None:
        # Durable first: an answer never acknowledges a change a crash could take back.
        self.store.save(bindings)
        self._index = _Index.of(bindings)
