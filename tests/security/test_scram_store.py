"""The `scram-credentials` file: persistence, generations across log dirs, corrupt copies, failed writes,
power cuts at every boundary, and reads that never wait for a writer."""
from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem, SimulatedPowerLoss  # noqa: E402
from logstore.broker.scram import SCRAM_MECHANISMS, new_credential, salted_password  # noqa: E402
from logstore.broker.scram_store import (  # noqa: E402
    SCRAM_CREDENTIALS_FILE,
    ScramCredentialStore,
    encode_credentials,
    kafka_credentials,
    read_credentials,
)
from logstore.checkpoints import CorruptCheckpointError  # noqa: E402
from logstore.errors import StorageError, UnacceptableCredentialError, UnsupportedSaslMechanismError  # noqa: E402

SHA256, SHA512 = SCRAM_MECHANISMS["SCRAM-SHA-256"], SCRAM_MECHANISMS["SCRAM-SHA-512"]


def dirs(tmp_path: Path, *names: str) -> list[str]:
    return [str(tmp_path / name) for name in names or ("a",)]


def test_credentials_survive_a_reopen_and_are_in_every_log_dir(tmp_path):
    log_dirs = dirs(tmp_path, "a", "b")
    store = ScramCredentialStore(log_dirs)
    store.set_password("alice", "SCRAM-SHA-512", "alice-secret", 8192)
    store.set_password("bob", "SCRAM-SHA-256", "bob-secret", 4096)
    again = ScramCredentialStore(log_dirs)
    assert again.users() == {"alice": {"SCRAM-SHA-512": 8192}, "bob": {"SCRAM-SHA-256": 4096}}
    assert again.get("alice", "SCRAM-SHA-512") == store.get("alice", "SCRAM-SHA-512")
    assert again.get("alice", "SCRAM-SHA-256") is None
    for log_dir in log_dirs:   # each copy alone holds everything
        assert ScramCredentialStore([log_dir]).credentials() == store.credentials()
    assert again.generation == 2


def test_the_file_keeps_kafkas_fields_never_the_password(tmp_path):
    store = ScramCredentialStore(dirs(tmp_path))
    store.set_password("alice", "SCRAM-SHA-256", "alice-secret", 4096)
    data = (tmp_path / "a" / SCRAM_CREDENTIALS_FILE).read_bytes()
    credential = store.get("alice", "SCRAM-SHA-256")
    salted = salted_password(SHA256, "alice-secret", credential.salt, 4096)
    assert b"alice-secret" not in data and base64.b64encode(salted) not in data and salted not in data
    doc = json.loads(data)
    assert doc["credentials"]["alice"]["SCRAM-SHA-256"] == {
        "salt": base64.b64encode(credential.salt).decode(),
        "storedKey": base64.b64encode(credential.stored_key).decode(),
        "serverKey": base64.b64encode(credential.server_key).decode(), "iterations": 4096}
    assert len(credential.salt) >= 16
    assert ScramCredentialStore(dirs(tmp_path)).get("alice", "SCRAM-SHA-256") == credential


def test_upsert_from_a_salted_password_stores_the_keys_kafka_derives(tmp_path):
    store = ScramCredentialStore(dirs(tmp_path))
    salt = os.urandom(20)
    store.upsert("carol", "SCRAM-SHA-512", 4096, salt, salted_password(SHA512, "pw", salt, 4096))
    assert store.get("carol", "SCRAM-SHA-512") == new_credential(SHA512, "pw", 4096, salt=salt)


def test_the_highest_generation_wins_whichever_log_dir_holds_it(tmp_path):
    log_dirs = dirs(tmp_path, "a", "b", "c")
    older = {("alice", "SCRAM-SHA-256"): new_credential(SHA256, "old", 4096)}
    newer = {("alice", "SCRAM-SHA-256"): new_credential(SHA256, "new", 4096)}
    for log_dir, (generation, credentials) in zip(log_dirs, [(3, older), (7, newer), (5, older)], strict=True):
        os.makedirs(log_dir)
        Path(log_dir, SCRAM_CREDENTIALS_FILE).write_bytes(encode_credentials(generation, credentials))
    store = ScramCredentialStore(log_dirs)
    assert store.credentials() == newer and store.generation == 7
    store.delete("alice", "SCRAM-SHA-256")
    assert all(read_credentials(os.path.join(d, SCRAM_CREDENTIALS_FILE)) == (8, {}) for d in log_dirs)
    assert ScramCredentialStore(log_dirs).credentials() == {}


@pytest.mark.parametrize("damage", ["torn", "garbage", "not-json-object", "bad-key", "bad-base64", "no-iterations",
                                    "unknown-mechanism", "not-utf8"])
def test_a_corrupt_copy_is_a_typed_error_naming_the_file(tmp_path, damage):
    log_dirs = dirs(tmp_path, "a", "b")
    ScramCredentialStore(log_dirs).set_password("alice", "SCRAM-SHA-512", "pw", 4096)
    path = Path(log_dirs[1], SCRAM_CREDENTIALS_FILE)
    data = path.read_bytes()
    doc = json.loads(data)
    entry = doc["credentials"]["alice"]["SCRAM-SHA-512"]
    if damage == "torn":
        data = data[:len(data) // 2]
    elif damage == "garbage":
        data = b"\0" * 40
    elif damage == "not-json-object":
        data = b"[1, 2]"
    elif damage == "not-utf8":
        data = data.replace(b"alice", b"al\xffce")
    else:
        if damage == "bad-key":
            entry["storedKey"] = base64.b64encode(b"short").decode()
        elif damage == "bad-base64":
            entry["salt"] = "***"
        elif damage == "no-iterations":
            del entry["iterations"]
        else:
            doc["credentials"]["alice"]["SCRAM-SHA-1"] = doc["credentials"]["alice"].pop("SCRAM-SHA-512")
        data = json.dumps(doc).encode()
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError) as refused:
        ScramCredentialStore(log_dirs)
    assert str(path) in str(refused.value) and refused.value.path == str(path)
    assert isinstance(refused.value, StorageError)


def test_changes_kafka_refuses_are_refused_before_anything_is_written(tmp_path):
    store = ScramCredentialStore(dirs(tmp_path))
    for call, error, says in [
        (lambda: store.set_password("", "SCRAM-SHA-256", "pw", 4096), UnacceptableCredentialError, "Username must"),
        (lambda: store.set_password("a", "SCRAM-SHA-256", "pw", 4095), UnacceptableCredentialError, "Too few"),
        (lambda: store.set_password("a", "SCRAM-SHA-256", "pw", 16385), UnacceptableCredentialError, "Too many"),
        (lambda: store.upsert("a", "SCRAM-SHA-1", 4096, b"s", b"x" * 20), UnsupportedSaslMechanismError, "Unknown"),
    ]:
        with pytest.raises(error, match=says):
            call()
    assert not (tmp_path / "a").exists() and store.generation == 0
    assert store.delete("nobody", "SCRAM-SHA-256") is False and not (tmp_path / "a").exists()


def test_alter_applies_several_changes_as_one_generation(tmp_path):
    store = ScramCredentialStore(dirs(tmp_path))
    store.set_password("alice", "SCRAM-SHA-256", "pw", 4096)
    bob = new_credential(SHA512, "bob", 4096)
    store.alter({("alice", "SCRAM-SHA-256"): None, ("bob", "SCRAM-SHA-512"): bob})
    assert store.generation == 2 and ScramCredentialStore(dirs(tmp_path)).credentials() == {
        ("bob", "SCRAM-SHA-512"): bob}


def test_a_failed_write_changes_nothing_and_the_next_one_is_whole(tmp_path):
    log_dirs = dirs(tmp_path, "a", "b")
    ScramCredentialStore(log_dirs).set_password("alice", "SCRAM-SHA-256", "pw", 4096)
    fs = FaultFileSystem()
    store = ScramCredentialStore(log_dirs, fs)
    before = store.credentials()
    fs.fail_write(f"{log_dirs[1]}/{SCRAM_CREDENTIALS_FILE}.tmp", error=errno.EIO)
    with pytest.raises(StorageError):
        store.set_password("bob", "SCRAM-SHA-256", "pw", 4096)
    assert store.credentials() == before
    assert ScramCredentialStore(log_dirs).credentials() == before    # rolled back on disk too
    store.set_password("carol", "SCRAM-SHA-256", "pw", 4096)
    assert set(ScramCredentialStore(log_dirs).users()) == {"alice", "carol"}


def test_a_power_cut_at_any_boundary_leaves_the_old_or_the_new_credentials(tmp_path):
    alice, bob = new_credential(SHA256, "a", 4096), new_credential(SHA512, "b", 4096)
    states = [{("alice", "SCRAM-SHA-256"): alice},
              {("alice", "SCRAM-SHA-256"): alice, ("bob", "SCRAM-SHA-512"): bob},
              {("bob", "SCRAM-SHA-512"): bob}]
    start = tmp_path / "start"
    ScramCredentialStore(dirs(start, "a", "b")).alter(states[0])

    def run(fs: FaultFileSystem, base: Path, journal: dict) -> None:
        store = ScramCredentialStore(dirs(base, "a", "b"), fs)
        journal["returned"] = 0
        store.alter({("bob", "SCRAM-SHA-512"): bob})
        journal["returned"] = 1
        store.delete("alice", "SCRAM-SHA-256")
        journal["returned"] = 2

    counting = FaultFileSystem()
    shutil.copytree(start, tmp_path / "count")
    run(counting, tmp_path / "count", {})
    total = len(counting.boundaries)
    counting.crash()
    assert total == 2 * 2 * 3      # two writes × two log dirs × (tmp fsync, rename, directory fsync)
    for k in range(1, total + 2):
        for durable_names in (False, True):
            base = tmp_path / f"cut-{k}-{durable_names}"
            shutil.copytree(start, base)
            fs = FaultFileSystem()
            fs.crash_at(k)
            journal: dict = {}
            try:
                run(fs, base, journal)
            except SimulatedPowerLoss:
                pass
            fs.crash(durable_metadata=durable_names)
            found = ScramCredentialStore(dirs(base, "a", "b")).credentials()
            returned = journal.get("returned", 0)
            assert found in states[returned:returned + 2], f"cut {k}: {returned} writes returned, found {found}"


def test_reads_do_not_wait_for_a_writer(tmp_path):
    store = ScramCredentialStore(dirs(tmp_path))
    store.set_password("alice", "SCRAM-SHA-256", "pw", 4096)
    seen = []
    with store._lock:   # a writer in the middle of its fsyncs
        reader = threading.Thread(target=lambda: seen.append((store.get("alice", "SCRAM-SHA-256"), store.users())))
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive()
    assert seen[0][0] is not None and seen[0][1] == {"alice": {"SCRAM-SHA-256": 4096}}


def test_the_store_opens_beside_a_brokers_files_and_they_ignore_it(tmp_path):
    from logstore.manager import LogManager
    from logstore.reader import StoreView

    log_dir = str(tmp_path / "data")
    ScramCredentialStore([log_dir]).set_password("alice", "SCRAM-SHA-512", "pw", 4096)
    Path(log_dir, SCRAM_CREDENTIALS_FILE + ".tmp").write_bytes(b"left by a crash")
    with LogManager([log_dir], start_scheduler=False) as store:
        store.create_topic("orders", 1)
    with LogManager([log_dir], start_scheduler=False) as store:
        assert store.topics() == {"orders": 1}
    assert StoreView([log_dir]).topics() == {"orders": 1}
    assert ScramCredentialStore([log_dir]).users() == {"alice": {"SCRAM-SHA-512": 4096}}


def test_credentials_from_kafkas_metadata_log_are_taken_once(tmp_path):
    log_dirs = dirs(tmp_path, "a", "b")
    made = new_credential(SHA512, "from-kafka", 4096)
    kafka = kafka_credentials({("alice", 2): (made.salt, made.stored_key, made.server_key, 4096),
                               ("bob", 9): (b"s", b"k", b"k", 4096)})       # a type Kafka does not know: left out
    assert kafka == {("alice", "SCRAM-SHA-512"): made}
    store = ScramCredentialStore(log_dirs, kafka=kafka)
    assert store.credentials() == kafka and store.generation == 1
    assert ScramCredentialStore(log_dirs).credentials() == kafka        # written: no longer needs Kafka's log
    store.delete("alice", "SCRAM-SHA-512")
    # Our file now says who exists: a credential deleted here does not come back from Kafka's log.
    assert ScramCredentialStore(log_dirs, kafka=kafka).credentials() == {}
