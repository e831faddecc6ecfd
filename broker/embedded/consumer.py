"""The embedded consumer: Kafka's consumer API reading straight from the node's logs.

`assign` takes partitions by hand; `subscribe` joins the consumer's group
through the node's group coordinator (see membership.py) and calls the
rebalance callbacks as Kafka's do: `on_revoke` before partitions go,
`on_assign` after they come, `on_lost` when the group forgot the member.
Positions start at the group's committed offset, else where
`auto.offset.reset` says. read_committed reads stop at the last stable offset
and drop aborted transactions, with the same filter a networked client
applies to a Fetch response. `poll` returns `{(topic, partition): [Record]}`,
as kafka-python's does, with at most `max.poll.records` records.

Each step asks the node's authorizer what the broker's handler of its API
asks (access.py): `poll` READ on the assigned topics (Fetch), and for a
subscription READ on the group and DESCRIBE on the subscribed topics
(JoinGroup, Metadata); positions DESCRIBE on the group and topics
(OffsetFetch, ListOffsets); `commit` READ on the group and topics. A refusal
raises its *AuthorizationFailedError.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from logstore.broker.authorizer import AclOperation, ResourceType
from logstore.broker.embedded.access import Access
from logstore.broker.embedded.membership import Change, GroupMetadata, Membership, parse_strategies
from logstore.broker.embedded.settings import CONSUMER_SETTINGS, parse_settings
from logstore.errors import (
    InvalidGroupIdError,
    LogStoreError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from logstore.read_committed import READ_COMMITTED, CommittedFilter

if TYPE_CHECKING:
    from logstore.broker.coordinator.group_state import CommittedOffset
    from logstore.broker.node import Node
    from logstore.formats.kafka import Record

TopicPartition = tuple[str, int]
Callback = Callable[["Consumer", list[TopicPartition]], None]
RETRY_BACKOFF_S = 0.02
_CLIENT_NUMBERS = itertools.count(1)


class NoOffsetForPartitionError(LogStoreError):
    """No committed offset and `auto.offset.reset=none` (Kafka's NoOffsetForPartitionException)."""


class Consumer:
    """Kafka's consumer over an embedded node: manual assignment or group subscription."""

    def __init__(self, node: Node, config: Mapping[str, Any] | None = None):
        self.settings = s = parse_settings(config, CONSUMER_SETTINGS, "consumer")
        self._access = Access(node, s["principal"])
        self._node = node
        self._store = node.store
        self._groups = node.groups
        self._group_id: str | None = s["group.id"]
        # Kafka's default client id, which the coordinator puts in front of the member ids it makes.
        self._client_id = s["client.id"] or f"consumer-{self._group_id or ''}-{next(_CLIENT_NUMBERS)}"
        self._committed_reads = s["isolation.level"] == READ_COMMITTED
        self._strategies = parse_strategies(s["partition.assignment.strategy"])
        self._assigned: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        # Records read but not yet returned (max.poll.records), and the offset after the read.
        self._buffered: dict[TopicPartition, tuple[list[Record], int]] = {}
        # Partition counts of the subscribed topics at the last assignment: a change asks for a rebalance.
        self._assigned_counts: dict[str, int] = {}
        self._subscription: frozenset[str] | None = None
        self._callbacks: dict[str, Callback | None] = {}
        self._member: Membership | None = None
        self._rotation = itertools.count()
        self._next_auto_commit = time.monotonic() + s["auto.commit.interval.ms"] / 1000
        self._last_poll = time.monotonic()
        self._closed = False
        node.add_client(self)

    def __repr__(self) -> str:
        return f"<Consumer {self._group_id} {self._member.member_id if self._member else 'assigned'}>"

    # -- what is read ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no group membership)."""
        self._check_open()
        if self._subscription is not None:
            raise ValueError("assign() after subscribe(): unsubscribe() first")
        self._set_assignment(list(dict.fromkeys(partitions)))

    def subscribe(self, topics: Iterable[str], *, on_assign: Callback | None = None,
                  on_revoke: Callback | None = None, on_lost: Callback | None = None) -> None:
        """Join the group for `topics`; partitions come and go in `poll` with these callbacks."""
        self._check_open()
        if self._group_id is None:
            raise InvalidGroupIdError("subscribe() needs group.id")
        if self._assigned and self._subscription is None:
            raise ValueError("subscribe() after assign(): unassign() first")
        s = self.settings
        if self._member is None:
            self._member = Membership(self._groups, self._group_id, s["group.instance.id"], self._client_id,
                                      self._strategies, s["session.timeout.ms"], s["max.poll.interval.ms"],
                                      s["heartbeat.interval.ms"])
        self._subscription = frozenset(topics)
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._member.subscribe(self._subscription)
        self._node.wake()

    def unsubscribe(self) -> None:
        """Leave the group (revoking what it gave) or drop a manual assignment."""
        self._leave()
        self._subscription = None
        self._set_assignment([])

    def assignment(self) -> list[TopicPartition]:
        """The partitions this consumer reads now."""
        return list(self._assigned)

    def group_metadata(self) -> GroupMetadata:
        """The member's group, generation and id, for `Producer.send_offsets_to_transaction`."""
        if self._member is not None:
            return self._member.metadata()
        if self._group_id is None:
            raise InvalidGroupIdError("the consumer has no group.id")
        return GroupMetadata(self._group_id, -1, "", self.settings["group.instance.id"])

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        keep = set(partitions)
        for tp in list(self._positions):
            if tp not in keep:
                del self._positions[tp]
                self._buffered.pop(tp, None)
        self._assigned = partitions

    # -- positions -------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` returns for `tp`."""
        self._check_assigned(tp)
        if tp not in self._positions:
            self._init_positions([tp], time.monotonic() + 60)
        return self._positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read `tp` from `offset` on."""
        self._check_assigned(tp)
        self._positions[tp] = offset
        self._buffered.pop(tp, None)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from each partition's log start."""
        chosen = list(self._assigned if partitions is None else partitions)
        self._require_topics(AclOperation.DESCRIBE, chosen)   # ListOffsets
        for tp in chosen:
            self.seek(tp, self._store.log(*tp).log_start_offset)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read only what comes after now (the last stable offset, for read_committed)."""
        chosen = list(self._assigned if partitions is None else partitions)
        self._require_topics(AclOperation.DESCRIBE, chosen)   # ListOffsets
        for tp in chosen:
            self.seek(tp, self._end(tp))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None where none is)."""
        asked = list(partitions)
        self._require_offsets(AclOperation.DESCRIBE, self._need_group(), asked)   # OffsetFetch
        found = self._groups.fetch_offsets(self._need_group(), asked, self._committed_reads)
        out: dict[TopicPartition, int | None] = {}
        for tp, value in found.items():
            if isinstance(value, LogStoreError):
                raise value
            out[tp] = None if value is None else value.offset
        return out

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets`, or every assigned partition's position, to the group (synchronously)."""
        group_id = self._need_group()
        if offsets is None:
            offsets = {tp: self._positions[tp] for tp in self._assigned if tp in self._positions}
        if not offsets:
            return
        self._require_offsets(AclOperation.READ, group_id, offsets)   # OffsetCommit
        meta = self.group_metadata()
        errors = self._groups.commit_offsets(group_id, meta.member_id, meta.group_instance_id, meta.generation_id,
                                             {tp: (offset, -1, "") for tp, offset in offsets.items()})
        failed = next((e for e in errors.values() if e is not None), None)
        if failed is not None:
            raise failed

    def _end(self, tp: TopicPartition) -> int:
        log_ = self._store.log(*tp)
        return log_.last_stable_offset if self._committed_reads else log_.high_watermark

    def _init_positions(self, partitions: list[TopicPartition], deadline: float) -> None:
        """Start each partition at the group's committed offset, else where auto.offset.reset says."""
        committed: dict[TopicPartition, CommittedOffset | LogStoreError | None] = {}
        self._require_topics(AclOperation.DESCRIBE, partitions)   # OffsetFetch, ListOffsets
        if self._group_id is not None:
            self._access.require(AclOperation.DESCRIBE, ResourceType.GROUP, (self._group_id,))
            while True:
                committed = self._groups.fetch_offsets(self._group_id, partitions, self._committed_reads)
                # A transactional commit still pending: its outcome decides where to start (KIP-447).
                if not any(isinstance(v, UnstableOffsetCommitError) for v in committed.values()) \
                        or time.monotonic() >= deadline:
                    break
                time.sleep(RETRY_BACKOFF_S)
        for tp in partitions:
            value = committed.get(tp)
            if isinstance(value, LogStoreError):
                raise value
            self._positions[tp] = value.offset if value is not None else self._reset_offset(tp)

    def _reset_offset(self, tp: TopicPartition) -> int:
        policy = self.settings["auto.offset.reset"]
        if policy == "earliest":
            return self._store.log(*tp).log_start_offset
        if policy == "latest":
            return self._end(tp)
        raise NoOffsetForPartitionError(f"{tp[0]}-{tp[1]}: no committed offset and auto.offset.reset=none")

    # -- polling ---------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> dict[TopicPartition, list[Record]]:
        """Records from the assigned partitions, waiting up to `timeout` s for some; rebalances happen here."""
        self._check_open()
        deadline = time.monotonic() + timeout
        self._last_poll = time.monotonic()
        node = self._node
        while True:
            seen = node.append_count
            member = self._member
            if member is not None:
                self._maybe_auto_commit(member)
                self._rebalance(member, deadline)
            records = self._fetch(deadline)
            left = deadline - time.monotonic()
            if records or left <= 0:
                return records
            with node.appended:
                node.appended.wait_for(lambda: node.append_count != seen or self._rejoin_wanted(), left)

    def _rejoin_wanted(self) -> bool:
        member = self._member
        return member is not None and not member.stable

    def _fetch(self, deadline: float) -> dict[TopicPartition, list[Record]]:
        self._require_topics(AclOperation.READ, self._assigned)   # Fetch
        missing = [tp for tp in self._assigned if tp not in self._positions]
        if missing:
            self._init_positions(missing, deadline)
        budget = self.settings["max.poll.records"]
        out: dict[TopicPartition, list[Record]] = {}
        if not self._assigned:
            return out
        start = next(self._rotation) % len(self._assigned)
        for tp in self._assigned[start:] + self._assigned[:start]:
            if budget <= 0:
                break
            buffered = self._buffered.pop(tp, None)
            records, end = buffered if buffered is not None else self._read(tp)
            if not records:
                self._positions[tp] = end
                continue
            taken, rest = records[:budget], records[budget:]
            if rest:
                self._buffered[tp] = (rest, end)
            self._positions[tp] = rest[0].offset if rest else end
            out[tp] = taken
            budget -= len(taken)
        return out

    def _read(self, tp: TopicPartition) -> tuple[list[Record], int]:
        """What `tp` has from its position (up to max.partition.fetch.bytes), and the offset after it."""
        log_ = self._store.log(*tp)
        position = self._positions[tp]
        isolation = READ_COMMITTED if self._committed_reads else "read_uncommitted"
        try:
            data = log_.read(position, self.settings["max.partition.fetch.bytes"], isolation=isolation)
        except OffsetOutOfRangeError:
            if self.settings["auto.offset.reset"] == "none":
                raise
            return [], self._reset_offset(tp)
        if data.records is None:
            return [], position
        fmt = log_.format
        buf = data.read()
        aborted = data.aborted_transactions or []  # a list whenever the read is read_committed
        keep = CommittedFilter(aborted).keep if self._committed_reads else None
        records: list[Record] = []
        end = position
        for entry in fmt.iter_entries(buf):
            end = entry.last_offset + 1
            if keep is not None:
                if not keep(entry, lambda: fmt.read_marker(buf, entry.position).type_name == "ABORT"):
                    continue
            elif getattr(entry, "is_control", False):
                continue
            decoded = fmt.decode_entry(buf, entry)
            if decoded and decoded[0].offset < position:
                decoded = [r for r in decoded if r.offset >= position]
            records.extend(decoded)
        return records, max(end, position)

    # -- the group ---------------------------------------------------------------------------

    def _rebalance(self, member: Membership, deadline: float) -> None:
        # JoinGroup, SyncGroup and Heartbeat: READ on the group; Metadata of the subscription: DESCRIBE.
        self._access.require(AclOperation.READ, ResourceType.GROUP, (member.group_id,))
        self._access.require(AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(self._subscription or ()))
        counts = self._subscribed_counts()
        if member.stable and counts != self._assigned_counts:
            member.rejoin_needed = True  # a subscribed topic appeared or grew: the leader must look again
        while not member.stable:
            if member.idle and not member.cooperative:
                revoked = member.revoke_all()
                if revoked:
                    self._revoke(revoked)
            change = member.step(counts, deadline)
            if change is None:
                return
            self._apply(change)
            self._assigned_counts = counts
            if time.monotonic() >= deadline:
                return

    def _subscribed_counts(self) -> dict[str, int]:
        topics = self._store.topics()
        return {t: topics[t] for t in sorted(self._subscription or ()) if t in topics}

    def _apply(self, change: Change) -> None:
        if change.revoked:
            self._revoke(change.revoked)
        if change.lost:
            self._drop(change.lost)
            self._call("lost", change.lost)
        if change.done:
            member = self._member
            assert member is not None  # only a subscribed consumer rebalances
            self._set_assignment(sorted(member.owned))
            self._node.wake()  # heartbeats are due from now on: the upkeep must schedule them
            self._call("assign", change.assigned)

    def _revoke(self, partitions: Collection[TopicPartition]) -> None:
        if self.settings["enable.auto.commit"]:
            self._commit_quietly({tp: self._positions[tp] for tp in partitions if tp in self._positions})
        self._call("revoke", partitions)
        self._drop(partitions)

    def _drop(self, partitions: Collection[TopicPartition]) -> None:
        self._set_assignment([tp for tp in self._assigned if tp not in partitions])

    def _call(self, which: str, partitions: Iterable[TopicPartition]) -> None:
        callback = self._callbacks.get(which)
        if callback is not None:
            callback(self, sorted(partitions))

    def _maybe_auto_commit(self, member: Membership) -> None:
        if self.settings["enable.auto.commit"] and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.settings["auto.commit.interval.ms"] / 1000
            if member.stable:
                self._commit_quietly(None)

    def _commit_quietly(self, offsets: Mapping[TopicPartition, int] | None) -> None:
        # Auto-commit failing (a rebalance began) is not the application's error: Kafka logs and goes on.
        try:
            self.commit(offsets)
        except LogStoreError:
            pass

    def tick(self, now_ms: int) -> int | None:
        """Heartbeat when due, and leave a group the application stopped polling (the node's upkeep calls this)."""
        member = self._member
        if member is None or self._closed:
            return None
        next_at = None
        if time.monotonic() - self._last_poll > self.settings["max.poll.interval.ms"] / 1000:
            if member.member_id:
                # Kafka's heartbeat thread does the same: the member is stuck, let the others take its partitions.
                member.leave(lost=True)
        else:
            next_at = member.heartbeat(now_ms)
        if not member.stable:
            with self._node.appended:
                self._node.appended.notify_all()  # a poll waiting for data must rejoin now
        return next_at

    # -- lifecycle ---------------------------------------------------------------------------

    def _require_topics(self, operation: AclOperation, partitions: Iterable[TopicPartition]) -> None:
        self._access.require(operation, ResourceType.TOPIC, sorted({topic for topic, _ in partitions}))

    def _require_offsets(self, operation: AclOperation, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """The group, then the topics: Kafka's offset APIs refuse the group first."""
        self._access.require(operation, ResourceType.GROUP, (group_id,))
        self._require_topics(operation, partitions)

    def _need_group(self) -> str:
        if self._group_id is None:
            raise InvalidGroupIdError("the consumer has no group.id")
        return self._group_id

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._assigned:
            raise UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} is not assigned to this consumer")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the consumer is closed")

    def _leave(self) -> None:
        member = self._member
        if member is None:
            return
        if self._assigned:
            self._revoke(set(self._assigned))
        member.leave()
        self._member = None

    def close(self) -> None:
        """Commit (with auto-commit), revoke, leave the group and stop."""
        if self._closed:
            return
        try:
            if self._member is None and self._group_id is not None and self.settings["enable.auto.commit"]:
                self._commit_quietly(None)
            self._leave()
        finally:
            self._closed = True
            self._node.remove_client(self)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
