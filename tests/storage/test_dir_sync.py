"""One syncfs for many waiting partitions of a log dir (logstore/dir_sync.py): what it makes durable, that a
power cut at any sync of such a window loses nothing acknowledged, that a failed syncfs takes the dir offline,
and, with a real broker, that acks=all over many partitions survives SIGKILL.

The store's syncs for waiters (the log dir's turns, which its thread runs otherwise, and the pool's) run in
a `QueuedExecutor` the test drains, so a window's waiters are all queued before its turn runs (as the
broker's event loop queues a Produce's partitions) and the boundaries come in the same order every run.
"""
from __future__ import annotations

import errno
import queue
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import logstore.dir_sync
import logstore.durability
import logstore.filesystem
import logstore.log
from clients.broker_process import BrokerProcess, finish_brokers, free_port
from fault_fs import FaultFileSystem, SimulatedPowerLoss
from logstore.checkpoints import CLEAN_SHUTDOWN_MARKER
from logstore.dir_sync import QUIET_UNWRITTEN_MAX, SHARED_MIN, DirSyncer
from logstore.errors import StorageError
from logstore.filesystem import OsFileSystem
from logstore.manager import LogManager
from power_loss import MODES, DeferredFlusher

TOPIC = "spread"
WIDE = 2 * SHARED_MIN      # partitions of a window that shares one syncfs
NARROW = SHARED_MIN - 1    # partitions of a window synced one by one while much else is unwritten
BUSY = QUIET_UNWRITTEN_MAX + 1   # the machine's unwritten file data that keeps narrow windows to fdatasyncs
WAIT = 30


class QueuedExecutor:
    """Stands in for the storage's sync pool: what is submitted runs when the test drains it, in order."""

    def __init__(self) -> None:
        self.queue: list[Callable[[], object]] = []

    def __call__(self) -> QueuedExecutor:   # `_pool()` answers the executor
        return self

    def submit(self, fn: Callable[[], object]) -> Future:
        """Queue `fn`; a future nobody waits on (the pool's callers do not)."""
        self.queue.append(fn)
        return Future()

    def drain(self) -> None:
        """Run everything queued, and what that queues, in this thread."""
        while self.queue:
            self.queue.pop(0)()


@pytest.fixture
def pool(monkeypatch) -> QueuedExecutor:
    executor = QueuedExecutor()
    monkeypatch.setattr(logstore.durability, "_pool", executor)
    # The dir's turns too, which its own thread runs otherwise.
    monkeypatch.setattr(DirSyncer, "_start_turns", lambda syncer: executor.submit(syncer._run))
    return executor


def _wait_all(store: LogManager, pool: QueuedExecutor, partitions: range, acked: dict[int, list[bytes]],
              value: Callable[[int], bytes]) -> list[int | BaseException]:
    """Append one record to each partition, wait for all of them at once, drain the pool; what each waiter
    heard. An acknowledged record goes to `acked`."""
    outcomes: list[int | BaseException] = []
    for p in partitions:
        log = store.log(TOPIC, p)
        end = log.append_records([value(p)]).last_offset + 1

        def settle(point: int | BaseException, p: int = p) -> None:
            outcomes.append(point)
            if not isinstance(point, BaseException):
                acked[p].append(value(p))
        log.when_durable(end, settle)
    try:
        pool.drain()
    finally:
        pool.queue.clear()
    return outcomes


def _store(d: Path, fs: FaultFileSystem | None = None, segment_bytes: int = 1 << 20) -> LogManager:
    store = LogManager(str(d), start_scheduler=False, **({"fs": fs} if fs is not None else {}))
    if TOPIC not in store.topics():
        # Small indexes: a sweep leaves dozens of stores mapped until they are collected.
        store.create_topic(TOPIC, WIDE, config={"segment.bytes": segment_bytes, "segment.index.bytes": 4096})
    return store


def test_a_wide_window_takes_one_syncfs_and_a_narrow_one_a_sync_per_partition(tmp_path, pool):
    fs = FaultFileSystem(real_syncs=False)
    fs.unwritten = BUSY
    store = _store(tmp_path / "d", fs)
    acked: dict[int, list[bytes]] = {p: [] for p in range(WIDE)}
    # A partition's first append writes its leader-epoch checkpoint (fsync, rename, directory fsync) itself.
    assert _wait_all(store, pool, range(WIDE), acked, lambda p: b"first %d" % p) == [1] * WIDE
    opened = len(fs.boundaries)
    outcomes = _wait_all(store, pool, range(WIDE), acked, lambda p: b"wide %d" % p)
    wide = [b.op for b in fs.boundaries[opened:]]
    assert wide == ["syncfs"]
    assert outcomes == [2] * WIDE
    assert all(store.log(TOPIC, p).recovery_point == 2 for p in range(WIDE))
    opened = len(fs.boundaries)
    outcomes = _wait_all(store, pool, range(NARROW), acked, lambda p: b"narrow %d" % p)
    narrow = [b.op for b in fs.boundaries[opened:]]
    assert narrow == ["fsync"] * NARROW and outcomes == [3] * NARROW
    # What one syncfs made durable survives a cut with names dropped: every record of both windows.
    fs.crash()
    with LogManager(str(tmp_path / "d"), start_scheduler=False) as again:
        for p in range(WIDE):
            assert [r.value for r in again.log(TOPIC, p).iter_records()] == acked[p]


@pytest.mark.parametrize("unwritten", [0, QUIET_UNWRITTEN_MAX, BUSY, None])
def test_a_narrow_window_shares_a_syncfs_only_while_little_else_is_unwritten(tmp_path, pool, unwritten):
    fs = FaultFileSystem(real_syncs=False)
    store = _store(tmp_path / "d", fs)
    acked: dict[int, list[bytes]] = {p: [] for p in range(WIDE)}
    assert _wait_all(store, pool, range(WIDE), acked, lambda p: b"first %d" % p) == [1] * WIDE
    fs.unwritten = unwritten
    quiet = unwritten is not None and unwritten <= QUIET_UNWRITTEN_MAX
    for turn, partitions in enumerate((range(2), range(NARROW), range(1))):
        opened = len(fs.boundaries)
        outcomes = _wait_all(store, pool, partitions, acked, lambda p, turn=turn: b"turn %d of %d" % (turn, p))
        ops = [b.op for b in fs.boundaries[opened:]]
        # One partition is always its own fdatasync: a syncfs would only write more.
        shared = quiet and len(partitions) > 1
        assert ops == (["syncfs"] if shared else ["fsync"] * len(partitions)), (turn, ops)
        assert all(isinstance(o, int) for o in outcomes) and len(outcomes) == len(partitions)
    fs.crash()
    with LogManager(str(tmp_path / "d"), start_scheduler=False) as again:
        for p in range(WIDE):
            assert [r.value for r in again.log(TOPIC, p).iter_records()] == acked[p]


def test_the_machines_unwritten_data_is_asked_once_a_recheck_interval(tmp_path, pool, monkeypatch):
    fs = FaultFileSystem(real_syncs=False)
    store = _store(tmp_path / "d", fs)
    acked: dict[int, list[bytes]] = {p: [] for p in range(WIDE)}
    assert _wait_all(store, pool, range(WIDE), acked, lambda p: b"first %d" % p) == [1] * WIDE
    asked = []
    real = fs.unwritten_bytes
    monkeypatch.setattr(fs, "unwritten_bytes", lambda: asked.append(fs.unwritten) or real())
    now = [1000.0]
    monkeypatch.setattr(logstore.dir_sync, "_clock", lambda: now[0])

    def turn(label: bytes) -> list[str]:
        opened = len(fs.boundaries)
        outcomes = _wait_all(store, pool, range(2), acked, lambda p: label + b" %d" % p)
        assert all(isinstance(o, int) for o in outcomes) and len(outcomes) == 2
        return [b.op for b in fs.boundaries[opened:]]

    fs.unwritten = 0
    assert turn(b"quiet") == ["syncfs"] and asked == [0]
    fs.unwritten = BUSY
    now[0] += logstore.dir_sync.QUIET_RECHECK_S / 2
    assert turn(b"within the interval") == ["syncfs"] and asked == [0]   # the answer of a moment ago
    now[0] += logstore.dir_sync.QUIET_RECHECK_S
    assert turn(b"after it") == ["fsync", "fsync"] and asked == [0, BUSY]
    fs.crash()
    with LogManager(str(tmp_path / "d"), start_scheduler=False) as again:
        for p in range(WIDE):
            assert [r.value for r in again.log(TOPIC, p).iter_records()] == acked[p]


def test_the_real_syncfs_syncs_a_dir_and_reports_one_it_cannot_open(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    OsFileSystem().syncfs(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        OsFileSystem().syncfs(str(tmp_path / "gone"))


def test_the_unwritten_bytes_are_the_kernels_dirty_and_writeback_or_unknown(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nDirty:              1048 kB\nWriteback:            12 kB\n")
    monkeypatch.setattr(logstore.filesystem, "MEMINFO", str(meminfo))
    assert OsFileSystem().unwritten_bytes() == (1048 + 12) * 1024
    meminfo.write_text("MemTotal:       24000000 kB\nDirty:              1048 kB\n")
    assert OsFileSystem().unwritten_bytes() is None
    monkeypatch.setattr(logstore.filesystem, "MEMINFO", str(tmp_path / "absent"))
    assert OsFileSystem().unwritten_bytes() is None


def _window(store: LogManager, pool: QueuedExecutor, acked: dict[int, list[bytes]]) -> None:
    """Three turns: a wide one over fresh segments' first records, a wide one in which partition 0 rolls, a
    narrow one."""
    for turn, partitions in enumerate((range(WIDE), range(WIDE), range(NARROW))):
        _wait_all(store, pool, partitions, acked, lambda p, turn=turn: b"turn %d of %d " % (turn, p) + b"x" * 60)


@pytest.mark.parametrize("unwritten", [0, BUSY], ids=["quiet", "busy"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_cut_at_any_sync_of_a_multi_partition_window_keeps_what_was_acknowledged(tmp_path, pool, monkeypatch,
                                                                                   after, unwritten):
    start = tmp_path / "start"
    # Small segments: partition 0 rolls in the window (its rolled segment is synced whole by the syncfs).
    _store(start, segment_bytes=200).close()

    def attempt(name: str, cut: int | None, durable_metadata: bool) -> tuple[list[str], dict[int, list[bytes]], bool]:
        d = tmp_path / name
        shutil.copytree(start, d)
        monkeypatch.setattr(logstore.log, "roll_flusher", DeferredFlusher())   # no background thread
        fs = FaultFileSystem(real_syncs=False)
        fs.unwritten = unwritten
        store = _store(d, fs, segment_bytes=200)
        opened = len(fs.boundaries)
        if cut is not None:
            fs.crash_at(cut, after=after)
        acked: dict[int, list[bytes]] = {p: [] for p in range(WIDE)}
        try:
            _window(store, pool, acked)
            finished = True
        except SimulatedPowerLoss:
            finished = False
        crossed = [b.op for b in fs.boundaries[opened:]]
        fs.crash(durable_metadata=durable_metadata)
        return crossed, acked, finished

    crossed, acked, _ = attempt("count", None, False)
    # Two wide turns of one syncfs each; the narrow one's syncfs, or its fdatasyncs while much else is
    # unwritten; the first appends' epoch checkpoints.
    if unwritten:
        assert crossed.count("syncfs") == 2 and crossed.count("fsync") >= NARROW, crossed
    else:
        assert crossed.count("syncfs") == 3, crossed
    assert all(len(values) == (3 if p < NARROW else 2) for p, values in acked.items())
    total = len(crossed)
    for k in range(1, total + 2):
        for durable_metadata in MODES:
            _, acked, _ = attempt(f"cut-{k}-{durable_metadata}", k, durable_metadata)
            where = f"cut {'after' if after else 'at'} boundary {k} of {total}, names kept={durable_metadata}"
            with LogManager(str(tmp_path / f"cut-{k}-{durable_metadata}"), start_scheduler=False) as again:
                for p in range(WIDE):
                    got = [r.value for r in again.log(TOPIC, p).iter_records()]
                    assert got[:len(acked[p])] == acked[p], f"{where}: partition {p} lost acknowledged records"
            shutil.rmtree(tmp_path / f"cut-{k}-{durable_metadata}")


def test_a_failed_syncfs_fails_every_waiter_and_takes_the_dir_offline(tmp_path, pool):
    fs = FaultFileSystem(real_syncs=False)
    store = _store(tmp_path / "d", fs)
    fs.fail_at(1, "syncfs", error=errno.EIO)
    logs = [store.log(TOPIC, p) for p in range(WIDE)]
    acked: dict[int, list[bytes]] = {p: [] for p in range(WIDE)}
    outcomes = _wait_all(store, pool, range(WIDE), acked, lambda p: b"lost %d" % p)
    assert len(outcomes) == WIDE and all(isinstance(o, StorageError) for o in outcomes), outcomes
    assert not any(acked.values())
    assert store.offline_dirs == [str(tmp_path / "d")]
    assert all(log.recovery_point == 0 for log in logs)
    with pytest.raises(StorageError, match="offline"):
        logs[0].append_records([b"refused"])
    with pytest.raises(StorageError, match="syncfs"):
        store.close()   # unclean: the next start recovers the dir
    assert not (tmp_path / "d" / CLEAN_SHUTDOWN_MARKER).exists()


def test_a_dirs_turns_run_in_its_own_thread_which_ends_when_idle_and_comes_back(tmp_path, monkeypatch):
    monkeypatch.setattr(logstore.dir_sync, "IDLE_EXIT_S", 0.05)
    heard: queue.Queue[tuple[int | BaseException, threading.Thread]] = queue.Queue()
    with _store(tmp_path / "d") as store:
        log = store.log(TOPIC, 0)
        for value in (b"first", b"after the thread ended"):
            end = log.append_records([value]).last_offset + 1
            log.when_durable(end, lambda point: heard.put((point, threading.current_thread())))
            point, thread = heard.get(timeout=WAIT)
            assert point == end == log.recovery_point
            assert thread.name.startswith("logstore-sync ") and thread is not threading.current_thread()
            thread.join(WAIT)
            assert not thread.is_alive()


@pytest.mark.parametrize("partitions", [NARROW, WIDE])
def test_waits_from_many_threads_are_all_settled_while_the_sync_thread_comes_and_goes(tmp_path, monkeypatch,
                                                                                     partitions):
    # A thread that ends as soon as it is idle: its end races the requests that start the next one.
    monkeypatch.setattr(logstore.dir_sync, "IDLE_EXIT_S", 0.0)
    waits_from_threads(tmp_path / "d", partitions, threads=4, waits=100)


def waits_from_threads(path: Path, partitions: int, threads: int, waits: int) -> None:
    """`threads` threads each append and wait `waits` times, one at a time, round the partitions: every
    wait settles, and the recovery points end at the logs' ends."""
    with _store(path) as store:
        logs = [store.log(TOPIC, p) for p in range(partitions)]
        failures: list[BaseException] = []

        def wait_one_by_one(index: int) -> None:
            try:
                for i in range(waits):
                    log = logs[(index + i) % partitions]
                    end = log.append_records([b"%d-%d" % (index, i)]).last_offset + 1
                    heard: queue.Queue[int | BaseException] = queue.Queue()
                    log.when_durable(end, heard.put)
                    point = heard.get(timeout=WAIT)
                    assert not isinstance(point, BaseException) and point >= end
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        workers = [threading.Thread(target=wait_one_by_one, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not failures, failures[:3]
        assert all(log.recovery_point == log.log_end_offset for log in logs)
        assert sum(log.log_end_offset for log in logs) == threads * waits


def test_acks_all_over_many_partitions_is_read_back_after_sigkill(tmp_path):
    acks_all_read_back_after_sigkill(tmp_path / "broker", partitions=200, per_partition=20)


def acks_all_read_back_after_sigkill(data_dir: Path, partitions: int, per_partition: int) -> None:
    """A broker on `data_dir` acknowledges idempotent acks=all records spread over `partitions`, is killed,
    and serves every acknowledged record after its restart."""
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, ())
    broker.data_dir.mkdir()
    try:
        broker.start()
        acked: dict[int, list[bytes]] = {}
        failed = []

        def on_delivery(err, msg):
            if err is not None:
                failed.append(err)
            else:
                acked.setdefault(msg.partition(), []).append(msg.value())

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(60)
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                      "enable.idempotence": True})
        for i in range(per_partition):
            for partition in range(partitions):
                p.produce(TOPIC, value=b"%d-%d" % (partition, i), partition=partition, on_delivery=on_delivery)
            p.poll(0)
        assert p.flush(60) == 0 and not failed, failed[:3]
        broker.kill()
        del p
        assert sum(map(len, acked.values())) == partitions * per_partition
        broker.start()
        assert _read_all(broker.bootstrap, partitions) == acked
    finally:
        finish_brokers([broker])


def _read_all(bootstrap: str, partitions: int) -> dict[int, list[bytes]]:
    """Every partition's values from the beginning to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-no-coordinator", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list[bytes]] = {}
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            msg = c.poll(30)
            assert msg is not None, f"{len(ended)} of {partitions} partitions read to their end"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                ended.add(msg.partition())
            else:
                got.setdefault(msg.partition(), []).append(msg.value())
    finally:
        c.close()
    return got
