"""The built-in authorizer's rules (Kafka's StandardAuthorizerData) and the ACL filters (Kafka's
ResourcePatternFilter / AccessControlEntryFilter), by scenario and against a plain model.

The model walks every ACL for every question, exactly as the rules are
written in `standard_authorizer`'s docstring; the indexed authorizer must
answer the same for any set of ACLs, principal, host, operation and name.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.broker.acl_store import AclStore
from logstore.broker.acls import (
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    validate_binding,
    validate_filter,
)
from logstore.broker.authorizer import (
    AclOperation,
    AclPermissionType,
    KafkaPrincipal,
    PatternType,
    ResourceType,
)
from logstore.broker.protocol import ErrorCode
from logstore.broker.standard_authorizer import IMPLIES_DESCRIBE, IMPLIES_DESCRIBE_CONFIGS, StandardAuthorizer

ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
T, R, W, D = ResourceType.TOPIC, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(name: str, operation: AclOperation = R, permission: AclPermissionType = ALLOW, *, pattern: PatternType = LIT,
        principal: str = "User:alice", host: str = "*", resource_type: ResourceType = T) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


class MemoryStore(AclStore):
    """An AclStore that keeps its ACLs in memory (the matching rules do not touch files)."""

    def __init__(self, bindings=()):
        super().__init__([])
        self.saved = list(bindings)

    def load(self):
        return list(self.saved)

    def save(self, bindings):
        self.saved = list(bindings)


def authorizer(*bindings: AclBinding, super_users=(), allow_if_no_acl=False) -> StandardAuthorizer:
    return StandardAuthorizer(MemoryStore(bindings), super_users, allow_if_no_acl)


def may(auth: StandardAuthorizer, principal: KafkaPrincipal, operation: AclOperation, name: str,
        resource_type: ResourceType = T, host: str = "10.0.0.1") -> bool:
    return name in auth.authorize(principal, operation, resource_type, [name], host=host)


# -- scenarios ---------------------------------------------------------------------------------------

def test_deny_beats_allow_whichever_pattern_carries_it():
    auth = authorizer(acl("orders", R), acl("ord", R, DENY, pattern=PRE))
    assert not may(auth, ALICE, R, "orders")
    auth = authorizer(acl("*", R), acl("orders", R, DENY, principal="User:*"))
    assert not may(auth, ALICE, R, "orders")
    assert may(auth, ALICE, R, "payments")


def test_prefixed_covers_names_that_start_with_it_and_literal_only_its_own():
    auth = authorizer(acl("app-", R, pattern=PRE), acl("exact", R))
    assert may(auth, ALICE, R, "app-")
    assert may(auth, ALICE, R, "app-orders")
    assert not may(auth, ALICE, R, "app")
    assert may(auth, ALICE, R, "exact")
    assert not may(auth, ALICE, R, "exact-2")
    assert not may(auth, ALICE, R, "exac")


def test_wildcard_resource_and_wildcard_principal():
    auth = authorizer(acl("*", W, principal="User:*"))
    assert may(auth, BOB, W, "anything")
    assert not may(auth, BOB, R, "anything")
    assert not may(auth, BOB, W, "anything", ResourceType.GROUP)


def test_host_is_the_clients_ip_or_any():
    auth = authorizer(acl("t", R, host="10.0.0.1"))
    assert may(auth, ALICE, R, "t", host="10.0.0.1")
    assert not may(auth, ALICE, R, "t", host="10.0.0.2")


@pytest.mark.parametrize("granted", sorted(AclOperation, key=int)[2:])
def test_allow_implies_describe_and_describe_configs_as_kafka(granted):
    auth = authorizer(acl("t", granted))
    assert may(auth, ALICE, D, "t") == (granted in IMPLIES_DESCRIBE or granted == AclOperation.ALL)
    assert may(auth, ALICE, AclOperation.DESCRIBE_CONFIGS, "t") == (
        granted in IMPLIES_DESCRIBE_CONFIGS or granted == AclOperation.ALL)
    assert may(auth, ALICE, AclOperation.CREATE, "t") == (granted in (AclOperation.CREATE, AclOperation.ALL))


def test_a_deny_implies_nothing_but_a_deny_of_all_denies_everything():
    auth = authorizer(acl("t", AclOperation.ALL), acl("t", R, DENY))
    assert not may(auth, ALICE, R, "t")
    assert may(auth, ALICE, D, "t")     # DENY READ does not deny DESCRIBE
    auth = authorizer(acl("t", AclOperation.ALL), acl("t", AclOperation.ALL, DENY))
    assert not may(auth, ALICE, D, "t")


def test_super_users_bypass_even_a_deny():
    auth = authorizer(acl("t", AclOperation.ALL, DENY, principal="User:*"), super_users=["User:bob"])
    assert may(auth, BOB, W, "t")
    assert not may(auth, ALICE, W, "t")


def test_allow_everyone_applies_only_to_resources_no_acl_covers():
    auth = authorizer(acl("t", R, principal="User:bob"), allow_if_no_acl=True)
    assert may(auth, ALICE, W, "other")      # no ACL on "other" at all
    assert not may(auth, ALICE, R, "t")      # an ACL covers "t", for someone else
    assert not may(authorizer(), ALICE, R, "other")   # the default is deny


def test_authorize_any_is_kafkas_authorize_by_resource_type():
    assert not authorizer().authorize_any(ALICE, W, T)
    assert authorizer(acl("x", W)).authorize_any(ALICE, W, T)
    assert not authorizer(acl("x", W), acl("x", W, DENY)).authorize_any(ALICE, W, T)
    assert not authorizer(acl("xy", W), acl("x", W, DENY, pattern=PRE)).authorize_any(ALICE, W, T)
    assert authorizer(acl("x", W, pattern=PRE), acl("x", W, DENY)).authorize_any(ALICE, W, T)
    assert not authorizer(acl("x", W), acl("*", W, DENY)).authorize_any(ALICE, W, T)
    assert authorizer(super_users=["User:alice"]).authorize_any(ALICE, W, T)
    assert authorizer(allow_if_no_acl=True).authorize_any(ALICE, W, T)


def test_create_is_idempotent_and_delete_returns_what_it_removed():
    auth = authorizer()
    assert auth.create_acls([acl("t"), acl("t")]) == [None, None]
    assert auth.acls(AclBindingFilter()) == [acl("t")]
    assert auth.delete_acls([AclBindingFilter(name="t", pattern_type=PatternType.MATCH)]) == [[acl("t")]]
    assert auth.acls(AclBindingFilter()) == []


@pytest.mark.parametrize(("binding", "message"), [
    (acl("t", principal="User"), "Could not parse principal from `User` (no colon is present separating the "
                                 "principal type from the principal name)"),
    (acl("", R), "Invalid empty resource name"),
    (acl("other", AclOperation.ALTER, resource_type=ResourceType.CLUSTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("t", AclOperation.ANY), "Invalid operation ANY"),
    (acl("t", AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl("t", R, AclPermissionType.ANY), "Invalid permissionType ANY"),
    (acl("t", R, pattern=PatternType.MATCH), "Invalid patternType MATCH"),
    (acl("t", resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
    (acl("t", resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
])
def test_invalid_bindings_are_refused_with_kafkas_message(binding, message):
    error = validate_binding(binding)
    assert error is not None and error.error == ErrorCode.invalid_request and error.message == message
    auth = authorizer()
    assert auth.create_acls([binding, acl("fine")])[0] == error
    assert auth.acls(AclBindingFilter()) == [acl("fine")]


def test_kafka_accepts_a_prefixed_wildcard_which_covers_names_starting_with_a_star():
    assert validate_binding(acl("*", pattern=PRE)) is None
    auth = authorizer(acl("*", R, pattern=PRE, resource_type=ResourceType.GROUP))
    assert may(auth, ALICE, R, "*group", ResourceType.GROUP)
    assert not may(auth, ALICE, R, "group", ResourceType.GROUP)


def test_filters_with_unknown_fields_are_refused():
    assert validate_filter(AclBindingFilter(pattern_type=PatternType.UNKNOWN)).message == "Unknown patternFilter."
    assert validate_filter(AclBindingFilter(operation=AclOperation.UNKNOWN)).message == "Unknown entryFilter."
    assert validate_filter(AclBindingFilter()) is None


def test_match_filters_select_the_patterns_that_apply_to_a_name():
    bindings = [acl("orders"), acl("*"), acl("ord", pattern=PRE), acl("orders", pattern=PRE), acl("other"),
                acl("orders-x", pattern=PRE)]
    match = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert [b for b in bindings if match.matches(b)] == bindings[:4]
    exact_any = AclBindingFilter(T, "orders", PatternType.ANY)
    assert [b for b in bindings if exact_any.matches(b)] == [bindings[0], bindings[3]]
    prefixed_only = AclBindingFilter(T, None, PRE)
    assert [b for b in bindings if prefixed_only.matches(b)] == [bindings[2], bindings[3], bindings[5]]
    assert not AclBindingFilter(ResourceType.GROUP).matches(bindings[0])
    assert AclBindingFilter(principal="User:alice", host="*", operation=R, permission=ALLOW).matches(bindings[0])
    assert not AclBindingFilter(permission=DENY).matches(bindings[0])


# -- the indexed authorizer against the plain model -------------------------------------------------

def model_decides(bindings, super_users, allow_if_no_acl, principal, host, operation, resource_type, name) -> bool:
    """The rules, ACL by ACL, as Kafka states them."""
    if str(principal) in super_users:
        return True
    applying = [b for b in set(bindings) if b.resource_type == resource_type and (
        (b.pattern_type == LIT and b.name in (name, WILDCARD)) or
        (b.pattern_type == PRE and name.startswith(b.name)))]
    results = set()
    for b in applying:
        if b.principal not in (str(principal), "User:*") or b.host not in ("*", host):
            continue
        if b.operation == AclOperation.ALL or b.operation == operation:
            results.add(b.permission)
        elif b.permission == ALLOW and (
                (operation == D and b.operation in IMPLIES_DESCRIBE) or
                (operation == AclOperation.DESCRIBE_CONFIGS and b.operation in IMPLIES_DESCRIBE_CONFIGS)):
            results.add(ALLOW)
    if DENY in results:
        return False
    if ALLOW in results:
        return True
    return allow_if_no_acl and not applying


NAMES = st.text(alphabet="ab*", min_size=1, max_size=4)
OPERATIONS = st.sampled_from([AclOperation.ALL, R, W, D, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                              AclOperation.ALTER_CONFIGS, AclOperation.CREATE])
BINDINGS = st.builds(AclBinding, st.sampled_from([T, ResourceType.GROUP]), NAMES, st.sampled_from([LIT, PRE]),
                     st.sampled_from(["User:alice", "User:bob", "User:*"]), st.sampled_from(["*", "10.0.0.1"]),
                     OPERATIONS, st.sampled_from([ALLOW, DENY]))


@settings(max_examples=400, deadline=None)
@given(bindings=st.lists(BINDINGS, max_size=12), super_users=st.sets(st.sampled_from(["User:alice", "User:bob"])),
       allow_if_no_acl=st.booleans(), principal=st.sampled_from([ALICE, BOB]),
       host=st.sampled_from(["10.0.0.1", "10.0.0.2"]), operation=OPERATIONS.filter(lambda o: o != AclOperation.ALL),
       resource_type=st.sampled_from([T, ResourceType.GROUP]), names=st.lists(NAMES, min_size=1, max_size=5))
def test_the_index_decides_as_the_model(bindings, super_users, allow_if_no_acl, principal, host, operation,
                                        resource_type, names):
    auth = authorizer(*bindings, super_users=super_users, allow_if_no_acl=allow_if_no_acl)
    expected = {n for n in names if model_decides(bindings, super_users, allow_if_no_acl, principal, host, operation,
                                                  resource_type, n)}
    assert auth.authorize(principal, operation, resource_type, names, host=host) == expected
    # Asked again (answered from the memo), and after an unrelated change (a new index), the same.
    assert auth.authorize(principal, operation, resource_type, names, host=host) == expected
    auth.create_acls([AclBinding(ResourceType.CLUSTER, "kafka-cluster", LIT, "User:carol", "*", R, ALLOW)])
    assert auth.authorize(principal, operation, resource_type, names, host=host) == expected


@settings(max_examples=200, deadline=None)
@given(bindings=st.lists(BINDINGS, max_size=10), name=st.none() | NAMES,
       pattern_type=st.sampled_from([PatternType.ANY, PatternType.MATCH, LIT, PRE]),
       principal=st.none() | st.sampled_from(["User:alice", "User:*"]), permission=st.sampled_from([ALLOW, DENY,
                                                                                                     AclPermissionType.ANY]))
def test_delete_removes_exactly_what_describe_lists(bindings, name, pattern_type, principal, permission):
    auth = authorizer(*bindings)
    wanted = AclBindingFilter(T, name, pattern_type, principal, None, AclOperation.ANY, permission)
    listed = auth.acls(wanted)
    assert listed == [b for b in dict.fromkeys(bindings) if wanted.matches(b)]
    assert auth.delete_acls([wanted]) == [listed]
    assert auth.acls(wanted) == []
    assert set(auth.acls(AclBindingFilter())) == set(bindings) - set(listed)
