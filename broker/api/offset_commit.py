"""OffsetCommit (8), v2-9: a group's consumed positions, durable in `__consumer_offsets` when answered.

A partition of an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION and
metadata over offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE; a
group-level refusal (unknown member, wrong generation, rebalancing) is
repeated on every partition, as Kafka answers. A commit with generation -1
to a group without members is accepted (consumers without group
management, admin tools). v2-4's retention time sets the offset's own
expiry, as Kafka did. v9 (KIP-848) carries a consumer group member's
epoch where a generation was: a member of such a group must commit with it
(STALE_MEMBER_EPOCH otherwise) and at v9 or above (UNSUPPORTED_VERSION).

Frames are read and answers written natively (`logstore.native.wire`), kio's
bytes: this is the request a consumer sends most, after Fetch.

Authorization (Kafka's KafkaApis): READ on the GROUP, else
GROUP_AUTHORIZATION_FAILED on every partition; READ on each TOPIC, else
TOPIC_AUTHORIZATION_FAILED on its partitions.
"""
from __future__ import annotations

import time

from logstore.broker.api import KioMessage, Request, api
from logstore.broker.api.group_calls import TopicPartition, millis
from logstore.broker.api.kit import DENIED, AclOperation, ResourceType, authorized, coordinate_soon, denied, error_code
from logstore.broker.coordinator.group_offsets import OffsetCommit
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.protocol import ErrorCode, PartitionRows, decode_native_offset_commit, native_encoder
from logstore.errors import CoordinatorNotAvailableError
from logstore.native.wire import encode_offset_commit

KEY = 8
DEFAULT_RETENTION = -1
# Kafka's offsets.commit.timeout.ms default: how long a commit waits to be durable.
COMMIT_TIMEOUT_S = 5.0

# Each (topic, partition) asked once, as Kafka's maps of the request keep them: topics and partitions in
# the order first asked, each with the entry asked last (kit.distinct_partitions' rule).
Asked = dict[str, dict[int, KioMessage]]


# Answers written natively: kio's bytes (tests/broker/test_wire_small_codecs.py).
@api(KEY, 2, 9, decode=decode_native_offset_commit, encode=native_encoder(encode_offset_commit))
async def handle(request: Request, body: KioMessage) -> PartitionRows:
    """Commit every partition asked that exists."""
    groups = request.broker.groups
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    asked, offsets, codes = _checked(request, body.topics, refused)
    retention = getattr(body, "retention_time", DEFAULT_RETENTION)
    retention_ms = millis(retention) if retention is not None else DEFAULT_RETENTION
    expire = int(time.time() * 1000) + retention_ms if retention_ms != DEFAULT_RETENTION else -1
    if offsets:
        # The decision and the append (a pwrite) on the loop unless another call holds the groups' lock; the
        # wait for the fsync here, holding no thread.
        outcome = await coordinate_soon(request, groups.lock, groups.commit_offsets_unsynced, body.group_id,
                                        body.member_id, getattr(body, "group_instance_id", None),
                                        body.generation_id_or_member_epoch, offsets, expire, request.version)
        if not outcome.ok:
            codes.update(dict.fromkeys(offsets, outcome.error))
        else:
            errors, appended = outcome.result
            for tp, error in errors.items():
                codes[tp] = ErrorCode.none if error is None else error_code(request, error)
            failed = [e for e in await request.broker.until_durable(appended, COMMIT_TIMEOUT_S) if e is not None]
            if failed:
                # Kafka answers a commit that timed out or failed to append COORDINATOR_NOT_AVAILABLE.
                code = error_code(request, CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {failed[0]}"))
                codes.update({tp: code for tp, error in errors.items() if error is None})
    return _answer(asked, codes)


def _checked(request: Request, topics: tuple[KioMessage, ...], refused: ErrorCode
             ) -> tuple[Asked, dict[TopicPartition, OffsetCommit], dict[TopicPartition, ErrorCode]]:
    """The partitions asked, those the coordinator commits (→ offset, leader epoch, metadata) and the codes
    of the others, as Kafka checks before the coordinator (group_calls.known_partitions' rules, in one pass
    over the request's few partitions): `refused` on all, TOPIC_AUTHORIZATION_FAILED for a topic the
    principal may not READ, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist."""
    asked: Asked = {}
    for topic in topics:
        rows = asked.setdefault(topic.name, {})
        for partition in topic.partitions:
            # Assigning an existing key keeps its place: a repeat moves nothing, its entry wins.
            rows[partition.partition_index] = partition
    allowed = authorized(request, AclOperation.READ, ResourceType.TOPIC, list(asked))
    count_of = request.broker.store.partition_count   # not topics(): a copy of every topic's count
    offsets: dict[TopicPartition, OffsetCommit] = {}
    codes: dict[TopicPartition, ErrorCode] = {}
    for name, rows in asked.items():
        code = refused or (ErrorCode.none if name in allowed else DENIED[ResourceType.TOPIC])
        count = count_of(name)
        for index, partition in rows.items():
            if code:
                codes[(name, index)] = code
            elif not 0 <= index < count:
                codes[(name, index)] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[(name, index)] = (partition.committed_offset,
                                          getattr(partition, "committed_leader_epoch", -1),
                                          partition.committed_metadata)
    return asked, offsets, codes


def _answer(asked: Asked, codes: dict[TopicPartition, ErrorCode]) -> PartitionRows:
    """The answer's topics → (partition, error code) rows, in the request's order."""
    none = ErrorCode.none
    return PartitionRows(0, [(name, [(index, codes.get((name, index), none)) for index in rows])
                             for name, rows in asked.items()])
