"""The hostile-client loop of issue 25: FrameGrammar's frames on many connections (hostile_clients.py, a
process of its own) against one broker, while a well-behaved idempotent acks=all producer and a consumer
run beside it on their own topic; shared by the soak (10 minutes) and its short run in the normal tests.

What must hold, each measured, not assumed:
- the well-behaved clients' throughput beside the hostile load is at least half of a solo run's (rates,
  so a shorter solo run is the same basis), produced and consumed;
- every acknowledged message is read back exactly once, in each partition in the order produced;
- broker RSS stays under the solo run's peak plus what the hostile connections may hold: one request of
  at most socket.request.max.bytes each (the broker reads one request per connection at a time, as Kafka
  mutes) twice over (the frame and its decoding), plus a fixed margin for caches, the allocator and the
  few replies owed per connection (the hostile topics hold little, and Fetch replies are file ranges);
- broker fds stay under the idle count plus two per connection (hostile, well-behaved; a socket closed by
  the client may stay open until the broker reads its end) plus FDS_PER_PARTITION for each partition the
  broker gained meanwhile (the well-behaved topic, what the hostile load created: at its peak, counted in
  the data dir, since the hostile load may create thousands and delete them again), and return to within
  IDLE_FD_SLACK of that once the hostile load has stopped (counted from the partitions left);
- the broker still answers ApiVersions and logged no traceback or unretrieved task exception.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from raw_wire import api_versions_v0, connect

MAX_REQUEST_BYTES = 4 << 20
BROKER_SETTINGS = (f"socket.request.max.bytes={MAX_REQUEST_BYTES}",)
PARTITIONS = 3
FDS_PER_PARTITION = 2  # issue 25: about 1 at rest (the active segment's .log), and one for a passing read
IDLE_FD_SLACK = 16
RSS_MARGIN_MIB = 128
WELL_BEHAVED_CONNECTIONS = 8  # librdkafka: a bootstrap and a broker connection per client, twice over
SAMPLE_EVERY = 0.2  # s
TIMEOUT = 60.0  # s: a bound on any single wait (a flush, reading back, the hostile process ending)
CLIENTS = str(Path(__file__).with_name("hostile_clients.py"))


@dataclass
class Sampler:
    """The broker's RSS and fd count, sampled from /proc on a thread of its own."""

    pid: int
    data_dir: Path
    rss_kib: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> tuple[int, int]:
        """(RSS KiB, open fds) now."""
        rss = next(int(line.split()[1]) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{self.pid}/fd"))

    def partition_dirs(self) -> int:
        """How many `<topic>-<partition>` directories the broker's log dir holds now (not those deleted)."""
        return sum(1 for name in os.listdir(self.data_dir) if name.rpartition("-")[2].isdigit())

    def __enter__(self) -> Sampler:
        self._stop.clear()
        self.rss_kib.clear()
        self.fds.clear()
        self.partitions.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            rss, fds = self.sample()
            self.rss_kib.append(rss)
            self.fds.append(fds)
            self.partitions.append(self.partition_dirs())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Run:
    """What one well-behaved run did."""

    seconds: float
    acked: int = 0
    consumed_in_window: int = 0
    acked_in_window: int = 0

    @property
    def produce_rate(self) -> float:
        return self.acked_in_window / self.seconds

    @property
    def consume_rate(self) -> float:
        return self.consumed_in_window / self.seconds


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=TIMEOUT).values():
        future.result(TIMEOUT)


class Ledger:
    """Per partition, the offsets and sequence numbers of messages, in arrays: a 10-minute run acknowledges
    millions, which tuples in a dict would hold in gigabytes."""

    def __init__(self) -> None:
        self.offsets: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.seqs: dict[int, array[int]] = defaultdict(lambda: array("q"))

    def add(self, partition: int, offset: int, value: bytes) -> None:
        self.offsets[partition].append(offset)
        self.seqs[partition].append(int(value))

    def __len__(self) -> int:
        return sum(len(a) for a in self.offsets.values())

    def in_offset_order(self, partition: int) -> tuple[array[int], array[int]]:
        """(offsets, sequence numbers) of the partition sorted by offset (delivery reports may interleave)."""
        offsets, seqs = self.offsets[partition], self.seqs[partition]
        if all(a < b for a, b in zip(offsets, offsets[1:])):
            return offsets, seqs
        pairs = sorted(zip(offsets, seqs))
        return array("q", (o for o, _ in pairs)), array("q", (q for _, q in pairs))


def well_behaved(bootstrap: str, topic: str, seconds: float) -> Run:
    """Produce (idempotent, acks=all) and consume `topic` for `seconds`; check every ack is read once, in order."""
    create_topic(bootstrap, topic)
    run = Run(seconds)
    acked, consumed = Ledger(), Ledger()
    errors: list[str] = []
    in_window = [True]

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
            return
        acked.add(msg.partition(), msg.offset(), msg.value())
        if in_window[0]:
            run.acked_in_window += 1

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "queue.buffering.max.messages": 20000})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

    def consume(timeout: float) -> int:
        msgs = consumer.consume(1000, timeout)
        for m in msgs:
            if m.error() is not None:
                raise KafkaException(m.error())
            consumed.add(m.partition(), m.offset(), m.value())
        return len(msgs)

    try:
        seq = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                for _ in range(200):
                    producer.produce(topic, key=b"k%d" % (seq % 16), value=b"%d" % seq, on_delivery=delivered)
                    seq += 1
            except BufferError:
                pass
            producer.poll(0)
            run.consumed_in_window += consume(0.005)
        in_window[0] = False
        assert producer.flush(TIMEOUT) == 0, "the well-behaved producer could not flush"
        assert not errors, f"deliveries failed: {errors[:5]}"
        run.acked = len(acked)
        assert run.acked == seq, f"{seq} produced, {run.acked} acknowledged"
        read_deadline = time.monotonic() + TIMEOUT
        while len(consumed) < len(acked) and time.monotonic() < read_deadline:
            consume(0.5)
    finally:
        producer.flush(TIMEOUT)
        consumer.close()
    check_read_back(acked, consumed)
    return run


def check_read_back(acked: Ledger, consumed: Ledger) -> None:
    """Every acknowledged message read exactly once at its offset, and each partition's sequence numbers in
    the order produced."""
    for partition in sorted(set(acked.offsets) | set(consumed.offsets)):
        offsets, seqs = acked.in_offset_order(partition)
        read_offsets, read_seqs = consumed.offsets[partition], consumed.seqs[partition]
        if read_offsets != offsets:
            twice = len(read_offsets) - len(set(read_offsets))
            missing = sorted(set(offsets) - set(read_offsets))
            extra = sorted(set(read_offsets) - set(offsets))
            raise AssertionError(f"partition {partition}: {twice} offsets read twice, {len(missing)} acknowledged "
                                 f"never read (first {missing[:5]}), {len(extra)} read never acknowledged "
                                 f"(first {extra[:5]})")
        assert read_seqs == seqs, f"partition {partition}: messages read back with other values than acknowledged"
        assert all(a < b for a, b in zip(seqs, seqs[1:])), \
            f"partition {partition} holds the producer's messages out of order"


def partitions_of(bootstrap: str) -> int:
    """How many partitions the broker has, over all topics."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT)
    return sum(len(t.partitions) for t in metadata.topics.values())


def hostile_process(broker, seconds: float, seed: int, connections: int, prefix: str) -> subprocess.Popen:
    """Start hostile_clients.py against `broker`; its stdout is the JSON summary."""
    return subprocess.Popen([sys.executable, CLIENTS, broker.host, str(broker.port), str(seconds), str(seed),
                             str(connections), prefix, str(MAX_REQUEST_BYTES)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(CLIENTS).parent)


def wait_fds_at_most(sampler: Sampler, bound: int, timeout: float) -> int:
    """Wait until the broker holds at most `bound` fds (it closes sockets as it notices them); the last count."""
    deadline = time.monotonic() + timeout
    fds = sampler.sample()[1]
    while fds > bound and time.monotonic() < deadline:
        # The broker gives no event for "closed everything": poll /proc, as an operator would.
        time.sleep(SAMPLE_EVERY)
        fds = sampler.sample()[1]
    return fds


def hostile_soak(broker, seconds: float, solo_seconds: float, seed: int, connections: int) -> dict[str, object]:
    """The whole loop; asserts what the module docstring lists and returns the measured numbers."""
    prefix = f"hostile{seed}"
    sampler = Sampler(broker.proc.pid, broker.data_dir)
    with sampler:
        solo = well_behaved(broker.bootstrap, f"solo-{seed}", solo_seconds)
    solo_rss = max(sampler.rss_kib, default=sampler.sample()[0])
    idle_fds = sampler.sample()[1]
    partitions_before = partitions_of(broker.bootstrap)
    dirs_before = sampler.partition_dirs()

    hostile = hostile_process(broker, seconds, seed, connections, prefix)
    try:
        with sampler:
            beside = well_behaved(broker.bootstrap, f"beside-{seed}", seconds)
        out, err = hostile.communicate(timeout=TIMEOUT + seconds)
    finally:
        if hostile.poll() is None:
            hostile.kill()
            hostile.wait()
    assert hostile.returncode == 0, f"the hostile process failed (seed {seed}):\n{err.decode()[-4000:]}"
    summary = json.loads(out)
    assert broker.running, f"the broker died (seed {seed}): {broker.proc.returncode}\n{broker.log_text()[-4000:]}"

    new_partitions = partitions_of(broker.bootstrap) - partitions_before
    peak_new_partitions = max([new_partitions, *(n - dirs_before for n in sampler.partitions)])
    fd_bound = idle_fds + 2 * (connections + WELL_BEHAVED_CONNECTIONS) + FDS_PER_PARTITION * peak_new_partitions
    rss_bound_kib = solo_rss + connections * 2 * MAX_REQUEST_BYTES // 1024 + RSS_MARGIN_MIB * 1024
    settled_bound = idle_fds + FDS_PER_PARTITION * new_partitions + IDLE_FD_SLACK
    settled = wait_fds_at_most(sampler, settled_bound, TIMEOUT)
    numbers = {
        "seed": seed, "seconds": seconds, "solo_seconds": solo_seconds,
        "solo_produce_rate": round(solo.produce_rate), "beside_produce_rate": round(beside.produce_rate),
        "solo_consume_rate": round(solo.consume_rate), "beside_consume_rate": round(beside.consume_rate),
        "acked_beside": beside.acked, "solo_rss_mib": solo_rss // 1024,
        "peak_rss_mib": max(sampler.rss_kib) // 1024, "rss_bound_mib": rss_bound_kib // 1024,
        "idle_fds": idle_fds, "peak_fds": max(sampler.fds), "fd_bound": fd_bound, "settled_fds": settled,
        "settled_bound": settled_bound, "new_partitions": new_partitions,
        "peak_new_partitions": peak_new_partitions, "hostile": summary["stats"],
    }
    print(f"hostile soak: {json.dumps(numbers)}")
    # Every check is made and all that failed are reported together: one broker bug must not hide another.
    failed = []
    if summary["anomaly_count"]:
        failed.append(f"hostile clients saw {summary['anomaly_count']} broken replies or closes: "
                      f"{json.dumps(summary['anomalies'])}")
    if beside.produce_rate < 0.5 * solo.produce_rate:
        failed.append("the well-behaved producer's throughput fell below half of its solo run's")
    if beside.consume_rate < 0.5 * solo.consume_rate:
        failed.append("the well-behaved consumer's throughput fell below half of its solo run's")
    if max(sampler.rss_kib) > rss_bound_kib:
        failed.append("broker RSS beyond its bound")
    if max(sampler.fds) > fd_bound:
        failed.append("broker fds beyond their bound")
    if settled > settled_bound:
        failed.append("broker fds did not come back after the hostile load")
    with connect(broker) as s:
        if 18 not in api_versions_v0(s, 1):
            failed.append("the broker no longer answers ApiVersions")
    log = broker.log_text()
    for marker in ("Traceback", "Task exception was never retrieved", "Unhandled exception"):
        if marker in log:
            at = log.index(marker)
            failed.append(f"the broker logged {marker!r}, first:\n{log[max(0, at - 300):at + 3000]}")
    assert not failed, f"seed {seed}, {numbers}:\n" + "\n".join(failed)
    return numbers
