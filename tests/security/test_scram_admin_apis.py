"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) handlers in-process: Kafka's
rules per user (ScramControlManager, ScramImage.describe) and the CLUSTER authorization."""
from __future__ import annotations

import asyncio
import hashlib

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode

from logstore.broker.api import REGISTRY, Request, load_all
from logstore.broker.authorizer import AclOperation, KafkaPrincipal, ResourceType
from logstore.broker.scram import SCRAM_MECHANISMS, new_credential
from logstore.broker.scram_store import ScramCredentialStore

DESCRIBE, ALTER = 50, 51
SHA256, SHA512 = 1, 2


class Authorizer:
    """Allows everything but what `denied` names as (operation, resource type)."""

    def __init__(self, denied=()):
        self.denied = set(denied)

    def authorize(self, principal, operation, resource_type, names, **context):
        return set() if (operation, resource_type) in self.denied else set(names)


class Context:
    """What the two handlers use of a broker."""

    def __init__(self, store, authorizer):
        self.scram = store
        self.authorizer = authorizer

    async def coordinate(self, call, *args):
        return await asyncio.get_running_loop().run_in_executor(None, call, *args)


@pytest.fixture
def store(tmp_path):
    return ScramCredentialStore([str(tmp_path / "a"), str(tmp_path / "b")])


def call(store, key, body, denied=()):
    load_all()
    request = Request(Context(store, Authorizer(denied)), key, 0, 1, "test",
                      principal=KafkaPrincipal("User", "admin"))
    return asyncio.run(REGISTRY[key].handler(request, body))


def upsertion(name, mechanism=SHA512, iterations=4096, password="pw", salt=b"salt-salt"):
    hash_name = {SHA256: "sha256", SHA512: "sha512"}.get(mechanism, "sha256")
    return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
                                    salted_password=hashlib.pbkdf2_hmac(hash_name, password.encode(), salt,
                                                                        max(iterations, 1)))


def alter(store, deletions=(), upsertions=(), denied=()):
    response = call(store, ALTER, AlterUserScramCredentialsRequest(
        deletions=tuple(ScramCredentialDeletion(name=n, mechanism=m) for n, m in deletions),
        upsertions=tuple(upsertions)), denied)
    return [(r.user, r.error_code, r.error_message) for r in response.results]


def describe(store, users=None, denied=()):
    body = DescribeUserScramCredentialsRequest(users=None if users is None else tuple(UserName(name=u) for u in users))
    return call(store, DESCRIBE, body, denied)


def test_upsertions_store_what_kafkas_controller_derives(store):
    assert alter(store, upsertions=[upsertion("alice", SHA512, 8192, "alice-pw"), upsertion("bob", SHA256)]) == [
        ("alice", ErrorCode.none, None), ("bob", ErrorCode.none, None)]
    assert store.get("alice", "SCRAM-SHA-512") == new_credential(SCRAM_MECHANISMS["SCRAM-SHA-512"], "alice-pw", 8192,
                                                                 salt=b"salt-salt")
    assert store.generation == 1          # one request, one write
    assert ScramCredentialStore(store.log_dirs).users() == {"alice": {"SCRAM-SHA-512": 8192},
                                                            "bob": {"SCRAM-SHA-256": 4096}}


def test_describe_all_and_by_name_as_kafkas_scram_image(store):
    alter(store, upsertions=[upsertion("alice", SHA512, 8192), upsertion("bob", SHA256)])
    alter(store, upsertions=[upsertion("alice", SHA256, 4096)])
    response = describe(store)
    assert response.error_code == ErrorCode.none
    rows = {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos] for r in response.results}
    assert rows == {"alice": [(SHA256, 4096), (SHA512, 8192)], "bob": [(SHA256, 4096)]}
    assert [r.user for r in describe(store, []).results] == ["alice", "bob"]
    named = describe(store, ["bob", "nobody", "alice", "bob"]).results
    assert [(r.user, r.error_code, r.error_message) for r in named] == [
        ("bob", ErrorCode.duplicate_resource,
         "Cannot describe SCRAM credentials for the same user twice in a single request: bob"),
        ("nobody", ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: nobody"),
        ("alice", ErrorCode.none, None)]
    assert not named[0].credential_infos and len(named[2].credential_infos) == 2


def test_each_refusal_as_kafkas_scram_control_manager(store):
    alter(store, upsertions=[upsertion("alice", SHA256), upsertion("twice", SHA256)])
    results = alter(store, deletions=[("alice", SHA512), ("", SHA256), ("carol", 0), ("twice", SHA256),
                                      ("twice", SHA256)],
                    upsertions=[upsertion("dave", SHA256, 4095), upsertion("erin", SHA256, 16385),
                                upsertion("frank", 3), upsertion("gina", SHA512), upsertion("gina", SHA256),
                                upsertion("twice")])
    assert sorted(results) == sorted([
        ("alice", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
        ("carol", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("twice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        ("dave", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("erin", ErrorCode.unacceptable_credential, "Too many iterations"),
        ("frank", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("gina", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")])
    assert store.users() == {"alice": {"SCRAM-SHA-256": 4096}, "twice": {"SCRAM-SHA-256": 4096}}
    assert store.generation == 1   # nothing written
    # As Kafka: a user's first refusal is its answer; a later entry for it is not looked at.
    assert alter(store, deletions=[("ghost", SHA256), ("ghost", SHA256)]) == [
        ("ghost", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")]


def test_a_deletion_and_an_upsertion_of_one_user_in_one_request_are_both_refused(store):
    alter(store, upsertions=[upsertion("alice", SHA256)])
    assert alter(store, deletions=[("alice", SHA256)], upsertions=[upsertion("alice", SHA512)]) == [
        ("alice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")]
    assert store.users() == {"alice": {"SCRAM-SHA-256": 4096}}


def test_valid_changes_apply_beside_refused_ones_and_deletions_come_first(store):
    alter(store, upsertions=[upsertion("alice", SHA256), upsertion("bob", SHA256)])
    results = alter(store, deletions=[("alice", SHA256)], upsertions=[upsertion("carol"), upsertion("dave", SHA256, 1)])
    assert results == [("alice", ErrorCode.none, None), ("carol", ErrorCode.none, None),
                       ("dave", ErrorCode.unacceptable_credential, "Too few iterations")]
    assert store.users() == {"bob": {"SCRAM-SHA-256": 4096}, "carol": {"SCRAM-SHA-512": 4096}}


def test_without_cluster_describe_the_request_is_refused(store):
    alter(store, upsertions=[upsertion("alice")])
    response = describe(store, ["alice", "bob"], denied=[(AclOperation.DESCRIBE, ResourceType.CLUSTER)])
    assert response.error_code == ErrorCode.cluster_authorization_failed
    assert [(r.user, r.error_code) for r in response.results] == [("", ErrorCode.cluster_authorization_failed)] * 2
    assert not any(r.credential_infos for r in response.results)
    assert describe(store, None, denied=[(AclOperation.DESCRIBE, ResourceType.CLUSTER)]).results == ()


def test_without_cluster_alter_nothing_changes(store):
    results = alter(store, deletions=[("zed", SHA256)], upsertions=[upsertion("bob"), upsertion("alice")],
                    denied=[(AclOperation.ALTER, ResourceType.CLUSTER)])
    assert results == [(u, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
                       for u in ("alice", "bob", "zed")]
    assert store.users() == {} and store.generation == 0


def test_a_failed_write_answers_its_error_for_each_change(store, tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "scram-credentials.tmp").mkdir()     # the write of the second copy cannot open its file
    results = alter(store, upsertions=[upsertion("alice"), upsertion("bob", 0)])
    assert results[0][:2] == ("alice", ErrorCode.kafka_storage_error)
    assert results[1][:2] == ("bob", ErrorCode.unsupported_sasl_mechanism)
    assert store.users() == {}
