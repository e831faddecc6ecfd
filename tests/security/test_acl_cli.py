"""`logstore acls` against a real broker, and real clients' admin APIs (kafka-python, confluent-kafka)
against CreateAcls, DescribeAcls and DeleteAcls."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AclBinding as CkBinding
from confluent_kafka.admin import AclBindingFilter as CkFilter
from confluent_kafka.admin import AclOperation as CkOperation
from confluent_kafka.admin import AclPermissionType as CkPermission
from confluent_kafka.admin import AdminClient as CkAdmin
from confluent_kafka.admin import ResourcePatternType as CkPatternType
from confluent_kafka.admin import ResourceType as CkResourceType
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from logstore.broker.authorizer import STANDARD_AUTHORIZER

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

from broker_process import BrokerProcess, finish_brokers, free_port  # noqa: E402

TIMEOUT = 30.0


@pytest.fixture
def acl_broker(tmp_path):
    """A broker with the StandardAuthorizer on which User:ANONYMOUS is a super user."""
    data = tmp_path / "data"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data, (f"authorizer.class.name={STANDARD_AUTHORIZER}",
                                                             "super.users=User:ANONYMOUS"))
    started = [broker]
    yield broker.start()
    finish_brokers(started)


def acls(broker, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logstore", "acls", "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=60, input=stdin)


def test_add_list_remove_as_kafka_acls(acl_broker):
    added = acls(acl_broker, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation",
                 "Describe", "--topic", "t", "--resource-pattern-type", "prefixed")
    assert added.returncode == 0, added.stderr
    assert added.stdout == (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=PREFIXED)`: \n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) \n\n")
    listed = acls(acl_broker, "--list", "--topic", "tx", "--resource-pattern-type", "match")
    assert listed.returncode == 0, listed.stderr
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=PREFIXED)`" \
        in listed.stdout and listed.stdout.count("principal=User:alice") == 2
    refused = acls(acl_broker, "--remove", "--topic", "t", "--resource-pattern-type", "prefixed")
    assert refused.returncode == 2 and "--force" in refused.stderr
    removed = acls(acl_broker, "--remove", "--force", "--topic", "t", "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0, removed.stderr
    assert acls(acl_broker, "--list").stdout == ""


def test_producer_and_consumer_conveniences(acl_broker):
    done = acls(acl_broker, "--add", "--allow-principal", "User:bob", "--producer", "--idempotent", "--topic", "p",
                "--transactional-id", "tx")
    assert done.returncode == 0, done.stderr
    done = acls(acl_broker, "--add", "--allow-principal", "User:carol", "--consumer", "--topic", "p", "--group", "g")
    assert done.returncode == 0, done.stderr
    listed = acls(acl_broker, "--list").stdout
    for line in ("operation=WRITE", "operation=CREATE", "operation=IDEMPOTENT_WRITE", "name=kafka-cluster",
                 "resourceType=TRANSACTIONAL_ID, name=tx", "resourceType=GROUP, name=g"):
        assert line in listed, listed
    only = acls(acl_broker, "--list", "--principal", "User:carol").stdout
    assert only.startswith("ACLs for principal `User:carol`") and "User:bob" not in only


def test_json_documents_of_add_list_and_remove(acl_broker):
    def binding(name: str, principal: str, operation: str, permission: str = "ALLOW") -> dict[str, str]:
        return {"resourceType": "TOPIC", "resourceName": name, "patternType": "LITERAL", "principal": principal,
                "host": "*", "operation": operation, "permissionType": permission}

    added = acls(acl_broker, "--json", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                 "--operation", "Write", "--topic", "j")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout) == {"added": [binding("j", "User:alice", "READ"),
                                                  binding("j", "User:alice", "WRITE")]}
    assert acls(acl_broker, "--add", "--deny-principal", "User:bob", "--operation", "Read", "--topic", "j",
                "--json").returncode == 0   # --json after the action, as anywhere
    listed = acls(acl_broker, "--list", "--topic", "j", "--principal", "User:bob", "--json")
    assert json.loads(listed.stdout) == {"acls": [binding("j", "User:bob", "READ", "DENY")]}
    refused = acls(acl_broker, "--remove", "--topic", "j", "--json")
    assert refused.returncode == 2 and "--json with --remove needs --force" in refused.stderr
    removed = acls(acl_broker, "--remove", "--topic", "j", "--allow-principal", "User:alice", "--operation", "Write",
                   "--force", "--json")
    assert json.loads(removed.stdout) == {"removed": [binding("j", "User:alice", "WRITE")]}
    left = acls(acl_broker, "--list", "--topic", "j", "--json")
    assert sorted(map(json.dumps, json.loads(left.stdout)["acls"])) == sorted(map(json.dumps, [
        binding("j", "User:alice", "READ"), binding("j", "User:bob", "READ", "DENY")]))


@pytest.mark.parametrize(("args", "message"), [
    (("--add", "--topic", "t"), "You must specify one of: --allow-principal, --deny-principal"),
    (("--add", "--allow-principal", "alice", "--topic", "t"), "principalType:principalName but got alice"),
    (("--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"),
     "ResourceType Group only supports operations"),
    (("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"),
     "is not valid when adding acls"),
    (("--list", "--idempotent"), "--idempotent option is only available if --producer is set"),
])
def test_usage_errors_exit_2(acl_broker, args, message):
    done = acls(acl_broker, *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_a_broker_without_an_authorizer_says_security_is_disabled(tmp_path):
    data = tmp_path / "plain"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data)
    try:
        broker.start()
        done = acls(broker, "--list")
        assert done.returncode == 1 and "SECURITY_DISABLED" in done.stderr
    finally:
        finish_brokers([broker])


def test_kafka_python_admin_creates_describes_and_deletes(acl_broker):
    admin = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    try:
        binding = ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                      ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL))
        created = admin.create_acls([binding])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(everything)
        assert error.errno == 0 and [(a.principal, a.operation, a.permission_type) for a in found] == [
            ("User:alice", ACLOperation.WRITE, ACLPermissionType.DENY)]
        [(_, deleted, error)] = admin.delete_acls([everything])
        assert error.errno == 0 and len(deleted) == 1
        assert admin.describe_acls(everything)[0] == []
    finally:
        admin.close()


def test_confluent_kafka_admin_creates_describes_and_deletes(acl_broker):
    admin = CkAdmin({"bootstrap.servers": acl_broker.bootstrap})
    binding = CkBinding(CkResourceType.GROUP, "app-", CkPatternType.PREFIXED, "User:bob", "*", CkOperation.READ,
                        CkPermission.ALLOW)
    admin.create_acls([binding])[binding].result(TIMEOUT)
    wanted = CkFilter(CkResourceType.GROUP, "app-1", CkPatternType.MATCH, None, None, CkOperation.ANY,
                      CkPermission.ANY)
    assert admin.describe_acls(wanted).result(TIMEOUT) == [binding]
    assert admin.delete_acls([wanted])[wanted].result(TIMEOUT) == [binding]
    assert admin.describe_acls(wanted).result(TIMEOUT) == []
