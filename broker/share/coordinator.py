"""ShareFetch and ShareAcknowledge without the wire: sessions, acknowledgements, acquisition, by topic id.

The broker's handlers and the embedded ShareConsumer both drive this object
(the coordinators never touch sockets). A fetch is two steps so the handler
can long-poll between them: `open_fetch` moves the session, applies the
acknowledgements the request carries and makes a first acquisition; `acquire`
hands out records again after the handler waited for appends. The first
acquisition writes each share-partition's acknowledgements and acquisitions
together: one fsync per partition per fetch, not two.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.broker.share.manager import Acquired, SharePartitionManager
from logstore.broker.share.sessions import SessionPartition, ShareSessions
from logstore.errors import InvalidRequestError, LogStoreError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from logstore.manager import LogManager

# (first offset, last offset, acknowledge types) as the wire carries an AcknowledgementBatch.
AckBatch = tuple[int, int, tuple[int, ...]]
UNKNOWN_TOPIC_ID = 100


@dataclass(frozen=True, slots=True)
class PartitionAck:
    """A partition's acknowledgements in a request, by topic id."""

    topic_id: bytes
    partition: int
    batches: tuple[AckBatch, ...]


@dataclass(frozen=True, slots=True)
class OpenedFetch:
    """What `open_fetch` decided: the session's partitions to fetch from (by name, with their ids) and
    each acknowledged partition's error code."""

    fetch: list[tuple[bytes, str, int]]
    acks: dict[SessionPartition, int]
    closing: bool
    acquired: dict[SessionPartition, Acquired | int]


class ShareCoordinator:
    """Share sessions and share-partitions behind ShareFetch/ShareAcknowledge. Task-safe."""

    def __init__(self, store: LogManager, partitions: SharePartitionManager, sessions: ShareSessions) -> None:
        self._store = store
        self.partitions = partitions
        self.sessions = sessions
        self._names_lock = threading.Lock()
        self._names: dict[bytes, str] = {}

    # -- what the group coordinator tells of share groups (its ShareListener) ---------------------

    def partitions_assigned(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """Initialize the share state of newly assigned partitions (idempotent)."""
        self.partitions.initialize(group_id, partitions)

    def member_left(self, group_id: str, member_id: str) -> None:
        """A member left or expired: its session goes and what it holds is released."""
        self.sessions.remove_member(group_id, member_id)
        self.partitions.release_member(group_id, member_id)

    def group_deleted(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """A share group was deleted: its sessions and its share state go."""
        self.sessions.remove_group(group_id)
        self.partitions.delete_group(group_id)

    def topic_name(self, topic_id: bytes) -> str | None:
        """The topic an id names now, or None (deleted, or never existed)."""
        with self._names_lock:
            name = self._names.get(topic_id)
        if name is not None and name in self._store.topics() and self._store.topic_id(name) == topic_id:
            return name
        names = {}
        for topic in self._store.topics():
            try:
                names[self._store.topic_id(topic)] = topic
            except LogStoreError:
                continue
        with self._names_lock:
            self._names = names
        return names.get(topic_id)

    def open_fetch(self, group_id: str, member_id: str, epoch: int, topics: Sequence[tuple[bytes, int]],
                   forgotten: Sequence[tuple[bytes, int]], acks: Sequence[PartitionAck], max_records: int = 0,
                   max_bytes: int = 0) -> OpenedFetch:
        """Move the member's session by a ShareFetch, apply its acknowledgements and acquire up to
        `max_records` (none if 0); all durable on return."""
        if not member_id:
            raise InvalidRequestError("A ShareFetch needs a member id")
        session, closing = self.sessions.fetch(group_id, member_id, epoch, topics, forgotten)
        acked, unwritten = self._apply(group_id, member_id, acks, write=False)
        fetch: list[tuple[bytes, str, int]] = []
        acquired: dict[SessionPartition, Acquired | int] = {}
        if closing:
            self.partitions.release_member(group_id, member_id)
        else:
            for topic_id, partition in list(session.partitions):
                name = self.topic_name(topic_id)
                if name is not None:
                    fetch.append((topic_id, name, partition))
            if max_records > 0:
                acquired = self.acquire(group_id, member_id, fetch, max_records, max_bytes)
        # What the acquisition did not write already (a no-op for the partitions it did).
        failed = self.partitions.flush(group_id, [(name, p) for _, name, p in unwritten])
        for topic_id, name, partition in unwritten:
            if (name, partition) in failed:
                acked[(topic_id, partition)] = failed[(name, partition)]
        return OpenedFetch(fetch, acked, closing, acquired)

    def acknowledge(self, group_id: str, member_id: str, epoch: int,
                    acks: Sequence[PartitionAck]) -> dict[SessionPartition, int]:
        """A ShareAcknowledge: each partition's error code (durable on return)."""
        if not member_id:
            raise InvalidRequestError("A ShareAcknowledge needs a member id")
        _, closing = self.sessions.acknowledge(group_id, member_id, epoch)
        acked, _ = self._apply(group_id, member_id, acks, write=True)
        if closing:
            self.partitions.release_member(group_id, member_id)
        return acked

    def _apply(self, group_id: str, member_id: str, acks: Iterable[PartitionAck], *,
               write: bool) -> tuple[dict[SessionPartition, int], list[tuple[bytes, str, int]]]:
        """Each acknowledged partition's error code, and the partitions acknowledged (id, name, index)."""
        errors: dict[SessionPartition, int] = {}
        changed: list[tuple[bytes, str, int]] = []
        for ack in acks:
            if not ack.batches:
                continue
            name = self.topic_name(ack.topic_id)
            if name is None:
                errors[(ack.topic_id, ack.partition)] = UNKNOWN_TOPIC_ID
                continue
            try:
                code = self.partitions.acknowledge(group_id, member_id, name, ack.partition, ack.batches,
                                                   write=write)
                changed.append((ack.topic_id, name, ack.partition))
            except LogStoreError as exc:
                code = exc.code
            errors[(ack.topic_id, ack.partition)] = code
        return errors, changed

    def acquire(self, group_id: str, member_id: str, fetch: Sequence[tuple[bytes, str, int]], max_records: int,
                max_bytes: int) -> dict[SessionPartition, Acquired | int]:
        """Records for the member from each partition (or the partition's error code), within the request's
        record and byte budgets (each partition's first batch whole even past them)."""
        out: dict[SessionPartition, Acquired | int] = {}
        records_left, bytes_left = max_records, max_bytes
        for topic_id, name, partition in fetch:
            if records_left <= 0 or bytes_left <= 0:
                break
            try:
                got = self.partitions.acquire(group_id, member_id, name, partition, records_left, bytes_left)
            except UnknownTopicOrPartitionError as exc:
                out[(topic_id, partition)] = exc.code
                continue
            except LogStoreError as exc:
                out[(topic_id, partition)] = exc.code
                continue
            if got.ranges:
                out[(topic_id, partition)] = got
                records_left -= sum(r.last_offset - r.first_offset + 1 for r in got.ranges)
                bytes_left -= len(got.records)
        return out
