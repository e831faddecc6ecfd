"""The coordinators' internal topics: created when first needed, and which partition holds an id.

A transactional id lives in `__transaction_state` and a group in
`__consumer_offsets`, at Kafka's hash of the id over the topic's own
partition count (partitioning.py), so a changed setting never moves an id.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from logstore.broker.coordinator.partitioning import partition_for
from logstore.errors import TopicExistsError

if TYPE_CHECKING:
    from logstore.broker.coordinator.txn_config import TxnConfig
    from logstore.manager import LogManager

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({TXN_STATE_TOPIC, OFFSETS_TOPIC})


class InternalTopics:
    """`__transaction_state` and `__consumer_offsets`: their creation (compacted, Kafka's partition counts
    and segment sizes from `TxnConfig`) and the partition of an id.

    Task-safe: a creation holds `_topic_lock`, which is taken with no other coordinator lock held.
    """

    def __init__(self, store: LogManager, config: TxnConfig) -> None:
        self._store = store
        self._config = config
        self._topic_lock = threading.Lock()
        # Internal topics known to exist (the broker refuses to delete them), so a write need not list the topics.
        self._created: set[str] = set()

    def _ensure_topic(self, name: str, partitions: int, segment_bytes: int) -> None:
        if name in self._created:
            return
        # Checked under the lock: a topic being created shows a partial partition count meanwhile,
        # and an id hashed over that count would land in the wrong partition.
        with self._topic_lock:
            if name not in self._store.topics():
                try:
                    # Records are written uncompressed (Kafka enforces it for __transaction_state).
                    self._store.create_topic(name, partitions, {"cleanup.policy": "compact",
                                                                "segment.bytes": segment_bytes})
                    log.info("created %s with %d partitions", name, partitions)
                except TopicExistsError:
                    pass
            self._created.add(name)

    def ensure_state_topic(self) -> None:
        """Create `__transaction_state` if it is missing (Kafka does so at the first lookup)."""
        self._ensure_topic(TXN_STATE_TOPIC, self._config.state_partitions, self._config.state_segment_bytes)

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it is missing (Kafka does so at the first group lookup)."""
        self._ensure_topic(OFFSETS_TOPIC, self._config.offsets_partitions, self._config.offsets_segment_bytes)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The `__consumer_offsets` partition of a group (the topic is created if missing)."""
        self.ensure_offsets_topic()
        return OFFSETS_TOPIC, partition_for(group_id, self._store.partitions(OFFSETS_TOPIC))

    def state_partition(self, transactional_id: str) -> int:
        """The `__transaction_state` partition that holds `transactional_id` (the topic is created if missing).

        The count is the topic's own, as created: a changed setting must not move ids.
        """
        self.ensure_state_topic()
        return partition_for(transactional_id, self._store.partitions(TXN_STATE_TOPIC))
