"""The coordinators' internal topics: created when first needed, and which partition holds an id.

A transactional id lives in `__transaction_state`, a group in
`__consumer_offsets` and a share-partition's state in `__share_group_state`
(keyed as Kafka's SharePartitionKey, "group:topicId:partition" with the
topic id in Kafka's base64url), each at Kafka's hash of the id over the
topic's own partition count (partitioning.py), so a changed setting never
moves an id.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logstore.broker.coordinator.partitioning import partition_for
from logstore.checkpoints import topic_id_to_string
from logstore.errors import TopicExistsError

if TYPE_CHECKING:
    from logstore.broker.coordinator.txn_config import TxnConfig
    from logstore.manager import LogManager

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({TXN_STATE_TOPIC, OFFSETS_TOPIC, SHARE_STATE_TOPIC})


@dataclass(frozen=True)
class ShareStateTopicConfig:
    """How `__share_group_state` is made, under Kafka's broker config names in `from_settings`."""

    partitions: int = 50               # share.coordinator.state.topic.num.partitions
    segment_bytes: int = 104_857_600   # share.coordinator.state.topic.segment.bytes

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ShareStateTopicConfig:
        """From broker settings (missing names keep Kafka's defaults)."""
        names = {"share.coordinator.state.topic.num.partitions": "partitions",
                 "share.coordinator.state.topic.segment.bytes": "segment_bytes"}
        return cls(**{field: settings[name] for name, field in names.items() if name in settings})


def share_partition_key(group_id: str, topic_id: bytes, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: the string hashed to a `__share_group_state` partition."""
    return f"{group_id}:{topic_id_to_string(topic_id)}:{partition}"


class InternalTopics:
    """`__transaction_state`, `__consumer_offsets` and `__share_group_state`: their creation (compacted,
    Kafka's partition counts and segment sizes from `TxnConfig` and `ShareStateTopicConfig`) and the
    partition of an id.

    Task-safe: a creation holds `_topic_lock`, which is taken with no other coordinator lock held.
    """

    def __init__(self, store: LogManager, config: TxnConfig,
                 share_config: ShareStateTopicConfig = ShareStateTopicConfig()) -> None:
        self._store = store
        self._config = config
        self._share_config = share_config
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

    def ensure_share_state_topic(self) -> None:
        """Create `__share_group_state` if it is missing (Kafka does so at the first share-state lookup).

        Compacted, unlike Kafka's (which deletes by retention and prunes below
        the oldest record still needed): every share-state update here carries
        what the newest snapshot lacks, so the newest of each key is enough.
        """
        self._ensure_topic(SHARE_STATE_TOPIC, self._share_config.partitions, self._share_config.segment_bytes)

    def share_state_partition(self, group_id: str, topic_id: bytes, partition: int) -> int:
        """The `__share_group_state` partition of a share-partition (the topic is created if missing)."""
        self.ensure_share_state_topic()
        return partition_for(share_partition_key(group_id, topic_id, partition),
                             self._store.partitions(SHARE_STATE_TOPIC))
