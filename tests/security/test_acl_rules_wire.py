"""Authorization rules beyond the matrix's one-ACL-per-row, over the wire, as Kafka 4 answers them:

- Fetch from a follower (replica_id >= 0) needs CLUSTER_ACTION on the CLUSTER, not READ on its topics;
  without it every partition answers TOPIC_AUTHORIZATION_FAILED (KafkaApis.handleFetchRequest), and a
  denied partition tells nothing of its log (FetchResponse.partitionResponse: -1 marks).
- DeleteTopics (ControllerApis.deleteTopics): a topic the principal may not DESCRIBE is
  TOPIC_AUTHORIZATION_FAILED whether or not it exists; one it may DESCRIBE but that does not exist is
  UNKNOWN_TOPIC_OR_PARTITION; DELETE on the CLUSTER may delete every topic; `delete.topic.enable=false`
  refuses the whole request before any ACL is asked.
- ACL hosts on IPv6: the authorizer sees the client's address as Java's InetAddress.getHostAddress prints
  it (`0:0:0:0:0:0:0:1`), and an ACL naming the host either way (`::1` too) applies.

Every broker has an ADMIN listener (SASL_PLAINTEXT, PLAIN) where User:admin, the super user, sets things
up, and a PLAINTEXT listener whose clients are User:ANONYMOUS, the principal under test.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from logstore.broker.admin_client import AdminClient
from logstore.broker.authorizer import CLUSTER_NAME, STANDARD_AUTHORIZER, AclOperation, ResourceType
from logstore.broker.client_security import ClientSecurity
from logstore.broker.protocol import ErrorCode
from logstore.native.record_batch import encode_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from acl_wire import errors, request  # noqa: E402
from broker_process import BrokerProcess, finish_brokers, free_port  # noqa: E402

Op, RT = AclOperation, ResourceType
ADMIN = ClientSecurity("SASL_PLAINTEXT", mechanism="PLAIN", username="admin", password="admin-secret")
ADMIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'
ANONYMOUS = "User:ANONYMOUS"
DENIED_TOPIC = int(ErrorCode.topic_authorization_failed)
UNKNOWN_TOPIC = int(ErrorCode.unknown_topic_or_partition)


@pytest.fixture
def secured(tmp_path):
    """`secured(client_host, *overrides) -> (admin address, client address)`: a broker with the ADMIN listener
    on 127.0.0.1 and a PLAINTEXT one on `client_host` ("127.0.0.1" or "[::1]"), the StandardAuthorizer on."""
    started: list[BrokerProcess] = []

    def start(client_host: str = "127.0.0.1", *overrides: str) -> tuple[str, str]:
        admin_port, client_port = free_port(), free_port()
        data_dir = tmp_path / f"broker{len(started)}"
        data_dir.mkdir()
        broker = BrokerProcess("127.0.0.1", admin_port, data_dir, (
            f"listeners=ADMIN://127.0.0.1:{admin_port},CLIENT://{client_host}:{client_port}",
            "listener.security.protocol.map=ADMIN:SASL_PLAINTEXT,CLIENT:PLAINTEXT",
            "listener.name.admin.sasl.enabled.mechanisms=PLAIN",
            f"listener.name.admin.plain.sasl.jaas.config={ADMIN_JAAS}",
            f"authorizer.class.name={STANDARD_AUTHORIZER}", "super.users=User:admin", "auto.create.topics.enable=false",
            *overrides))
        started.append(broker)
        broker.start()
        return f"127.0.0.1:{admin_port}", f"{client_host}:{client_port}"
    yield start
    finish_brokers(started)


def acl(resource_type: ResourceType, name: str, operation: AclOperation, *, host: str = "*",
        pattern: int = 3) -> dict[str, Any]:
    """A CreateAcls creation (and DeleteAcls filter) of ALLOW `operation` for User:ANONYMOUS."""
    return {"resource_type": int(resource_type), "resource_name": name, "resource_pattern_type": pattern,
            "principal": ANONYMOUS, "host": host, "operation": int(operation), "permission_type": 3}


def as_filter(creation: dict[str, Any]) -> dict[str, Any]:
    return {"resource_type_filter": creation["resource_type"], "resource_name_filter": creation["resource_name"],
            "pattern_type_filter": creation["resource_pattern_type"], "principal_filter": creation["principal"],
            "host_filter": creation["host"], "operation": creation["operation"],
            "permission_type": creation["permission_type"]}


def create_acls(admin: AdminClient, *creations: dict[str, Any]) -> None:
    assert set(errors(admin.request(request(30, 3, creations=list(creations))))) == {0}


def delete_acls(admin: AdminClient, *creations: dict[str, Any]) -> None:
    removed = admin.request(request(31, 3, filters=[as_filter(c) for c in creations]))
    assert set(errors(removed)) == {0} and all(r.matching_acls for r in removed.filter_results)


def create_topics(admin: AdminClient, *names: str) -> None:
    created = admin.request(request(19, 5, timeout=30_000, topics=[
        {"name": t, "num_partitions": 1, "replication_factor": 1} for t in names]))
    assert set(errors(created)) == {0}


def fetch(client: AdminClient, topic: str, replica_id: int) -> Any:
    """The one partition's answer to a Fetch v12 of `topic` from offset 0."""
    answer = client.request(request(1, 12, replica_id=replica_id, max_wait=0, min_bytes=0, max_bytes=100_000,
                                    topics=[{"topic": topic, "partitions": [
                                        {"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                         "partition_max_bytes": 100_000, "current_leader_epoch": -1,
                                         "last_fetched_epoch": -1}]}]))
    assert answer.error_code == 0
    [partition] = [p for t in answer.responses for p in t.partitions]
    return partition


def test_a_follower_fetch_needs_cluster_action_not_read(secured):
    admin_at, client_at = secured()
    with AdminClient(admin_at, security=ADMIN) as admin, AdminClient(client_at) as client:
        create_topics(admin, "replicated")
        produced = admin.request(request(0, 9, acks=1, timeout=5000, topic_data=[
            {"name": "replicated", "partition_data": [{"index": 0, "records": encode_batch([None], [b"v"])}]}]))
        assert set(errors(produced)) == {0}
        read = acl(RT.TOPIC, "replicated", Op.READ)
        create_acls(admin, read)
        consumer = fetch(client, "replicated", -1)
        assert (consumer.error_code, consumer.high_watermark) == (0, 1) and consumer.records
        follower = fetch(client, "replicated", 1)
        assert (follower.error_code, follower.high_watermark, follower.log_start_offset) == (DENIED_TOPIC, -1, -1)
        assert not follower.records

        cluster_action = acl(RT.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION)
        create_acls(admin, cluster_action)
        delete_acls(admin, read)
        follower = fetch(client, "replicated", 1)
        assert (follower.error_code, follower.high_watermark) == (0, 1) and follower.records
        # A consumer without READ learns nothing of the partition, not even its high watermark.
        consumer = fetch(client, "replicated", -1)
        assert (consumer.error_code, consumer.high_watermark, consumer.last_stable_offset,
                consumer.log_start_offset) == (DENIED_TOPIC, -1, -1, -1)


def _delete(client: AdminClient, *names: str, version: int = 4) -> dict[str, int]:
    answer = client.request(request(20, version, timeout=30_000, topic_names=list(names)))
    return {r.name: r.error_code for r in answer.responses}


def test_delete_topics_answers_as_kafkas_controller(secured):
    admin_at, client_at = secured()
    with AdminClient(admin_at, security=ADMIN) as admin, AdminClient(client_at) as client:
        create_topics(admin, "seen-existing", "hidden-existing", "gone-existing", "anything-existing")
        create_acls(admin, acl(RT.TOPIC, "seen-", Op.DESCRIBE, pattern=4), acl(RT.TOPIC, "gone-", Op.DELETE, pattern=4))
        assert _delete(client, "seen-missing", "seen-existing", "hidden-missing", "hidden-existing", "gone-missing",
                       "gone-existing") == {
            "seen-missing": UNKNOWN_TOPIC,       # may DESCRIBE it: told it does not exist
            "seen-existing": DENIED_TOPIC,       # may DESCRIBE it, not DELETE it
            "hidden-missing": DENIED_TOPIC,      # may not DESCRIBE: not told whether it exists
            "hidden-existing": DENIED_TOPIC,
            "gone-missing": UNKNOWN_TOPIC,       # DELETE implies DESCRIBE
            "gone-existing": 0,
        }
        create_acls(admin, acl(RT.CLUSTER, CLUSTER_NAME, Op.DELETE))
        assert _delete(client, "anything-missing", "anything-existing") == {"anything-missing": UNKNOWN_TOPIC,
                                                                            "anything-existing": 0}
        listed = {t.name for t in admin.request(request(3, 12, topics=None, allow_auto_topic_creation=False)).topics}
        assert {"seen-existing", "hidden-existing"} <= listed and not {"gone-existing", "anything-existing"} & listed


def test_delete_topics_disabled_refuses_before_asking_for_acls(secured):
    admin_at, client_at = secured("127.0.0.1", "delete.topic.enable=false")
    with AdminClient(admin_at, security=ADMIN) as admin, AdminClient(client_at) as client:
        create_topics(admin, "kept")
        assert _delete(client, "kept", "hidden") == {"kept": int(ErrorCode.topic_deletion_disabled),
                                                     "hidden": int(ErrorCode.topic_deletion_disabled)}
        # Before v3 the code did not exist: INVALID_REQUEST, as Kafka answers those versions.
        assert _delete(admin, "kept", version=2) == {"kept": int(ErrorCode.invalid_request)}


def _has_ipv6_loopback() -> bool:
    import socket
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_acl_hosts_match_an_ipv6_client_as_java_prints_its_address(secured):
    assert _has_ipv6_loopback(), "this machine has no IPv6 loopback: test_acl_host_forms covers the rule"
    admin_at, client_at = secured("[::1]")
    with AdminClient(admin_at, security=ADMIN) as admin, AdminClient(client_at) as client:
        create_topics(admin, "java-form", "short-form", "v4-host", "other-v6-host")
        create_acls(admin, acl(RT.TOPIC, "java-form", Op.DESCRIBE, host="0:0:0:0:0:0:0:1"),
                    acl(RT.TOPIC, "short-form", Op.DESCRIBE, host="::1"),
                    acl(RT.TOPIC, "v4-host", Op.DESCRIBE, host="127.0.0.1"),
                    acl(RT.TOPIC, "other-v6-host", Op.DESCRIBE, host="::2"))
        shown = client.request(request(3, 12, topics=[{"name": t} for t in ("java-form", "short-form", "v4-host",
                                                                           "other-v6-host")],
                                       allow_auto_topic_creation=False)).topics
        assert {t.name: t.error_code for t in shown} == {"java-form": 0, "short-form": 0, "v4-host": DENIED_TOPIC,
                                                         "other-v6-host": DENIED_TOPIC}
        # The ACLs are kept as they were given.
        listed = admin.request(request(29, 3, resource_type_filter=2, pattern_type_filter=1, operation=1,
                                       permission_type=1))
        assert {r.resource_name: r.acls[0].host for r in listed.resources} == {
            "java-form": "0:0:0:0:0:0:0:1", "short-form": "::1", "v4-host": "127.0.0.1", "other-v6-host": "::2"}
