"""TxnOffsetCommit (28), v0-5: a transactional producer commits a group's offsets in its transaction.

Behavior:
- The offsets are written to the group's `__consumer_offsets` partition as
  part of the transaction, which must hold that partition, and become the
  group's offsets only when the COMMIT marker lands there.
- v0-4 need AddOffsetsToTxn first (else INVALID_TXN_STATE). v5 is transaction
  version 2 (KIP-890 part 2): the partition joins the transaction here, as
  Kafka's coordinator adds it when the commit arrives, opening the
  transaction if none is; a failure to add it (a fenced epoch, a transaction
  being ended) is answered on every partition.

Version notes: v3 (KIP-447) names the consumer's member and generation,
checked as OffsetCommit checks them; v0-2 commit for any group.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v3. v4 only adds
TRANSACTION_ABORTABLE to what may be answered.

Authorization (Kafka's KafkaApis): WRITE on the TRANSACTIONAL_ID, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition; READ on the GROUP,
else GROUP_AUTHORIZATION_FAILED on every partition; READ on each TOPIC, else
TOPIC_AUTHORIZATION_FAILED on its partitions.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.group_calls import known_partitions, partition_codes
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied, error_code
from logstore.broker.coordinator.txn_metadata import TV_2
from logstore.broker.protocol import ZERO_MS

KEY = 28
# The first version of transaction version 2 (Kafka's TxnOffsetCommitRequest: version > 4).
IMPLICIT_ADD_FROM = 5


@api(KEY, 0, 5)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Stage the offsets in the producer's transaction."""
    groups = request.broker.groups
    refused = (denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
               or denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id))
    offsets, codes = known_partitions(request, body.topics, lambda p: (
        p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata), error=refused)
    if offsets and request.version >= IMPLICIT_ADD_FROM:
        transactions = request.broker.transactions
        added = await coordinate(request, transactions.add_offsets, body.transactional_id, body.producer_id,
                                 body.producer_epoch, body.group_id, TV_2)
        if not added.ok:
            codes.update(dict.fromkeys(offsets, added.error))
            offsets = {}
    if offsets:
        outcome = await coordinate(request, groups.commit_txn_offsets, body.transactional_id, body.group_id,
                                   body.producer_id, body.producer_epoch, getattr(body, "member_id", ""),
                                   getattr(body, "group_instance_id", None), getattr(body, "generation_id", -1),
                                   offsets)
        codes.update({tp: error_code(request, error) for tp, error in outcome.result.items()} if outcome.ok
                     else dict.fromkeys(offsets, outcome.error))
    topics = partition_codes(KEY, request.version, "TxnOffsetCommitResponse", body.topics, codes)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, topics=topics)
