"""aiokafka 0.14.0 against a real broker: an idempotent producer, a manually assigned consumer.

aiokafka is the oldest speaker of the four (ApiVersions v0, Metadata v5,
Produce v7, Fetch v11, InitProducerId v0).
"""
from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from segment_files import COMPRESSION, batches, segment_paths

TIMEOUT = 15.0  # s


async def produce(broker, topic: str, pairs, **config) -> list:
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                         linger_ms=5, **config)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, partition=0) for k, v in pairs]
        return [await asyncio.wait_for(f, TIMEOUT) for f in futures]
    finally:
        await p.stop()


async def consume(broker, tp: TopicPartition, count: int, **config) -> list:
    """`count` records from the start of `tp`, then a fetch that must bring nothing more."""
    c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", **config)
    await c.start()
    try:
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = []
        async with asyncio.timeout(TIMEOUT):
            while len(got) < count:
                for records in (await c.getmany(tp, timeout_ms=500)).values():
                    got.extend(records)
        assert not await c.getmany(tp, timeout_ms=100), "more records than were produced"
        assert await c.position(tp) == count
        return got
    finally:
        await c.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"], ids=lambda c: c or "none")
def test_idempotent_producer_then_assigned_consumer(broker, topic, codec):
    pairs = [(b"k%d" % i, b"aiokafka %d " % i * (1 + i % 5)) for i in range(300)]
    metas = asyncio.run(produce(broker, topic, pairs, compression_type=codec))
    assert [(m.partition, m.offset) for m in metas] == [(0, i) for i in range(300)]

    got = asyncio.run(consume(broker, TopicPartition(topic, 0), 300))
    assert [(r.offset, r.key, r.value) for r in got] == [(i, k, v) for i, (k, v) in enumerate(pairs)]

    on_disk = [b for path in segment_paths(broker.data_dir, topic, 0) for b in batches(path, whole=False)]
    assert {COMPRESSION[b.compression_type] for b in on_disk} == {codec or "none"}
    assert all(b.producer_id >= 0 for b in on_disk)  # idempotent batches carry the producer id


def test_read_committed_consumer_sees_idempotent_writes(broker, topic):
    # No transactions here, so the last stable offset is the high watermark.
    pairs = [(None, b"m%d" % i) for i in range(50)]
    asyncio.run(produce(broker, topic, pairs))
    got = asyncio.run(consume(broker, TopicPartition(topic, 0), 50, isolation_level="read_committed"))
    assert [r.value for r in got] == [v for _, v in pairs]
