"""ShareFetch (78) and ShareAcknowledge (79) on the wire: share sessions, acquisition, Kafka's errors.

Raw kio requests against a real broker process: a session's epochs,
records acquired with their delivery counts, acknowledgements of records a
member does not hold, a final epoch releasing what the member holds, unknown
topic ids, and READ on the topic (which the ACL matrix cannot ask for: these
APIs name topics by id).
"""
from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.share_acknowledge.v1 import request as ack_v1
from kio.schema.share_acknowledge.v2 import request as ack_v2
from kio.schema.share_fetch.v1 import request as fetch_v1
from kio.static.primitive import i32Timedelta

from broker_process import BrokerProcess, finish_brokers, free_port
from raw_wire import kio_round_trip
from share_helpers import create_topic, produce_values, set_group_configs

AUTHORIZING_BROKER = Path(__file__).parent.parent / "broker" / "authorizing_broker.py"
_ids = itertools.count(100)


def topic_id(broker, topic: str) -> uuid.UUID:
    """The topic's id, from Metadata v12."""
    answer = kio_round_trip(broker, 3, 12, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), next(_ids))
    return answer.topics[0].topic_id


def share_fetch(broker, group: str, member: str, epoch: int, fetch: tuple[uuid.UUID, ...] = (),
                acks: dict[uuid.UUID, tuple[tuple[int, int, tuple[int, ...]], ...]] | None = None,
                max_records: int = 500):
    """One ShareFetch v1 of partition 0 of each topic in `fetch` (and of those acknowledged)."""
    acks = acks or {}
    topics = tuple(fetch_v1.FetchTopic(topic_id=tid, partitions=(fetch_v1.FetchPartition(
        partition_index=0, acknowledgement_batches=tuple(
            fetch_v1.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=types)
            for f, last, types in acks.get(tid, ()))),))
                   for tid in dict.fromkeys([*fetch, *acks]))
    return kio_round_trip(broker, 78, 1, fetch_v1.ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch,
        max_wait=i32Timedelta.parse(timedelta(milliseconds=500)), min_bytes=1, max_bytes=1 << 20,
        max_records=max_records, batch_size=max_records, topics=topics, forgotten_topics_data=()), next(_ids))


def share_acknowledge(broker, group: str, member: str, epoch: int, tid: uuid.UUID,
                      batches: tuple[tuple[int, int, tuple[int, ...]], ...]):
    """One ShareAcknowledge v1 of partition 0 of `tid`."""
    return kio_round_trip(broker, 79, 1, ack_v1.ShareAcknowledgeRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, topics=(ack_v1.AcknowledgeTopic(
            topic_id=tid, partitions=(ack_v1.AcknowledgePartition(partition_index=0, acknowledgement_batches=tuple(
                ack_v1.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=types)
                for f, last, types in batches)),)),)), next(_ids))


def acquired(answer) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of every AcquiredRecords of the answer."""
    return [(r.first_offset, r.last_offset, r.delivery_count)
            for t in answer.responses for p in t.partitions for r in p.acquired_records]


def test_sessions_acquisition_and_acknowledgements(broker, topic):
    """Epochs, acquisition, INVALID_RECORD_STATE, release and the final epoch, as Kafka answers them."""
    create_topic(broker.bootstrap, topic)
    group = f"{topic}-g"
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(10)))
    tid = topic_id(broker, topic)
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    assert share_fetch(broker, group, one, 1, (tid,)).error_code == ErrorCode.share_session_not_found
    first = share_fetch(broker, group, one, 0, (tid,), max_records=1)
    assert first.error_code == ErrorCode.none
    (got,) = acquired(first)
    assert got[0] == 0 and got[2] == 1
    held_last = got[1]
    assert share_fetch(broker, group, one, 3).error_code == ErrorCode.invalid_share_session_epoch
    # Another member may not acknowledge what the first holds; nothing changes for the first.
    share_fetch(broker, group, two, 0, (tid,), max_records=1)
    refused = share_acknowledge(broker, group, two, 1, tid, ((0, 0, (1,)),))
    assert refused.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
    # The first releases offset 0 and accepts the rest of what it holds; the same request acquires again
    # (acknowledgements first), and 0 comes back to it, counted twice.
    acks = ((0, 0, (2,)), (1, held_last, (1,))) if held_last else ((0, 0, (2,)),)
    answer = share_fetch(broker, group, one, 1, (), acks={tid: acks}, max_records=1)
    assert answer.responses[0].partitions[0].acknowledge_error_code == ErrorCode.none
    assert acquired(answer)[0][0] == 0 and acquired(answer)[0][2] == 2
    # The final epoch releases what the member still holds: the other member gets offset 0 next.
    closed = share_acknowledge(broker, group, one, -1, tid, ())
    assert closed.error_code == ErrorCode.none
    assert share_fetch(broker, group, one, 2).error_code == ErrorCode.share_session_not_found
    taken = acquired(share_fetch(broker, group, two, 2, max_records=1))
    assert taken and taken[0][0] == 0


def test_unknown_topic_ids_and_acknowledge_without_a_session(broker, topic):
    """An unknown topic id is UNKNOWN_TOPIC_ID; a ShareAcknowledge cannot open a session."""
    group, member = f"{topic}-g", str(uuid.uuid4())
    stranger = uuid.uuid4()
    answer = share_fetch(broker, group, member, 0, (stranger,))
    assert answer.error_code == ErrorCode.none
    assert answer.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    opening = share_acknowledge(broker, group, member, 0, stranger, ((0, 0, (1,)),))
    assert opening.error_code == ErrorCode.invalid_share_session_epoch


def test_share_acknowledge_v2_answers_the_lock_duration(broker, topic):
    """v2's response carries AcquisitionLockTimeoutMs: the group's lock duration, 0 with a request-level error."""
    create_topic(broker.bootstrap, topic)
    group, member = f"{topic}-g", str(uuid.uuid4())
    set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="20000")
    produce_values(broker.bootstrap, topic, [b"x"])
    tid = topic_id(broker, topic)
    assert acquired(share_fetch(broker, group, member, 0, (tid,)))[0][0] == 0

    def acknowledge_v2(epoch: int):
        return kio_round_trip(broker, 79, 2, ack_v2.ShareAcknowledgeRequest(
            group_id=group, member_id=member, share_session_epoch=epoch, is_renew_ack=False,
            topics=(ack_v2.AcknowledgeTopic(topic_id=tid, partitions=(ack_v2.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=(ack_v2.AcknowledgementBatch(
                    first_offset=0, last_offset=0, acknowledge_types=(1,)),)),)),)), next(_ids))

    refused = acknowledge_v2(7)
    assert (refused.error_code, refused.acquisition_lock_timeout) == (
        ErrorCode.invalid_share_session_epoch, timedelta(0))
    accepted = acknowledge_v2(1)
    assert accepted.error_code == ErrorCode.none
    assert accepted.responses[0].partitions[0].error_code == ErrorCode.none
    assert accepted.acquisition_lock_timeout == timedelta(milliseconds=20000)


def test_share_fetch_needs_read_on_the_topic(tmp_path):
    """READ on each TOPIC (Kafka's KafkaApis): a topic refused answers TOPIC_AUTHORIZATION_FAILED and is
    neither fetched nor acknowledged (READ on the GROUP is the ACL matrix's)."""
    data = tmp_path / "denying"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data,
                           launcher=(str(AUTHORIZING_BROKER), "READ:TOPIC:hidden", "--"))
    broker.start()
    try:
        for name in ("hidden", "open"):
            create_topic(broker.bootstrap, name)
            produce_values(broker.bootstrap, name, [b"x"])
        group, member = "readers", str(uuid.uuid4())
        set_group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
        hidden, visible = topic_id(broker, "hidden"), topic_id(broker, "open")
        answer = share_fetch(broker, group, member, 0, (hidden, visible))
        codes = {t.topic_id: (t.partitions[0].error_code, len(t.partitions[0].acquired_records))
                 for t in answer.responses}
        assert codes == {hidden: (ErrorCode.topic_authorization_failed, 0), visible: (ErrorCode.none, 1)}
        refused = share_acknowledge(broker, group, member, 1, hidden, ((0, 0, (1,)),))
        assert refused.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    finally:
        finish_brokers([broker])
