"""The embedded ShareConsumer: a KIP-932 share-group member in-process, with confluent-kafka's model.

    consumer = embedded.ShareConsumer(node, {"group.id": "jobs", "share.acknowledgement.mode": "explicit"})
    consumer.subscribe(["jobs"])
    for record in consumer.poll(1.0):
        consumer.acknowledge(record, AckType.ACCEPT)   # or RELEASE (deliver again), REJECT (never again)
    consumer.commit_sync()

It drives the objects the broker's handlers drive: the group coordinator's
share-group heartbeat (membership and assignment: every member may get every
partition) and the node's ShareCoordinator (a share session, acknowledgements,
acquisition), so several members, embedded or remote, share a partition with
each record locked to one of them at a time.

`poll` returns the records this member acquired (each with its delivery
count). In implicit mode (the default) the records of a poll are accepted by
the next `poll`, `commit_sync`, `commit_async` or `close`; in explicit mode
each must be acknowledged before the next `poll` (IllegalStateError
otherwise). Acknowledgements are sent with the next fetch, or at once by
`commit_sync`; `commit_async` leaves them to the next `poll` or `close`, and
the callback given to `set_acknowledgement_commit_callback` hears each
partition's outcome (on the node's upkeep thread when it is the one that
sends them: a member that stopped polling for `max.poll.interval.ms` leaves
the group there, its acknowledgements sent and what it holds released).
`close` sends what is pending, closes the share session (what the member
still holds is released at once, for the others) and leaves the group. A
member that neither polls nor is closed holds its records until it leaves
or their locks expire (`share.record.lock.duration.ms`).

Offsets of an acquired range that carry no record (compacted away) are
acknowledged as GAP, as Kafka's consumer does. Authorization is the broker's
(access.py): READ on the group and DESCRIBE on the subscribed topics for the
heartbeat, READ on the group and topics for fetching and acknowledging.

Not thread-safe for the application (one thread at a time, as confluent's);
the node's upkeep thread heartbeats through `tick`, under the consumer's lock.
Times are ms unless named _s.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logstore.broker.authorizer import AclOperation, ResourceType
from logstore.broker.coordinator.share_group import LEAVE_EPOCH
from logstore.broker.embedded.access import Access
from logstore.broker.embedded.producer import IllegalStateError
from logstore.broker.embedded.settings import parse_settings
from logstore.broker.share.coordinator import OpenedFetch, PartitionAck
from logstore.broker.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from logstore.broker.share.types import AckType
from logstore.errors import (
    ERROR_CODES,
    FencedMemberEpochError,
    InvalidGroupIdError,
    InvalidShareSessionEpochError,
    LogStoreError,
    ShareSessionNotFoundError,
    UnknownMemberIdError,
)

if TYPE_CHECKING:
    from logstore.broker.node import Node
    from logstore.broker.share.manager import Acquired

__all__ = ["AckType", "AcknowledgementError", "SHARE_CONSUMER_SETTINGS", "ShareConsumer", "ShareRecord"]

TopicPartition = tuple[str, int]
# What the acknowledgement callback hears: each partition's offsets and its error (None: applied).
CommitCallback = Callable[[dict[TopicPartition, list[int]], "LogStoreError | None"], None]

SHARE_CONSUMER_SETTINGS: dict[str, tuple[Any, type, frozenset[str] | None]] = {
    "client.id": ("", str, None),
    "principal": ("User:ANONYMOUS", str, None),
    "group.id": (None, str, None),
    "share.acknowledgement.mode": ("implicit", str, frozenset({"implicit", "explicit"})),
    "max.poll.records": (500, int, None),
    "fetch.max.bytes": (52_428_800, int, None),
    "max.poll.interval.ms": (300_000, int, None),
}
_APPLICATION_TYPES = (AckType.ACCEPT, AckType.RELEASE, AckType.REJECT)
_CLIENT_HOST = "/embedded"


class AcknowledgementError(LogStoreError):
    """A partition refused acknowledgements (the error code the broker answered, e.g. INVALID_RECORD_STATE)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error_name = ERROR_CODES[code].name


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """A record this member acquired: where it is, what it holds, and how many times it was delivered."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    delivery_count: int


class ShareConsumer:
    """One share-group member over an embedded node (see the module's docstring)."""

    def __init__(self, node: Node, config: Mapping[str, Any] | None = None) -> None:
        self.settings = s = parse_settings(config, SHARE_CONSUMER_SETTINGS, "share consumer")
        if not s["group.id"]:
            raise InvalidGroupIdError("a share consumer needs group.id")
        self._group_id: str = s["group.id"]
        self._explicit = s["share.acknowledgement.mode"] == "explicit"
        self._access = Access(node, s["principal"])
        self._node = node
        self._member_id = str(uuid.uuid4())
        self._client_id = s["client.id"] or f"share-consumer-{self._group_id}"
        self._lock = threading.RLock()
        self._subscription: tuple[str, ...] = ()
        self._subscription_sent = False
        self._member_epoch = 0
        self._joined = False
        self._next_heartbeat: int | None = None
        # (topic id, topic, partition) of the current assignment; the session's partitions by (topic id, partition).
        self._assigned: list[tuple[bytes, str, int]] = []
        self._session_epoch = INITIAL_EPOCH
        self._session: set[tuple[bytes, int]] = set()
        # The records of the last poll not yet acknowledged, and the acknowledgements not yet sent.
        self._in_flight: dict[tuple[str, int, int], ShareRecord] = {}
        self._pending: dict[TopicPartition, dict[int, AckType]] = {}
        self._topic_ids: dict[str, bytes] = {}
        self._callback: CommitCallback | None = None
        self._last_poll = time.monotonic()
        self._closed = False
        node.add_client(self)

    def __repr__(self) -> str:
        return f"<ShareConsumer {self._group_id} {self._member_id}>"

    # -- subscription --------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Share-consume `topics` (replacing the subscription; empty: unsubscribe)."""
        self._check_open()
        wanted = tuple(dict.fromkeys(topics))
        if any(not t for t in wanted):
            raise ValueError("a topic name is empty")
        if not wanted:
            self.unsubscribe()
            return
        with self._lock:
            self._subscription = wanted
            self._subscription_sent = False
            self._next_heartbeat = 0
        self._node.wake()

    def unsubscribe(self) -> None:
        """Leave the group; what this member holds goes back to the others."""
        self._release_and_leave()
        with self._lock:
            self._subscription = ()

    def subscription(self) -> list[str]:
        """The topics subscribed to."""
        return list(self._subscription)

    def assignment(self) -> list[TopicPartition]:
        """The partitions the group gave this member."""
        with self._lock:
            return [(topic, p) for _, topic, p in self._assigned]

    # -- polling --------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> list[ShareRecord]:
        """Records acquired for this member, waiting up to `timeout` s for some."""
        self._check_open()
        if not self._subscription:
            raise IllegalStateError("poll() before subscribe()")
        with self._lock:
            if self._explicit and self._in_flight:
                raise IllegalStateError(f"{len(self._in_flight)} records of the last poll are not acknowledged")
            self._accept_in_flight()
        deadline = time.monotonic() + timeout
        self._last_poll = time.monotonic()
        node = self._node
        while True:
            seen = node.append_count
            with self._lock:
                self._heartbeat_if_due()
                records = self._fetch()
            left = deadline - time.monotonic()
            if records or left <= 0:
                return records
            with node.appended:
                node.appended.wait_for(lambda: node.append_count != seen, left)

    def _fetch(self) -> list[ShareRecord]:
        """One ShareFetch (under the lock): the session moved, the pending acknowledgements sent, records
        acquired."""
        assigned = list(self._assigned)
        wanted = {(tid, p) for tid, _, p in assigned}
        self._access.require(AclOperation.READ, ResourceType.GROUP, (self._group_id,))
        self._access.require(AclOperation.READ, ResourceType.TOPIC, sorted({t for _, t, _ in assigned}))
        acks, sent = self._ack_batches()
        try:
            opened = self._open_fetch(wanted, acks, self.settings["max.poll.records"],
                                      self.settings["fetch.max.bytes"])
        except BaseException:
            self._restore(sent)
            raise
        self._session_epoch = self._next_epoch(self._session_epoch)
        self._session = wanted
        self._acknowledged(sent, opened.acks)
        names = {(tid, p): name for tid, name, p in opened.fetch}
        records: list[ShareRecord] = []
        for key, answer in opened.acquired.items():
            if isinstance(answer, int):
                continue   # the partition's error (gone, offline): its records come with a later fetch
            records += self._records(names[key], key[1], answer)
        return records

    def _open_fetch(self, wanted: set[tuple[bytes, int]], acks: list[PartitionAck], max_records: int = 0,
                    max_bytes: int = 0) -> OpenedFetch:
        """The session moved to `wanted` by a ShareFetch carrying `acks` (and acquiring up to `max_records`);
        a session the broker lost is opened again (the acknowledgements with it)."""
        share = self._node.share
        try:
            if self._session_epoch != INITIAL_EPOCH:
                return share.open_fetch(self._group_id, self._member_id, self._session_epoch,
                                        sorted(wanted - self._session), sorted(self._session - wanted), acks,
                                        max_records, max_bytes)
        except (ShareSessionNotFoundError, InvalidShareSessionEpochError):
            self._session_epoch, self._session = INITIAL_EPOCH, set()
        return share.open_fetch(self._group_id, self._member_id, INITIAL_EPOCH, sorted(wanted), [], acks,
                                max_records, max_bytes)

    def _restore(self, sent: Mapping[TopicPartition, Mapping[int, AckType]]) -> None:
        """Put back acknowledgements a failed call did not deliver (newer ones of the same offsets win)."""
        for tp, types in sent.items():
            self._pending[tp] = {**types, **self._pending.get(tp, {})}

    def _records(self, topic: str, partition: int, acquired: Acquired) -> list[ShareRecord]:
        """The records of the acquired ranges; offsets of a range with no record are acknowledged as GAP."""
        counts: dict[int, int] = {}
        for acquired_range in acquired.ranges:
            counts.update(dict.fromkeys(range(acquired_range.first_offset, acquired_range.last_offset + 1),
                                        acquired_range.delivery_count))
        fmt = self._node.store.log(topic, partition).format
        buf = acquired.records
        records: list[ShareRecord] = []
        for entry in fmt.iter_entries(buf, verify_crc=False):
            if getattr(entry, "is_control", False):
                continue
            for r in fmt.decode_entry(buf, entry, verify_crc=False):
                count = counts.pop(r.offset, None)
                if count is not None:
                    records.append(ShareRecord(topic, partition, r.offset, r.timestamp, r.key, r.value,
                                               tuple(r.headers), count))
        if counts:
            self._pending.setdefault((topic, partition), {}).update(dict.fromkeys(counts, AckType.GAP))
        for record in records:
            self._in_flight[(topic, partition, record.offset)] = record
        return records

    # -- acknowledgements -------------------------------------------------------------------------

    def acknowledge(self, record: ShareRecord, ack_type: AckType = AckType.ACCEPT) -> None:
        """Mark a record of the last poll ACCEPT, RELEASE or REJECT (explicit mode); sent with the next
        poll or commit."""
        self.acknowledge_offset(record.topic, record.partition, record.offset, ack_type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, ack_type: AckType = AckType.ACCEPT) -> None:
        """`acknowledge` by the record's place."""
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        kind = AckType(ack_type)
        if kind not in _APPLICATION_TYPES:
            raise ValueError(f"an acknowledgement is ACCEPT, RELEASE or REJECT, not {kind.name}")
        with self._lock:
            if self._in_flight.pop((topic, partition, offset), None) is None:
                raise IllegalStateError(f"{topic}-{partition} offset {offset} is not a record of the last poll "
                                        "waiting for its acknowledgement")
            self._pending.setdefault((topic, partition), {})[offset] = kind

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        """Hear each partition's acknowledgement outcome: callback({(topic, partition): offsets}, error)."""
        self._callback = callback

    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, LogStoreError | None]:
        """Send the pending acknowledgements now (durable when this returns): each partition's error or None."""
        self._check_open()
        with self._lock:
            self._accept_in_flight()
            return self._send_acknowledgements(self._session_epoch)

    def commit_async(self) -> None:
        """Leave the pending acknowledgements (implicit mode: the last poll's records, accepted) to the next
        poll or close; the callback hears their outcome."""
        self._check_open()
        with self._lock:
            self._accept_in_flight()

    def _accept_in_flight(self) -> None:
        if self._explicit:
            return
        for (topic, partition, offset) in self._in_flight:
            self._pending.setdefault((topic, partition), {})[offset] = AckType.ACCEPT
        self._in_flight.clear()

    def _ack_batches(self) -> tuple[list[PartitionAck], dict[TopicPartition, dict[int, AckType]]]:
        """The pending acknowledgements as the wire's batches (one per run of offsets), and what they hold."""
        sent, self._pending = self._pending, {}
        acks = []
        for (topic, partition), types in sent.items():
            offsets = sorted(types)
            batches, start = [], 0
            for i in range(1, len(offsets) + 1):
                if i == len(offsets) or offsets[i] != offsets[i - 1] + 1:
                    run = offsets[start:i]
                    batches.append((run[0], run[-1], tuple(int(types[o]) for o in run)))
                    start = i
            acks.append(PartitionAck(self._topic_id(topic), partition, tuple(batches)))
        return acks, sent

    def _send_acknowledgements(self, epoch: int) -> dict[TopicPartition, LogStoreError | None]:
        """ShareAcknowledge in the session (`epoch` FINAL_EPOCH closes it); each partition's outcome."""
        if not self._pending and epoch != FINAL_EPOCH:
            return {}
        with self._lock:
            wanted = {(tid, p) for tid, _, p in self._assigned}
        acks, sent = self._ack_batches()
        try:
            self._access.require(AclOperation.READ, ResourceType.GROUP, (self._group_id,))
            self._access.require(AclOperation.READ, ResourceType.TOPIC, sorted({t for t, _ in sent}))
            if epoch == INITIAL_EPOCH:
                # No session yet (or it was lost): a fetch carries them, opening one.
                codes = self._open_fetch(wanted, acks).acks
                self._session_epoch, self._session = self._next_epoch(INITIAL_EPOCH), wanted
            else:
                try:
                    codes = self._node.share.acknowledge(self._group_id, self._member_id, epoch, acks)
                    following = self._next_epoch(epoch)
                except (ShareSessionNotFoundError, InvalidShareSessionEpochError):
                    # The broker lost the session (the member was removed meanwhile): a new one carries them.
                    self._session_epoch, self._session = INITIAL_EPOCH, set()
                    codes = self._open_fetch(set() if epoch == FINAL_EPOCH else wanted, acks).acks
                    following, self._session = self._next_epoch(INITIAL_EPOCH), wanted
                    if epoch == FINAL_EPOCH:
                        self._node.share.acknowledge(self._group_id, self._member_id, FINAL_EPOCH, [])
                self._session_epoch = INITIAL_EPOCH if epoch == FINAL_EPOCH else following
        except BaseException:
            self._restore(sent)
            raise
        return self._acknowledged(sent, codes)

    def _acknowledged(self, sent: Mapping[TopicPartition, Mapping[int, AckType]],
                      codes: Mapping[tuple[bytes, int], int]) -> dict[TopicPartition, LogStoreError | None]:
        """Each partition's outcome, told to the callback."""
        outcome: dict[TopicPartition, LogStoreError | None] = {}
        for (topic, partition), types in sent.items():
            code = codes.get((self._topic_id(topic), partition), 0)
            error = None if code == 0 else AcknowledgementError(
                code, f"{topic}-{partition}: acknowledgements refused ({ERROR_CODES[code].name})")
            outcome[(topic, partition)] = error
            if self._callback is not None:
                self._callback({(topic, partition): sorted(types)}, error)
        return outcome

    @staticmethod
    def _next_epoch(epoch: int) -> int:
        return epoch + 1 if epoch < 2**31 - 1 else 1

    def _topic_id(self, topic: str) -> bytes:
        found = self._topic_ids.get(topic)
        if found is None:
            found = self._topic_ids[topic] = self._node.store.topic_id(topic)
        return found

    # -- the group ------------------------------------------------------------------------------

    def _heartbeat_if_due(self) -> None:
        with self._lock:
            joining = not self._joined
            if joining or (self._next_heartbeat is not None and int(time.time() * 1000) >= self._next_heartbeat):
                self._heartbeat()
        if joining:
            self._node.wake()   # the upkeep heartbeats from now on: it must see this member's deadline

    def _heartbeat(self) -> None:
        """ShareGroupHeartbeat (under the lock): join, stay, take a new assignment; rejoin when fenced."""
        groups = self._node.groups
        self._access.require(AclOperation.READ, ResourceType.GROUP, (self._group_id,))
        self._access.require(AclOperation.DESCRIBE, ResourceType.TOPIC, self._subscription)
        topics = None if self._subscription_sent and self._joined else list(self._subscription)
        try:
            result = groups.share_group_heartbeat(self._group_id, self._member_id, self._member_epoch,
                                                  subscribed_topic_names=topics, client_id=self._client_id,
                                                  client_host=_CLIENT_HOST)
        except (UnknownMemberIdError, FencedMemberEpochError):
            # The group forgot this member (its session ran out): join again, with the same member id.
            self._member_epoch, self._joined, self._subscription_sent = 0, False, False
            self._next_heartbeat = 0
            return
        self._member_epoch = result.member_epoch
        self._joined = self._subscription_sent = True
        self._next_heartbeat = int(time.time() * 1000) + result.heartbeat_interval_ms
        if result.assignment is not None:
            share = self._node.share
            assigned = []
            for topic_id, partitions in result.assignment:
                name = share.topic_name(topic_id)
                if name is not None:
                    self._topic_ids[name] = topic_id
                    assigned += [(topic_id, name, p) for p in partitions]
            self._assigned = sorted(assigned, key=lambda a: (a[1], a[2]))

    def tick(self, now_ms: int) -> int | None:
        """Heartbeat when due, and leave the group when the application stopped polling for longer than
        max.poll.interval.ms, as Kafka's consumer does (the node's upkeep calls this); when to call again."""
        with self._lock:
            if self._closed or not self._subscription or self._next_heartbeat is None:
                return None
            if self._joined and time.monotonic() - self._last_poll > self.settings["max.poll.interval.ms"] / 1000:
                # The others get what it holds now (the acknowledgements already made go first, from this
                # thread; the last poll's records are not taken as processed); the next poll joins again.
                self._release_and_leave(accept=False)
                return None
            if now_ms >= self._next_heartbeat:
                try:
                    self._heartbeat()
                except LogStoreError:
                    # Tried again at the next interval, as Kafka's heartbeat thread retries.
                    self._next_heartbeat = now_ms + 1_000
            return self._next_heartbeat

    # -- lifecycle ------------------------------------------------------------------------------

    def _release_and_leave(self, *, accept: bool = True) -> None:
        """Send what is pending (`accept`: with the last poll's records, in implicit mode), close the session
        (what the member holds is released) and leave the group."""
        with self._lock:
            if accept:
                self._accept_in_flight()
            self._in_flight.clear()
            try:
                if self._session_epoch != INITIAL_EPOCH:
                    self._send_acknowledgements(FINAL_EPOCH)
            finally:
                self._session_epoch, self._session = INITIAL_EPOCH, set()
                if self._joined:
                    self._node.groups.share_group_heartbeat(self._group_id, self._member_id, LEAVE_EPOCH,
                                                            client_id=self._client_id, client_host=_CLIENT_HOST)
                self._member_epoch, self._joined, self._subscription_sent = 0, False, False
                self._next_heartbeat, self._assigned = None, []

    def close(self) -> None:
        """Acknowledge what is pending (implicit mode: the last poll's records), release the rest, leave."""
        if self._closed:
            return
        try:
            self._release_and_leave()
        finally:
            self._closed = True
            self._node.remove_client(self)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the share consumer is closed")

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
