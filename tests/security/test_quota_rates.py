"""Real clients under quotas: a limited producer and consumer keep to their byte rates, an unlimited one beside
them is not slowed (issue 26's outcome checks; rates measured on the broker's side, not the client's).

Kafka's sampled rate lets a new client through with (quota.window.num - 1) × quota.window.size.seconds worth
of its quota at once before it throttles (that is the window the rate is measured over). With Kafka's
defaults (11 samples of 1 s) that is 10 s of quota: a 10 s measurement would see the burst, not the rate.
These brokers keep 2 samples of 1 s, so the burst is 1 s worth (plus the request that crosses the quota), and
the 10 s are measured once that first window has passed (WARM_UP), on producers sending requests of 64 KiB.
"""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import quota_broker
from quota_broker import alter, log_bytes

start_broker = quota_broker.start_broker   # the fixture
# A client starved of CPU by other tests reads below its quota through no fault of the broker's.
pytestmark = pytest.mark.alone
RATE = 1048576               # B/s
SECONDS = 10.0
WARM_UP = 2.0                # s: quota.window.num × quota.window.size.seconds, the burst's sample gone
WINDOW = ("quota.window.num=2", "quota.window.size.seconds=1")
VALUE = b"v" * 10_000


def _topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in names]).values():
        future.result(30)


class _Producing(threading.Thread):
    """Produces VALUE as fast as the client lets it until `stop`, noting the throttle times it is told."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.throttles: list[float] = []
        self.topic, self.stop = topic, stop
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "batch.size": 65536, "queue.buffering.max.kbytes": 4096, "acks": 1,
                                  "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, VALUE)
            except BufferError:
                self.producer.poll(0.01)
            else:
                self.producer.poll(0)
        self.producer.purge()
        self.producer.flush(30)


def _wait_for_first_bytes(data_dir, topic: str) -> float:
    deadline = time.monotonic() + 30
    while log_bytes(data_dir, topic) == 0:
        assert time.monotonic() < deadline, f"nothing reached {topic}"
        time.sleep(0.01)
    return time.monotonic()


def test_a_producer_limited_to_1_mb_per_s_writes_at_that_rate_beside_an_unlimited_one(start_broker):
    broker = start_broker(*WINDOW)
    _topics(broker.bootstrap, "limited", "unlimited")
    [entry] = alter(broker.bootstrap, {"client-id": "slow"}, {"producer_byte_rate": float(RATE)})
    assert entry.error_code == 0
    stop = threading.Event()
    slow = _Producing(broker.bootstrap, "slow", "limited", stop)
    fast = _Producing(broker.bootstrap, "fast", "unlimited", stop)
    slow.start()
    fast.start()
    try:
        time.sleep(_wait_for_first_bytes(broker.data_dir, "limited") + WARM_UP - time.monotonic())
        limited_from = log_bytes(broker.data_dir, "limited")
        unlimited_from = log_bytes(broker.data_dir, "unlimited")
        time.sleep(SECONDS)
        limited_rate = (log_bytes(broker.data_dir, "limited") - limited_from) / SECONDS
        unlimited_rate = (log_bytes(broker.data_dir, "unlimited") - unlimited_from) / SECONDS
    finally:
        stop.set()
        slow.join(60)
        fast.join(60)
    assert 0.85 * RATE <= limited_rate <= 1.15 * RATE, f"{limited_rate / RATE:.3f} of the quota"
    assert slow.throttles and max(slow.throttles) > 0
    assert unlimited_rate > 3 * RATE, f"the unlimited producer wrote {unlimited_rate / RATE:.2f} MiB/s"
    assert not any(fast.throttles), fast.throttles


def test_a_consumer_limited_to_1_mb_per_s_reads_at_that_rate_beside_an_unlimited_one(start_broker):
    broker = start_broker(*WINDOW)
    _topics(broker.bootstrap, "backlog")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 65536})
    count = 4000                  # 40 MB: more than the limited consumer can take in 12 s
    for _ in range(count):
        while True:
            try:
                producer.produce("backlog", VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    [entry] = alter(broker.bootstrap, {"client-id": "slowc"}, {"consumer_byte_rate": float(RATE)})
    assert entry.error_code == 0

    def consume(client_id: str, out: dict, seconds: float) -> None:
        throttles: list[float] = []
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "group.id": client_id,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "fetch.max.bytes": 65536, "max.partition.fetch.bytes": 65536,
                             "message.max.bytes": 65536,
                             "throttle_cb": lambda event: throttles.append(event.throttle_time)})
        consumer.subscribe(["backlog"])
        taken, started, measured_from = 0, None, None
        try:
            while started is None or time.monotonic() - started < WARM_UP + seconds:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    started = started or time.monotonic()
                    taken += 1
                if measured_from is None and started is not None and time.monotonic() - started >= WARM_UP:
                    measured_from = taken
            out.update(records=taken - measured_from, throttles=throttles, all=taken)
        finally:
            consumer.close()

    slow, fast = {}, {}
    threads = [threading.Thread(target=consume, args=("slowc", slow, SECONDS)),
               threading.Thread(target=consume, args=("fastc", fast, SECONDS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    per_record = log_bytes(broker.data_dir, "backlog") / count
    slow_rate = slow["records"] * per_record / SECONDS
    fast_rate = fast["records"] * per_record / SECONDS
    assert 0.85 * RATE <= slow_rate <= 1.15 * RATE, f"{slow_rate / RATE:.3f} of the quota"
    assert slow["throttles"] and max(slow["throttles"]) > 0
    assert fast_rate > 3 * RATE or fast["all"] == count, f"{fast_rate / RATE:.2f} MiB/s"
    assert not any(fast["throttles"]), fast["throttles"]
