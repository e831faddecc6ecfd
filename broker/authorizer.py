"""Who may do what: Kafka's authorization model, and the authorizer every handler asks.

As in Kafka (`org.apache.kafka.server.authorizer.Authorizer`): a principal
(`User:ANONYMOUS` on a PLAINTEXT connection), an operation (AclOperation)
and a resource (a type and a name). Handlers ask through
`logstore.broker.api.kit`, never the authorizer directly, so which
operation and resource each API needs, and the error it answers when
denied, are written once per API in its module.

The broker's authorizer is named by Kafka's `authorizer.class.name`: empty
(Kafka's default: no authorizer) allows everything; otherwise a
`module.Class` (or `module:Class`) whose no-argument instance is an
`Authorizer`. Rules such as ACLs are its business, not the handlers'.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, runtime_checkable

__all__ = ["ANONYMOUS", "AclOperation", "AllowAll", "Authorizer", "CLUSTER_NAME", "KafkaPrincipal", "ResourceType",
           "AUTHORIZER_SETTING", "load_authorizer"]

AUTHORIZER_SETTING = "authorizer.class.name"
# The one CLUSTER resource's name, as Kafka names it (Resource.CLUSTER_NAME).
CLUSTER_NAME = "kafka-cluster"


class AclOperation(IntEnum):
    """Kafka's AclOperation, with its wire codes."""

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


class ResourceType(IntEnum):
    """Kafka's ResourceType (the kinds a handler authorizes), with its wire codes."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


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
    must not block (a rule store is loaded before the broker listens)."""

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
        """The names among `names` on which `principal` may perform `operation`."""


class AllowAll:
    """Kafka without an authorizer: every principal may do everything."""

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
        """Every name asked."""
        return set(names)


def load_authorizer(class_name: str) -> Authorizer:
    """The authorizer `authorizer.class.name` names: "" allows everything, else `module.Class` or `module:Class`."""
    class_name = class_name.strip()
    if not class_name:
        return AllowAll()
    module_name, sep, attribute = class_name.partition(":")
    if not sep:
        module_name, _, attribute = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{AUTHORIZER_SETTING}={class_name}: no such class ({exc})") from None
    try:
        authorizer = cls()
    except TypeError as exc:
        raise ValueError(f"{AUTHORIZER_SETTING}={class_name}: cannot be made without arguments ({exc})") from None
    if not isinstance(authorizer, Authorizer):
        raise ValueError(f"{AUTHORIZER_SETTING}={class_name}: has no authorize(principal, operation, "
                         "resource_type, names)")
    return authorizer
