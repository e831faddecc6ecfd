"""Transaction requests at the versions of transaction version 2 (KIP-890 part 2) and KIP-939, sent with kio.

No client installed here speaks them (librdkafka 2.16, kafka-python and aiokafka stay on version 0), so the
tests send each request themselves, as Kafka's Java producer would with `transaction.version` 2 finalized:
InitProducerId v5/v6, Produce v12 (no AddPartitionsToTxn), TxnOffsetCommit v5 (no AddOffsetsToTxn) and
EndTxn v5, whose answer carries the producer id and epoch to go on with.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass

from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest as InitV5
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest as InitV6
from kio.schema.produce.v12.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.txn_offset_commit.v5.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.static.primitive import i16, i32Timedelta

from logstore.formats import DEFAULT_FORMAT

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))
ACKS_ALL = i16(-1)


@dataclass
class Producer:
    """One producer instance of a transactional id, as its client keeps it: id, epoch, the next sequence
    of each partition it wrote in this epoch."""

    transactional_id: str
    producer_id: int
    epoch: int
    sequences: dict[tuple[str, int], int]
    answer: object = None   # the InitProducerId response that made it

    def moved_to(self, producer_id: int, epoch: int) -> None:
        """A new producer id or epoch (EndTxn v5's answer): sequences start again at 0."""
        self.producer_id, self.epoch, self.sequences = producer_id, epoch, {}


def init(wire, transactional_id: str, timeout: i32Timedelta = TIMEOUT, **v6) -> tuple[int, Producer]:
    """InitProducerId (v5, or v6 when KIP-939's fields are given): (error code, the producer)."""
    if v6:
        request = InitV6(transactional_id=transactional_id, transaction_timeout=timeout, **v6)
    else:
        request = InitV5(transactional_id=transactional_id, transaction_timeout=timeout)
    answer = wire.request(request)
    return answer.error_code, Producer(transactional_id, answer.producer_id, answer.producer_epoch, {}, answer)


def produce(wire, p: Producer, topic: str, partition: int, *values: bytes) -> int:
    """Produce v12 of one transactional batch (no AddPartitionsToTxn before it); its partition's error code."""
    sequence = p.sequences.get((topic, partition), 0)
    batch = DEFAULT_FORMAT.encode_batch([None] * len(values), list(values), producer_id=p.producer_id,
                                        producer_epoch=p.epoch, base_sequence=sequence, transactional=True)
    answer = wire.request(ProduceRequest(transactional_id=p.transactional_id, acks=ACKS_ALL, timeout=TIMEOUT,
                                         topic_data=(TopicProduceData(name=topic, partition_data=(
                                             PartitionProduceData(index=partition, records=batch),)),)))
    (row,) = answer.responses[0].partition_responses
    if row.error_code == 0:
        p.sequences[(topic, partition)] = sequence + len(values)
    return row.error_code


def commit_offsets(wire, p: Producer, group: str, topic: str, offsets: dict[int, int]) -> list[int]:
    """TxnOffsetCommit v5 (no AddOffsetsToTxn before it); each partition's error code."""
    answer = wire.request(TxnOffsetCommitRequest(
        transactional_id=p.transactional_id, group_id=group, producer_id=p.producer_id, producer_epoch=p.epoch,
        topics=(TxnOffsetCommitRequestTopic(name=topic, partitions=tuple(
            TxnOffsetCommitRequestPartition(partition_index=part, committed_offset=offset, committed_metadata=None)
            for part, offset in offsets.items())),)))
    return [row.error_code for t in answer.topics for row in t.partitions]


def end(wire, p: Producer, commit: bool, epoch: int | None = None, producer_id: int | None = None):
    """EndTxn v5 as `p` (or with another id/epoch); the answer. On success `p` moves to the id and epoch
    answered, as Kafka's producer does."""
    answer = wire.request(EndTxnRequest(transactional_id=p.transactional_id,
                                        producer_id=p.producer_id if producer_id is None else producer_id,
                                        producer_epoch=i16(p.epoch if epoch is None else epoch), committed=commit))
    if answer.error_code == 0 and epoch is None and producer_id is None:
        p.moved_to(answer.producer_id, answer.producer_epoch)
    return answer
