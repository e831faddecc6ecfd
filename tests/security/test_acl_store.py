"""The `acls` file: one copy per log dir, the highest generation wins, a corrupt copy is an error that
names the file, and a broker does not start on ACLs it cannot read."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logstore.broker.acl_store import ACLS_FILE, AclStore, read_acls
from logstore.broker.acls import AclBinding, AclBindingFilter
from logstore.broker.authorizer import STANDARD_AUTHORIZER, AclOperation, AclPermissionType, PatternType, ResourceType
from logstore.broker.config import BrokerConfig
from logstore.broker.standard_authorizer import StandardAuthorizer
from logstore.checkpoints import CorruptCheckpointError

READ_T = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                    AclPermissionType.ALLOW)
WRITE_P = AclBinding(ResourceType.TOPIC, "p-", PatternType.PREFIXED, "User:bob", "10.0.0.1", AclOperation.WRITE,
                     AclPermissionType.DENY)


def test_every_log_dir_gets_a_copy_and_a_new_store_reads_it(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    store = AclStore(dirs)
    assert store.load() == []
    store.save([READ_T, WRITE_P])
    for d in dirs:
        assert read_acls(f"{d}/{ACLS_FILE}") == (1, [READ_T, WRITE_P])
    assert AclStore(dirs).load() == [READ_T, WRITE_P]


def test_the_highest_generation_wins(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    AclStore(dirs).save([READ_T])
    newer = AclStore(dirs[1:])
    newer.load()
    newer.save([WRITE_P])      # generation 2 in b only: a crash between the two dirs' writes
    fresh = AclStore(dirs)
    assert fresh.load() == [WRITE_P] and fresh.generation == 2


@pytest.mark.parametrize(("text", "reason"), [
    ("{", "Expecting property name"),
    ('{"version": 1, "generation": 1, "acls": []}', "expected version 0"),
    ('{"version": 0, "generation": 1, "acls": [{"resourceType": "TOPIC"}]}', "ACL 0: expected an object"),
    ('{"version": 0, "generation": 1, "acls": [%s]}' % json.dumps({**READ_T.to_json(), "principal": "alice"}),
     "Could not parse principal"),
])
def test_a_corrupt_copy_names_the_file(tmp_path, text, reason):
    (tmp_path / ACLS_FILE).write_text(text)
    with pytest.raises(CorruptCheckpointError, match=reason) as caught:
        AclStore([str(tmp_path)]).load()
    assert caught.value.path == str(tmp_path / ACLS_FILE)


def test_the_authorizer_reads_its_settings_and_the_store(tmp_path):
    AclStore([str(tmp_path)]).save([READ_T])
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "super.users": " User:admin ; User:ops;",
                                           "allow.everyone.if.no.acl.found": "true"})
    auth = StandardAuthorizer.from_config(config)
    assert auth.super_users == {"User:admin", "User:ops"} and auth.allow_if_no_acl
    assert auth.acls(AclBindingFilter()) == [READ_T]


def test_a_broker_does_not_start_on_acls_it_cannot_read(tmp_path):
    (tmp_path / ACLS_FILE).write_text("not json")
    done = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}",
                           "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                           "--override", f"authorizer.class.name={STANDARD_AUTHORIZER}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1   # the machine's problem (a damaged file), not a setting
    assert f"{tmp_path / ACLS_FILE}" in done.stderr and "Traceback" not in done.stderr


def test_a_super_user_that_is_no_principal_is_a_config_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}",
                           "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", "super.users=admin",
                           "--override", f"authorizer.class.name={STANDARD_AUTHORIZER}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "super.users: expected a string in format principalType:principalName but got admin" in done.stderr
