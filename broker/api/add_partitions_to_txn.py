"""AddPartitionsToTxn (24), v0-3: put partitions in the producer's transaction.

A request-level error (wrong producer id or epoch, CONCURRENT_TRANSACTIONS
while markers are being written) is repeated on every partition. If some
partitions do not exist, those get UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, and nothing is added. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2. v4+ (the broker-to-broker verification
form of KIP-890) is not advertised: this broker verifies in-process.
"""
from __future__ import annotations

from logstore.broker.api import api, build, coordinator_error, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError, UnknownTopicOrPartitionError

KEY = 24


@api(KEY, 0, 3)
async def handle(request, body):
    """Add every partition asked, or none."""
    broker = request.broker
    version = request.version
    asked = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    try:
        await broker.coordinate(broker.transactions.add_partitions, body.v3_and_below_transactional_id,
                                body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, asked)
    except UnknownTopicOrPartitionError as exc:
        unknown = set(getattr(exc, "partitions", asked))
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                  for tp in asked}
    except LogStoreError as exc:
        error = coordinator_error(exc, version, 2)
        errors = dict.fromkeys(asked, error)
    partition_cls = response_type(KEY, version, "AddPartitionsToTxnPartitionResult")
    topic_cls = response_type(KEY, version, "AddPartitionsToTxnTopicResult")
    topics = tuple(build(topic_cls, name=t.name, results_by_partition=tuple(
        build(partition_cls, partition_index=p, partition_error_code=errors.get((t.name, p), ErrorCode.none))
        for p in t.partitions)) for t in body.v3_and_below_topics)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, results_by_topic_v3_and_below=topics)
