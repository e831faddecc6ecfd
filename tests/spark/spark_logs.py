"""Log dirs for the Spark tests, written through the library, and the rows logstore itself reads from them.

`PartitionWriter` appends as several producers would (plain, idempotent and
transactional batches, COMMIT/ABORT markers), with timestamps that grow by a
fixed step per offset, so a test can say which offset a timestamp bound starts at.
`library_rows` is the oracle: the library's own `iter_records` at an isolation
level, in the columns of Spark's Kafka source (timestamps in ms).
"""
from __future__ import annotations

import random
from typing import NamedTuple

TS0 = 1_700_000_000_000  # ms: the first record's timestamp
TS_STEP = 10             # ms between consecutive offsets of a partition, unless a writer says otherwise
COORDINATOR_EPOCH = 3


class KafkaRow(NamedTuple):
    """One row of Spark's Kafka source schema; timestamp in ms, headers as (key, value) tuples."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int
    headers: tuple = ()


class PartitionWriter:
    """Appends to one partition for several producers, keeping each producer's sequence numbers."""

    def __init__(self, log, label: str, *, compression: int = 0, step: int = TS_STEP):
        self.log = log
        self.label = label
        self.compression = compression
        self.step = step
        self._sequences: dict[int, int] = {}
        self._open: set[int] = set()
        self._count = 0

    @property
    def open_transactions(self) -> set[int]:
        """Producer ids with a transaction not yet ended."""
        return set(self._open)

    def _records(self, n: int, kind: str):
        keys, values, headers, stamps = [], [], [], []
        for _ in range(n):
            i = self._count
            self._count += 1
            # Every third key is null, headers vary in number and some values are null.
            keys.append(None if i % 3 == 0 else b"key-%d" % (i % 7))
            values.append(b"%s|%s|%d" % (self.label.encode(), kind.encode(), i))
            headers.append([("h%d" % j, None if (i + j) % 4 == 0 else b"%d.%d" % (i, j)) for j in range(i % 3)]
                           + ([("ключ", b"\x00\xff")] if i % 5 == 0 else []))
            stamps.append(TS0 + i * self.step)
        return keys, values, headers, stamps

    def plain(self, n: int):
        """A batch without a producer id."""
        keys, values, headers, stamps = self._records(n, "plain")
        return self.log.append_records(values, keys=keys, headers=headers, timestamps=stamps,
                                       compression=self.compression)

    def produce(self, producer_id: int, n: int, *, transactional: bool):
        """A batch of an idempotent producer (epoch 0), in its open transaction if `transactional`."""
        keys, values, headers, stamps = self._records(n, "txn" if transactional else "idem")
        sequence = self._sequences.get(producer_id, 0)
        self._sequences[producer_id] = sequence + n
        if transactional:
            self._open.add(producer_id)
        return self.log.append_records(values, keys=keys, headers=headers, timestamps=stamps,
                                       compression=self.compression, producer_id=producer_id,
                                       producer_epoch=0, base_sequence=sequence, transactional=transactional)

    def end(self, producer_id: int, *, commit: bool):
        """The producer's COMMIT or ABORT marker."""
        self._open.discard(producer_id)
        # A marker's timestamp follows the records', so timestamps never go back in a partition.
        stamp = TS0 + self._count * self.step
        self._count += 1
        return self.log.write_txn_marker(producer_id, 0, COORDINATOR_EPOCH, commit=commit, timestamp=stamp)

    def interleave(self, rng: random.Random, producer_ids, appends: int) -> None:
        """`appends` random appends: plain and idempotent batches, transactional batches of the producers
        interleaved, and markers ending their transactions, about a third of them aborts."""
        for _ in range(appends):
            choice = rng.random()
            pid = rng.choice(producer_ids)
            if choice < 0.15:
                self.plain(rng.randint(1, 4))
            elif choice < 0.25 and pid not in self._open:
                self.produce(pid, rng.randint(1, 3), transactional=False)
            elif choice < 0.65 or not self._open:
                self.produce(pid, rng.randint(1, 4), transactional=True)
            else:
                self.end(rng.choice(sorted(self._open)), commit=rng.random() < 0.65)

    def end_all(self, rng: random.Random) -> None:
        """End every open transaction."""
        for pid in sorted(self._open):
            self.end(pid, commit=rng.random() < 0.5)


def timestamp_types(log) -> dict[int, int]:
    """offset → the timestamp type of the batch holding it (0 CreateTime, 1 LogAppendTime)."""
    return {record.offset: entry.timestamp_type
            for entry, records in log.iter_batches() if not entry.is_control for record in records}


def library_rows(log, topic: str, partition: int, isolation: str) -> list[KafkaRow]:
    """What the library reads at `isolation`, as Kafka source rows."""
    types = timestamp_types(log)
    return [KafkaRow(topic, partition, r.offset, r.key, r.value, r.timestamp, types[r.offset], tuple(r.headers))
            for r in log.iter_records(isolation=isolation)]
