"""Does one parked Fetch of 100,000 partitions slow an unrelated producer? (issue 25, finding 7)

    .venv/bin/python bench/parked_fetch.py                  # this checkout's broker
    .venv/bin/python bench/parked_fetch.py --logstore-src /tmp/base   # another checkout's, for A/B

A fresh `logstore broker` gets `--partitions` partitions (topics of 10,000, KRaft's per-request limit,
created untimed) and one more topic of one partition, the producer's. The default, 100,000, is capped by
vm.max_map_count (65,530 unless raised: each partition holds one memory map), with a note saying so.
Then phases alternate, `--rounds` times each: idle (no Fetch parked) and parked: one raw-wire Fetch
(v12) listing every one of the many partitions from offset 0, with max_wait 10 minutes and min_bytes
2^31-1 so it parks, sent on its own connection and left unread. A parked phase starts once the broker
has decoded and parked it (its CPU quiet for two samples of 0.25 s) and counts only if the Fetch is
still unanswered at the end.

In each phase one connection sends `--requests` Produce requests (v9, acks=1, one batch of one 100 B
record, after `--warmup` untimed ones) to the producer's topic, one at a time, and times each round trip
(frame written to response read) in this process. Reported: p50 and p99 (nearest rank) of every phase,
the medians over phases of each kind, and parked/idle; the target is <= 2x. Before per-partition
waiters every append woke every parked waiter, and each woken Fetch read all its partitions again.
"""
from __future__ import annotations

import argparse
import datetime
import math
import select
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from c_client import ROOT, BrokerSpec, RunningBroker, start_broker
from kio_call import KioCall
from summary import Summary

TOPIC_PARTITIONS = 10_000       # KRaft's limit on one CreateTopics request
PRODUCER_TOPIC = "latency"
MAX_WAIT_MS = 600_000
QUIET_CPU = 0.02                # s of broker CPU per 0.25 s sample: parked, nothing left to decode
PARK_TIMEOUT = 300.0            # s for the broker to decode and park the big Fetch
IO_TIMEOUT = 60.0
DEFAULT_PARTITIONS = 100_000
MAP_HEADROOM = 2_000            # the maps a broker holds besides its partitions' (libraries, arenas, ...)


PRODUCE = KioCall(0, 9)
FETCH = KioCall(1, 12)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """`size` bytes from `sock`, or EOFError."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the broker closed the connection")
        got += n
    return bytes(buf)


def exchange(sock: socket.socket, frame: bytes) -> bytes:
    """Write a request frame, read its response frame (without the size prefix)."""
    sock.sendall(frame)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def map_limit() -> int:
    """How many partitions the kernel's memory-map limit leaves room for."""
    # Each partition holds one memory map (its active segment's offset index); past vm.max_map_count mmap
    # fails with ENOMEM and the CreateTopics that crosses it answers KAFKA_STORAGE_ERROR.
    return int(Path("/proc/sys/vm/max_map_count").read_text()) - MAP_HEADROOM


def partition_count(asked: int | None) -> int:
    """The partitions to create: as asked, or DEFAULT_PARTITIONS capped by the memory-map limit (said why)."""
    room = map_limit()
    if asked is None:
        if room < DEFAULT_PARTITIONS:
            print(f"# {room:,} partitions, not {DEFAULT_PARTITIONS:,}: vm.max_map_count leaves room for no more "
                  f"(sysctl -w vm.max_map_count=262144, as Kafka's docs advise, allows {DEFAULT_PARTITIONS:,})",
                  file=sys.stderr)
        return min(room, DEFAULT_PARTITIONS)
    if asked > room:
        raise SystemExit(f"{asked:,} partitions need more memory maps than vm.max_map_count allows: raise it "
                         f"(sysctl -w vm.max_map_count=262144) or ask for at most {room:,}")
    return asked


def create_topics(bootstrap: str, partitions: int) -> list[tuple[str, int]]:
    """Topics of TOPIC_PARTITIONS partitions (the last one smaller) adding up to `partitions`, plus the
    producer's: the (topic, partition count) of the many."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    many = [(f"wide-{i}", min(TOPIC_PARTITIONS, partitions - i * TOPIC_PARTITIONS))
            for i in range(math.ceil(partitions / TOPIC_PARTITIONS))]
    for name, count in [*many, (PRODUCER_TOPIC, 1)]:
        started = time.monotonic()
        admin.create_topics([NewTopic(name, count, 1)], operation_timeout=600)[name].result(900)
        print(f"# created {name} ({count:,} partitions) in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return many


def fetch_frame(topics: list[tuple[str, int]]) -> bytes:
    """One Fetch of every partition of `topics` from offset 0 that parks: long max_wait, min_bytes out of reach."""
    t = FETCH.types
    body = t.FetchRequest(
        cluster_id=None, replica_id=i32(-1),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=MAX_WAIT_MS)),
        min_bytes=i32(2**31 - 1), max_bytes=i32(50 << 20), isolation_level=i8(0), session_id=i32(0),
        session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=tuple(t.FetchTopic(topic=name, partitions=tuple(
            t.FetchPartition(partition=i32(p), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                             last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1024))
            for p in range(count))) for name, count in topics))
    return FETCH.frame(7, body)


def produce_frame(correlation_id: int) -> bytes:
    """One acks=1 Produce of one 100 B record to the producer's topic."""
    from logstore.formats import kafka as K

    batch = K.encode_batch([None], [b"x" * 100], None, int(time.time() * 1000))
    t = PRODUCE.types
    body = t.ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(t.TopicProduceData(name=PRODUCER_TOPIC, partition_data=(
            t.PartitionProduceData(index=i32(0), records=batch),)),))
    return PRODUCE.frame(correlation_id, body)


def nearest_rank(ordered: list[float], percent: float) -> float:
    """The nearest-rank percentile of an ascending list."""
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def produce_latencies(port: int, requests: int, warmup: int) -> list[float]:
    """Round trips (s) of `requests` sequential acks=1 Produces on one connection, after `warmup` untimed."""
    frame = produce_frame(1)
    seconds: list[float] = []
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for n in range(warmup + requests):
            started = time.perf_counter()
            answer = exchange(sock, frame)
            elapsed = time.perf_counter() - started
            if n >= warmup:
                seconds.append(elapsed)
            if n == 0 or n == warmup + requests - 1:
                (topic,) = PRODUCE.read(answer).responses
                (part,) = topic.partition_responses
                if part.error_code != 0:
                    raise RuntimeError(f"Produce answered error {part.error_code}")
    return seconds


def wait_parked(broker: RunningBroker, sock: socket.socket) -> float:
    """Wait until the broker is quiet after the big Fetch (decoded, read, parked); the seconds it took."""
    started = time.monotonic()
    quiet = 0
    before = broker.cpu()
    while quiet < 2:
        if time.monotonic() - started > PARK_TIMEOUT:
            raise TimeoutError(f"the broker was still busy {PARK_TIMEOUT} s after the Fetch")
        time.sleep(0.25)
        now = broker.cpu()
        quiet = quiet + 1 if now - before < QUIET_CPU else 0
        before = now
        if answered(sock):
            raise RuntimeError("the Fetch was answered instead of parking")
    return time.monotonic() - started


def answered(sock: socket.socket) -> bool:
    """Whether anything (the Fetch's response, or EOF) is waiting on `sock`."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def summary(seconds: list[float]) -> tuple[float, float]:
    """(p50, p99) in microseconds."""
    ordered = sorted(seconds)
    return nearest_rank(ordered, 50) * 1e6, nearest_rank(ordered, 99) * 1e6


def main(argv: list[str] | None = None) -> None:
    """Create the partitions, alternate idle and parked phases, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logstore-src", default=str(ROOT), metavar="DIR",
                        help="the logstore checkout whose .venv runs the broker (default this checkout)")
    parser.add_argument("--data-root", metavar="DIR",
                        help="where the broker's data dir goes (default the temp dir; /dev/shm keeps the disk, "
                             "which other processes' fsyncs make noisy, out of it)")
    parser.add_argument("--partitions", type=int,
                        help="partitions the Fetch lists (default 100,000, or what vm.max_map_count allows)")
    parser.add_argument("--requests", type=int, default=2_000, help="timed Produces per phase")
    parser.add_argument("--warmup", type=int, default=200, help="untimed Produces before each phase")
    parser.add_argument("--rounds", type=int, default=3, help="idle and parked phases, alternating")
    args = parser.parse_args(argv)

    partitions = partition_count(args.partitions)
    spec = BrokerSpec(Path(args.logstore_src).resolve().name, "logstore", Path(args.logstore_src).resolve())
    broker = start_broker(spec, data_root=args.data_root)
    rows: list[tuple[str, float, float]] = []
    try:
        many = create_topics(broker.bootstrap, partitions)
        big = fetch_frame(many)
        print(f"# the Fetch frame: {len(big):,} bytes, {partitions:,} partitions", file=sys.stderr)
        for r in range(args.rounds):
            p50, p99 = summary(produce_latencies(broker.port, args.requests, args.warmup))
            rows.append(("idle", p50, p99))
            print(f"# round {r} idle   p50 {p50:8.0f} us  p99 {p99:8.0f} us", file=sys.stderr, flush=True)
            with socket.create_connection(("127.0.0.1", broker.port), timeout=IO_TIMEOUT) as fetch:
                fetch.sendall(big)
                took = wait_parked(broker, fetch)
                p50, p99 = summary(produce_latencies(broker.port, args.requests, args.warmup))
                if answered(fetch):
                    raise RuntimeError("the parked Fetch was answered during the phase: the phase does not count")
            rows.append(("parked", p50, p99))
            print(f"# round {r} parked p50 {p50:8.0f} us  p99 {p99:8.0f} us (parked after {took:.1f} s)",
                  file=sys.stderr, flush=True)
    finally:
        broker.stop()

    print(f"unrelated acks=1 Produce round trips, {spec.label}, {partitions:,} partitions in the parked Fetch, "
          f"{args.rounds} x {args.requests} requests per kind")
    print(f"{'phase':<8} {'p50 us':>8} {'p99 us':>8}")
    for phase, p50, p99 in rows:
        print(f"{phase:<8} {p50:>8.0f} {p99:>8.0f}")
    medians = {kind: (statistics.median(p50 for k, p50, _ in rows if k == kind),
                      statistics.median(p99 for k, _, p99 in rows if k == kind)) for kind in ("idle", "parked")}
    for kind, (p50, p99) in medians.items():
        print(f"{'median ' + kind:<14} p50 {p50:.0f} us  p99 {p99:.0f} us")
    ratio50 = medians["parked"][0] / medians["idle"][0]
    ratio99 = medians["parked"][1] / medians["idle"][1]
    print(f"parked/idle: p50 {ratio50:.2f}x  p99 {ratio99:.2f}x  (target <= 2x: "
          f"{'met' if max(ratio50, ratio99) <= 2 else 'missed'})")
    out = Summary("parked_fetch", f"An unrelated Produce while a Fetch of {partitions:,} partitions is parked")
    for name, ratio, (idle, parked) in (("p50", ratio50, (medians["idle"][0], medians["parked"][0])),
                                        ("p99", ratio99, (medians["idle"][1], medians["parked"][1]))):
        out.row(f"Produce round trip {name}, parked / idle", ratio, verdict=ratio <= 2, target=2, op="<=",
                ours=f"{parked:.0f} µs parked", peer=f"{idle:.0f} µs idle")
    out.write()


if __name__ == "__main__":
    main()
