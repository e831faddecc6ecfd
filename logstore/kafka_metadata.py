"""What a directory Kafka wrote knows about its topics beyond the partition directories.

A KRaft broker keeps topic ids, partition counts, topic configs and
producer-id blocks in `__cluster_metadata-0` (read by
`logstore.cluster_metadata`); a ZooKeeper-era broker keeps them in ZooKeeper,
so its directory carries only the partitions and `partition.metadata`.

The metadata log is never written here and is kept byte for byte, so the
directory can go back to Kafka. Its topic configs are copied into
`topic-configs` once per state of the metadata log: the applied state (end
offset and snapshot) is recorded in `kafka-metadata-applied`, so overrides
changed or deleted here later are not brought back at the next open, while a
metadata log that Kafka has written since is applied again. A topic whose
`partition.metadata` names another topic id than the metadata log is a
topic made here after Kafka's was deleted: the metadata says nothing about it.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from logstore.checkpoints import PARTITION_METADATA, read_partition_metadata, write_atomically
from logstore.cluster_metadata import ClusterMetadata, MetadataTopic, read_cluster_metadata
from logstore.config import REMOVED_TOPIC_CONFIGS, LogConfig
from logstore.errors import CorruptRecordError, InvalidConfigError, StorageError
from logstore.filesystem import OS, FileSystem

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
METADATA_DIR = f"{METADATA_TOPIC}-0"
APPLIED_FILE = "kafka-metadata-applied"


@dataclass(frozen=True)
class KafkaMetadata:
    """The metadata log of a store's directory, limited to the topics whose ids match the partitions on disk."""

    cluster: ClusterMetadata
    topics: dict[str, MetadataTopic]

    @property
    def state(self) -> dict[str, Any]:
        """What identifies this state of the metadata log (its end offset and the snapshot it started from)."""
        return {"endOffset": self.cluster.end_offset, "snapshot": self.cluster.snapshot}


def read_kafka_metadata(log_dirs: list[str], topic_dirs: Mapping[str, str],
                        fs: FileSystem = OS) -> KafkaMetadata | None:
    """The metadata log of the first log dir holding one, or None; `topic_dirs` maps a topic to one of its
    partition directories, whose `partition.metadata` must agree with the metadata log's topic id."""
    for log_dir in log_dirs:
        path = os.path.join(log_dir, METADATA_DIR)
        if not fs.isdir(path):
            continue
        try:
            # Kafka's own files, only ever read here: mapped directly, not through `fs`.
            cluster = read_cluster_metadata(path)
        except CorruptRecordError as exc:
            # Advice, not data: the partitions open without it, as they would from a ZooKeeper-era broker.
            log.warning("%s cannot be read (%s): Kafka's topic configs in it are not used", path, exc)
            return None
        if cluster is None:
            return None
        topics = {}
        for name, topic in cluster.topics.items():
            partition_dir = topic_dirs.get(name)
            if partition_dir is None:
                continue
            on_disk = _topic_id(partition_dir, fs)
            if on_disk is None or on_disk == topic.topic_id:
                topics[name] = topic
            else:
                log.info("topic %s was made again after Kafka's: %s does not apply to it", name, METADATA_DIR)
        return KafkaMetadata(cluster, topics)
    return None


def _topic_id(partition_dir: str, fs: FileSystem) -> bytes | None:
    try:
        return read_partition_metadata(os.path.join(partition_dir, PARTITION_METADATA), fs)
    except FileNotFoundError:
        return None


def applied_state(log_dir: str, fs: FileSystem = OS) -> dict[str, Any] | None:
    """The metadata-log state whose configs were last copied into `topic-configs`, or None."""
    path = os.path.join(log_dir, APPLIED_FILE)
    try:
        state: dict[str, Any] = json.loads(fs.read_file(path).decode("utf-8"))
        return state
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise StorageError(f"{path}: {exc}") from None


def record_applied(log_dirs: list[str], metadata: KafkaMetadata, fs: FileSystem = OS) -> None:
    """Remember that this state of the metadata log has been applied."""
    data = json.dumps(metadata.state, sort_keys=True).encode("utf-8")
    for log_dir in log_dirs:
        write_atomically(os.path.join(log_dir, APPLIED_FILE), data, fs=fs)


def topic_overrides(metadata: KafkaMetadata, base: LogConfig) -> dict[str, dict[str, Any]]:
    """The configs Kafka set on each topic, those this store runs with (Kafka's names and values).

    Kafka's topic configs that mean nothing on one node here (replication,
    tiered storage, compression on write, ...) are left out, and logged once.
    """
    overrides: dict[str, dict[str, Any]] = {}
    skipped: set[str] = set()
    for name, topic in metadata.topics.items():
        kept = {}
        for key, value in topic.configs.items():
            if key in REMOVED_TOPIC_CONFIGS:
                # Kafka 4 drops them too; kept, a topic with only these would store an empty entry.
                skipped.add(key)
                continue
            try:
                base.with_overrides({key: value})
            except InvalidConfigError:
                skipped.add(key)
                continue
            kept[key] = value
        if kept:
            overrides[name] = kept
    if skipped:
        log.info("topic configs from %s not used here: %s", METADATA_DIR, ", ".join(sorted(skipped)))
    return overrides
