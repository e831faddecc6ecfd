"""The `acls` file: the built-in authorizer's ACLs, which Kafka keeps in its metadata log.

One copy at the root of every log dir, each whole:

    {"version": 0, "generation": <n>, "acls": [{"resourceType": "TOPIC", "resourceName": "t",
      "patternType": "LITERAL", "principal": "User:alice", "host": "*", "operation": "READ",
      "permissionType": "ALLOW"}, ...]}

(the fields of Kafka's AccessControlEntryRecord, enum values by name). As
`topic-configs` (`logstore.generation_files`): each change replaces every
copy atomically with the generation raised by one, and on open the copy with
the highest generation wins, so a crash between two log dirs leaves the older
set or the newer one, never a mix. A copy that breaks the format is a
`CorruptCheckpointError` naming the file: the broker does not start on ACLs
it cannot read, since starting without them could allow what they deny.

A directory Kafka wrote holds its ACLs as AccessControlEntryRecords in
`__cluster_metadata-0` (`kafka_acls` turns them into bindings): while no
`acls` copy exists, they are the first generation the authorizer writes
(`StandardAuthorizer.take_kafka_acls`), once; from then on the file alone
says which ACLs exist, so an ACL deleted here stays deleted.

Not thread-safe: the authorizer serialises its changes.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from logstore.broker.acls import AclBinding, enum_of, validate_binding
from logstore.broker.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from logstore.checkpoints import CorruptCheckpointError, topic_id_to_string
from logstore.cluster_metadata import MetadataAcl
from logstore.filesystem import OS, FileSystem
from logstore.generation_files import GenerationFile

__all__ = ["ACLS_FILE", "AclStore", "encode_acls", "kafka_acls", "read_acls"]

log = logging.getLogger(__name__)

ACLS_FILE = "acls"
ACLS_COPIES = GenerationFile(ACLS_FILE, "acls", body_is_list=True)


def encode_acls(generation: int, bindings: Iterable[AclBinding]) -> bytes:
    """The file's bytes for a generation of ACLs."""
    return ACLS_COPIES.encode(generation, [b.to_json() for b in bindings])


def read_acls(path: str, fs: FileSystem = OS) -> tuple[int, list[AclBinding]]:
    """(generation, ACLs) of one `acls` file; FileNotFoundError if there is none, CorruptCheckpointError
    if it breaks the format."""
    generation, items = ACLS_COPIES.read(path, fs)
    bindings: list[AclBinding] = []
    for index, item in enumerate(items):
        try:
            bindings.append(AclBinding.from_json(item))
        except ValueError as exc:
            raise CorruptCheckpointError(path, 1, f"ACL {index}: {exc}") from None
    return generation, bindings


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
        found = ACLS_COPIES.read_newest(self.log_dirs, lambda path: read_acls(path, self.fs))
        if found is None:
            return []
        self.found = True
        self.generation = max(self.generation, found[0])
        return found[1]

    def save(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every copy with `bindings`, durably, before returning (a StorageIOError if a write fails)."""
        # Raised before writing: a generation half-written by a failed write is never reused.
        self.generation += 1
        ACLS_COPIES.write(self.log_dirs, self.generation, [b.to_json() for b in bindings], self.fs, make_dirs=True)
        self.found = True
