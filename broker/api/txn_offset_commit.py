"""TxnOffsetCommit (28), v0-3: a transactional producer commits a group's offsets in its transaction.

The offsets are written to the group's `__consumer_offsets` partition as
part of the transaction, which must hold that partition (AddOffsetsToTxn
first, else INVALID_TXN_STATE), and become the group's offsets only when
the COMMIT marker lands there. v3 (KIP-447) names the consumer's member
and generation, checked as OffsetCommit checks them; v0-2 commit for any
group.
"""
from __future__ import annotations

from logstore.broker.api import api, build, coordinator_error, response_type
from logstore.broker.api.group_calls import code_of, known_partitions, partition_codes
from logstore.broker.protocol import ZERO_MS
from logstore.errors import LogStoreError

KEY = 28


@api(KEY, 0, 3)
async def handle(request, body):
    """Stage the offsets in the producer's transaction."""
    groups = request.broker.groups
    offsets, codes = known_partitions(request, body.topics, lambda p: (
        p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    if offsets:
        try:
            errors = await request.broker.coordinate(
                groups.commit_txn_offsets, body.transactional_id, body.group_id, body.producer_id,
                body.producer_epoch, getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
                getattr(body, "generation_id", -1), offsets)
            codes.update({tp: code_of(error) for tp, error in errors.items()})
        except LogStoreError as exc:
            codes.update(dict.fromkeys(offsets, coordinator_error(exc, request.version, 3)))
    topics = partition_codes(KEY, request.version, "TxnOffsetCommitResponse", body.topics, codes)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, topics=topics)
