"""A node: the store, the producer ids and the coordinators over one data directory, and their upkeep.

The broker puts a socket server in front of a node; an embedding
application drives one directly (`logstore.broker.embedded`). Either way the
same objects decide: the coordinators never know who called them.

The upkeep thread does what Kafka's broker schedules: it acts on group
deadlines (sessions, join phases) as they come, aborts transactions past their
timeout and finishes decided ones, expires idle transactional ids and old
committed offsets, and gives every registered in-process client a tick (a
producer's linger, a consumer's heartbeat). Each job may block on an fsync;
a job that fails is logged and tried again at its next turn, so one bad
write never stops the others.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any, Protocol

from logstore.broker.config import BrokerConfig
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.group_loading import collection_paused
from logstore.broker.coordinator.internal_topics import SHARE_STATE_TOPIC, ShareStateTopicConfig
from logstore.broker.coordinator.share_group import ShareGroupConfig
from logstore.broker.coordinator.transaction import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TXN_STATE_TOPIC,
    TransactionCoordinator,
    TxnConfig,
)
from logstore.broker.group_configs import GroupConfigStore
from logstore.broker.producer_ids import ProducerIdAllocator
from logstore.broker.share.coordinator import ShareCoordinator
from logstore.broker.share.manager import SharePartitionManager
from logstore.broker.share.sessions import ShareSessions
from logstore.broker.share.state_store import ShareStateStore
from logstore.checkpoints import new_topic_id, topic_id_to_string, write_atomically
from logstore.config import INTERNAL_TOPIC_CONFIGS
from logstore.dir_transactions import recover_dir_transactions
from logstore.errors import InvalidRequestError, StorageError, UnknownTopicOrPartitionError
from logstore.filesystem import OS, FileSystem
from logstore.manager import LogManager

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"


class Ticking(Protocol):
    """An in-process client with timed work: `tick(now_ms)` does what is due, returns when to call again."""

    def tick(self, now_ms: int) -> int | None: ...

    def close(self) -> None: ...


def cluster_id(log_dir: str, node_id: int, fs: FileSystem = OS) -> str:
    """The cluster id in `meta.properties` (Kafka's file), made once per log dir."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        text = fs.read_file(path).decode("utf-8")
    except FileNotFoundError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "cluster.id":
            return value
    made = topic_id_to_string(new_topic_id())
    write_atomically(path, f"version=1\ncluster.id={made}\nnode.id={node_id}\n".encode(), fs=fs)
    return made


def _now_ms() -> int:
    return int(time.time() * 1000)


class Node:
    """The store and coordinators of one data directory, with the thread that keeps them.

    The group coordinator's partitions are read in the constructor, or with `load_groups_in_background`
    by a thread of their own while the caller goes on (a broker listens meanwhile, as Kafka's does, and
    groups not read yet answer COORDINATOR_LOAD_IN_PROGRESS).
    """

    def __init__(self, config: BrokerConfig, *,
                 on_appended: Callable[[Iterable[tuple[str, int]] | None], None] | None = None,
                 fs: FileSystem = OS, load_groups_in_background: bool = False):
        self.config = config
        self.node_id = config["node.id"]
        settings = {k: v for k, v in config.settings.items() if "." in k}
        # Opening the store takes the directory's lock: nothing below runs for a second process.
        self.store = LogManager(config.log_dirs, config.log_config, broker_settings=settings,
                                topic_defaults=_internal_topic_defaults(config.settings), fs=fs)
        try:
            self.cluster_id = cluster_id(config.log_dirs[0], self.node_id, fs)
            self._complete_topics()
            self.producer_ids = ProducerIdAllocator(config.log_dirs[0], fs)
            self._on_appended = on_appended or (lambda partitions: None)
            self._wake = threading.Condition()
            self._woken = False
            self._closing = False
            self._clients: list[Ticking] = []
            # Appends and markers bump this; in-process consumers wait on it for data.
            self.appended = threading.Condition()
            self.append_count = 0
            self.transactions = TransactionCoordinator(self.store, self.producer_ids.allocate,
                                                       TxnConfig.from_settings(config.settings),
                                                       on_markers=self.notify_appended,
                                                       share_state_topic=ShareStateTopicConfig.from_settings(
                                                           config.settings))
            loaded = self.transactions.load()
            if loaded:
                log.info("transaction coordinator loaded %d transactional ids", loaded)
            self._raise_producer_id_floor()
            # Each group's configs (`group-configs`), which the group coordinator reads per group.
            self.group_configs = GroupConfigStore(config.log_dirs, lambda: config.settings, fs)
            # Before the groups: a share group's members leaving or its partitions assigned reach it.
            self.share = self._start_share()
            # Before loading: a loaded group with members sets session timers, which wake the upkeep.
            self.groups = GroupCoordinator(self.store, self.transactions, GroupConfig.from_settings(config.settings),
                                           on_timer=self.wake, group_setting=self.group_configs.value,
                                           share_config=ShareGroupConfig.from_settings(config.settings),
                                           share_listener=self.share)
            self.group_configs.listen(self.groups.group_configs_changed)
            self.transactions.on_offsets_marker = self.groups.complete_txn_offsets
            self._group_loader: threading.Thread | None = None
            if load_groups_in_background:
                self._group_loader = threading.Thread(target=self._load_groups,
                                                      args=(self.groups.begin_load(), True),
                                                      name="logstore-group-load", daemon=True)
                self._group_loader.start()
            else:
                self._load_groups(self.groups.begin_load(), background=False)
        except BaseException:
            try:
                self.store.close()
            except StorageError as exc:
                log.warning("log dirs not closed cleanly after the failed start: %s", exc)
            raise
        self._upkeep = threading.Thread(target=self._run_upkeep, name="logstore-upkeep", daemon=True)

    def _load_groups(self, partitions: range, background: bool) -> None:
        """Read the group coordinator's partitions one by one; groups of those not read yet answer
        COORDINATOR_LOAD_IN_PROGRESS. In the `background`, a partition that cannot be read is logged and its
        groups answer COORDINATOR_NOT_AVAILABLE (the broker already serves); otherwise its error is raised."""
        started = time.monotonic()
        with collection_paused():
            for partition in partitions:
                if self._closing:
                    self.groups.abandon_load("the broker is stopping")
                    return
                try:
                    self.groups.load_partition(partition)
                except Exception as exc:
                    if not background:
                        raise
                    log.exception("%s-%d could not be loaded; its groups answer COORDINATOR_NOT_AVAILABLE",
                                  OFFSETS_TOPIC, partition)
                    self.groups.fail_partition(partition, exc)
        loaded = self.groups.group_count()
        if loaded:
            log.info("group coordinator loaded %d groups in %.2f s", loaded, time.monotonic() - started)

    def group_setting(self, group_id: str, name: str) -> Any:
        """A group config's value for a group: its own, else the broker's default."""
        return self.group_configs.value(group_id, name)

    def _start_share(self) -> ShareCoordinator:
        """Share groups' state: `__share_group_state` loaded, the share-partitions and sessions over it."""
        settings = self.config.settings
        states = ShareStateStore(self.store, self.transactions.internal_topics,
                                 fsync=settings["logstore.acks.all.fsync"],
                                 snapshot_every=settings["share.coordinator.snapshot.update.records.per.snapshot"],
                                 clock=_now_ms)
        states.load()
        partitions = SharePartitionManager(self.store, states, self.group_setting,
                                           max_in_flight=settings["group.share.partition.max.record.locks"],
                                           on_available=self.notify_appended, on_deadline=self.wake)
        self._clients.append(partitions)
        return ShareCoordinator(self.store, partitions, ShareSessions(settings["group.share.max.share.sessions"]))

    def _complete_topics(self) -> None:
        """Create empty the partitions a copied directory lacks, up to the count Kafka gave each topic.

        The count is the metadata log's where it knows the topic; for the
        internal topics it is at least the broker's setting, since a group or
        transactional id is found by hashing over it.
        """
        metadata = self.store.kafka_metadata
        wanted = {OFFSETS_TOPIC: self.config["offsets.topic.num.partitions"],
                  TXN_STATE_TOPIC: self.config["transaction.state.log.num.partitions"],
                  SHARE_STATE_TOPIC: self.config["share.coordinator.state.topic.num.partitions"]}
        for topic, count in self.store.topics().items():
            known = metadata.topics.get(topic) if metadata is not None else None
            total = max(count, known.partitions if known is not None else wanted.get(topic, count))
            made = self.store.complete_partitions(topic, total)
            if made and topic in wanted:
                log.info("%s: created the %d partitions missing from the log dir", topic, len(made))
            elif made:
                log.warning("topic %s: partitions %s are not in the log dir (a copy of one broker of a "
                            "cluster?); they start empty", topic, ",".join(map(str, made)))

    def _raise_producer_id_floor(self) -> None:
        """Hand out no producer id that the directory already holds (Kafka's ids, or ours before a lost file)."""
        metadata = self.store.kafka_metadata
        highest = max(self.store.max_producer_id(scan_segments=not self.producer_ids.persisted),
                      self.transactions.highest_loaded_producer_id,
                      metadata.cluster.next_producer_id - 1
                      if metadata is not None and metadata.cluster.next_producer_id is not None else -1)
        self.producer_ids.reserve_through(highest)

    def start(self) -> Node:
        """Start the upkeep thread, loaded members' sessions from now; returns the node."""
        self.groups.restart_sessions()
        self._upkeep.start()
        return self

    # -- what clients and handlers use ---------------------------------------------------------

    def notify_appended(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Records or markers were appended to `partitions` (None: any): wake whoever waits for data."""
        with self.appended:
            self.append_count += 1
            self.appended.notify_all()
        self._on_appended(partitions)

    def add_client(self, client: Ticking) -> None:
        """Give an in-process client its ticks from now on."""
        with self._wake:
            self._clients.append(client)
        self.wake()

    def remove_client(self, client: Ticking) -> None:
        """No more ticks for `client`."""
        with self._wake:
            if client in self._clients:
                self._clients.remove(client)

    def wake(self) -> None:
        """Make the upkeep look at its deadlines again (one moved earlier); callable from any thread."""
        with self._wake:
            self._woken = True
            self._wake.notify()

    def delete_topic(self, name: str) -> None:
        """Delete a topic: every group's offsets of it first (Kafka's tombstones), then its directories.

        In that order, so a topic made again with the name never finds old
        offsets, even after a crash between the two.
        """
        if name not in self.store.topics():
            raise UnknownTopicOrPartitionError(f"no topic {name!r}")
        if name in INTERNAL_TOPICS:
            # The coordinators' state lives there: deleting it would forget every transaction.
            raise InvalidRequestError(f"{name} is an internal topic; it cannot be deleted")
        removed = self.groups.delete_topic_offsets(name)
        if removed:
            log.info("topic %s: removed %d committed offsets", name, removed)
        self.store.delete_topic(name)

    # -- upkeep ------------------------------------------------------------------------------

    def _run_upkeep(self) -> None:
        settings = self.config.settings
        intervals = {
            "abort": settings["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            "expire_ids": settings["transaction.remove.expired.transaction.cleanup.interval.ms"],
            "expire_offsets": settings["offsets.retention.check.interval.ms"],
        }
        txns, groups = self.transactions, self.groups
        jobs = {
            "abort": self._abort_and_finish_transactions,
            "expire_ids": lambda: _logged(txns.expire_transactional_ids(),
                                          "expired %d transactional ids (transactional.id.expiration.ms)"),
            "expire_offsets": lambda: _logged(groups.expire_offsets(),
                                              "expired %d committed offsets (offsets.retention.minutes)"),
        }
        self._guarded("finish decided transactions", lambda: _logged(
            txns.complete_prepared(), "finished %d transactions decided before the restart"))
        self._guarded("finish log dir transactions", self._finish_dir_transactions)
        now = _now_ms()
        due = {name: now + every for name, every in intervals.items()}
        while True:
            with self._wake:
                if self._closing:
                    return
                self._woken = False
                clients = list(self._clients)
            now = _now_ms()
            deadlines = [self._guarded("group deadlines", groups.poll)]
            for name, at in due.items():
                if now >= at:
                    self._guarded(name, jobs[name])
                    due[name] = now + intervals[name]
                deadlines.append(due[name])
            for client in clients:
                deadlines.append(self._guarded(f"tick of {client!r}", lambda: client.tick(_now_ms())))
            wake_at = min(d for d in deadlines if d is not None)
            with self._wake:
                if not self._woken and not self._closing:
                    self._wake.wait(max(wake_at - _now_ms(), 0) / 1000)

    def _abort_and_finish_transactions(self) -> None:
        self.transactions.abort_timed_out()
        self.transactions.complete_prepared()
        self._finish_dir_transactions()

    def _finish_dir_transactions(self) -> None:
        """Transactions Spark jobs wrote into the log dir before this broker held it (logstore.dir_transactions):
        decided ones finished, undecided ones aborted once their timeout has passed."""
        done = recover_dir_transactions(self.store)
        if done.jobs:
            log.info("log dir transactions of %d jobs finished: %d committed, %d aborted",
                     len(done.jobs), done.committed, done.aborted)

    def _guarded(self, what: str, job: Callable[[], Any]) -> Any:
        try:
            return job()
        except Exception:  # noqa: BLE001 - one failed job must not stop the upkeep; tried again next turn
            log.exception("upkeep: %s failed", what)
            return None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the in-process clients still open, stop the upkeep, then close the store (checkpoints,
        snapshots, clean-shutdown marker).

        A log dir that cannot be closed cleanly (a full disk, an offline dir) is logged, not raised: it
        gets no clean-shutdown marker, so the next start recovers it, and the stop itself succeeded.
        """
        with self._wake:
            clients = list(self._clients)
        for client in clients:
            self._guarded(f"close of {client!r}", client.close)
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._upkeep.is_alive() and self._upkeep is not threading.current_thread():
            self._upkeep.join()
        if self._group_loader is not None:
            self._group_loader.join()  # it stops after the partition it reads: the store must outlive it
        try:
            self.store.close()
        except StorageError as exc:
            log.warning("stopped without a clean shutdown of every log dir (the next start recovers them): %s",
                        exc)


def _internal_topic_defaults(settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Kafka's configs of the internal topics, with this broker's segment sizes for them."""
    segment_bytes = {OFFSETS_TOPIC: settings["offsets.topic.segment.bytes"],
                     TXN_STATE_TOPIC: settings["transaction.state.log.segment.bytes"]}
    return {topic: {**configs, "segment.bytes": segment_bytes[topic]}
            for topic, configs in INTERNAL_TOPIC_CONFIGS.items()}


def _logged(items: int | Sized, message: str) -> None:
    count = items if isinstance(items, int) else len(items)
    if count:
        log.info(message, count)
