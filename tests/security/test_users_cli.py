"""`logstore users`: add, list and delete SCRAM credentials offline; refusals are one line, no traceback."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from logstore.broker.scram import SCRAM_MECHANISMS, ScramServer
from logstore.broker.scram_store import SCRAM_CREDENTIALS_FILE, ScramCredentialStore
from logstore.cli import main
from logstore.dir_lock import DirLock
from scram_client import RfcScramClient


def users(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["users", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_add_list_delete_round_trip_over_two_log_dirs(tmp_path, capsys):
    dirs = f"{tmp_path}/a,{tmp_path}/b"     # neither exists yet: made as kafka-storage format makes them
    assert users(capsys, "add", "--log-dirs", dirs, "--mechanism", "SCRAM-SHA-512", "--user", "alice",
                 "--password", "alice-secret", "--iterations", "8192")[0] == 0
    (tmp_path / "pw").write_text("bob-secret\n")
    assert users(capsys, "add", "--log-dirs", dirs, "--mechanism", "SCRAM-SHA-256", "--user", "bob",
                 "--password-file", str(tmp_path / "pw"))[0] == 0
    status, out, _ = users(capsys, "list", "--log-dirs", dirs)
    assert status == 0 and out.splitlines() == ["USER \tMECHANISM    \tITERATIONS",
                                                "alice\tSCRAM-SHA-512\t8192",
                                                "bob  \tSCRAM-SHA-256\t4096"]
    status, out, _ = users(capsys, "list", "--log-dirs", f"{tmp_path}/b", "--json")
    assert json.loads(out) == {"users": [{"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 8192},
                                         {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 4096}]}
    # The stored credential logs bob in with the password from the file (its final newline dropped).
    store = ScramCredentialStore([f"{tmp_path}/a"])
    server = ScramServer(SCRAM_MECHANISMS["SCRAM-SHA-256"], lambda u: store.get(u, "SCRAM-SHA-256"))
    client = RfcScramClient("sha256", "bob", "bob-secret", "abc")
    assert client.check(server.evaluate(client.final(server.evaluate(client.first()))))
    assert b"secret" not in (tmp_path / "a" / SCRAM_CREDENTIALS_FILE).read_bytes()
    status, out, _ = users(capsys, "delete", "--log-dirs", dirs, "--user", "alice")
    assert status == 0 and "SCRAM-SHA-512 credential of alice deleted" in out
    assert ScramCredentialStore([f"{tmp_path}/b"]).users() == {"bob": {"SCRAM-SHA-256": 4096}}
    status, _, err = users(capsys, "delete", "--log-dirs", dirs, "--user", "alice")
    assert status == 1
    assert err == f"logstore users: user 'alice' has no SCRAM credential in {tmp_path}/a, {tmp_path}/b\n"


def test_log_dirs_come_from_a_server_properties(tmp_path, capsys):
    (tmp_path / "server.properties").write_text(f"log.dirs={tmp_path}/x,{tmp_path}/y\n")
    assert users(capsys, "add", "--config", str(tmp_path / "server.properties"), "--mechanism", "SCRAM-SHA-256",
                 "--user", "carol", "--password", "pw")[0] == 0
    assert ScramCredentialStore([f"{tmp_path}/y"]).users() == {"carol": {"SCRAM-SHA-256": 4096}}


def test_the_password_is_read_from_stdin_when_it_is_not_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("from-stdin\n"))
    assert users(capsys, "add", "--log-dirs", str(tmp_path), "--mechanism", "SCRAM-SHA-256", "--user", "dave")[0] == 0
    store = ScramCredentialStore([str(tmp_path)])
    server = ScramServer(SCRAM_MECHANISMS["SCRAM-SHA-256"], lambda u: store.get(u, "SCRAM-SHA-256"))
    client = RfcScramClient("sha256", "dave", "from-stdin", "abc")
    assert client.check(server.evaluate(client.final(server.evaluate(client.first()))))


def test_a_locked_log_dir_is_refused_with_one_line(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    lock = DirLock(str(tmp_path / "a"))     # a broker's hold on the directory
    try:
        status, _, err = users(capsys, "add", "--log-dirs", f"{tmp_path}/b,{tmp_path}/a", "--mechanism",
                               "SCRAM-SHA-256", "--user", "x", "--password", "y")
    finally:
        lock.release()
    assert status == 1 and err.startswith("logstore users: log dir ") and "in use by" in err
    assert err.count("\n") == 1
    assert not any((tmp_path / d / SCRAM_CREDENTIALS_FILE).exists() for d in "ab")


@pytest.mark.parametrize("argv, says", [
    (["list"], "give the data directories with --log-dirs"),
    (["list", "--log-dirs", "a", "--config", "b"], "one of them"),
    (["add", "--log-dirs", "{d}", "--mechanism", "SCRAM-SHA-1", "--user", "x", "--password", "y"],
     "not a SCRAM mechanism"),
    (["add", "--log-dirs", "{d}", "--mechanism", "SCRAM-SHA-256", "--user", "x", "--password", "y",
      "--iterations", "100"], "must be 4096..16384"),
    (["add", "--log-dirs", "{d}", "--mechanism", "SCRAM-SHA-256", "--user", "", "--password", "y"],
     "--user must not be empty"),
    (["add", "--log-dirs", "{d}", "--mechanism", "SCRAM-SHA-256", "--user", "x", "--password", ""],
     "the password is empty"),
    (["add", "--log-dirs", "{d}", "--mechanism", "SCRAM-SHA-256", "--user", "x", "--password-file", "{d}/none"],
     "--password-file"),
    (["list", "--config", "{d}/missing.properties"], "--config"),
])
def test_bad_arguments_are_one_line_and_status_2(tmp_path, capsys, argv, says):
    status, _, err = users(capsys, *(a.replace("{d}", str(tmp_path)) for a in argv))
    assert status == 2 and says in err and err.startswith("logstore users: error: ") and err.count("\n") == 1


def test_a_corrupt_file_is_named_without_a_traceback(tmp_path):
    (tmp_path / SCRAM_CREDENTIALS_FILE).write_text("{not json")
    done = subprocess.run([sys.executable, "-m", "logstore", "users", "list", "--log-dirs", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"logstore users: corrupt checkpoint file {tmp_path}/{SCRAM_CREDENTIALS_FILE}")
