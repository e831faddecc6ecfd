"""The ACL matrix: for every API the broker serves, the ACLs Kafka requires, checked over the wire.

`REQUIRED` is Kafka's table of required ACLs per API (the documentation's
"Operations and Resources on Protocols" table, as KafkaApis / AclApis /
ControllerApis check them in Kafka 4), written down here, not derived from
the code: one row per API key, each requirement an (operation, resource
type, error when denied). An API served without a row fails
`test_every_served_api_has_a_row`. `VARIANTS` are the table's rows for
another form of a request (FindCoordinator of a transactional id);
InitProducerId without a transactional id (IDEMPOTENT_WRITE on the
CLUSTER, or WRITE on any topic) and the filtering APIs are checked on
their own.

The principal under test is a real one (`PRINCIPALS`): User:alice
authenticated with SCRAM-SHA-512 on a SASL_PLAINTEXT listener, User:alice
from her client certificate on an SSL listener with
`ssl.client.auth=required` and a mapping rule, and PLAINTEXT's
User:ANONYMOUS. Beside its listener the broker has an ADMIN listener
(SASL_PLAINTEXT, PLAIN) where User:admin, the only super user, creates the
topics, the principal's ACLs and (for SCRAM) its credentials. The broker
is SIGKILLed once that is done (the ACLs and credentials must survive a
kill) and started again with the same settings.

For resource type X and operation O the principal has resources `ok-O`
(ALLOW O only) and `no-O` (ALLOW ALL and DENY O): each request is sent
naming the `ok-` resources, which must pass authorization, and once per
requirement with that one resource swapped for its `no-` twin, which must
answer the requirement's error. CLUSTER requirements are checked granted
(ALLOW of each operation on the cluster) and then denied once the admin
removed the cluster ACLs (applied at once, no restart).
"""
from __future__ import annotations

import hashlib
import secrets
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from logstore.broker.admin_client import AdminClient
from logstore.broker.api import load_all
from logstore.broker.authorizer import CLUSTER_NAME, STANDARD_AUTHORIZER, AclOperation, ResourceType
from logstore.broker.client_security import ClientSecurity
from logstore.broker.protocol import ErrorCode
from logstore.native.record_batch import encode_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from acl_wire import errors, request  # noqa: E402
from tls_certs import Certs  # noqa: E402

Op, RT = AclOperation, ResourceType
TOPIC_DENIED, GROUP_DENIED = ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed
CLUSTER_DENIED, TXN_DENIED = ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed
AUTH_ERRORS = {int(TOPIC_DENIED), int(GROUP_DENIED), int(CLUSTER_DENIED), int(TXN_DENIED)}


@dataclass(frozen=True)
class Requirement:
    operation: AclOperation
    resource_type: ResourceType
    error: ErrorCode


def need(operation: AclOperation, resource_type: ResourceType) -> Requirement:
    error = {RT.TOPIC: TOPIC_DENIED, RT.GROUP: GROUP_DENIED, RT.CLUSTER: CLUSTER_DENIED,
             RT.TRANSACTIONAL_ID: TXN_DENIED}[resource_type]
    return Requirement(operation, resource_type, error)


# Kafka's table (docs "Operations and Resources on Protocols"; KafkaApis, AclApis). An empty tuple: no ACL.
# Filtering APIs (Metadata for all topics, ListGroups, ListTransactions) hide rather than refuse: their rows
# name the operation that makes a resource visible, and `FILTERS` checks them.
REQUIRED: dict[int, tuple[Requirement, ...]] = {
    0: (need(Op.WRITE, RT.TOPIC),),                                            # Produce
    1: (need(Op.READ, RT.TOPIC),),                                             # Fetch (consumer)
    2: (need(Op.DESCRIBE, RT.TOPIC),),                                         # ListOffsets
    3: (need(Op.DESCRIBE, RT.TOPIC),),                                         # Metadata, topics named
    8: (need(Op.READ, RT.GROUP), need(Op.READ, RT.TOPIC)),                     # OffsetCommit
    9: (need(Op.DESCRIBE, RT.GROUP), need(Op.DESCRIBE, RT.TOPIC)),             # OffsetFetch
    10: (need(Op.DESCRIBE, RT.GROUP),),                                        # FindCoordinator (group)
    11: (need(Op.READ, RT.GROUP),),                                            # JoinGroup
    12: (need(Op.READ, RT.GROUP),),                                            # Heartbeat
    13: (need(Op.READ, RT.GROUP),),                                            # LeaveGroup
    14: (need(Op.READ, RT.GROUP),),                                            # SyncGroup
    15: (need(Op.DESCRIBE, RT.GROUP),),                                        # DescribeGroups
    16: (need(Op.DESCRIBE, RT.GROUP),),                                        # ListGroups (filter)
    17: (),                                                                    # SaslHandshake
    18: (),                                                                    # ApiVersions
    19: (need(Op.CREATE, RT.TOPIC),),                                          # CreateTopics (or CREATE CLUSTER)
    20: (need(Op.DELETE, RT.TOPIC),),                                          # DeleteTopics
    21: (need(Op.DELETE, RT.TOPIC),),                                          # DeleteRecords
    22: (need(Op.WRITE, RT.TRANSACTIONAL_ID),),                                # InitProducerId (transactional)
    23: (need(Op.DESCRIBE, RT.TOPIC),),                                        # OffsetForLeaderEpoch
    24: (need(Op.WRITE, RT.TRANSACTIONAL_ID), need(Op.WRITE, RT.TOPIC)),       # AddPartitionsToTxn v0-3
    25: (need(Op.WRITE, RT.TRANSACTIONAL_ID), need(Op.READ, RT.GROUP)),        # AddOffsetsToTxn
    26: (need(Op.WRITE, RT.TRANSACTIONAL_ID),),                                # EndTxn
    27: (need(Op.CLUSTER_ACTION, RT.CLUSTER),),                                # WriteTxnMarkers
    28: (need(Op.WRITE, RT.TRANSACTIONAL_ID), need(Op.READ, RT.GROUP), need(Op.READ, RT.TOPIC)),  # TxnOffsetCommit
    29: (need(Op.DESCRIBE, RT.CLUSTER),),                                      # DescribeAcls
    30: (need(Op.ALTER, RT.CLUSTER),),                                         # CreateAcls
    31: (need(Op.ALTER, RT.CLUSTER),),                                         # DeleteAcls
    32: (need(Op.DESCRIBE_CONFIGS, RT.TOPIC),),                                # DescribeConfigs (topic)
    33: (need(Op.ALTER_CONFIGS, RT.TOPIC),),                                   # AlterConfigs (topic)
    35: (need(Op.DESCRIBE, RT.CLUSTER),),                                      # DescribeLogDirs
    36: (),                                                                    # SaslAuthenticate
    37: (need(Op.ALTER, RT.TOPIC),),                                           # CreatePartitions
    42: (need(Op.DELETE, RT.GROUP),),                                          # DeleteGroups
    43: (need(Op.ALTER, RT.CLUSTER),),                                         # ElectLeaders
    44: (need(Op.ALTER_CONFIGS, RT.TOPIC),),                                   # IncrementalAlterConfigs (topic)
    46: (need(Op.DESCRIBE, RT.CLUSTER),),                                      # ListPartitionReassignments
    47: (need(Op.DELETE, RT.GROUP), need(Op.READ, RT.TOPIC)),                  # OffsetDelete
    48: (need(Op.DESCRIBE_CONFIGS, RT.CLUSTER),),                              # DescribeClientQuotas
    49: (need(Op.ALTER_CONFIGS, RT.CLUSTER),),                                 # AlterClientQuotas
    50: (need(Op.DESCRIBE, RT.CLUSTER),),                                      # DescribeUserScramCredentials
    51: (need(Op.ALTER, RT.CLUSTER),),                                         # AlterUserScramCredentials
    60: (),                          # DescribeCluster (none; DESCRIBE on the CLUSTER shows its operations)
    61: (need(Op.READ, RT.TOPIC),),                                            # DescribeProducers
    65: (need(Op.DESCRIBE, RT.TRANSACTIONAL_ID),),                             # DescribeTransactions
    66: (need(Op.DESCRIBE, RT.TRANSACTIONAL_ID),),                             # ListTransactions (filter)
    68: (need(Op.READ, RT.GROUP),),                                            # ConsumerGroupHeartbeat
    69: (need(Op.DESCRIBE, RT.GROUP),),                                        # ConsumerGroupDescribe
    75: (need(Op.DESCRIBE, RT.TOPIC),),                                        # DescribeTopicPartitions
    76: (need(Op.READ, RT.GROUP), need(Op.DESCRIBE, RT.TOPIC)),                # ShareGroupHeartbeat
    77: (need(Op.DESCRIBE, RT.GROUP),),                                        # ShareGroupDescribe
    # ShareFetch and ShareAcknowledge also need READ on each TOPIC; they name topics by id, which a request
    # built from names cannot carry: test_share_authorization.py checks that half.
    78: (need(Op.READ, RT.GROUP),),                                            # ShareFetch
    79: (need(Op.READ, RT.GROUP),),                                            # ShareAcknowledge
    90: (need(Op.DESCRIBE, RT.GROUP), need(Op.DESCRIBE, RT.TOPIC)),            # DescribeShareGroupOffsets
    91: (need(Op.READ, RT.GROUP), need(Op.READ, RT.TOPIC)),                    # AlterShareGroupOffsets
    92: (need(Op.DELETE, RT.GROUP), need(Op.READ, RT.TOPIC)),                  # DeleteShareGroupOffsets
}
FILTERS = {16, 66}
NO_ACL = {k for k, v in REQUIRED.items() if not v}
BATCH = encode_batch([None], [b"v"])

Names = dict[ResourceType, str]


def name(prefix: str, requirement: Requirement) -> str:
    return f"{prefix}-{requirement.operation.name.lower().replace('_', '-')}"


def _partitions(topic: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"partition_index": 0, **extra}]


# API key → (version, request of the resources' names). What each request asks need not succeed: only its
# authorization is judged (an unknown member, a producer id never issued: errors after the check).
REQUESTS: dict[int, tuple[int, Callable[[Names], Any]]] = {
    0: (9, lambda n: request(0, 9, acks=1, timeout=5000, topic_data=[
        {"name": n[RT.TOPIC], "partition_data": [{"index": 0, "records": BATCH}]}])),
    1: (12, lambda n: request(1, 12, replica_id=-1, max_wait=0, min_bytes=0, max_bytes=10_000, topics=[
        {"topic": n[RT.TOPIC], "partitions": [{"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                                "partition_max_bytes": 10_000, "current_leader_epoch": -1,
                                                "last_fetched_epoch": -1}]}])),
    2: (7, lambda n: request(2, 7, replica_id=-1, topics=[
        {"name": n[RT.TOPIC], "partitions": _partitions(n[RT.TOPIC], timestamp=-1, current_leader_epoch=-1)}])),
    3: (12, lambda n: request(3, 12, topics=[{"name": n[RT.TOPIC]}], allow_auto_topic_creation=False)),
    8: (8, lambda n: request(8, 8, group_id=n[RT.GROUP], generation_id_or_member_epoch=-1, topics=[
        {"name": n[RT.TOPIC], "partitions": _partitions("", committed_offset=0, committed_leader_epoch=-1)}])),
    9: (8, lambda n: request(9, 8, groups=[
        {"group_id": n[RT.GROUP], "topics": [{"name": n[RT.TOPIC], "partition_indexes": [0]}]}])),
    10: (4, lambda n: request(10, 4, key_type=0, coordinator_keys=[n[RT.GROUP]])),
    11: (7, lambda n: request(11, 7, group_id=n[RT.GROUP], session_timeout=10_000, rebalance_timeout=10_000,
                              protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}])),
    12: (4, lambda n: request(12, 4, group_id=n[RT.GROUP], generation_id=1, member_id="nobody")),
    13: (5, lambda n: request(13, 5, group_id=n[RT.GROUP], members=[{"member_id": "nobody"}])),
    14: (5, lambda n: request(14, 5, group_id=n[RT.GROUP], generation_id=1, member_id="nobody",
                              protocol_type="consumer", protocol_name="range")),
    15: (5, lambda n: request(15, 5, groups=[n[RT.GROUP]])),
    19: (5, lambda n: request(19, 5, timeout=10_000, topics=[
        {"name": n[RT.TOPIC], "num_partitions": 1, "replication_factor": 1}])),
    20: (4, lambda n: request(20, 4, timeout=10_000, topic_names=[n[RT.TOPIC]])),
    21: (2, lambda n: request(21, 2, timeout=10_000, topics=[
        {"name": n[RT.TOPIC], "partitions": [{"partition_index": 0, "offset": 0}]}])),
    22: (4, lambda n: request(22, 4, transactional_id=n[RT.TRANSACTIONAL_ID], transaction_timeout=60_000,
                              producer_id=-1, producer_epoch=-1)),
    23: (4, lambda n: request(23, 4, replica_id=-1, topics=[
        {"topic": n[RT.TOPIC], "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}])),
    24: (3, lambda n: request(24, 3, v3_and_below_transactional_id=n[RT.TRANSACTIONAL_ID],
                              v3_and_below_producer_id=123_456, v3_and_below_producer_epoch=0,
                              v3_and_below_topics=[{"name": n[RT.TOPIC], "partitions": [0]}])),
    25: (3, lambda n: request(25, 3, transactional_id=n[RT.TRANSACTIONAL_ID], producer_id=123_456, producer_epoch=0,
                              group_id=n[RT.GROUP])),
    26: (3, lambda n: request(26, 3, transactional_id=n[RT.TRANSACTIONAL_ID], producer_id=123_456, producer_epoch=0,
                              committed=False)),
    # A topic that does not exist: authorized, the marker is refused after the check and nothing is written.
    27: (1, lambda n: request(27, 1, markers=[{"producer_id": 123_456, "producer_epoch": 0, "transaction_result": False,
                                               "coordinator_epoch": 0,
                                               "topics": [{"name": "absent", "partition_indexes": [0]}]}])),
    28: (3, lambda n: request(28, 3, transactional_id=n[RT.TRANSACTIONAL_ID], group_id=n[RT.GROUP],
                              producer_id=123_456, producer_epoch=0, generation_id=-1, topics=[
                                  {"name": n[RT.TOPIC], "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                                        "committed_leader_epoch": -1}]}])),
    29: (3, lambda n: request(29, 3, resource_type_filter=1, pattern_type_filter=1, operation=1,
                              permission_type=1)),
    30: (3, lambda n: request(30, 3, creations=[{"resource_type": 3, "resource_name": "unrelated",
                                                 "resource_pattern_type": 3, "principal": "User:nobody", "host": "*",
                                                 "operation": 3, "permission_type": 3}])),
    31: (3, lambda n: request(31, 3, filters=[{"resource_type_filter": 3, "resource_name_filter": "nothing",
                                               "pattern_type_filter": 3, "operation": 1, "permission_type": 1}])),
    32: (4, lambda n: request(32, 4, resources=[{"resource_type": 2, "resource_name": n[RT.TOPIC]}])),
    33: (2, lambda n: request(33, 2, validate_only=True, resources=[
        {"resource_type": 2, "resource_name": n[RT.TOPIC], "configs": [{"name": "retention.ms", "value": "1000"}]}])),
    35: (4, lambda n: request(35, 4, topics=None)),
    37: (3, lambda n: request(37, 3, timeout=10_000, validate_only=True, topics=[
        {"name": n[RT.TOPIC], "count": 3, "assignments": None}])),
    42: (2, lambda n: request(42, 2, groups_names=[n[RT.GROUP]])),
    43: (2, lambda n: request(43, 2, election_type=0, timeout=10_000, topic_partitions=[
        {"topic": n[RT.TOPIC], "partitions": [0]}])),
    44: (1, lambda n: request(44, 1, validate_only=True, resources=[
        {"resource_type": 2, "resource_name": n[RT.TOPIC],
         "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}])),
    46: (0, lambda n: request(46, 0, timeout=10_000, topics=None)),
    47: (0, lambda n: request(47, 0, group_id=n[RT.GROUP], topics=[
        {"name": n[RT.TOPIC], "partitions": [{"partition_index": 0}]}])),
    48: (1, lambda n: request(48, 1, components=[], strict=False)),
    49: (1, lambda n: request(49, 1, validate_only=True, entries=[
        {"entity": [{"entity_type": "user", "entity_name": "someone"}],
         "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}])),
    50: (0, lambda n: request(50, 0, users=None)),
    51: (0, lambda n: request(51, 0, deletions=[{"name": "someone", "mechanism": 1}], upsertions=[])),
    61: (0, lambda n: request(61, 0, topics=[{"name": n[RT.TOPIC], "partition_indexes": [0]}])),
    65: (0, lambda n: request(65, 0, transactional_ids=[n[RT.TRANSACTIONAL_ID]])),
    68: (0, lambda n: request(68, 0, group_id=n[RT.GROUP], member_epoch=0, member_id="",
                              rebalance_timeout_ms=10_000, subscribed_topic_names=[], server_assignor=None,
                              topic_partitions=[])),
    69: (0, lambda n: request(69, 0, group_ids=[n[RT.GROUP]])),
    75: (0, lambda n: request(75, 0, topics=[{"name": n[RT.TOPIC]}], response_partition_limit=2000)),
    76: (1, lambda n: request(76, 1, group_id=n[RT.GROUP], member_id="acl", member_epoch=0, rack_id=None,
                              subscribed_topic_names=[n[RT.TOPIC]])),
    77: (1, lambda n: request(77, 1, group_ids=[n[RT.GROUP]], include_authorized_operations=False)),
    78: (1, lambda n: request(78, 1, group_id=n[RT.GROUP], member_id="acl", share_session_epoch=0, max_wait=0,
                              min_bytes=1, max_bytes=10_000, max_records=10, batch_size=10, topics=[],
                              forgotten_topics_data=[])),
    79: (1, lambda n: request(79, 1, group_id=n[RT.GROUP], member_id="acl", share_session_epoch=1, topics=[])),
    90: (1, lambda n: request(90, 1, groups=[{"group_id": n[RT.GROUP], "topics": [
        {"topic_name": n[RT.TOPIC], "partitions": [0]}]}])),
    91: (0, lambda n: request(91, 0, group_id=n[RT.GROUP], topics=[
        {"topic_name": n[RT.TOPIC], "partitions": [{"partition_index": 0, "start_offset": 0}]}])),
    92: (0, lambda n: request(92, 0, group_id=n[RT.GROUP], topics=[{"topic_name": n[RT.TOPIC]}])),
}

# Rows of Kafka's table for another form of an API's request: (label, requirements, request of the names).
Row = tuple[str, tuple[Requirement, ...], Callable[[Names], Any]]
VARIANTS: list[Row] = [
    ("FindCoordinator (transactional id)", (need(Op.DESCRIBE, RT.TRANSACTIONAL_ID),),
     lambda n: request(10, 4, key_type=1, coordinator_keys=[n[RT.TRANSACTIONAL_ID]])),
]
# InitProducerId without a transactional id: IDEMPOTENT_WRITE on the CLUSTER, or WRITE on any topic.
IDEMPOTENT = need(Op.IDEMPOTENT_WRITE, RT.CLUSTER)
# DescribeCluster's bit field of the cluster operations granted by the table's cluster rows (bit n: operation n).
CLUSTER_GRANTED = sum(1 << op for op in {r.operation for reqs in REQUIRED.values() for r in reqs if
                                         r.resource_type == RT.CLUSTER} | {IDEMPOTENT.operation})


def _login_scram(certs: Certs) -> ClientSecurity:
    return ClientSecurity("SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username="alice", password=ALICE_PASSWORD)


def _login_mtls(certs: Certs) -> ClientSecurity:
    """TLS checking the broker's name against the test CA, alice's client certificate presented."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert("alice")), str(certs.client_key("alice")))
    return ClientSecurity("SSL", tls=context)


def _tls_settings(certs: Certs) -> tuple[str, ...]:
    return ("ssl.keystore.type=PEM", f"ssl.keystore.location={certs.broker_keystore}", "ssl.client.auth=required",
            f"ssl.truststore.location={certs.ca}", "ssl.truststore.type=PEM",
            "ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=.*$/$1/L")


@dataclass(frozen=True)
class Principal:
    """A principal the matrix runs as: its name, the protocol of the listener it connects to, that
    listener's settings and the client's login."""

    name: str
    protocol: str
    settings: Callable[[Certs], tuple[str, ...]]
    login: Callable[[Certs], ClientSecurity]


ALICE_PASSWORD = "alice-secret"
ADMIN = ClientSecurity("SASL_PLAINTEXT", mechanism="PLAIN", username="admin", password="admin-secret")
ADMIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'
PRINCIPALS = {
    "scram-sha-512": Principal("User:alice", "SASL_PLAINTEXT",
                               lambda certs: ("listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512",),
                               _login_scram),
    "mtls": Principal("User:alice", "SSL", _tls_settings, _login_mtls),
    "plaintext": Principal("User:ANONYMOUS", "PLAINTEXT", lambda certs: (), lambda certs: ClientSecurity()),
}
RESOURCE_TYPES = (RT.TOPIC, RT.GROUP, RT.TRANSACTIONAL_ID)
# DeleteTopics and DeleteGroups last: the topics and groups they delete are used by the others.
ORDER = sorted(REQUESTS, key=lambda key: (key in (20, 42), key))
# The transactional ids the admin begins a transaction of, for ListTransactions' filter.
TRANSACTIONS = ("ok-describe", "no-describe")


def test_every_served_api_has_a_row():
    served = set(load_all())
    assert served - set(REQUIRED) == set(), "an API is served without a row in Kafka's ACL table"
    assert served - NO_ACL - FILTERS <= set(REQUESTS)


def _acls(principal: str) -> list[dict[str, Any]]:
    """The creations of the principal's ACLs: ok-O (ALLOW O), no-O (ALLOW ALL, DENY O), the cluster's."""
    creations = []
    requirements = [r for reqs in REQUIRED.values() for r in reqs] + [r for _, reqs, _ in VARIANTS
                                                                       for r in reqs]
    for r in [*requirements, IDEMPOTENT]:
        base = {"resource_type": int(r.resource_type), "resource_pattern_type": 3, "principal": principal, "host": "*"}
        if r.resource_type == RT.CLUSTER:
            creations.append({**base, "resource_name": CLUSTER_NAME, "operation": int(r.operation),
                              "permission_type": 3})
            continue
        creations += [{**base, "resource_name": name("ok", r), "operation": int(r.operation), "permission_type": 3},
                      {**base, "resource_name": name("no", r), "operation": int(Op.ALL), "permission_type": 3},
                      {**base, "resource_name": name("no", r), "operation": int(r.operation), "permission_type": 2}]
    return [dict(t) for t in {tuple(sorted(c.items())) for c in creations}]


def _acl_filter(principal: str, resource_type: ResourceType, operation: AclOperation) -> dict[str, Any]:
    """A DeleteAcls filter of the principal's ALLOW ACLs of `operation` on every resource of the type."""
    return {"resource_type_filter": int(resource_type), "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": principal, "host_filter": None, "operation": int(operation), "permission_type": 3}


def _scram_upsertion(user: str, password: str) -> dict[str, Any]:
    """An AlterUserScramCredentials upsertion of SCRAM-SHA-512 (mechanism 2), salted as a client salts it."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)
    return {"name": user, "mechanism": 2, "iterations": 4096, "salt": salt, "salted_password": salted}


def _granted_names(requirements: tuple[Requirement, ...]) -> Names:
    names = {t: "ok-unused" for t in RESOURCE_TYPES}
    for r in requirements:
        if r.resource_type != RT.CLUSTER:
            names[r.resource_type] = name("ok", r)
    return names


def _rows() -> list[Row]:
    """Every request form the matrix checks, as (label, requirements, request of the names), deletions last."""
    rows = [(f"api {key}", REQUIRED[key], REQUESTS[key][1]) for key in ORDER]
    return [*rows[:-2], *VARIANTS, *rows[-2:]]


def _setup(admin: AdminClient, principal: str, scram: bool) -> None:
    """As the super user: the topics, the principal's ACLs (and SCRAM credentials), groups and transactions."""
    if scram:
        altered = admin.request(request(51, 0, deletions=[], upsertions=[_scram_upsertion("alice", ALICE_PASSWORD)]))
        assert set(errors(altered)) == {0}
    topics = sorted({name(p, r) for reqs in REQUIRED.values() for r in reqs if r.resource_type == RT.TOPIC
                     for p in ("ok", "no") if r.operation != Op.CREATE})
    created = admin.request(request(19, 5, timeout=30_000, topics=[
        {"name": t, "num_partitions": 1, "replication_factor": 1} for t in topics]))
    assert set(errors(created)) == {0}
    made = admin.request(request(30, 3, creations=_acls(principal)))
    assert set(errors(made)) == {0}
    # OffsetDelete judges topics only for a group that exists (else GROUP_ID_NOT_FOUND, as Kafka's merge);
    # ListGroups' filter is checked on groups that exist.
    for group in ("ok-delete", "ok-describe", "no-describe"):
        committed = admin.request(REQUESTS[8][1]({RT.GROUP: group, RT.TOPIC: "no-read"}))
        assert set(errors(committed)) == {0}
    # ListTransactions' filter is checked on transactions under way.
    for txn in TRANSACTIONS:
        assert admin.request(request(10, 4, key_type=1, coordinator_keys=[txn])).coordinators[0].error_code == 0
        started = admin.request(request(22, 4, transactional_id=txn, transaction_timeout=600_000, producer_id=-1,
                                        producer_epoch=-1))
        assert started.error_code == 0
        added = admin.request(request(24, 3, v3_and_below_transactional_id=txn,
                                      v3_and_below_producer_id=started.producer_id,
                                      v3_and_below_producer_epoch=started.producer_epoch,
                                      v3_and_below_topics=[{"name": "ok-write", "partitions": [0]}]))
        assert set(errors(added)) == {0}


def _cluster_operations(client: AdminClient) -> int:
    """The cluster operations DescribeCluster shows the principal."""
    described = client.request(request(60, 0, include_cluster_authorized_operations=True))
    assert described.error_code == 0, described
    return int(described.cluster_authorized_operations)


def _init_without_transactional_id(client: AdminClient) -> int:
    return int(client.request(request(22, 4, transactional_id=None, transaction_timeout=60_000, producer_id=-1,
                                      producer_epoch=-1)).error_code)


@pytest.mark.parametrize("principal", sorted(PRINCIPALS))
def test_each_api_answers_kafkas_error_without_its_acl_and_passes_with_it(start_secure, certs, principal):
    who = PRINCIPALS[principal]
    broker, ports = start_secure(
        {"ADMIN": "SASL_PLAINTEXT", "CLIENT": who.protocol},
        f"authorizer.class.name={STANDARD_AUTHORIZER}", "auto.create.topics.enable=false", "super.users=User:admin",
        "listener.name.admin.sasl.enabled.mechanisms=PLAIN", f"listener.name.admin.plain.sasl.jaas.config={ADMIN_JAAS}",
        *who.settings(certs))
    admin_at, client_at = f"127.0.0.1:{ports['ADMIN']}", f"127.0.0.1:{ports['CLIENT']}"
    with AdminClient(admin_at, security=ADMIN) as admin:
        _setup(admin, who.name, who.login(certs).mechanism is not None)
    broker.kill()     # the ACLs and credentials must be durable once their APIs answered
    broker.start()

    failures = []
    with (AdminClient(admin_at, security=ADMIN) as admin,
          AdminClient(client_at, security=who.login(certs)) as client):
        listed = admin.request(request(29, 3, resource_type_filter=1, pattern_type_filter=1, operation=1,
                                       permission_type=1))
        assert sum(len(r.acls) for r in listed.resources) == len(_acls(who.name)), "ACLs lost in the SIGKILL"
        for label, requirements, build in _rows():
            granted = _granted_names(requirements)
            got = errors(client.request(build(granted)))
            if AUTH_ERRORS & set(got):
                failures.append(f"{label} with its ACLs answered {got}")
            for r in requirements:
                if r.resource_type == RT.CLUSTER:
                    continue
                got = errors(client.request(build({**granted, r.resource_type: name("no", r)})))
                if int(r.error) not in got:
                    failures.append(f"{label} without {r.operation.name} on {r.resource_type.name} answered {got}")
        states = client.request(request(66, 1, state_filters=[], producer_id_filters=[], duration_filter=-1))
        shown_txns = {t.transactional_id for t in states.transaction_states}
        if shown_txns & set(TRANSACTIONS) != {"ok-describe"}:
            failures.append(f"ListTransactions showed {sorted(shown_txns)}")
        if (got_init := _init_without_transactional_id(client)) != 0:
            failures.append(f"InitProducerId (no transactional id) with IDEMPOTENT_WRITE answered {got_init}")
        if (operations := _cluster_operations(client)) != CLUSTER_GRANTED:
            failures.append(f"DescribeCluster with the cluster ACLs showed operations {operations:#x}")
        assert not failures, "\n".join(failures)

        # The admin removes the cluster ACLs: every CLUSTER requirement is then denied, at once.
        removed = admin.request(request(31, 3, filters=[{"resource_type_filter": int(RT.CLUSTER),
                                                         "resource_name_filter": None, "pattern_type_filter": 1,
                                                         "operation": 1, "permission_type": 1}]))
        assert set(errors(removed)) == {0} and removed.filter_results[0].matching_acls
        for label, requirements, build in _rows():
            for r in requirements:
                if r.resource_type == RT.CLUSTER:
                    got = errors(client.request(build(_granted_names(requirements))))
                    if int(r.error) not in got:
                        failures.append(f"{label} without {r.operation.name} on the CLUSTER answered {got}")
        groups = {g.group_id for g in client.request(request(16, 4, states_filter=[])).groups}
        if "ok-describe" not in groups or "no-describe" in groups:
            failures.append(f"ListGroups without DESCRIBE on the CLUSTER showed {sorted(groups)}")
        shown = client.request(request(3, 12, topics=None, allow_auto_topic_creation=False)).topics
        hidden = {t.name for t in shown} & {"no-describe"}
        if hidden or "ok-describe" not in {t.name for t in shown}:
            failures.append(f"Metadata of every topic showed {sorted(t.name for t in shown)}")
        paged = {t.name for t in client.request(request(75, 0, topics=[], response_partition_limit=2000)).topics}
        if "no-describe" in paged or "ok-describe" not in paged:
            failures.append(f"DescribeTopicPartitions of every topic showed {sorted(paged)}")
        if (operations := _cluster_operations(client)) != 0:
            failures.append(f"DescribeCluster without DESCRIBE on the CLUSTER showed operations {operations:#x}")
        # InitProducerId without a transactional id: WRITE on some topic stands for IDEMPOTENT_WRITE, until the
        # principal may write no topic at all.
        if (got_init := _init_without_transactional_id(client)) != 0:
            failures.append(f"InitProducerId (no transactional id) with WRITE on a topic answered {got_init}")
        removed = admin.request(request(31, 3, filters=[_acl_filter(who.name, RT.TOPIC, op) for op in (Op.WRITE,
                                                                                                     Op.ALL)]))
        assert set(errors(removed)) == {0}
        if (got_init := _init_without_transactional_id(client)) != int(CLUSTER_DENIED):
            failures.append(f"InitProducerId (no transactional id) without WRITE on any topic answered {got_init}")
    assert not failures, "\n".join(failures)
