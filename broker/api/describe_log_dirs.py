"""DescribeLogDirs (35), v1-5: each log dir with its partitions' sizes and its disk's space, as Kafka's
KafkaApis.handleDescribeLogDirsRequest and ReplicaManager.describeLogDirs answer.

- `topics` null asks for every partition; otherwise the partitions listed
  (one not on this broker is left out, as Kafka leaves it out).
- One result per log dir (its absolute path): each topic that has a
  partition asked in that dir, with each such partition's size in bytes
  (every segment's `.log`), an offset lag of 0 (the only replica is the
  leader: there is no future replica catching up) and `is_future_key`
  false; the dir's file system's total and usable bytes (v4+).
- A log dir an I/O error took offline answers KAFKA_STORAGE_ERROR with no
  topics and no space figures.

Authorization: DESCRIBE on the CLUSTER, else the whole answer is
CLUSTER_AUTHORIZATION_FAILED with no results.

Sizes are summed over every partition asked, so a large answer is built in the coordinator pool.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.manager import LogManager

KEY = 35
# Partitions whose sizes are summed on the event loop; an answer with more is built in the pool.
INLINE_PARTITIONS = 200


def _space(log_dir: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `log_dir`, as Java's FileStore reports them."""
    stat = os.statvfs(log_dir)
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def _results(store: LogManager, version: int, asked: set[tuple[str, int]] | None) -> tuple[KioMessage, ...]:
    """One result per log dir, its topics and partitions among `asked` (None: every partition)."""
    result_cls = response_type(KEY, version, "DescribeLogDirsResult")
    topic_cls = response_type(KEY, version, "DescribeLogDirsTopic")
    partition_cls = response_type(KEY, version, "DescribeLogDirsPartition")
    by_dir: dict[str, dict[str, list[KioMessage]]] = {d: {} for d in store.log_dirs}
    for (topic, index), opened in sorted(store.logs().items()):
        if asked is not None and (topic, index) not in asked:
            continue
        log_dir = os.path.dirname(opened.directory)
        if log_dir in by_dir:
            by_dir[log_dir].setdefault(topic, []).append(build(
                partition_cls, partition_index=index, partition_size=opened.size, offset_lag=0, is_future_key=False))
    offline = set(store.offline_dirs)
    results = []
    for log_dir, topics in by_dir.items():
        if log_dir in offline:
            results.append(build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=log_dir, topics=(),
                                 total_bytes=-1, usable_bytes=-1))
            continue
        total, usable = _space(log_dir)
        results.append(build(result_cls, error_code=ErrorCode.none, log_dir=log_dir, total_bytes=total,
                             usable_bytes=usable, topics=tuple(build(topic_cls, name=name, partitions=tuple(rows))
                                                               for name, rows in topics.items())))
    return tuple(results)


def _asked(topics: Iterable[KioMessage] | None) -> set[tuple[str, int]] | None:
    if topics is None:
        return None
    return {(topic.topic, int(index)) for topic in topics for index in topic.partitions}


@api(KEY, 1, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe every log dir and the partitions asked in it."""
    version = request.version
    refused = denied(request, AclOperation.DESCRIBE, ResourceType.CLUSTER)
    if refused != ErrorCode.none:
        return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=refused, results=())
    store = request.broker.store
    asked = _asked(body.topics)
    if (len(asked) if asked is not None else sum(store.topics().values())) <= INLINE_PARTITIONS:
        results = _results(store, version, asked)
    else:
        # Building raises no Kafka error: an offline dir's error is in its result.
        results = (await coordinate(request, _results, store, version, asked)).result
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=ErrorCode.none, results=results)
