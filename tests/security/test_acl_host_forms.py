"""ACL hosts as Kafka compares them (Java's InetAddress.getHostAddress), and authorizeByResourceType's
wildcard DENY, on the authorizer itself (the wire is test_acl_rules_wire's)."""
from __future__ import annotations

import pytest

from logstore.broker.acls import java_host
from logstore.broker.authorizer import AclOperation, AclPermissionType, KafkaPrincipal, ResourceType
from test_acl_matching import acl, authorizer

ALICE = KafkaPrincipal("User", "alice")
T, W, R = ResourceType.TOPIC, AclOperation.WRITE, AclOperation.READ
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.mark.parametrize("given, java", [
    ("::1", "0:0:0:0:0:0:0:1"),
    ("0:0:0:0:0:0:0:1", "0:0:0:0:0:0:0:1"),
    ("::", "0:0:0:0:0:0:0:0"),
    ("2001:DB8::0042:1", "2001:db8:0:0:0:0:42:1"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
    ("::ffff:10.0.0.7", "10.0.0.7"),          # Java's Inet4Address of a mapped address
    ("10.0.0.7", "10.0.0.7"),
    ("*", "*"),
    ("broker.example", "broker.example"),
    ("not:an:address", "not:an:address"),
])
def test_hosts_are_compared_as_java_prints_them(given, java):
    assert java_host(given) == java


@pytest.mark.parametrize("acl_host", ["::1", "0:0:0:0:0:0:0:1", "0:0:0:0:0:0:0:0001"])
@pytest.mark.parametrize("client_host", ["::1", "0:0:0:0:0:0:0:1"])
def test_an_ipv6_acl_host_applies_however_either_side_writes_it(acl_host, client_host):
    granted = authorizer(acl("t", host=acl_host))
    assert granted.authorize(ALICE, R, T, ["t"], host=client_host) == {"t"}
    assert granted.authorize(ALICE, R, T, ["t"], host="::2") == set()
    assert granted.authorize_any(ALICE, R, T, host=client_host)
    assert not granted.authorize_any(ALICE, R, T, host="127.0.0.1")
    assert authorizer(acl("t", host="*"), acl("t", permission=DENY, host=acl_host)).authorize(
        ALICE, R, T, ["t"], host=client_host) == set()


def test_a_client_on_an_ipv4_mapped_address_is_its_ipv4_host():
    assert authorizer(acl("t", host="127.0.0.1")).authorize(ALICE, R, T, ["t"], host="::ffff:127.0.0.1") == {"t"}


@pytest.mark.parametrize("order", ["allow-first", "deny-first"])
def test_a_wildcard_deny_wins_in_authorize_by_resource_type_whatever_the_order(order):
    bindings = [acl("*", W), acl("*", W, DENY)]
    if order == "deny-first":
        bindings.reverse()
    assert not authorizer(*bindings).authorize_any(ALICE, W, T)
