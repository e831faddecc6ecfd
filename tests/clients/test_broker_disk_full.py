"""A full or failing disk under a real broker process and real clients: nothing acknowledged is lost.

The disk-full cases run the broker on a small tmpfs of its own (we run as root: `mount -t tmpfs`),
filled with a file of zeros until the kernel refuses, and given space again by removing it. Writes then
fail as they do on any full disk: part of a pwrite lands, then ENOSPC. The broker must answer
KAFKA_STORAGE_ERROR (not drop the connection), take appends again once space returns, stop cleanly on
SIGTERM (status 0, no clean-shutdown marker, so the next start recovers) and start on a full disk.
The I/O-error cases run the broker on `faulty_disk_broker.py`, whose file system fails the writes a
control file names: the log dir goes offline, and with every log dir offline the broker stops.
"""
from __future__ import annotations

import contextlib
import errno
import signal
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from broker_process import CLEAN_SHUTDOWN_MARKER, STOP_TIMEOUT, BrokerProcess, free_port
from raw_wire import kio_round_trip

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
from small_disk import fill, mounted_tmpfs  # noqa: E402 (found through the path set just above)

TIMEOUT = 30.0   # s: any one wait for the broker or a client
TMPFS_SIZE = "24m"
VALUE = 1000     # bytes of each record's value
PAGE = 4096      # what tmpfs allocates at a time
LAUNCHER = str(Path(__file__).with_name("faulty_disk_broker.py"))
CONTROL = "LOGSTORE_TEST_DISK_FAULTS"
FETCH, KAFKA_STORAGE_ERROR = 1, 56


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs of its own at `tmp_path/data` (unmounted at teardown)."""
    with mounted_tmpfs(tmp_path / "data", TMPFS_SIZE) as mount:
        yield mount


_STARTED: list[BrokerProcess] = []


@pytest.fixture(autouse=True)
def _no_broker_left():
    """Every broker a test made is dead after it (the test stops them; a failed one leaves them running)."""
    yield
    while _STARTED:
        broker = _STARTED.pop()
        if broker.running:
            broker.kill()


@contextlib.contextmanager
def _killed_on_failure(broker: BrokerProcess) -> Iterator[None]:
    """Kill the broker if the block fails (its own failure is the one reported)."""
    try:
        yield
    except BaseException:
        if broker.running:
            broker.kill()
        raise


def _broker(mount: Path, *overrides: str, launcher: tuple[str, ...] = (), env: dict[str, str] | None = None
            ) -> BrokerProcess:
    broker = BrokerProcess("127.0.0.1", free_port(), mount, ("log.flush.scheduler.interval.ms=100", *overrides),
                           env=env or {}, launcher=launcher)
    _STARTED.append(broker)
    return broker


def _stop_and_check(broker: BrokerProcess, *, status: int = 0) -> None:
    """SIGTERM and wait; the exit status must be `status` and the log hold no traceback."""
    broker.proc.send_signal(signal.SIGTERM)
    assert broker.proc.wait(STOP_TIMEOUT) == status, broker.log_text()[-4000:]
    broker.proc.stdout.close()
    assert "Traceback" not in broker.log_text(), broker.log_text()[-4000:]


def _create(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


def _producer(broker: BrokerProcess, **config: object) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 2, **config})


def _produce(producer: Producer, topic: str, values: list[bytes], acked: list[bytes], failed: list[object],
             timeout: float = TIMEOUT) -> None:
    def on_delivery(err, msg):
        (failed if err is not None else acked).append(err if err is not None else msg.value())
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(timeout) == 0


def _values(start: int, count: int) -> list[bytes]:
    return [b"%08d " % i + b"v" * VALUE for i in range(start, start + count)]


def _read_all(broker: BrokerProcess, topic: str) -> list[bytes]:
    """Every value of partition 0, from the start to its end."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused-no-coordinator",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while True:
            assert time.monotonic() < deadline, f"no end of partition after {TIMEOUT} s ({len(got)} read)"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return got
            got.append(msg.value())
    finally:
        c.close()


def _assert_exactly_once(acked: list[bytes], read: list[bytes]) -> None:
    assert len(read) == len(set(read)), "a record is there twice"
    missing = set(acked) - set(read)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[0][:8]!r}"


def _storage_error_on_the_wire(broker: BrokerProcess, topic: str) -> None:
    """A produce without retries gets KAFKA_STORAGE_ERROR back, twice on the same connection: the broker
    answers, it does not drop the connection. Each record is larger than a page, so its write needs a page
    the full disk does not have (a smaller one may fit in what the log's last page has left)."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0, linger_ms=0,
                             max_block_ms=int(TIMEOUT * 1000), request_timeout_ms=int(TIMEOUT * 1000))
    try:
        for attempt in range(2):
            with pytest.raises(KafkaStorageError):
                producer.send(topic, b"refused %d " % attempt + b"r" * PAGE * 2, partition=0).get(TIMEOUT)
    finally:
        producer.close(0)


def test_fill_errors_free_produce_more_kill_restart_loses_nothing(tmpfs):
    broker = _broker(tmpfs).start()
    try:
        topic = "full"
        _create(broker, topic)
        producer = _producer(broker, **{"message.timeout.ms": 5000})
        acked: list[bytes] = []
        failed: list[object] = []
        _produce(producer, topic, _values(0, 100), acked, failed)
        assert not failed
        filler = fill(tmpfs)
        # Fill: the producer's retries end in delivery failures; nothing the broker could not write is acked.
        _produce(producer, topic, _values(100, 200), acked, failed)
        assert failed, "the disk never filled"
        _storage_error_on_the_wire(broker, topic)
        # Free space: the same producer's new records are acknowledged again.
        filler.unlink()
        more: list[object] = []
        _produce(producer, topic, _values(300, 100), acked, more)
        assert not more, more[:3]
        broker.kill()
        broker.start()
        _assert_exactly_once(acked, _read_all(broker, topic))
    finally:
        if broker.running:
            broker.kill()


def test_sigterm_on_a_full_disk_stops_cleanly_and_the_next_start_recovers(tmpfs):
    broker = _broker(tmpfs).start()
    topic = "stopping"
    _create(broker, topic)
    acked: list[bytes] = []
    failed: list[object] = []
    _produce(_producer(broker), topic, _values(0, 300), acked, failed)
    assert not failed
    filler = fill(tmpfs)
    _storage_error_on_the_wire(broker, topic)
    _stop_and_check(broker, status=0)
    assert not (tmpfs / CLEAN_SHUTDOWN_MARKER).exists()
    filler.unlink()
    broker.start()
    with _killed_on_failure(broker):
        _assert_exactly_once(acked, _read_all(broker, topic))
    broker.stop()


def test_a_start_on_a_full_disk_after_an_unclean_stop_serves_and_then_takes_writes(tmpfs):
    broker = _broker(tmpfs).start()
    topic = "restarted"
    _create(broker, topic)
    acked: list[bytes] = []
    failed: list[object] = []
    _produce(_producer(broker), topic, _values(0, 300), acked, failed)
    assert not failed
    broker.kill()
    filler = fill(tmpfs)
    broker.start()
    with _killed_on_failure(broker):
        assert _read_all(broker, topic) == acked
        # What the start freed (index files it kept in memory instead) is taken again.
        fill(tmpfs)
        _storage_error_on_the_wire(broker, topic)
        filler.unlink()
        _produce(_producer(broker), topic, _values(300, 10), acked, failed)
        assert not failed
        assert _read_all(broker, topic) == acked
    broker.stop()   # status 0 and the clean-shutdown marker: space is back


def _fetch(topic: str, partitions: list[int]) -> FetchRequest:
    """A Fetch v12 from offset 0 of each of `partitions`, not waiting."""
    return FetchRequest(
        replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=(FetchTopic(topic=topic, partitions=tuple(FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20) for p in partitions)),))


def _faulty(tmp_path: Path, *overrides: str) -> tuple[BrokerProcess, Path]:
    data = tmp_path / "data"
    data.mkdir()
    control = tmp_path / "faults"
    broker = _broker(data, *overrides, launcher=(LAUNCHER,), env={CONTROL: str(control)})
    return broker, control


def test_an_io_error_takes_its_log_dir_offline_and_with_every_dir_offline_the_broker_stops(tmp_path):
    broker, control = _faulty(tmp_path)
    broker.start()
    topic = "eio"
    _create(broker, topic)
    acked: list[bytes] = []
    failed: list[object] = []
    _produce(_producer(broker), topic, _values(0, 50), acked, failed)
    assert not failed
    control.write_text(f"*/{topic}-0/*.log {errno.EIO}\n")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    future = producer.send(topic, b"torn", partition=0)
    # The only log dir is offline: the broker stops, status 1, saying why in one line.
    assert broker.proc.wait(STOP_TIMEOUT) == 1, broker.log_text()[-4000:]
    broker.proc.stdout.close()
    producer.close(0)
    assert future.is_done and future.failed()
    text = broker.log_text()
    assert "Traceback" not in text, text[-4000:]
    assert text.rstrip().splitlines()[-1].startswith("logstore broker: stopped: every log dir is offline"), text
    assert not (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    control.unlink()
    broker.start()
    with _killed_on_failure(broker):
        assert _read_all(broker, topic) == acked
    broker.stop()


def test_with_one_of_two_log_dirs_offline_its_partitions_answer_storage_errors(tmp_path):
    broker, control = _faulty(tmp_path)
    second = tmp_path / "second"
    broker.overrides = (*broker.overrides, f"log.dirs={broker.data_dir},{second}")
    broker.start()
    _create(broker, "split", 2)
    in_first = [p for p in range(2) if (broker.data_dir / f"split-{p}").is_dir()]
    assert len(in_first) == 1
    bad, good = in_first[0], 1 - in_first[0]
    control.write_text(f"{broker.data_dir}/split-{bad}/*.log {errno.EIO}\n")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(KafkaStorageError):
            producer.send("split", b"torn", partition=bad).get(TIMEOUT)
        # Refused from now on, reads too, while the other dir's partition serves on.
        with pytest.raises(KafkaStorageError):
            producer.send("split", b"refused", partition=bad).get(TIMEOUT)
        assert producer.send("split", b"fine", partition=good).get(TIMEOUT).offset == 0
    finally:
        producer.close(0)
    fetched = kio_round_trip(broker, FETCH, 12, _fetch("split", [bad, good]), 5).responses[0].partitions
    assert [(p.partition_index, int(p.error_code)) for p in fetched] == [(bad, KAFKA_STORAGE_ERROR), (good, 0)]
    assert broker.running
    _stop_and_check(broker, status=0)
    assert not (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists() and (second / CLEAN_SHUTDOWN_MARKER).exists()


def test_a_topic_creation_that_fails_midway_leaves_no_directory_across_a_restart(tmp_path):
    broker, control = _faulty(tmp_path)
    broker.start()
    control.write_text(f"*/big-17/partition.metadata.tmp {errno.ENOSPC}\n")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        with pytest.raises(Exception) as info:
            admin.create_topics([NewTopic("big", 40, 1)])["big"].result(TIMEOUT)
        assert info.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, info.value
        assert "big" not in admin.list_topics(timeout=TIMEOUT).topics
        assert not [p for p in broker.data_dir.iterdir() if p.name.startswith("big")]
    finally:
        control.unlink()
    _stop_and_check(broker)
    broker.start()
    with _killed_on_failure(broker):
        assert "big" not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT).topics
        assert not [p for p in broker.data_dir.iterdir() if p.name.startswith("big")]
    broker.stop()


def test_a_249_character_topic_is_deleted_and_stays_deleted_after_a_restart(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    broker = _broker(data).start()
    topic = "t" * 249
    _create(broker, topic)
    acked: list[bytes] = []
    failed: list[object] = []
    _produce(_producer(broker), topic, _values(0, 10), acked, failed)
    assert not failed and _read_all(broker, topic) == acked
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(TIMEOUT)
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    assert not [p for p in data.iterdir() if p.name.startswith("ttt")]
    broker.stop()
    broker.start()
    with _killed_on_failure(broker):
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT).topics
        assert topic not in topics
        assert not [p for p in data.iterdir() if p.name.startswith("ttt")]
    broker.stop()
