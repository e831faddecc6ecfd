"""Who may do what: Kafka's authorization model, and the authorizer every handler asks.

As in Kafka (`org.apache.kafka.server.authorizer.Authorizer`): a principal
(`User:ANONYMOUS` on a PLAINTEXT connection), an operation (AclOperation)
and a resource (a type and a name). Handlers ask through
`logstore.broker.api.kit`, never the authorizer directly, so which
operation and resource each API needs, and the error it answers when
denied, are written once per API in its module.

The broker's authorizer is named by Kafka's `authorizer.class.name`: empty
(Kafka's default: no authorizer) allows everything; Kafka's
`org.apache.kafka.metadata.authorizer.StandardAuthorizer` is the built-in
ACL authorizer (`logstore.broker.standard_authorizer`); otherwise a
`module.Class` (or `module:Class`) whose no-argument instance is an
`Authorizer`. Rules such as ACLs are its business, not the handlers'.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from logstore.filesystem import OS, FileSystem

if TYPE_CHECKING:
    from logstore.broker.acls import AclBinding, AclBindingFilter, AclError
    from logstore.broker.config import BrokerConfig

__all__ = ["ANONYMOUS", "AclAuthorizer", "AclOperation", "AclPermissionType", "AllowAll", "Authorizer", "CLUSTER_NAME",
           "KafkaPrincipal", "PatternType", "ResourceType", "AUTHORIZER_SETTING", "STANDARD_AUTHORIZER",
           "load_authorizer"]

log = logging.getLogger(__name__)

AUTHORIZER_SETTING = "authorizer.class.name"
# Kafka's KRaft authorizer; the ZooKeeper-era one, which Kafka 4 no longer has, means the same here.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
OLD_ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
BUILT_IN_NAMES = frozenset({STANDARD_AUTHORIZER, OLD_ACL_AUTHORIZER, "StandardAuthorizer", "standard"})
# The one CLUSTER resource's name, as Kafka names it (Resource.CLUSTER_NAME).
CLUSTER_NAME = "kafka-cluster"


class AclOperation(IntEnum):
    """Kafka's AclOperation, with its wire codes (UNKNOWN and ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(IntEnum):
    """Kafka's ResourceType, with its wire codes (UNKNOWN and ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's PatternType of a resource pattern (ANY and MATCH only in filters)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    """Kafka's AclPermissionType (ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True)
class KafkaPrincipal:
    """Who sent a request: Kafka's principal type and name ("User:ANONYMOUS")."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@runtime_checkable
class Authorizer(Protocol):
    """Decides which of the named resources a principal may act on; called on the event loop, so it
    must not block (a rule store is loaded before the broker listens).

    An authorizer whose `authorize` also takes a `host` keyword is given the client's address (the IP,
    as Kafka's ACLs name hosts: "127.0.0.1"); one without it is called with the four arguments.
    """

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
        """The names among `names` on which `principal` may perform `operation`."""


@runtime_checkable
class AclAuthorizer(Protocol):
    """An authorizer that keeps ACLs (Kafka's StandardAuthorizer): the ACL APIs are served only with one,
    else they answer SECURITY_DISABLED. `create_acls` and `delete_acls` block until the change is durable
    (called from the broker's pool); `acls` and `authorize_any` do not."""

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str], *, host: str = "") -> set[str]:
        """The names among `names` on which `principal`, connected from `host`, may perform `operation`."""

    def authorize_any(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                      *, host: str = "") -> bool:
        """Whether some resource of the type may be acted on (Kafka's authorizeByResourceType)."""

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs the filter matches."""

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Add the bindings (a duplicate is a success that adds nothing); per binding, None or its error."""

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | AclError]:
        """Remove every ACL each filter matches, in one durable change; per filter, what it removed or its
        error."""


class AllowAll:
    """Kafka without an authorizer: every principal may do everything."""

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
        """Every name asked."""
        return set(names)


def load_authorizer(class_name: str, config: BrokerConfig, fs: FileSystem = OS) -> Authorizer:
    """The authorizer `authorizer.class.name` names: "" allows everything; Kafka's StandardAuthorizer (or
    the old AclAuthorizer, or our short name) is the built-in ACL authorizer over `config`'s log dirs;
    else a `module.Class` or `module:Class` made without arguments. A bad name is a ValueError that says
    which; an ACL file that cannot be read, the store's error naming the file."""
    class_name = class_name.strip()
    if not class_name:
        return AllowAll()
    if class_name == OLD_ACL_AUTHORIZER:
        log.warning("%s=%s is ZooKeeper-era Kafka's; the built-in %s is used", AUTHORIZER_SETTING, class_name,
                    STANDARD_AUTHORIZER)
    if class_name in BUILT_IN_NAMES:
        return _standard(config, fs)
    module_name, sep, attribute = class_name.partition(":")
    if not sep:
        module_name, _, attribute = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{AUTHORIZER_SETTING}={class_name}: no such class ({exc})") from None
    if cls is _standard_class():
        return _standard(config, fs)
    try:
        authorizer = cls()
    except TypeError as exc:
        raise ValueError(f"{AUTHORIZER_SETTING}={class_name}: cannot be made without arguments ({exc})") from None
    if not isinstance(authorizer, Authorizer):
        raise ValueError(f"{AUTHORIZER_SETTING}={class_name}: has no authorize(principal, operation, "
                         "resource_type, names)")
    return authorizer


def _standard_class() -> type:
    # Imported here: the built-in authorizer imports this module's types.
    from logstore.broker.standard_authorizer import StandardAuthorizer
    return StandardAuthorizer


def _standard(config: BrokerConfig, fs: FileSystem) -> Authorizer:
    from logstore.broker.standard_authorizer import StandardAuthorizer
    return StandardAuthorizer.from_config(config, fs)
