"""The `acls` file: the built-in authorizer's ACLs, which Kafka keeps in its metadata log.

One copy at the root of every log dir, each whole:

    {"version": 0, "generation": <n>, "acls": [{"resourceType": "TOPIC", "resourceName": "t",
      "patternType": "LITERAL", "principal": "User:alice", "host": "*", "operation": "READ",
      "permissionType": "ALLOW"}, ...]}

(the fields of Kafka's AccessControlEntryRecord, enum values by name). As
`topic-configs` (`logstore.topics`): each change replaces every copy
atomically (tmp + fsync + rename + directory fsync) with the generation
raised by one, and on open the copy with the highest generation wins, so a
crash between two log dirs leaves the older set or the newer one, never a
mix. A copy that breaks the format is a `CorruptCheckpointError` naming the
file: the broker does not start on ACLs it cannot read, since starting
without them could allow what they deny.

A directory Kafka wrote holds its ACLs as AccessControlEntryRecords in
`__cluster_metadata-0` (`kafka_acls` turns them into bindings): while no
`acls` copy exists, they are the first generation the authorizer writes
(`StandardAuthorizer.take_kafka_acls`), once; from then on the file alone
says which ACLs exist, so an ACL deleted here stays deleted.

Not thread-safe: the authorizer serialises its changes.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence

from logstore.broker.acls import AclBinding, enum_of, validate_binding
from logstore.broker.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from logstore.checkpoints import CorruptCheckpointError, topic_id_to_string, write_atomically
from logstore.cluster_metadata import MetadataAcl
from logstore.filesystem import OS, FileSystem

__all__ = ["ACLS_FILE", "AclStore", "encode_acls", "kafka_acls", "read_acls"]

log = logging.getLogger(__name__)

ACLS_FILE = "acls"
ACLS_VERSION = 0


def encode_acls(generation: int, bindings: Iterable[AclBinding]) -> bytes:
    """The file's bytes for a generation of ACLs."""
    doc = {"version": ACLS_VERSION, "generation": generation, "acls": [b.to_json() for b in bindings]}
    return json.dumps(doc, indent=1).encode("utf-8")


def read_acls(path: str, fs: FileSystem = OS) -> tuple[int, list[AclBinding]]:
    """(generation, ACLs) of one `acls` file; FileNotFoundError if there is none, CorruptCheckpointError
    if it breaks the format."""
    data = fs.read_file(path)
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(path, data.count(b"\n", 0, exc.start) + 1, "not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise CorruptCheckpointError(path, exc.lineno, exc.msg) from None
    if not isinstance(doc, dict) or set(doc) != {"version", "generation", "acls"}:
        raise CorruptCheckpointError(path, 1, "expected an object of version, generation and acls")
    if type(doc["version"]) is not int or doc["version"] != ACLS_VERSION:
        raise CorruptCheckpointError(path, 1, f"expected version {ACLS_VERSION}, found {doc['version']!r}")
    if type(doc["generation"]) is not int or doc["generation"] < 0:
        raise CorruptCheckpointError(path, 1, f"bad generation {doc['generation']!r}")
    if not isinstance(doc["acls"], list):
        raise CorruptCheckpointError(path, 1, "acls is not a list")
    bindings: list[AclBinding] = []
    for index, item in enumerate(doc["acls"]):
        try:
            bindings.append(AclBinding.from_json(item))
        except ValueError as exc:
            raise CorruptCheckpointError(path, 1, f"ACL {index}: {exc}") from None
    return doc["generation"], bindings


def kafka_acls(records: Mapping[bytes, MetadataAcl]) -> list[AclBinding]:
    """The bindings of Kafka's AccessControlEntryRecords (by ACL id, as `ClusterMetadata.acls` holds them); one
    that Kafka's controller would have refused (a code this broker does not know) is left out and logged."""
    bindings: list[AclBinding] = []
    for acl_id, acl in records.items():
        binding = AclBinding(enum_of(ResourceType, acl.resource_type), acl.resource_name,
                             enum_of(PatternType, acl.pattern_type), acl.principal, acl.host,
                             enum_of(AclOperation, acl.operation), enum_of(AclPermissionType, acl.permission_type))
        error = validate_binding(binding)
        if error is None:
            bindings.append(binding)
        else:
            log.warning("ACL %s of Kafka's metadata log not used: %s (%s)", topic_id_to_string(acl_id),
                        error.message, acl)
    return bindings


class AclStore:
    """The `acls` copies of a broker's log dirs: the newest read at open, every copy replaced by `save`.

    `found` says whether a copy existed at `load` or has been written since: until then, Kafka's ACLs may
    seed the store.
    """

    def __init__(self, log_dirs: Sequence[str], fs: FileSystem = OS):
        self.log_dirs = list(log_dirs)
        self.fs = fs
        self.generation = 0
        self.found = False

    def load(self) -> list[AclBinding]:
        """The ACLs of the copy with the highest generation ([] when there is none)."""
        newest: list[AclBinding] = []
        best = -1
        for log_dir in self.log_dirs:
            try:
                generation, bindings = read_acls(os.path.join(log_dir, ACLS_FILE), self.fs)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if generation > best:
                best, newest = generation, bindings
        if best >= 0:
            self.found = True
            self.generation = max(self.generation, best)
        return newest

    def save(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every copy with `bindings`, durably, before returning (a StorageIOError if a write fails)."""
        # Raised before writing: a generation half-written by a failed write is never reused.
        self.generation += 1
        data = encode_acls(self.generation, bindings)
        for log_dir in self.log_dirs:
            self.fs.makedirs(log_dir, exist_ok=True)
            write_atomically(os.path.join(log_dir, ACLS_FILE), data, fs=self.fs)
        self.found = True
