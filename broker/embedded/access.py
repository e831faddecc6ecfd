"""What an embedded client may do: its node's authorizer, asked what the broker's handlers ask it.

An embedded client runs as the principal its `principal` setting names
(`User:ANONYMOUS` by default, as a PLAINTEXT connection is). Before each
call that stands for a Kafka API it asks the node's authorizer for the
operation and resource that API's handler asks for (Produce: WRITE on the
TOPIC; InitProducerId: WRITE on the TRANSACTIONAL_ID, or IDEMPOTENT_WRITE on
the CLUSTER or WRITE on some topic; Fetch: READ on the TOPIC; JoinGroup:
READ on the GROUP; OffsetFetch: DESCRIBE on the GROUP and TOPIC; ...), and
a refusal raises the resource type's *AuthorizationFailedError, naming what
was refused.

The node's authorizer is the one `authorizer.class.name` names in the
node's settings (`embedded.open` attaches it; a node opened otherwise gets
one made from its settings at first use), so the ACL files a broker of the
same directory reads decide here too. An embedded client connects from no
address: only ACLs for every host (`*`) apply to it.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from logstore.broker.acls import parse_principal
from logstore.broker.authorizer import (
    AUTHORIZER_SETTING,
    CLUSTER_NAME,
    AclAuthorizer,
    AclOperation,
    AllowAll,
    Authorizer,
    KafkaPrincipal,
    ResourceType,
    load_authorizer,
)
from logstore.errors import (
    AuthorizationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidConfigError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

if TYPE_CHECKING:
    from logstore.broker.node import Node

__all__ = ["Access", "attach", "authorizer_of"]

PRINCIPAL_SETTING = "principal"
_REFUSALS: dict[ResourceType, type[AuthorizationFailedError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}
_AUTHORIZERS: weakref.WeakKeyDictionary[Node, Authorizer] = weakref.WeakKeyDictionary()


def attach(node: Node, authorizer: Authorizer) -> None:
    """Make `authorizer` the one every embedded client of `node` asks."""
    _AUTHORIZERS[node] = authorizer


def authorizer_of(node: Node) -> Authorizer:
    """The authorizer of `node`'s embedded clients (made from its `authorizer.class.name` if none is attached)."""
    found = _AUTHORIZERS.get(node)
    if found is None:
        try:
            found = load_authorizer(str(node.config.settings.get(AUTHORIZER_SETTING, "") or ""), node.config)
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        _AUTHORIZERS[node] = found
    return found


class Access:
    """One client's principal and its node's authorizer: `require` raises what a handler would answer."""

    def __init__(self, node: Node, principal: str):
        try:
            principal_type, name = parse_principal(principal)
        except ValueError as exc:
            raise InvalidConfigError(f"{PRINCIPAL_SETTING}: {exc}") from None
        self.principal = KafkaPrincipal(principal_type, name)
        self.authorizer = authorizer_of(node)
        self._store = node.store
        # Kafka without an authorizer: nothing to ask, on the hot path least of all.
        self.everything = isinstance(self.authorizer, AllowAll)

    def allowed(self, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
        """The names among `names` the principal may perform `operation` on."""
        if self.everything:
            return set(names)
        return set(self.authorizer.authorize(self.principal, operation, resource_type, list(names)))

    def require(self, operation: AclOperation, resource_type: ResourceType, names: Iterable[str] = (CLUSTER_NAME,),
                ) -> None:
        """Raise the type's *AuthorizationFailedError unless the principal may perform `operation` on every
        name (the CLUSTER by default)."""
        if self.everything:
            return
        wanted = list(dict.fromkeys(names))
        refused = [n for n in wanted if n not in self.allowed(operation, resource_type, wanted)]
        if refused:
            what = "" if resource_type == ResourceType.CLUSTER else f" {', '.join(refused)}"
            raise _REFUSALS[resource_type](f"{self.principal} may not {operation.name} {resource_type.name}{what}",
                                           tuple(refused))

    def require_idempotent_write(self) -> None:
        """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the CLUSTER or WRITE on some topic
        (Kafka's authorizeByResourceType), else ClusterAuthorizationFailedError."""
        if self.everything or self.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, [CLUSTER_NAME]):
            return
        authorizer = self.authorizer
        if isinstance(authorizer, AclAuthorizer):
            if authorizer.authorize_any(self.principal, AclOperation.WRITE, ResourceType.TOPIC):
                return
        elif self.allowed(AclOperation.WRITE, ResourceType.TOPIC, self._store.topics()):
            # An authorizer that cannot answer by resource type is asked about the topics that exist, as the
            # broker's handler asks it.
            return
        raise ClusterAuthorizationFailedError(f"{self.principal} may not IDEMPOTENT_WRITE the CLUSTER nor WRITE any "
                                              "topic")
