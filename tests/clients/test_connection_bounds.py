"""What one client can make the broker hold is bounded, and given back when it leaves.

Each attack pipelines requests on one raw connection and never reads a
reply. The broker's descriptors (`/proc/<pid>/fd`) and resident memory
(`/proc/<pid>/status` VmRSS) are sampled while it goes on and after the
client disconnects. The bounds, and why:

- descriptors: a connection owes at most `MAX_REPLIES_OWED` replies before
  it stops being read, a Fetch reply holds one duplicate fd per partition
  with records, so the attack's connection adds at most that many plus its
  socket (`FD_SLACK` covers the broker's own churn: a segment roll, a
  checkpoint); once it disconnects, every one of them is closed;
- memory: what the broker reads is bounded by the same muting (one request
  in work, 16 replies owed of a few KiB each, the socket's buffers): RSS
  grows by about 1 MiB during either attack, so `RSS_GROWTH_KIB` is 8 MiB.
  Without the bound the broker read DescribeConfigs as fast as it could
  answer them and kept every answer (8.6 KB each here: tens of MiB in the
  5 s watched, 1.8 GiB by the end of such an attack).
"""
from __future__ import annotations

import os
import socket
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.fetch.v12.request import FetchRequest

from kio_wire import fetch_request, read_response, request_frame
from logstore.broker.connection import MAX_REPLIES_OWED
from raw_wire import API_VERSIONS, TIMEOUT, api_versions_v0, connect

FETCH, DESCRIBE_CONFIGS = 1, 32
BROKER = 4   # DescribeConfigs' resource type
ATTACK_SECONDS = 5.0     # how long the broker is watched while one client pipelines without reading
FD_SLACK = 8
RSS_GROWTH_KIB = 8 * 1024


def broker_fds(broker) -> int:
    """How many descriptors the broker process has open."""
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


def fds_back_to(broker, bound: int) -> int:
    """Wait (up to TIMEOUT) for the broker's descriptors to drop to `bound`; the last count seen."""
    deadline = time.monotonic() + TIMEOUT
    count = broker_fds(broker)
    while count > bound and time.monotonic() < deadline:
        time.sleep(0.05)
        count = broker_fds(broker)
    return count


def topic_with_records(broker, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(TIMEOUT)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for partition in range(partitions):
        p.produce(topic, value=b"x" * 100, partition=partition)
    assert p.flush(TIMEOUT) == 0


def fetch(topic: str, partitions: list[int], max_bytes: int = 1 << 20, max_wait_ms: int = 0) -> FetchRequest:
    """A Fetch v12 from offset 0 of each of `partitions` (repeats allowed), not waiting."""
    return fetch_request(topic, partitions, max_bytes=max_bytes, max_wait_ms=max_wait_ms)


class Attack:
    """One connection sending `frames` from a thread without ever reading; the broker sampled meanwhile."""

    def __init__(self, broker, frames: bytes):
        self.broker = broker
        self.sock = connect(broker)
        self.sock.settimeout(None)
        self.frames = frames
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.peak_fds = 0
        self.peak_rss_kib = 0

    def _send(self) -> None:
        try:
            self.sock.sendall(self.frames)
        except OSError:
            pass  # the test hung up while the broker was not reading

    def watch(self, seconds: float) -> Attack:
        """Start sending and sample the broker's fds and RSS for `seconds`."""
        self.thread.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.peak_fds = max(self.peak_fds, broker_fds(self.broker))
            self.peak_rss_kib = max(self.peak_rss_kib, self.broker.memory_kib("VmRSS"))
            time.sleep(0.02)
        return self

    def hang_up(self) -> None:
        """Disconnect without having read a reply."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive()


def _baseline(broker) -> tuple[int, int]:
    return broker_fds(broker), broker.memory_kib("VmRSS")


def _still_serving(broker) -> None:
    with connect(broker) as s:
        assert api_versions_v0(s, 1)[API_VERSIONS] == (0, 4)


def test_25000_pipelined_fetches_never_read_hold_a_bounded_number_of_fds(start_broker):
    broker = start_broker()
    topic_with_records(broker, "fetched")
    frames = b"".join(request_frame(fetch("fetched", [0]), i) for i in range(25_000))
    fds, rss = _baseline(broker)
    attack = Attack(broker, frames).watch(ATTACK_SECONDS)
    try:
        assert attack.peak_fds <= fds + MAX_REPLIES_OWED + FD_SLACK, \
            f"{attack.peak_fds - fds} fds more during the attack"
        assert attack.peak_rss_kib - rss <= RSS_GROWTH_KIB, f"RSS grew by {attack.peak_rss_kib - rss} KiB"
    finally:
        attack.hang_up()
    assert fds_back_to(broker, fds) <= fds, "descriptors still held after the client left"
    _still_serving(broker)


def test_100000_pipelined_describe_configs_never_read_hold_bounded_memory(start_broker):
    broker = start_broker()
    topic_with_records(broker, "described")
    # The broker's own settings, with their synonyms and documentation: an 8.6 KB answer to 60 bytes.
    request = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=BROKER, resource_name="1", configuration_keys=None),), include_synonyms=True,
        include_documentation=True)
    frames = b"".join(request_frame(request, i) for i in range(100_000))
    fds, rss = _baseline(broker)
    attack = Attack(broker, frames).watch(ATTACK_SECONDS)
    try:
        assert attack.peak_rss_kib - rss <= RSS_GROWTH_KIB, f"RSS grew by {attack.peak_rss_kib - rss} KiB"
        assert attack.peak_fds <= fds + 1 + FD_SLACK
    finally:
        attack.hang_up()
    assert fds_back_to(broker, fds) <= fds
    assert broker.memory_kib("VmRSS") - rss <= RSS_GROWTH_KIB
    _still_serving(broker)


def test_a_fetch_listing_a_partition_30000_times_answers_it_once_and_holds_no_fd(start_broker):
    broker = start_broker()
    topic_with_records(broker, "repeated")
    fds, _ = _baseline(broker)
    with connect(broker) as s:
        s.sendall(request_frame(fetch("repeated", [0] * 30_000, max_bytes=50 << 20), 7))
        correlation, response = read_response(s, FETCH, 12)
    assert correlation == 7
    ((partition,),) = [t.partitions for t in response.responses]
    assert partition.partition_index == 0 and partition.error_code == 0 and partition.records
    assert fds_back_to(broker, fds) <= fds, "a Fetch left descriptors open"
    _still_serving(broker)


def test_replies_owed_stop_the_reading_and_are_answered_in_order_once_read(start_broker):
    """The bound is backpressure, not loss: a client that reads late gets every answer, in order."""
    broker = start_broker()
    topic_with_records(broker, "late-reader")
    count = 2_000
    with connect(broker) as s:
        sender = threading.Thread(target=s.sendall, args=(
            b"".join(request_frame(fetch("late-reader", [0]), i) for i in range(count)),), daemon=True)
        sender.start()
        for i in range(count):
            correlation, response = read_response(s, FETCH, 12)
            assert correlation == i
            assert response.responses[0].partitions[0].records
        sender.join(TIMEOUT)
