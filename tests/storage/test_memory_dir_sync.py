"""A log dir on tmpfs (durability.py's `in_memory`): a waiter needs no sync, since an fsync writes nothing
there: the recovery point follows the log's end in the waiting thread, with no sync thread and no fsync;
concurrent appends and waits from many threads all settle, and a broker on such a dir acknowledges acks=all
and keeps it across a SIGKILL (the page cache outlives the process).
"""
from __future__ import annotations

import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients.broker_process import BrokerProcess, finish_brokers, free_port
from logstore.durability import SYNC_STATS
from logstore.filesystem import OS
from test_dir_sync import TOPIC, _read_all, _store

SHM = "/dev/shm"
WAIT = 30


@pytest.fixture
def memory_dir() -> Iterator[Path]:
    if not OS.memory_backed(SHM):
        pytest.skip(f"{SHM} is not tmpfs here")
    path = Path(tempfile.mkdtemp(prefix="logstore-test-", dir=SHM))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sync_threads(path: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("logstore-sync ") and str(path) in t.name]


def test_the_file_systems_are_told_apart(memory_dir, tmp_path):
    assert OS.memory_backed(str(memory_dir))
    assert OS.memory_backed(str(tmp_path)) == OS.memory_backed(tempfile.gettempdir())
    assert not OS.memory_backed(str(memory_dir / "missing"))


def test_a_wait_on_a_dir_kept_in_memory_is_settled_in_the_waiting_thread(memory_dir):
    with _store(memory_dir / "d") as store:
        log = store.log(TOPIC, 0)
        for value in (b"first", b"second"):
            syncs = SYNC_STATS.syncs
            end = log.append_records([value]).last_offset + 1
            heard: list[tuple[int | BaseException, threading.Thread]] = []
            log.when_durable(end, lambda point: heard.append((point, threading.current_thread())))
            assert heard == [(end, threading.current_thread())]
            assert log.recovery_point == end
            log.when_durable(end, lambda point: heard.append((point, threading.current_thread())))
            assert heard[-1] == (end, threading.current_thread())
            assert SYNC_STATS.syncs == syncs
        assert not _sync_threads(memory_dir)


def test_waits_from_many_threads_on_a_dir_kept_in_memory_are_all_settled(memory_dir):
    threads, waits, partitions = 4, 200, 3
    with _store(memory_dir / "d") as store:
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


def test_a_broker_on_tmpfs_acknowledges_acks_all_and_keeps_it_across_sigkill(memory_dir):
    partitions, per_partition = 20, 50
    broker = BrokerProcess("127.0.0.1", free_port(), memory_dir / "broker", ())
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
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
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
