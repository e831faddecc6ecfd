"""The SCRAM credentials of the broker's users: the `scram-credentials` file, one full copy per log dir.

Kafka keeps them as UserScramCredentialRecords in its metadata log; here, as
`topic-configs` keeps topic overrides (`logstore/topics.py`):

    {"version": 0, "generation": <n>,
     "credentials": {"<user>": {"<SCRAM-SHA-256|SCRAM-SHA-512>":
                                {"salt": <base64>, "storedKey": <base64>, "serverKey": <base64>,
                                 "iterations": <n>}}}}

Kafka's fields, never the password nor the salted password. Each write
replaces every copy atomically with the generation raised by one; on open the
copy with the highest generation wins (`logstore.generation_files`), so a
crash between two log dirs leaves the older state or the newer one, never a
mix. A copy that does not parse stops the open with a
`CorruptCheckpointError` naming the file. A write that fails
part-way is rolled back in memory and, as far as the disk lets it, on disk
(every copy rewritten with the old credentials under a newer generation).

A directory Kafka wrote holds its users as UserScramCredentialRecords in
`__cluster_metadata-0`: given them (`kafka`, as replayed from that log), a
store with no file of its own yet writes them as its first generation, once.

Thread-safety: the credentials are one dict replaced whole on each write
(copy on write), so `get`, `users` and `credentials` read without a lock
from the event loop while a coordinator thread writes; writers are
serialised by a lock. Every write returns once fsynced.
"""
from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from logstore.broker.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    credential_from_salted_password,
    new_credential,
    scram_mechanism,
)
from logstore.checkpoints import CorruptCheckpointError
from logstore.errors import StorageError, UnacceptableCredentialError
from logstore.filesystem import OS, FileSystem
from logstore.generation_files import GenerationFile

__all__ = ["SCRAM_CREDENTIALS_FILE", "ScramCredentialStore", "check_credential", "decode_credentials",
           "encode_credentials", "kafka_credentials", "read_credentials"]

log = logging.getLogger(__name__)

SCRAM_CREDENTIALS_FILE = "scram-credentials"
SCRAM_CREDENTIALS_COPIES = GenerationFile(SCRAM_CREDENTIALS_FILE, "credentials")
Key = tuple[str, str]   # (user, mechanism name)


def kafka_credentials(records: Mapping[tuple[str, int], tuple[bytes, bytes, bytes, int]]) -> dict[Key, ScramCredential]:
    """Credentials as Kafka's UserScramCredentialRecords hold them ((name, mechanism type) → (salt, stored key,
    server key, iterations)), keyed as this store keys them; a mechanism type Kafka does not know is left out."""
    found: dict[Key, ScramCredential] = {}
    for (user, mechanism_type), (salt, stored_key, server_key, iterations) in records.items():
        mechanism = next((m for m in SCRAM_MECHANISMS.values() if m.type == mechanism_type), None)
        if mechanism is not None:
            found[(user, mechanism.name)] = ScramCredential(salt, stored_key, server_key, iterations)
    return found


def check_credential(user: str, mechanism: str, iterations: int) -> None:
    """Kafka's controller rules for a credential to store (ScramControlManager.validateUpsertion)."""
    if not user:
        raise UnacceptableCredentialError("Username must not be empty")
    scram_mechanism(mechanism)
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError("Too few iterations")
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError("Too many iterations")


def _credentials_json(credentials: Mapping[Key, ScramCredential]) -> dict[str, dict[str, Any]]:
    users: dict[str, dict[str, Any]] = {}
    for (user, mechanism), c in credentials.items():
        users.setdefault(user, {})[mechanism] = {
            "salt": base64.b64encode(c.salt).decode("ascii"),
            "storedKey": base64.b64encode(c.stored_key).decode("ascii"),
            "serverKey": base64.b64encode(c.server_key).decode("ascii"),
            "iterations": c.iterations}
    return users


def encode_credentials(generation: int, credentials: Mapping[Key, ScramCredential]) -> bytes:
    """The file's bytes for a generation of credentials."""
    return SCRAM_CREDENTIALS_COPIES.encode(generation, _credentials_json(credentials))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode_credentials(path: str, data: bytes) -> tuple[int, dict[Key, ScramCredential]]:
    """(generation, credentials) of a file's bytes; CorruptCheckpointError naming `path` if they break the format."""
    generation, users = SCRAM_CREDENTIALS_COPIES.decode(path, data)
    found: dict[Key, ScramCredential] = {}
    for user, mechanisms in users.items():
        if not user or not isinstance(mechanisms, dict) or not mechanisms:
            raise CorruptCheckpointError(path, 1, f"user {user!r}: expected a non-empty object of mechanisms")
        for name, fields in mechanisms.items():
            found[(user, name)] = _credential(path, user, name, fields)
    return generation, found


def _credential(path: str, user: str, name: str, fields: object) -> ScramCredential:
    where = f"user {user!r}, {name}"
    if name not in SCRAM_MECHANISMS:
        raise CorruptCheckpointError(path, 1, f"{where}: not a SCRAM mechanism")
    if not isinstance(fields, dict) or set(fields) != {"salt", "storedKey", "serverKey", "iterations"}:
        raise CorruptCheckpointError(path, 1, f"{where}: expected salt, storedKey, serverKey and iterations")
    if not _is_int(fields["iterations"]) or fields["iterations"] < 1:
        raise CorruptCheckpointError(path, 1, f"{where}: bad iterations {fields['iterations']!r}")
    size = SCRAM_MECHANISMS[name].digest_size
    values = []
    for field in ("salt", "storedKey", "serverKey"):
        try:
            value = base64.b64decode(str(fields[field]).encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise CorruptCheckpointError(path, 1, f"{where}: {field} is not base64") from None
        if field != "salt" and len(value) != size:
            raise CorruptCheckpointError(path, 1, f"{where}: {field} is {len(value)} bytes, not {size}")
        values.append(value)
    return ScramCredential(values[0], values[1], values[2], fields["iterations"])


def read_credentials(path: str, fs: FileSystem = OS) -> tuple[int, dict[Key, ScramCredential]]:
    """(generation, credentials) of one `scram-credentials` file; FileNotFoundError if there is none."""
    return decode_credentials(path, fs.read_file(path))


class ScramCredentialStore:
    """The SCRAM credentials per (user, mechanism), persisted in every log dir (see the module docstring).

    Owns the `scram-credentials` file of each log dir. Reads are lock-free and safe from any thread;
    writes are serialised by a lock and block on fsyncs (call them off the event loop).
    """

    def __init__(self, log_dirs: Iterable[str], fs: FileSystem = OS,
                 kafka: Mapping[Key, ScramCredential] | None = None):
        self.log_dirs = [os.fspath(d) for d in log_dirs]
        self._fs = fs
        self._lock = threading.Lock()
        self._generation = 0
        self._credentials: dict[Key, ScramCredential] = {}
        found = SCRAM_CREDENTIALS_COPIES.read_newest(self.log_dirs, lambda path: read_credentials(path, fs))
        if found is not None:
            self._generation, self._credentials = found
        elif kafka:
            # A directory Kafka wrote keeps its users: its metadata log's credentials become the first
            # generation of ours, once; from then on our file alone says who exists (a deletion stays one).
            self.alter(kafka)
            log.info("SCRAM credentials of %d users taken from Kafka's metadata log", len({u for u, _ in kafka}))

    # -- reads (lock-free) ----------------------------------------------------------------------

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a mechanism ("SCRAM-SHA-256"), or None."""
        return self._credentials.get((user, mechanism))

    def users(self) -> dict[str, dict[str, int]]:
        """User → {mechanism: iterations}, users sorted."""
        found: dict[str, dict[str, int]] = {}
        for (user, mechanism), credential in sorted(self._credentials.items()):
            found.setdefault(user, {})[mechanism] = credential.iterations
        return found

    def credentials(self) -> dict[Key, ScramCredential]:
        """Every credential, by (user, mechanism): a copy."""
        return dict(self._credentials)

    @property
    def generation(self) -> int:
        """The generation of the file last read or written (0: none yet)."""
        return self._generation

    def __len__(self) -> int:
        return len(self._credentials)

    # -- writes (fsynced before they return) -----------------------------------------------------

    def upsert(self, user: str, mechanism: str, iterations: int, salt: bytes, salted_password: bytes) -> None:
        """Store a credential from a salted password (AlterUserScramCredentials' upsertion), as Kafka's
        controller derives the stored and server keys from it."""
        check_credential(user, mechanism, iterations)
        credential = credential_from_salted_password(scram_mechanism(mechanism), salt, salted_password, iterations)
        self.alter({(user, mechanism): credential})

    def set_password(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        """Store a credential for a password with a fresh random salt (runs PBKDF2: milliseconds)."""
        check_credential(user, mechanism, iterations)
        self.alter({(user, mechanism): new_credential(scram_mechanism(mechanism), password, iterations)})

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove a credential; whether there was one (nothing is written if not)."""
        with self._lock:
            if (user, mechanism) not in self._credentials:
                return False
            self._write({k: v for k, v in self._credentials.items() if k != (user, mechanism)})
            return True

    def alter(self, changes: Mapping[Key, ScramCredential | None]) -> None:
        """Apply several changes at once (None removes): one generation, all or none (Kafka's atomic
        AlterUserScramCredentials). Credentials are taken as given: callers check them first."""
        with self._lock:
            updated = dict(self._credentials)
            for key, credential in changes.items():
                if credential is None:
                    updated.pop(key, None)
                else:
                    updated[key] = credential
            self._write(updated)

    def _write(self, credentials: dict[Key, ScramCredential]) -> None:
        before = self._credentials
        try:
            self._store(credentials)
        except BaseException:
            try:
                self._store(before)
            except (OSError, StorageError) as again:
                log.warning("%s not restored after a failed write (%s): a copy may hold the change",
                            SCRAM_CREDENTIALS_FILE, again)
            raise
        self._credentials = credentials

    def _store(self, credentials: dict[Key, ScramCredential]) -> None:
        # Raised before writing: a generation half-written by a failed write is never reused.
        self._generation += 1
        # make_dirs: `logstore users add` may run before the broker's first start made the log dirs.
        SCRAM_CREDENTIALS_COPIES.write(self.log_dirs, self._generation, _credentials_json(credentials), self._fs,
                                       make_dirs=True)
