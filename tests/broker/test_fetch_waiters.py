"""Long-polling Fetches are woken by appends to their own partitions only (Kafka's purgatory keys).

In-process: a broker that is not listening, its Fetch and Produce handlers
called on one event loop, and each pass of the Fetch over its partitions
counted. A Fetch parked on `x` must not run again for an append to `y`
(before, every append woke every parked Fetch, so one parked Fetch with many
partitions made every unrelated produce pay for re-reading all of them).
"""
from __future__ import annotations

import asyncio
import io
import threading
from datetime import timedelta

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.request_header.v2 import RequestHeader
from kio.serial import entity_writer

from logstore.broker.api import REGISTRY, Request
from logstore.broker.api import fetch as fetch_api
from logstore.broker.config import BrokerConfig
from logstore.broker.protocol import decode_native_produce
from logstore.broker.server import Broker
from logstore.formats.kafka import encode_batch

FETCH, PRODUCE = 1, 0
PARTITIONS = 50         # of the topic the Fetch parks on: each pass reads them all
TURNS = 20              # loop iterations given to a woken Fetch to run (it needs two)


@pytest.fixture
def broker(tmp_path):
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0"]))
    broker.create_topic("x", PARTITIONS)
    broker.create_topic("y", 1)
    yield broker
    broker.node.close()


@pytest.fixture
def passes(monkeypatch):
    """How many times a Fetch has read its partitions."""
    count = [0]
    read_all = fetch_api._read_all

    def counted(*args, **kwargs):
        count[0] += 1
        return read_all(*args, **kwargs)
    monkeypatch.setattr(fetch_api, "_read_all", counted)
    return count


def _fetch_body(topic: str, partitions: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait=timedelta(seconds=30), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(FetchTopic(topic=topic, partitions=tuple(FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20) for p in range(partitions))),))


def _produce_body(topic: str, partition: int):
    """A Produce v9 (acks=1) as the broker's native decoder hands it to the handler."""
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=PRODUCE, request_api_version=9,
                                                    correlation_id=2, client_id="test"))
    entity_writer(ProduceRequest)(out, ProduceRequest(
        transactional_id=None, acks=1, timeout=timedelta(seconds=30), topic_data=(TopicProduceData(
            name=topic, partition_data=(PartitionProduceData(
                index=partition, records=encode_batch([None], [b"value"])),)),)))
    return decode_native_produce(out.getvalue())[1]


async def _turns() -> None:
    for _ in range(TURNS):
        await asyncio.sleep(0)


async def _parked(broker: Broker) -> asyncio.Task:
    """A Fetch of every partition of `x`, parked (it has read them once and found nothing)."""
    parked = asyncio.create_task(REGISTRY[FETCH].handler(Request(broker, FETCH, 12, 1, "test"),
                                                          _fetch_body("x", PARTITIONS)))
    await _turns()
    assert not parked.done()
    assert len(broker.fetch_waiters) == PARTITIONS
    return parked


def _records(answer) -> list[int]:
    """The partitions of a Fetch answer that carry records."""
    return [row[0] for _, partition_rows in answer.topics for row in partition_rows if row[6]]


def test_an_append_wakes_only_the_fetches_parked_on_its_partition(broker, passes):
    async def scenario() -> None:
        parked = await _parked(broker)
        assert passes[0] == 1
        broker.store.log("y", 0).append(encode_batch([None], [b"elsewhere"]))
        broker.notify_appended([("y", 0)])
        await _turns()
        assert passes[0] == 1, "an append to another topic re-ran the parked Fetch"
        broker.store.log("x", 7).append(encode_batch([None], [b"here"]))
        broker.notify_appended([("x", 7)])
        rows = await asyncio.wait_for(parked, 30)
        assert passes[0] == 2
        assert _records(rows) == [7]
        fetch_api._close(rows.topics)
        assert len(broker.fetch_waiters) == 0, "a woken Fetch left its registrations behind"
    asyncio.run(scenario())


def test_a_produce_wakes_only_the_fetches_of_its_partitions(broker, passes):
    async def scenario() -> None:
        parked = await _parked(broker)
        produce = REGISTRY[PRODUCE].handler
        await produce(Request(broker, PRODUCE, 9, 2, "test"), _produce_body("y", 0))
        await _turns()
        assert passes[0] == 1, "a produce to another topic re-ran the parked Fetch"
        await produce(Request(broker, PRODUCE, 9, 3, "test"), _produce_body("x", 3))
        rows = await asyncio.wait_for(parked, 30)
        assert passes[0] == 2
        assert _records(rows) == [3]
        fetch_api._close(rows.topics)
    asyncio.run(scenario())


def test_markers_written_by_another_thread_wake_the_fetches_of_their_partitions(broker, passes):
    async def scenario() -> None:
        broker._loop = asyncio.get_running_loop()   # as start() records it
        parked = await _parked(broker)
        elsewhere = threading.Thread(target=broker._appended_elsewhere, args=([("y", 0)],))
        elsewhere.start()
        elsewhere.join()
        await _turns()
        assert passes[0] == 1
        broker.store.log("x", 1).append(encode_batch([None], [b"committed"]))
        # The coordinator's thread names the partitions whose last stable offset moved.
        elsewhere = threading.Thread(target=broker._appended_elsewhere, args=([("x", 1)],))
        elsewhere.start()
        elsewhere.join()
        rows = await asyncio.wait_for(parked, 30)
        assert passes[0] == 2 and _records(rows) == [1]
        fetch_api._close(rows.topics)
    asyncio.run(scenario())


def test_a_fetch_parked_on_a_closed_connection_ends_at_once(broker, passes):
    class Gone:
        """A connection's progress whose client has gone."""

        def __init__(self) -> None:
            self.gone = asyncio.get_running_loop().create_future()

        def applied(self) -> None:
            pass

        def waiting(self) -> None:
            pass

    async def scenario() -> None:
        progress = Gone()
        parked = asyncio.create_task(REGISTRY[FETCH].handler(
            Request(broker, FETCH, 12, 1, "test", progress=progress), _fetch_body("x", 3)))
        await _turns()
        assert not parked.done()
        progress.gone.set_result(None)
        rows = await asyncio.wait_for(parked, 30)
        assert _records(rows) == []
        assert len(broker.fetch_waiters) == 0
    asyncio.run(scenario())
