"""The admin tools (`logstore acls`, `groups`, `configs`, `transactions`) on secured listeners, with Kafka's
`--command-config` client properties: TLS with a PEM truststore, SASL SCRAM and PLAIN, and clean refusals."""
from __future__ import annotations

import subprocess
import sys

import pytest

from sasl_brokers import sasl_broker

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def logstore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logstore", *args], capture_output=True, text=True, timeout=120)


def properties(path, protocol: str, mechanism: str, user: str, password: str, truststore=None) -> str:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    lines = [f"security.protocol={protocol}", f"sasl.mechanism={mechanism}",
             f'sasl.jaas.config=org.apache.kafka.common.security.{module} required username="{user}" '
             f'password="{password}";']
    if truststore is not None:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={truststore}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def secured(start_module_secure, certs):
    """A broker with the ACL authorizer whose super users are alice and the PLAINTEXT listener's ANONYMOUS."""
    return sasl_broker(start_module_secure, certs, f"authorizer.class.name={STANDARD}",
                       "super.users=User:ANONYMOUS;User:alice")


def test_acls_over_sasl_ssl_with_scram(secured, certs, tmp_path):
    _, ports = secured
    config = properties(tmp_path / "admin.properties", "SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret",
                        certs.ca)
    bootstrap = f"127.0.0.1:{ports['SASL_SSL']}"
    added = logstore("acls", "--bootstrap-server", bootstrap, "--command-config", config, "--add",
                     "--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders")
    assert added.returncode == 0, added.stderr
    listed = logstore("acls", "--bootstrap-server", bootstrap, "--command-config", config, "--list")
    assert listed.returncode == 0, listed.stderr
    assert "principal=User:bob" in listed.stdout and "operation=READ" in listed.stdout


def test_groups_over_sasl_plaintext_with_plain(secured, tmp_path):
    _, ports = secured
    config = properties(tmp_path / "carol.properties", "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
    listed = logstore("groups", "--bootstrap-server", f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "--command-config",
                      config, "list")
    assert listed.returncode == 0, listed.stderr


def test_a_refused_login_is_one_line_and_status_1(secured, certs, tmp_path):
    _, ports = secured
    config = properties(tmp_path / "wrong.properties", "SASL_SSL", "SCRAM-SHA-512", "alice", "wrong", certs.ca)
    done = logstore("acls", "--bootstrap-server", f"127.0.0.1:{ports['SASL_SSL']}", "--command-config", config,
                    "--list")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "SASL_AUTHENTICATION_FAILED" in done.stderr, done.stderr


def test_an_untrusted_broker_certificate_is_refused(secured, tmp_path):
    _, ports = secured
    config = properties(tmp_path / "no-ca.properties", "SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
    done = logstore("groups", "--bootstrap-server", f"127.0.0.1:{ports['SASL_SSL']}", "--command-config", config,
                    "list")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "TLS handshake with 127.0.0.1 failed" in done.stderr, done.stderr


@pytest.mark.parametrize("lines, said", [
    (["security.protocol=SASL_SSL", "sasl.mechanism=GSSAPI"], "sasl.mechanism=GSSAPI"),
    (["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN"], "sasl.jaas.config with username and password"),
    (["security.protocol=SSL", "ssl.truststore.location=/x.jks"], "ssl.truststore.type=JKS"),
    (["security.protocol=TLS"], "security.protocol=TLS is not one of"),
])
def test_bad_client_properties_are_a_usage_line(tmp_path, lines, said):
    path = tmp_path / "bad.properties"
    path.write_text("\n".join(lines) + "\n")
    done = logstore("groups", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path), "list")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr
