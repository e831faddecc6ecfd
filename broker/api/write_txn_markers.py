"""WriteTxnMarkers (27), v1-2: COMMIT or ABORT markers written into partitions, as a partition leader does
when the transaction coordinator asks; here what kafka-transactions' `abort` sends (Admin.abortTransaction).

Behavior, as Kafka's KafkaApis.handleWriteTxnMarkersRequest:
- Each marker ends one producer's transaction (`producer_id`, `producer_epoch`,
  `coordinator_epoch`; `transaction_result` true: COMMIT) in each partition
  listed, one control batch per partition, appended as the coordinator's
  markers are (the log's producer state checks them: an epoch older than the
  producer's is INVALID_PRODUCER_EPOCH, a coordinator epoch older than the
  partition's last marker is TRANSACTION_COORDINATOR_FENCED), and answered
  once durable. A partition with no open transaction of the producer still
  gets the marker, as in Kafka.
- A marker in a `__consumer_offsets` partition completes the producer's
  transactional offset commits there (applied on COMMIT, dropped on ABORT),
  as the coordinator's own markers do.
- An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION; parked
  Fetches of the partitions written are woken.
- The transaction coordinator's state is not touched: this is for
  transactions it does not know of (hanging ones), as in Kafka.

Authorization (Kafka's KafkaApis): CLUSTER_ACTION on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED on every partition.

Version notes: kio has no v0 schema (Kafka 4 serves 1+); v1 is flexible; v2
adds the marker's transaction version: a version 2 marker carries the epoch
its coordinator bumped, so the log refuses one whose epoch is not above the
producer's there (INVALID_PRODUCER_EPOCH), as Kafka's partitions do.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, attempt, denied
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.protocol import ErrorCode

if TYPE_CHECKING:
    from logstore.broker.context import BrokerContext

KEY = 27

Answers = list[tuple[str, list[tuple[int, ErrorCode]]]]  # by topic, in the request's order


def _write(broker: BrokerContext, topic: str, index: int, marker: KioMessage) -> None:
    """One marker into one partition, durable; a `__consumer_offsets` partition's offsets completed."""
    log = broker.store.log(topic, index)
    result = log.write_txn_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                  commit=marker.transaction_result,
                                  transaction_version=getattr(marker, "transaction_version", 0))
    log.durable(result.last_offset + 1).result()
    if topic == OFFSETS_TOPIC:
        broker.groups.complete_txn_offsets(index, marker.producer_id, marker.transaction_result)


def _write_marker(request: Request, marker: KioMessage) -> Answers:
    """Every partition of one marker, in the request's order (runs in the coordinator pool: it blocks on
    the fsync)."""
    answers: Answers = []
    for topic in marker.topics:
        rows = [(int(index), attempt(request, _write, request.broker, topic.name, int(index), marker).error)
                for index in dict.fromkeys(topic.partition_indexes)]
        answers.append((topic.name, rows))
    return answers


@api(KEY, 1, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Write each marker into its partitions."""
    version = request.version
    result_cls = response_type(KEY, version, "WritableTxnMarkerResult")
    topic_cls = response_type(KEY, version, "WritableTxnMarkerTopicResult")
    partition_cls = response_type(KEY, version, "WritableTxnMarkerPartitionResult")
    refused = denied(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    markers = []
    for marker in body.markers:
        if refused:
            answers: Answers = [(t.name, [(int(i), refused) for i in dict.fromkeys(t.partition_indexes)])
                                for t in marker.topics]
        else:
            answers = await request.broker.coordinate(_write_marker, request, marker)
            written = [(topic, index) for topic, rows in answers for index, error in rows if not error]
            if written:
                request.broker.notify_appended(written)
        markers.append(build(result_cls, producer_id=marker.producer_id, topics=tuple(
            build(topic_cls, name=name, partitions=tuple(
                build(partition_cls, partition_index=index, error_code=error) for index, error in rows))
            for name, rows in answers)))
    return build(response_type(KEY, version), markers=tuple(markers))
