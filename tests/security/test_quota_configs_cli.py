"""`logstore configs --entity-type users|clients` against a running broker, as kafka-configs.sh is used."""
from __future__ import annotations

import subprocess
import sys

import quota_broker
from quota_broker import describe, described

start_broker = quota_broker.start_broker   # the fixture


def configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logstore", "configs", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_alter_and_describe_user_and_client_quotas(start_broker):
    b = start_broker().bootstrap
    done = configs(b, "--alter", "--entity-type", "clients", "--entity-name", "slow",
                   "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert (done.returncode, done.stdout) == (0, "Completed updating config for client-id 'slow'.\n"), done.stderr
    assert configs(b, "--alter", "--user", "alice", "--client", "app", "--add-config",
                   "request_percentage=25.5").returncode == 0
    assert configs(b, "--alter", "--entity-type", "users", "--entity-default", "--add-config",
                   "producer_byte_rate=4096").returncode == 0
    assert described(describe(b)) == {
        (("client-id", "slow"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        (("client-id", "app"), ("user", "alice")): {"request_percentage": 25.5},
        (("user", None),): {"producer_byte_rate": 4096.0}}
    shown = configs(b, "--describe", "--entity-type", "clients", "--entity-name", "slow")
    assert shown.stdout == ("Quota configs for client-id 'slow' are consumer_byte_rate=2097152.0, "
                            "producer_byte_rate=1048576.0\n")
    assert configs(b, "--describe", "--entity-type", "users").stdout == (
        "Quota configs for the default user-principal are producer_byte_rate=4096.0\n")
    assert configs(b, "--describe", "--user", "alice", "--client", "app").stdout == (
        "Quota configs for user-principal 'alice', client-id 'app' are request_percentage=25.5\n")
    assert configs(b, "--alter", "--client", "slow", "--delete-config", "producer_byte_rate").returncode == 0
    assert described(describe(b))[(("client-id", "slow"),)] == {"consumer_byte_rate": 2097152.0}


def test_refusals_exit_1_with_kafkas_error_and_usage_errors_exit_2(start_broker):
    b = start_broker().bootstrap
    bad = configs(b, "--alter", "--client", "c", "--add-config", "producer_byte_rate=-1")
    assert bad.returncode == 1
    assert "INVALID_REQUEST: Quota producer_byte_rate must be greater than 0" in bad.stderr
    assert configs(b, "--alter", "--entity-type", "clients", "--add-config", "producer_byte_rate=1").returncode == 2
    assert configs(b, "--alter", "--client", "c").returncode == 2
    assert configs(b, "--alter", "--client", "c", "--add-config", "producer_byte_rate").returncode == 2
    assert configs("127.0.0.1:1", "--describe", "--entity-type", "users").returncode == 2
    assert described(describe(b)) == {}
