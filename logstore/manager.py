"""LogManager: every partition under `log.dirs`, its checkpoints and its schedule.

Opening a store reads the per-directory checkpoints, loads every
`<topic>-<partition>` directory in parallel (recovering them if the clean
shutdown marker is missing) and removes the marker, so a crash from here on
is seen as unclean. Closing flushes every log, writes the checkpoints and
then the marker. Topic names follow Kafka's rule, which also keeps every
path inside the data directory.

A log dir is the unit of failure, as in Kafka: an I/O error on its write
path takes it offline (`dir_failures`, log_dir_failures.py), after which
`log()` answers its partitions with KAFKA_STORAGE_ERROR, nothing more is
written there, and `close` writes no clean-shutdown marker for it; the
marker is written only for a dir whose every log flush and checkpoint of
the close succeeded, so one a full disk kept from them is recovered on the
next open. A full disk costs no dir: it fails the calls that need space
(a checkpoint keeps its old file, which only makes a crash scan more). A
topic creation that fails part-way removes what it made, so no directory
of a topic the store does not have is left; a topic's directories are
renamed for deletion under Kafka's name (`filenames.delete_dir_name`),
which fits 255 bytes for any legal topic name.

Topic config overrides persist in `topic-configs` (see `logstore.topics`).
A directory Kafka wrote is opened as Kafka left it: `__cluster_metadata-0`
is read, never loaded as a partition (see `logstore.kafka_metadata`), and
Kafka's internal topics keep their compaction without any override on disk.
Files are reached through the store's `FileSystem` (`fs`, default the real one).
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from logstore.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpoint,
    derived_topic_id,
    new_topic_id,
    read_clean_shutdown_marker,
    read_partition_metadata,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)
from logstore.config import INTERNAL_TOPIC_CONFIGS, REMOVED_TOPIC_CONFIGS, TOPIC_CONFIGS, LogConfig
from logstore.dir_lock import DirLock
from logstore.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from logstore.filenames import delete_dir_name, is_delete_dir, parse_partition_dir
from logstore.filesystem import OS, FileSystem
from logstore.formats import DEFAULT_FORMAT, LogFormat
from logstore.kafka_metadata import METADATA_TOPIC, KafkaMetadata, applied_state, read_kafka_metadata, record_applied
from logstore.kafka_metadata import topic_overrides as kafka_topic_overrides
from logstore.log import Log
from logstore.log_cleaner import (
    CLEANER_CHECKPOINT,
    CLEANER_DEFAULTS,
    CLEANER_STATE,
    LIVE_CLEANER_SETTINGS,
    LogCleaner,
)
from logstore.log_dir_failures import LogDirFailureChannel, write_failed
from logstore.partition_growth import make_partitions, write_missing_metadata
from logstore.topics import (
    TOPIC_CONFIGS_COPIES,
    TOPIC_CONFIGS_FILE,
    read_topic_configs,
    topic_level,
    validate_topic_name,
)

if TYPE_CHECKING:
    from logstore.loader import RecoveryReport

log = logging.getLogger(__name__)

# Kafka's intervals for the background jobs (broker config names).
SCHEDULE_DEFAULTS = {
    "log.retention.check.interval.ms": 300_000,
    "log.flush.offset.checkpoint.interval.ms": 60_000,
    "log.flush.start.offset.checkpoint.interval.ms": 60_000,
    "log.flush.scheduler.interval.ms": 1_000,
    "num.recovery.threads.per.data.dir": 2,
    "producer.id.expiration.ms": 86_400_000,
    "producer.id.expiration.check.interval.ms": 600_000,
}


def _enabled(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while thousands of partitions are opened or made (Mercurial's `nogc`).

    Each partition adds some 50 long-lived objects, none of them garbage, and the collector answers heap
    growth with full passes over every object: 0.6 of 2.2 s when opening 10,000 partitions. Left as it
    was found (a caller that turned it off keeps it off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def partition_key(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a `<topic>-<partition>` directory name, None for any other name."""
    try:
        key = parse_partition_dir(name)
        validate_topic_name(key[0])
    except (ValueError, InvalidTopicError):
        return None
    return key


class _OpenOptions(TypedDict, total=False):
    """What `LogManager._open_log` passes on to `Log.open`."""

    clean_shutdown: bool
    recovery_point: int
    log_start_offset: int


class _StoreOptions(TypedDict, total=False):
    """What `open_store` passes on to `LogManager`."""

    topic_configs: Mapping[str, Mapping[str, Any]] | None
    fmt: LogFormat
    broker_settings: Mapping[str, Any] | None
    start_scheduler: bool
    topic_defaults: Mapping[str, Mapping[str, Any]] | None
    fs: FileSystem


@dataclass(frozen=True)
class TopicInfo:
    """A topic: its id, partition count and config."""

    name: str
    topic_id: bytes
    partitions: int
    config: LogConfig


class LogManager:
    """The partitions of one store: open, create, delete, checkpoint, retain, close.

    A topic's config is the default config, then its entry in `topic_defaults`
    (Kafka's internal topics' unless given), then the overrides it was created
    with (kept in `topic-configs`), then `topic_configs` given to this opener
    (for this run only, not written).
    """

    def __init__(self, log_dirs: str | Iterable[str], config: Mapping[str, Any] | LogConfig | None = None, *,
                 topic_configs: Mapping[str, Mapping[str, Any]] | None = None, fmt: LogFormat = DEFAULT_FORMAT,
                 broker_settings: Mapping[str, Any] | None = None, start_scheduler: bool = True,
                 topic_defaults: Mapping[str, Mapping[str, Any]] | None = None, fs: FileSystem = OS):
        self.fs = fs
        self.log_dirs = [os.path.abspath(d) for d in ([log_dirs] if isinstance(log_dirs, str) else log_dirs)]
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        self.default_config = config if isinstance(config, LogConfig) else LogConfig.from_properties(config)
        self.settings = {**SCHEDULE_DEFAULTS, **CLEANER_DEFAULTS, **(broker_settings or {})}
        self.format = fmt
        self._given_overrides = {t: topic_level(c, self.default_config) for t, c in (topic_configs or {}).items()}
        defaults = INTERNAL_TOPIC_CONFIGS if topic_defaults is None else topic_defaults
        # Kept: a new broker-level default (`reconfigure`) is applied under them again.
        self._topic_defaults = {t: dict(c) for t, c in defaults.items()}
        self._topic_bases = {t: self.default_config.with_overrides(c) for t, c in defaults.items()}
        # What the directory's `__cluster_metadata` says of the topics on disk (None: no metadata log).
        self.kafka_metadata: KafkaMetadata | None = None
        self._stored_overrides: dict[str, dict[str, Any]] = {}
        self._config_generation = 0
        self._logs: dict[tuple[str, int], Log] = {}
        # Bumped whenever partitions come or go: clients cache partition counts until it moves.
        self.topics_version = 0
        # Topic → partition count, kept with `_logs`: creations, Metadata and the coordinators ask far more
        # often than topics change, and counting `_logs` costs a pass over every partition.
        self._counts: dict[str, int] = {}
        self._topic_ids: dict[str, bytes] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        self._closed = False
        self.reports: list[RecoveryReport | None] = []
        # Kafka's LogDirFailureChannel: an I/O error takes a whole log dir offline (log_dir_failures.py).
        self.dir_failures = LogDirFailureChannel(self.log_dirs)
        self._dir_locks: list[DirLock] = []
        try:
            for d in self.log_dirs:
                if not fs.isdir(d):
                    # A new log dir whose name a power cut could take back: its parent is synced, as Kafka does.
                    fs.makedirs(d, exist_ok=True)
                    fs.fsync_dir(os.path.dirname(os.path.abspath(d)))
                self._dir_locks.append(DirLock(d, fs))
            self._load_all()
        except BaseException:
            self._release_dirs()
            raise
        # Compacts the logs whose cleanup.policy has `compact`; its thread runs beside the scheduler's.
        self.cleaner = LogCleaner(self.logs, self.log_dirs, self.settings, fs=fs)
        if start_scheduler:
            self._scheduler = threading.Thread(target=self._run_schedule, name="logstore-scheduler", daemon=True)
            self._scheduler.start()
            if _enabled(self.settings["log.cleaner.enable"]):
                self.cleaner.start()

    # -- loading -------------------------------------------------------------------------

    def _load_all(self) -> None:
        started = time.monotonic()
        jobs = []
        for log_dir in self.log_dirs:
            clean = read_clean_shutdown_marker(log_dir, self.fs)
            recovery = OffsetCheckpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT), self.fs).read()
            starts = OffsetCheckpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT), self.fs).read()
            for name in sorted(self.fs.listdir(log_dir)):
                path = os.path.join(log_dir, name)
                if not self.fs.isdir(path):
                    continue
                if is_delete_dir(name):
                    self.fs.rmtree(path)
                    continue
                key = partition_key(name)
                # Kafka's metadata log is read, not served: its retention is by snapshot, not by config.
                if key is None or key[0] == METADATA_TOPIC:
                    continue
                jobs.append((log_dir, path, key, clean, recovery.get(key, 0), starts.get(key, 0)))
        self._load_topic_configs({job[2][0] for job in jobs})
        self.kafka_metadata = read_kafka_metadata(self.log_dirs, {job[2][0]: job[1] for job in jobs}, fs=self.fs)
        if self.kafka_metadata is not None:
            self._apply_kafka_metadata(self.kafka_metadata)
        else:
            self._compact_what_kafka_cleaned({job[2][0] for job in jobs})
        total = len(jobs)
        done = 0
        workers = max(1, int(self.settings["num.recovery.threads.per.data.dir"]) * len(self.log_dirs))
        # One config per topic, shared by its partitions (a LogConfig is frozen; a change swaps it whole).
        configs = {topic: self.config_for(topic) for topic in {job[2][0] for job in jobs}}
        with collector_paused(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix="logstore-load") as pool:
            futures = [pool.submit(self._load_one, *job, configs[job[2][0]]) for job in jobs]
            try:
                for future in futures:
                    future.result()
                    done += 1
                    if done % 100 == 0 or done == total:
                        log.info("loaded %d/%d partitions", done, total)
            except BaseException:
                for future in futures:
                    future.cancel()
                for opened in self._logs.values():
                    opened.close()
                raise
        # A partition a crash cut short of its partition.metadata gets the id its topic's others carry.
        if completed := write_missing_metadata(self.fs, self._logs, dict(self._topic_ids)):
            log.info("wrote the partition.metadata of %d partitions whose creation a crash cut short", completed)
        self._name_topics_without_ids()
        for log_dir in self.log_dirs:
            remove_clean_shutdown_marker(log_dir, self.fs)
        log.info("opened %d partitions in %.2f s", total, time.monotonic() - started)

    def _name_topics_without_ids(self) -> None:
        # Kafka before 2.8 wrote no partition.metadata. The metadata log's id wins; otherwise one derived
        # from the name stays the same across restarts without writing a file Kafka would check.
        known = self.kafka_metadata.topics if self.kafka_metadata is not None else {}
        for topic in {name for name, _ in self._logs}:
            if topic not in self._topic_ids:
                self._topic_ids[topic] = known[topic].topic_id if topic in known else derived_topic_id(topic)

    def _load_topic_configs(self, present: set[str]) -> None:
        found = TOPIC_CONFIGS_COPIES.read_newest(self.log_dirs, lambda path: read_topic_configs(path, self.fs))
        stored: dict[str, dict[str, Any]]
        self._config_generation, stored = found or (0, {})
        self._stored_overrides = stored
        # An entry without directories is a create or delete cut short by a crash; left
        # on disk, it would come back as the config of a later topic of that name.
        kept = {t: o for t, o in stored.items() if t in present}
        if kept != stored:
            try:
                self._store_topic_configs(kept)
            except StorageError as exc:
                # A full disk must not stop a start: the stale entries are dropped again at the next one.
                log.warning("%s not rewritten (%s); entries without directories dropped in memory",
                            TOPIC_CONFIGS_FILE, exc)
                self._stored_overrides = kept

    def _apply_kafka_metadata(self, metadata: KafkaMetadata) -> None:
        # Once per state of the metadata log: an override changed here since is not brought back.
        if applied_state(self.log_dirs[0], self.fs) == metadata.state:
            return
        imported = {t: topic_level(c, self._base_config(t))
                    for t, c in kafka_topic_overrides(metadata, self.default_config).items()}
        merged = {**self._stored_overrides, **imported}
        if merged != self._stored_overrides:
            self._store_topic_configs(merged)
        record_applied(self.log_dirs, metadata, self.fs)
        if imported:
            log.info("topic configs of %d topics taken from %s", len(imported), METADATA_TOPIC)

    def _compact_what_kafka_cleaned(self, present: set[str]) -> None:
        # A ZooKeeper-era directory carries no topic configs, but Kafka's cleaner checkpoints only the logs it
        # compacts: those topics keep compacting here rather than fall to retention. Only on a directory no
        # store has opened (no topic-configs, no cleaner-state.json), so a policy changed here later stands.
        if any(self.fs.exists(os.path.join(d, name)) for d in self.log_dirs for name in (TOPIC_CONFIGS_FILE,
                                                                                          CLEANER_STATE)):
            return
        cleaned = {topic for d in self.log_dirs
                   for topic, _ in OffsetCheckpoint(os.path.join(d, CLEANER_CHECKPOINT), self.fs).read()}
        found = sorted((cleaned & present) - set(self._topic_bases))
        if found:
            self._store_topic_configs({**self._stored_overrides, **{t: {"cleanup.policy": "compact"} for t in found}})
            log.info("topics Kafka's cleaner compacted stay compacted: %s", ", ".join(found))

    def _store_topic_configs(self, topics: dict[str, dict[str, Any]]) -> None:
        # Raised before writing: a generation half-written by a failed write is never reused.
        self._config_generation += 1
        TOPIC_CONFIGS_COPIES.write(self.log_dirs, self._config_generation, topics, self.fs)
        self._stored_overrides = topics

    def _open_log(self, path: str, config: LogConfig, **kwargs: Unpack[_OpenOptions]) -> Log:
        opened = Log.open(path, config, fmt=self.format, fs=self.fs,
                          producer_id_expiration_ms=int(self.settings["producer.id.expiration.ms"]),
                          dir_state=self.dir_failures.state(os.path.dirname(path)), **kwargs)
        opened.on_truncated = self._checkpoint_after_truncation
        return opened

    def _load_one(self, log_dir: str, path: str, key: tuple[str, int], clean: bool, recovery_point: int,
                  log_start_offset: int, config: LogConfig) -> None:
        topic, _ = key
        opened = self._open_log(path, config, clean_shutdown=clean, recovery_point=recovery_point,
                                log_start_offset=log_start_offset)
        with self._lock:
            self._logs[key] = opened
            self._count_partitions(topic, (key[1],))
            self.reports.append(opened.recovery_report)
            metadata = os.path.join(path, PARTITION_METADATA)
            if topic not in self._topic_ids and self.fs.exists(metadata):
                self._topic_ids[topic] = read_partition_metadata(metadata, self.fs)

    # -- topics --------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        """The default config with the topic's overrides."""
        return self._base_config(topic).with_overrides(self.topic_overrides(topic))

    def _base_config(self, topic: str) -> LogConfig:
        return self._topic_bases.get(topic, self.default_config)

    def topic_overrides(self, topic: str) -> dict[str, Any]:
        """The settings `topic` sets itself, under topic-level Kafka names ({} for none or an unknown topic)."""
        return {**self._stored_overrides.get(topic, {}), **self._given_overrides.get(topic, {})}

    def alter_topic_config(self, topic: str, overrides: Mapping[str, Any | None], *,
                           validate_only: bool = False) -> LogConfig:
        """Change a topic's overrides (a value sets one, None deletes it) and return the config it runs with now.

        Names are topic-level (`retention.ms`). The whole resulting config is
        checked first, as Kafka's LogConfig.validate does, so an error changes
        nothing; then the overrides are written to `topic-configs` and only
        then swapped into every partition's Log. `validate_only` stops after
        the checks. An override given to this opener for the run is dropped
        for every name changed here, so the change takes effect. An unknown
        topic is refused before any config is looked at (Kafka answers
        UNKNOWN_TOPIC_OR_PARTITION first); a config Kafka 4 removed
        (`REMOVED_TOPIC_CONFIGS`) is taken and dropped, as Kafka drops it.
        """
        validate_topic_name(topic)
        with self._lock:
            self._check_open()
            if topic not in self._partition_counts():
                raise UnknownTopicOrPartitionError(f"The topic '{topic}' does not exist.")
            for name in overrides:
                if name not in TOPIC_CONFIGS and name not in REMOVED_TOPIC_CONFIGS:
                    raise InvalidConfigError(f"Unknown topic config name: {name}")
            stored = dict(self._stored_overrides.get(topic, {}))
            for name, value in overrides.items():
                if value is None:
                    stored.pop(name, None)
                else:
                    stored[name] = value
            stored = topic_level(stored, self.default_config)
            given = {n: v for n, v in self._given_overrides.get(topic, {}).items() if n not in overrides}
            config = self._base_config(topic).with_overrides({**stored, **given})
            if validate_only:
                return config
            # Kafka keeps every override as a string: doubles go to the file so, exactly as given.
            stored = {n: str(v) if isinstance(v, float) else v for n, v in stored.items()}
            if stored != self._stored_overrides.get(topic, {}):
                others = {t: o for t, o in self._stored_overrides.items() if t != topic}
                self._store_topic_configs({**others, topic: stored} if stored else others)
            if given:
                self._given_overrides[topic] = given
            else:
                self._given_overrides.pop(topic, None)
            logs = [opened for (name, _), opened in self._logs.items() if name == topic]
            # As Kafka's LogManager.updateTopicConfig: a round cleaning a log that stops compacting is aborted.
            stops = any(opened.config.compacts and not config.compacts for opened in logs)
            with self.cleaner.paused() if stops else nullcontext():
                for opened in logs:
                    # Swapped whole, as Kafka swaps its volatile config: a LogConfig is frozen, so a
                    # reader sees the old one or the new one; an append under way may finish on the old.
                    opened.config = config
            return config

    def reconfigure(self, default_config: LogConfig, settings: Mapping[str, Any] | None = None, *,
                    validate_only: bool = False) -> None:
        """Run with new broker-level defaults (Kafka's DynamicLogConfig): every topic's config is recomputed
        over `default_config` and swapped into its live Logs, so a topic without its own override takes the
        new value at once. Every topic's new config is checked before any is swapped (InvalidConfigError
        naming the topic: an override may conflict with a new default); `validate_only` stops there.
        `settings`: new values of the store's broker settings, of which `producer.id.expiration.ms` applies
        at once to every partition and the cleaner's buffer sizes and backoff to its next round (the others at
        the next start)."""
        with self._lock:
            self._check_open()
            bases = {t: default_config.with_overrides(c) for t, c in self._topic_defaults.items()}
            configs: dict[str, LogConfig] = {}
            for topic in self._partition_counts():
                try:
                    configs[topic] = bases.get(topic, default_config).with_overrides(self.topic_overrides(topic))
                except InvalidConfigError as exc:
                    raise InvalidConfigError(f"{exc} (in the config of topic {topic})") from None
            if validate_only:
                return
            self.default_config, self._topic_bases = default_config, bases
            changed = {name for name, value in (settings or {}).items() if self.settings.get(name) != value}
            self.settings = {**self.settings, **(settings or {})}
            expiration_ms = int(self.settings["producer.id.expiration.ms"])
            logs = list(self._logs.items())
            # As alter_topic_config: a round cleaning a log that stops compacting is aborted first.
            stops = any(opened.config.compacts and not configs[topic].compacts for (topic, _), opened in logs)
            with self.cleaner.paused() if stops else nullcontext():
                for (topic, _), opened in logs:
                    opened.config = configs[topic]
                    opened.producers.expiration_ms = expiration_ms
            if changed & LIVE_CLEANER_SETTINGS:
                self.cleaner.reconfigure(self.settings)

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                     *, topic_id: bytes | None = None) -> TopicInfo:
        """Create `partitions` empty partition directories with a fresh topic id.

        All or nothing: a creation that fails part-way (no space, no descriptors left) removes what it
        made and raises StorageError, so no directory of a topic the store does not have is left behind.
        """
        validate_topic_name(name)
        if partitions < 1:
            raise InvalidPartitionsError(f"a topic needs at least one partition, got {partitions}")
        with self._lock:
            self._check_open()
            if name in self._partition_counts():
                raise TopicExistsError(f"topic {name!r} already exists")
            overrides = topic_level(config or {}, self.default_config)
            topic_config = self._base_config(name).with_overrides(overrides)
            before = self._stored_overrides
            try:
                # Written before the directories, so no directory of the topic is ever seen without its config.
                if overrides or name in self._stored_overrides:
                    stored = {t: o for t, o in self._stored_overrides.items() if t != name}
                    self._store_topic_configs({**stored, name: overrides} if overrides else stored)
                self._given_overrides.pop(name, None)
                topic_id = topic_id or new_topic_id()
                self._topic_ids[name] = topic_id
                self._add_partitions(name, range(partitions), topic_id, topic_config)
            except BaseException:
                self._topic_ids.pop(name, None)
                self._restore_topic_configs(before)
                raise
            return TopicInfo(name, topic_id, partitions, topic_config)

    def _restore_topic_configs(self, before: dict[str, dict[str, Any]]) -> None:
        """After a failed create: the overrides as they were (in memory at least: an entry left on disk
        without directories is dropped at the next open)."""
        if self._stored_overrides == before:
            return
        try:
            self._store_topic_configs(before)
        except (OSError, StorageError) as exc:
            log.warning("%s not rewritten after a failed create (%s); the next open drops the entry",
                        TOPIC_CONFIGS_FILE, exc)
            self._stored_overrides = before

    def _add_partitions(self, name: str, partitions: Iterable[int], topic_id: bytes, config: LogConfig) -> None:
        # Published together: `topics()` reads without the lock, and a partial partition count
        # would send keys hashed over it (group and transactional ids) to the wrong partition.
        with collector_paused():
            opened = make_partitions(
                self.fs, name, partitions, topic_id, self._least_loaded_dir,
                lambda path: self._open_log(path, config, clean_shutdown=True),
                lambda log_dir, what, exc: self.dir_failures.state(log_dir).fail(what, exc))
        self._logs.update(opened)
        self._count_partitions(name, (p for _, p in opened))
        self.topics_version += 1

    def create_partitions(self, name: str, total: int) -> list[int]:
        """Grow a topic to `total` partitions (Kafka's InvalidPartitions messages); returns the new ones.

        All or nothing while the store runs; a crash part-way leaves a prefix of them (partition_growth.py).
        """
        with self._lock:
            self._check_open()
            current = self.partitions(name)
            if total == current:
                raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
            if total < current:
                raise InvalidPartitionsError(f"The topic {name} currently has {current} partition(s); {total} "
                                             "would not be an increase.")
            self._add_partitions(name, range(current, total), self.topic_id(name), self.config_for(name))
            return list(range(current, total))

    def complete_partitions(self, name: str, total: int) -> list[int]:
        """Create empty the partitions of `name` below `total` that are missing; returns them.

        A log dir copied from one broker of a cluster holds only the
        partitions that broker had; one node serving the topic needs them all.
        """
        with self._lock:
            self._check_open()
            present = {p for t, p in self._logs if t == name}
            missing = [p for p in range(total) if p not in present]
            if missing:
                self._add_partitions(name, missing, self.topic_id(name), self.config_for(name))
            return missing

    def max_producer_id(self, *, scan_segments: bool = False) -> int:
        """The highest producer id any partition's producer state holds, -1 for none.

        `scan_segments` also reads every batch header: producers expired from
        the state (as an old directory's all are) still have ids in the log.
        """
        return max((opened.max_producer_id(scan_segments=scan_segments) for opened in list(self._logs.values())),
                   default=-1)

    def _least_loaded_dir(self, placing: Mapping[Any, str] | None = None) -> str:
        """The log dir holding the fewest partitions, counting those being made (their directories)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = {d: 0 for d in self.log_dirs}
        for directory in [*(o.directory for o in self._logs.values()), *(placing or {}).values()]:
            parent = os.path.dirname(directory)
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_topic(self, name: str) -> None:
        """Remove a topic: each directory is renamed `*-delete` first, so a crash mid-way finishes on reopen."""
        with self._lock:
            self._check_open()
            keys = sorted(k for k in self._logs if k[0] == name)
            if not keys:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            for key in keys:
                doomed = self._logs.pop(key)
                if key == keys[-1]:   # the count is the highest partition's, gone last
                    self._counts.pop(name, None)
                self.topics_version += 1
                # Kafka aborts cleaning first: a round must not read files being removed.
                with self.cleaner.paused():
                    try:
                        doomed.close()
                    except StorageError as exc:
                        # Its files go anyway: what it could not flush is not wanted.
                        log.warning("%s: closed for deletion: %s", doomed.directory, exc)
                log_dir = os.path.dirname(doomed.directory)
                renamed = os.path.join(log_dir, delete_dir_name(*key))
                try:
                    self.fs.rename(doomed.directory, renamed)
                    # As Kafka's renameDir: the rename is durable before the files go.
                    self.fs.fsync_dir(log_dir)
                except OSError as exc:
                    raise write_failed(self.dir_failures.state(log_dir), f"rename of {doomed.directory} for "
                                       "deletion", exc) from exc
                self.fs.rmtree(renamed)
            self._topic_ids.pop(name, None)
            self._given_overrides.pop(name, None)
            if name in self._stored_overrides:
                self._store_topic_configs({t: o for t, o in self._stored_overrides.items() if t != name})

    def topics(self) -> dict[str, int]:
        """Topic name → partition count."""
        return dict(self._partition_counts())

    def _partition_counts(self) -> dict[str, int]:
        return self._counts

    def _count_partitions(self, topic: str, partitions: Iterable[int]) -> None:
        # One assignment: readers go without the lock, and a partial count would send keys hashed over it
        # (group and transactional ids) to the wrong partition.
        self._counts[topic] = max(self._counts.get(topic, 0), *(p + 1 for p in partitions))

    def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has, 0 if there is no such topic (no copy of every topic's count)."""
        return self._partition_counts().get(topic, 0)

    def partitions(self, topic: str) -> int:
        """How many partitions `topic` has."""
        count = self._partition_counts().get(topic)
        if count is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        return count

    def topic_id(self, topic: str) -> bytes:
        """The 16-byte topic id in `partition.metadata`."""
        try:
            return self._topic_ids[topic]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}") from None

    def log(self, topic: str, partition: int = 0) -> Log:
        """The partition log; LogDirOfflineError (KAFKA_STORAGE_ERROR) for one in an offline log dir, as
        Kafka's replica manager answers every request for an offline partition."""
        try:
            found = self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}") from None
        found.dir_state.check()
        return found

    def logs(self) -> dict[tuple[str, int], Log]:
        """Every open partition."""
        return dict(self._logs)

    # -- background work -----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every online log dir.

        Raises StorageError, once every dir was tried, if one could not be written: a full disk leaves
        the old files (a lower recovery point only makes a crash scan more), anything else takes the
        dir offline.
        """
        failure: StorageError | None = None
        with self._lock:
            for log_dir in self.log_dirs:
                if not self.dir_failures.state(log_dir).online:
                    continue
                try:
                    self._checkpoint_dir(log_dir)
                except StorageError as exc:
                    failure = failure or exc
        if failure is not None:
            raise failure

    def _checkpoint_dir(self, log_dir: str) -> None:
        mine = {k: v for k, v in self._logs.items() if os.path.dirname(v.directory) == log_dir}
        try:
            OffsetCheckpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT), self.fs).write(
                {k: v.recovery_point for k, v in mine.items()})
            OffsetCheckpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT), self.fs).write(
                {k: v.log_start_offset for k, v in mine.items()})
        except OSError as exc:
            raise write_failed(self.dir_failures.state(log_dir), f"checkpoint in {log_dir}", exc) from exc

    def _checkpoint_after_truncation(self, truncated: Log) -> None:
        """Kafka rewrites the checkpoint at once: a stale recovery point above a truncation would let a crash
        skip the scan of what is appended there next. When it cannot be written, the old file goes (a
        crash then scans the whole dir); when that fails too, the dir goes offline."""
        log_dir = os.path.dirname(truncated.directory)
        state = self.dir_failures.state(log_dir)
        try:
            with self._lock:
                state.check()
                self._checkpoint_dir(log_dir)
        except StorageError as exc:
            if not state.online:
                return
            path = os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT)
            try:
                self.fs.unlink(path)
                self.fs.fsync_dir(log_dir)
            except FileNotFoundError:
                pass
            except OSError as unlink_exc:
                state.fail(f"removal of the stale {path}", unlink_exc)
                return
            log.warning("%s: not rewritten after a truncation of %s (%s); removed, so a crash scans every log "
                        "of the dir", path, truncated.directory, exc)

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the segments deleted."""
        deleted = 0
        for opened in list(self._logs.values()):
            deleted += opened.delete_old_segments(now_ms)
            opened.delete_expired_files()
        return deleted

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Drop producers idle for producer.id.expiration.ms from every log; returns how many went."""
        return sum(len(opened.expire_producers(now_ms)) for opened in list(self._logs.values()))

    def flush_due(self) -> None:
        """Flush the logs whose flush.ms has passed."""
        for opened in list(self._logs.values()):
            opened.flush_if_due()

    def _run_schedule(self) -> None:
        intervals: dict[Callable[[], object], int] = {
            self.run_retention: self.settings["log.retention.check.interval.ms"],
            self.checkpoint: self.settings["log.flush.offset.checkpoint.interval.ms"],
            self.flush_due: self.settings["log.flush.scheduler.interval.ms"],
            self.expire_producers: self.settings["producer.id.expiration.check.interval.ms"],
        }
        due = {job: time.monotonic() + ms / 1000 for job, ms in intervals.items()}
        while not self._stop.is_set():
            job = min(due, key=due.get)  # type: ignore[arg-type]  # never None: `due` is asked for its own keys
            if self._stop.wait(max(0.0, due[job] - time.monotonic())):
                return
            try:
                job()
            except (OSError, StorageError) as exc:
                log.error("scheduled %s failed: %s", job.__name__, exc)
            due[job] = time.monotonic() + intervals[job] / 1000

    # -- lifecycle -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the log manager is closed")

    def close(self) -> None:
        """Clean shutdown: flush and close every log, write the checkpoints, then the clean-shutdown marker of
        each log dir where all of that worked.

        An offline dir gets nothing written. Everything is closed either way; then StorageError is raised
        if some dir was not closed cleanly (a full disk, an I/O error): the next open recovers it.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        # Before the logs close: a round under way is aborted and leaves only `.cleaned` files.
        self.cleaner.stop()
        if self._scheduler is not None:
            self._scheduler.join()
        unclean: dict[str, StorageError] = {}
        try:
            for opened in self._logs.values():
                try:
                    opened.close()
                except StorageError as exc:
                    unclean.setdefault(os.path.dirname(opened.directory), exc)
            for log_dir in self.log_dirs:
                state = self.dir_failures.state(log_dir)
                if not state.online:
                    unclean.setdefault(log_dir, state.error())
                    continue
                try:
                    self._checkpoint_dir(log_dir)
                    # A directory holding a log that failed to flush is recovered on the next open.
                    if log_dir not in unclean:
                        write_clean_shutdown_marker(log_dir, fs=self.fs)
                except StorageError as exc:
                    unclean.setdefault(log_dir, exc)
        finally:
            self._release_dirs()
        for log_dir, why in unclean.items():
            log.warning("log dir %s not closed cleanly, the next start recovers it: %s", log_dir, why)
        if unclean:
            raise next(iter(unclean.values()))

    @property
    def offline_dirs(self) -> list[str]:
        """The log dirs an I/O error took offline (their partitions answer KAFKA_STORAGE_ERROR)."""
        return self.dir_failures.offline_dirs

    def _release_dirs(self) -> None:
        for held in self._dir_locks:
            held.release()
        self._dir_locks.clear()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(path: str | Iterable[str], config: Mapping[str, Any] | None = None,
               **kwargs: Unpack[_StoreOptions]) -> LogManager:
    """Open (creating if needed) a store directory; the entry point for embedding."""
    return LogManager(path, config, **kwargs)
