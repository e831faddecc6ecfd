"""Which partition a record goes to: Kafka's default partitioner.

A record with a key goes to `toPositive(murmur2(key)) % partitions`, the
Java client's formula, so an embedded producer and a Java, librdkafka
(`murmur2_random`) or kafka-python producer put a key in the same
partition. A record without one sticks to a partition until that
partition's batch is written, then moves on (KIP-480's sticky partitioner),
so unkeyed records still fill batches.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from logstore.errors import UnknownTopicOrPartitionError
from logstore.native.record_batch import murmur2

if TYPE_CHECKING:
    from logstore.manager import LogManager

def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Partitioner:
    """Partition counts cached from the store (refreshed when its topics change), and the sticky choice."""

    def __init__(self, store: LogManager, auto_create: bool, default_partitions: int,
                 may_create: Callable[[str], None] = lambda topic: None):
        self._store = store
        self._auto_create = auto_create
        # Raises if the client may not create the topic (auto-creation asks for CREATE, as Kafka's Metadata).
        self._may_create = may_create
        self._default_partitions = default_partitions
        # Read by the producer's native send too: partition counts and the sticky choices, valid while
        # `version` is the store's `topics_version` (the dicts are never replaced).
        self.counts: dict[str, int] = {}
        self.version = -1
        self.sticky: dict[str, int] = {}

    def count(self, topic: str) -> int:
        """How many partitions `topic` has; a missing topic is created when auto.create.topics.enable is on."""
        store = self._store
        if store.topics_version != self.version:
            self.counts.clear()
            self.version = store.topics_version
        count = self.counts.get(topic)
        if count is None:
            count = store.topics().get(topic)
            if count is None:
                if not self._auto_create:
                    raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} (auto.create.topics.enable=false)")
                self._may_create(topic)
                count = store.create_topic(topic, self._default_partitions).partitions
            self.counts[topic] = count
        return count

    def partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The partition of a record: the one asked for, the key's, or the topic's sticky one."""
        if key is None and partition is None and self.version == self._store.topics_version:
            sticky = self.sticky.get(topic)
            if sticky is not None:
                return sticky  # the common unkeyed case, without a count lookup
        count = self.count(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"{topic} has {count} partitions; there is no {partition}")
            return partition
        if key is not None:
            return partition_for_key(key, count)
        sticky = self.sticky.get(topic)
        if sticky is None or sticky >= count:
            sticky = self.sticky[topic] = random.randrange(count)
        return sticky

    def batch_written(self, tp: tuple[str, int]) -> None:
        """`tp`'s batch went to the log: unkeyed records of its topic move on to another partition."""
        topic, p = tp
        if self.sticky.get(topic) == p:
            count = self.counts.get(topic, 1)
            self.sticky[topic] = (p + 1 + random.randrange(count - 1)) % count if count > 1 else 0
