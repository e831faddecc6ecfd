"""`ShareCoordinator.open_fetch` over a real store: a ShareFetch's acknowledgements and its first acquisition
reach `__share_group_state` as one write per share-partition, and every acknowledgement is durable when the
call returns, also on partitions the acquisition did not visit."""
from __future__ import annotations

import time

import pytest

from logstore.broker.coordinator.internal_topics import SHARE_STATE_TOPIC, InternalTopics, ShareStateTopicConfig
from logstore.broker.coordinator.txn_config import TxnConfig
from logstore.broker.share.coordinator import PartitionAck, ShareCoordinator
from logstore.broker.share.manager import SharePartitionManager
from logstore.broker.share.sessions import ShareSessions
from logstore.broker.share.state_store import ShareStateStore
from logstore.broker.share.types import AckType, DeliveryState
from logstore.manager import LogManager

TS = int(time.time() * 1000)
GROUP, MEMBER, TOPIC = "workers", "m1", "jobs"
SETTINGS = {"share.record.lock.duration.ms": 30_000, "share.delivery.count.limit": 5,
            "share.auto.offset.reset": "earliest", "share.isolation.level": "read_uncommitted"}
ACCEPT = (int(AckType.ACCEPT),)


@pytest.fixture
def env(tmp_path):
    store = LogManager(str(tmp_path))
    topics = InternalTopics(store, TxnConfig(), ShareStateTopicConfig(1, 1 << 20))
    states = ShareStateStore(store, topics, fsync=True, snapshot_every=500, clock=lambda: TS)
    states.load()
    partitions = SharePartitionManager(store, states, lambda group, name: SETTINGS[name], max_in_flight=2000)
    coordinator = ShareCoordinator(store, partitions, ShareSessions(10))
    store.create_topic(TOPIC, 2)
    for p in (0, 1):
        for _ in range(3):
            store.log(TOPIC, p).append_records([b"job"] * 10, timestamps=TS)
    yield store, states, coordinator
    store.close()


def state_records(store: LogManager) -> int:
    return store.log(SHARE_STATE_TOPIC, 0).high_watermark


def test_acknowledgements_and_the_acquisition_of_one_fetch_are_one_write_per_partition(env):
    store, states, coordinator = env
    tid = store.topic_id(TOPIC)
    opened = coordinator.open_fetch(GROUP, MEMBER, 0, [(tid, 0)], [], [], 10, 1 << 20)
    assert [r.first_offset for r in opened.acquired[(tid, 0)].ranges] == [0]
    before = state_records(store)
    opened = coordinator.open_fetch(GROUP, MEMBER, 1, [], [], [PartitionAck(tid, 0, ((0, 9, ACCEPT),))], 10, 1 << 20)
    assert opened.acks == {(tid, 0): 0}
    assert [(r.first_offset, r.last_offset) for r in opened.acquired[(tid, 0)].ranges] == [(10, 19)]
    assert state_records(store) == before + 1
    durable = states.read((GROUP, tid, 0))
    assert durable is not None and durable.start_offset == 10
    # Held records are persisted as available with their delivery count, as Kafka persists them.
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in durable.batches] == [
        (10, 19, DeliveryState.AVAILABLE, 1)]


def test_acknowledgements_on_partitions_the_acquisition_skips_are_durable_on_return(env):
    store, states, coordinator = env
    tid = store.topic_id(TOPIC)
    coordinator.open_fetch(GROUP, MEMBER, 0, [(tid, 1)], [], [], 10, 1 << 20)
    # The session moves to partition 0 while the member acknowledges what it holds of partition 1.
    opened = coordinator.open_fetch(GROUP, MEMBER, 1, [(tid, 0)], [(tid, 1)],
                                    [PartitionAck(tid, 1, ((0, 9, ACCEPT),))], 10, 1 << 20)
    assert opened.acks == {(tid, 1): 0}
    assert list(opened.acquired) == [(tid, 0)]
    assert states.read((GROUP, tid, 1)).start_offset == 10


def test_an_acknowledging_fetch_that_acquires_nothing_writes_its_acknowledgements(env):
    store, states, coordinator = env
    tid = store.topic_id(TOPIC)
    coordinator.open_fetch(GROUP, MEMBER, 0, [(tid, 0)], [], [], 10, 1 << 20)
    opened = coordinator.open_fetch(GROUP, MEMBER, 1, [], [], [PartitionAck(tid, 0, ((0, 9, ACCEPT),))])
    assert opened.acquired == {}
    assert states.read((GROUP, tid, 0)).start_offset == 10
    closing = coordinator.open_fetch(GROUP, MEMBER, -1, [], [], [])
    assert closing.closing and closing.acquired == {}
