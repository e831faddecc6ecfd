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

Authorization (Kafka's KafkaApis): READ on the GROUP, else
GROUP_AUTHORIZATION_FAILED on every partition; READ on each TOPIC, else
TOPIC_AUTHORIZATION_FAILED on its partitions.
"""
from __future__ import annotations

import time

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.group_calls import known_partitions, millis, partition_codes
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate_soon, denied, error_code
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.protocol import ZERO_MS
from logstore.errors import CoordinatorNotAvailableError

KEY = 8
DEFAULT_RETENTION = -1
# Kafka's offsets.commit.timeout.ms default: how long a commit waits to be durable.
COMMIT_TIMEOUT_S = 5.0


@api(KEY, 2, 9)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Commit every partition asked that exists."""
    groups = request.broker.groups
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    offsets, codes = known_partitions(request, body.topics, lambda p: (
        p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata), error=refused)
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
            codes.update({tp: error_code(request, error) for tp, error in errors.items()})
            failed = [e for e in await request.broker.until_durable(appended, COMMIT_TIMEOUT_S) if e is not None]
            if failed:
                # Kafka answers a commit that timed out or failed to append COORDINATOR_NOT_AVAILABLE.
                code = error_code(request, CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {failed[0]}"))
                codes.update({tp: code for tp, error in errors.items() if error is None})
    topics = partition_codes(KEY, request.version, "OffsetCommitResponse", body.topics, codes)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, topics=topics)
