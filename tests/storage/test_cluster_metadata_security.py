"""KRaft's `__cluster_metadata-0` keeps the cluster's SCRAM users and ACLs: their four records, byte for byte,
and their replay (snapshot, log, removals, transactions) into `ClusterMetadata`.

The expected bytes are put together here with `struct` from Kafka's schemas
(`UserScramCredentialRecord.json` and the rest, all flexible at version 0); the
directories are written with logstore's own batch encoder, as
`test_cluster_metadata.py` writes them (no public Kafka data dir with these
records was found to vendor).
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from pathlib import Path

import pytest

from logstore.checkpoints import topic_id_to_string
from logstore.cluster_metadata import MetadataAcl, MetadataRecord, decode_metadata_record, read_cluster_metadata
from logstore.metadata_schemas import METADATA_SCHEMAS
from test_cluster_metadata import MetadataLog, begin, compact, end, fingerprint, meta, uid, write_snapshot

SCRAM_SHA_256, SCRAM_SHA_512 = 1, 2          # Kafka's ScramMechanism types
TOPIC, GROUP, CLUSTER = 2, 3, 4              # ResourceType
LITERAL, PREFIXED = 3, 4                     # PatternType
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8      # AclOperation
DENY, ALLOW = 2, 3                           # AclPermissionType
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}


def scram_keys(mechanism: int, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(stored key, server key) as Kafka's ScramFormatter derives them (RFC 5802: Hi, HMAC, H)."""
    name = HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


def user(name: str, mechanism: int, password: str, iterations: int = 4096) -> bytes:
    """A UserScramCredentialRecord for a password, salted as Kafka's controller stores it."""
    salt = hashlib.sha256(f"salt of {name}".encode()).digest()[:20]
    stored, server = scram_keys(mechanism, password, salt, iterations)
    return meta("UserScramCredentialRecord", name=name, mechanism=mechanism, salt=salt, storedKey=stored,
                serverKey=server, iterations=iterations)


def remove_user(name: str, mechanism: int) -> bytes:
    return meta("RemoveUserScramCredentialRecord", name=name, mechanism=mechanism)


def acl(n: int, resource_type: int, name: str, pattern: int, principal: str, operation: int,
        permission: int = ALLOW, host: str = "*") -> bytes:
    return meta("AccessControlEntryRecord", id=topic_id_to_string(uid(n)), resourceType=resource_type,
                resourceName=name, patternType=pattern, principal=principal, host=host, operation=operation,
                permissionType=permission)


def remove_acl(n: int) -> bytes:
    return meta("RemoveAccessControlEntryRecord", id=topic_id_to_string(uid(n)))


# -- the records ------------------------------------------------------------------------------------

SALT, STORED, SERVER = b"salt-salt", bytes(range(64)), bytes(range(64, 128))
VECTORS = [
    ("USER_SCRAM_CREDENTIAL_RECORD", 11,
     {"name": "alice", "mechanism": 2, "salt": SALT, "storedKey": STORED, "serverKey": SERVER, "iterations": 8192},
     b"\x01\x0b\x00" + compact(b"alice") + b"\x02" + compact(SALT) + compact(STORED) + compact(SERVER)
     + struct.pack(">i", 8192) + b"\x00"),
    ("REMOVE_USER_SCRAM_CREDENTIAL_RECORD", 22, {"name": "alice", "mechanism": 1},
     b"\x01\x16\x00" + compact(b"alice") + b"\x01" + b"\x00"),
    ("ACCESS_CONTROL_ENTRY_RECORD", 18,
     {"id": topic_id_to_string(uid(5)), "resourceType": 2, "resourceName": "orders", "patternType": 4,
      "principal": "User:alice", "host": "*", "operation": 3, "permissionType": 3},
     b"\x01\x12\x00" + uid(5) + b"\x02" + compact(b"orders") + b"\x04" + compact(b"User:alice") + compact(b"*")
     + b"\x03\x03" + b"\x00"),
    ("REMOVE_ACCESS_CONTROL_ENTRY_RECORD", 19, {"id": topic_id_to_string(uid(5))},
     b"\x01\x13\x00" + uid(5) + b"\x00"),
]


@pytest.mark.parametrize("type_name, api_key, data, raw", VECTORS, ids=[v[0] for v in VECTORS])
def test_kafkas_security_records_decode_and_encode_byte_for_byte(type_name, api_key, data, raw):
    assert decode_metadata_record(raw) == MetadataRecord(api_key, type_name, 0, data)
    assert meta(METADATA_SCHEMAS[api_key].name, **data) == raw


def test_the_table_has_every_version_kafka_writes_of_the_four_records():
    # Kafka 3.5 to 4.x: each at version 0 only (validVersions "0"), with these fields in this order.
    fields = {11: ["Name", "Mechanism", "Salt", "StoredKey", "ServerKey", "Iterations"],
              22: ["Name", "Mechanism"],
              18: ["Id", "ResourceType", "ResourceName", "PatternType", "Principal", "Host", "Operation",
                   "PermissionType"],
              19: ["Id"]}
    for api_key, names in fields.items():
        schema = METADATA_SCHEMAS[api_key]
        assert (schema.first, schema.last) == (0, 0)
        assert [f.name for f in schema.fields] == names


# -- the replay -------------------------------------------------------------------------------------

def test_users_and_acls_replay_through_snapshot_log_removals_and_transactions(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(meta("FeatureLevelRecord", name="metadata.version", featureLevel=21))            # 0
    log.batch(user("old", SCRAM_SHA_256, "gone-before-the-snapshot"), acl(90, TOPIC, "old", LITERAL,
                                                                         "User:old", READ))   # 1-2
    write_snapshot(directory, 3, 1, [
        meta("FeatureLevelRecord", name="metadata.version", featureLevel=21),
        user("alice", SCRAM_SHA_512, "alice-secret"), user("alice", SCRAM_SHA_256, "alice-secret"),
        user("bob", SCRAM_SHA_256, "bob-secret"), user("carol", SCRAM_SHA_512, "carol-secret"),
    ], [
        acl(1, TOPIC, "ord", PREFIXED, "User:alice", ALL),
        acl(2, GROUP, "*", LITERAL, "User:alice", READ),
        acl(3, TOPIC, "orders", LITERAL, "User:bob", READ),
        acl(4, CLUSTER, "kafka-cluster", LITERAL, "User:bob", DESCRIBE, DENY, "10.0.0.1"),
    ])
    log.batch(remove_user("carol", SCRAM_SHA_512), remove_acl(3))                             # 3-4
    log.batch(user("bob", SCRAM_SHA_256, "bob-new-secret", 8192))                             # 5: replaced
    log.batch(begin(), user("erin", SCRAM_SHA_512, "erin-secret"))                            # 6-7
    log.batch(acl(5, TOPIC, "orders", LITERAL, "User:erin", WRITE), end())                    # 8-9: committed
    log.batch(begin(), user("dave", SCRAM_SHA_512, "dave-secret"), acl(6, TOPIC, "orders", LITERAL,
                                                                        "User:dave", READ),
              remove_acl(1), meta("AbortTransactionRecord", reason="failover"))                # 10-14: aborted
    log.batch(remove_user("nobody", SCRAM_SHA_512), remove_acl(77))                           # 15-16: unknown
    log.batch(begin(), remove_user("alice", SCRAM_SHA_256), remove_acl(2))                    # 17-19: still open
    before = fingerprint(directory)

    found = read_cluster_metadata(directory)

    assert fingerprint(directory) == before
    assert found.end_offset == 20
    expected_users = {("alice", SCRAM_SHA_512): ("alice-secret", 4096),
                      ("alice", SCRAM_SHA_256): ("alice-secret", 4096),
                      ("bob", SCRAM_SHA_256): ("bob-new-secret", 8192),
                      ("erin", SCRAM_SHA_512): ("erin-secret", 4096)}
    assert set(found.scram_credentials) == set(expected_users)
    for (name, mechanism), (password, iterations) in expected_users.items():
        salt, stored, server, got_iterations = found.scram_credentials[name, mechanism]
        assert type(salt) is bytes and type(stored) is bytes and type(server) is bytes
        assert got_iterations == iterations
        assert (stored, server) == scram_keys(mechanism, password, salt, iterations)
    assert found.acls == {
        uid(1): MetadataAcl(TOPIC, "ord", PREFIXED, "User:alice", "*", ALL, ALLOW),
        uid(2): MetadataAcl(GROUP, "*", LITERAL, "User:alice", "*", READ, ALLOW),
        uid(4): MetadataAcl(CLUSTER, "kafka-cluster", LITERAL, "User:bob", "10.0.0.1", DESCRIBE, DENY),
        uid(5): MetadataAcl(TOPIC, "orders", LITERAL, "User:erin", "*", WRITE, ALLOW),
    }


def test_an_acl_removed_then_made_again_keeps_only_its_new_id(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(acl(1, TOPIC, "t", LITERAL, "User:a", READ))
    log.batch(remove_acl(1), acl(2, TOPIC, "t", LITERAL, "User:a", READ))
    log.batch(user("a", SCRAM_SHA_512, "one"), remove_user("a", SCRAM_SHA_512), user("a", SCRAM_SHA_512, "two"))
    found = read_cluster_metadata(directory)
    assert list(found.acls) == [uid(2)]
    salt, stored, server, iterations = found.scram_credentials["a", SCRAM_SHA_512]
    assert (stored, server) == scram_keys(SCRAM_SHA_512, "two", salt, iterations)


def test_a_metadata_log_without_users_or_acls_has_none(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    MetadataLog(directory).batch(meta("FeatureLevelRecord", name="metadata.version", featureLevel=21))
    found = read_cluster_metadata(directory)
    assert (found.scram_credentials, found.acls) == ({}, {})


REAL_KAFKA = Path(__file__).resolve().parents[1] / "fixtures" / "real-kafka"


@pytest.mark.parametrize("directory", sorted(p.name for p in REAL_KAFKA.glob("kraft*")))
def test_the_vendored_kafka_dirs_hold_no_users_or_acls(directory):
    """None of the public KRaft dirs ran with SCRAM or an authorizer: their replay finds neither."""
    found = read_cluster_metadata(REAL_KAFKA / directory / "__cluster_metadata-0")
    assert (found.scram_credentials, found.acls) == ({}, {})
