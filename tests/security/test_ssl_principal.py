"""A TLS client's principal: its certificate's subject as Java's X500Principal.getName() writes it (RFC 2253),
checked against openssl's RFC 2253 printing of real certificates, and Kafka's ssl.principal.mapping.rules."""
from __future__ import annotations

import ssl
import subprocess

import pytest

from logstore.broker.ssl_principal import NoMatchingRule, PrincipalMapper, subject_dn
from logstore.errors import InvalidConfigError
from tls_certs import make_certs

SUBJECTS = {
    "plain": "/C=US/ST=CA/L=Palo Alto/O=Example/OU=eng/CN=alice",
    "escaped": r"/O=Example, Inc./CN=a\+b;c",
    "multi-ou": "/DC=com/DC=example/OU=a/OU=b/UID=u1/CN=carol",
}


@pytest.fixture(scope="module")
def subject_certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("subjects"), {**SUBJECTS, "email": "/CN=dave/emailAddress=d@x.org"})


def _der(path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_the_subject_reads_as_openssl_prints_rfc2253(subject_certs, name):
    printed = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in",
                              str(subject_certs.client_cert(name))], capture_output=True, text=True, check=True)
    assert subject_dn(_der(subject_certs.client_cert(name))) == printed.stdout.strip().removeprefix("subject=")


def test_attributes_without_a_keyword_are_hex_as_java_writes_them(subject_certs):
    # emailAddress is an IA5String (tag 0x16) under OID 1.2.840.113549.1.9.1, which Java has no keyword for.
    assert subject_dn(_der(subject_certs.client_cert("email"))) == "1.2.840.113549.1.9.1=#16076440782e6f7267,CN=dave"


DN = "CN=Kafka1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"


@pytest.mark.parametrize("rules, expected", [
    ("DEFAULT", DN),
    ("", DN),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "Kafka1"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "kafka1"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U", "KAFKA1@SERVICEUSERS"),
    ("RULE:^CN=(.*?),OU=Admins.*$/$1/, RULE:^CN=(.*?),OU=ServiceUsers.*$/svc-$1/", "svc-Kafka1"),
    ("RULE:^CN=(.*?),OU=Admins.*$/$1/,DEFAULT", DN),
    (r"RULE:^CN=(.*?),OU=(.*?),.*$/$1\/$2/", "Kafka1/ServiceUsers"),
])
def test_mapping_rules(rules, expected):
    assert PrincipalMapper(rules).name(DN) == expected


def test_a_dn_no_rule_applies_to_is_refused():
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*?),OU=Admins.*$/$1/").name(DN)


@pytest.mark.parametrize("rules", ["DEFAULT hello", "RULE:/", "RULE:^CN=(.*?)$", "RULE:^CN=(.*?)$/$1",
                                   "RULE:^CN=((.*?)$/$1/", "nonsense"])
def test_invalid_rules_are_refused(rules):
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        PrincipalMapper(rules)
