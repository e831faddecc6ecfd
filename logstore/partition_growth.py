"""New partition directories, for a topic created or grown, and the topic ids a crash kept them from.

The directories are made in partition order; then each one's
`partition.metadata` and `leader-epoch-checkpoint` (epoch 0 from offset 0,
as Kafka's leader writes it on taking the partition) are written and made
durable, side by side in threads (each file needs two fsyncs, and the file
system commits concurrent fsyncs together: a thousand partitions take well
under a second instead of seconds), then each log opened (an empty segment, whose index files wait for
its first append, and an empty producer state), and one fsync of each log dir
makes their names durable together. A failure part-way removes every
directory made (`remove_partitions`), so nothing half-made stays visible
while the store runs. A crash part-way (a SIGKILL, a power cut) leaves a
prefix of the new partitions: the store loads them as a topic that grew less
far, and the client that got no answer asks again. Some of them may lack
their `partition.metadata`; the next open writes it with the topic's id
(`write_missing_metadata`), as Kafka writes a missing one with the id its
metadata knows.

`LogManager` calls these under its lock and publishes the opened logs in one step.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from logstore.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from logstore.epoch_cache import INITIAL_LEADER_EPOCH
from logstore.errors import StorageError, StorageIOError
from logstore.filenames import partition_dir_name
from logstore.filesystem import FileSystem

if TYPE_CHECKING:
    from logstore.log import Log

log = logging.getLogger(__name__)

__all__ = ["make_partitions", "remove_partitions", "write_missing_metadata"]

PartitionKey = tuple[str, int]
SYNC_THREADS = 32
"""Partitions made durable at once: enough for the file system to commit their fsyncs in a few groups."""


def make_partitions(fs: FileSystem, name: str, partitions: Iterable[int], topic_id: bytes,
                    pick_dir: Callable[[Mapping[PartitionKey, str]], str], open_log: Callable[[str], Log],
                    fail_dir: Callable[[str, str, OSError], object]) -> dict[PartitionKey, Log]:
    """Make and open the partitions `partitions` of topic `name`; the opened logs by (topic, partition).

    `pick_dir(placed)` names the log dir of the next partition, given the directories placed so far;
    `open_log(path)` opens one; `fail_dir(log_dir, what, error)` takes a log dir offline. On any failure
    every directory made is removed (an OSError is raised as a StorageIOError that says so).
    """
    placed: dict[PartitionKey, str] = {}
    opened: dict[PartitionKey, Log] = {}
    try:
        for partition in partitions:
            path = os.path.join(pick_dir(placed), partition_dir_name(name, partition))
            fs.makedirs(path)
            placed[(name, partition)] = path
        _each(lambda path: _write_new_partition_files(fs, path, topic_id), list(placed.values()))
        for key, path in placed.items():
            opened[key] = open_log(path)
        # The new names are durable before the topic is: a power cut cannot take them back.
        for log_dir in sorted({os.path.dirname(path) for path in placed.values()}):
            fs.fsync_dir(log_dir)
    except BaseException as exc:
        remove_partitions(fs, list(opened.values()), list(placed.values()), fail_dir)
        if isinstance(exc, OSError):
            raise StorageIOError(f"partitions of topic {name!r} not created ({len(placed)} made, then: {exc}); "
                                 "what was made is removed", exc, intact=True) from exc
        raise
    return opened


def _write_new_partition_files(fs: FileSystem, path: str, topic_id: bytes) -> None:
    # Kafka's new leader records where its epoch starts at once (Partition.makeLeader): the partition's
    # first append, on the broker's event loop, then finds it there and writes no checkpoint (two fsyncs).
    write_leader_epoch_checkpoint(os.path.join(path, LEADER_EPOCH_CHECKPOINT), [(INITIAL_LEADER_EPOCH, 0)], fs)
    write_partition_metadata(os.path.join(path, PARTITION_METADATA), topic_id, fs)


def _each(work: Callable[[str], object], paths: list[str]) -> None:
    """`work` on every path, in up to SYNC_THREADS threads; the first error raised once all have ended."""
    if len(paths) <= 1:
        for path in paths:
            work(path)
        return
    with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(paths)), thread_name_prefix="logstore-create") as pool:
        for _ in pool.map(work, paths):
            pass


def write_missing_metadata(fs: FileSystem, logs: Mapping[PartitionKey, Log], topic_ids: Mapping[str, bytes]) -> int:
    """Give each partition of a topic in `topic_ids` that has no `partition.metadata` the topic's id (a
    creation a crash cut short); returns how many were written. One that cannot be written now (a full
    disk) is logged and left for the next open: the topic's id is known from its other partitions."""
    written = 0
    for (topic, _), opened in logs.items():
        topic_id = topic_ids.get(topic)
        path = os.path.join(opened.directory, PARTITION_METADATA)
        if topic_id is None or fs.exists(path):
            continue
        try:
            write_partition_metadata(path, topic_id, fs)
        except OSError as exc:
            log.warning("%s not written (%s); written at a later open", path, exc)
            continue
        written += 1
    return written


def remove_partitions(fs: FileSystem, opened: list[Log], made: list[str],
                      fail_dir: Callable[[str, str, OSError], object]) -> None:
    """Undo a failed `make_partitions`: close the logs (freeing their descriptors first), remove every
    directory made, and make that durable; a directory that stays takes its log dir offline."""
    for partial in opened:
        try:
            partial.delete()
        except (OSError, StorageError) as exc:
            log.warning("%s: %s", partial.directory, exc)
    for path in made:
        fs.rmtree(path)
    for log_dir in sorted({os.path.dirname(p) for p in made}):
        left = [p for p in made if os.path.dirname(p) == log_dir and fs.exists(p)]
        try:
            fs.fsync_dir(log_dir)
            if left:
                raise OSError(f"cannot remove {', '.join(left)}")
        except OSError as exc:
            # Left there, it would come back after a restart as partitions no one created.
            fail_dir(log_dir, "removal of a failed partition creation", exc)
