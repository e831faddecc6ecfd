"""kcat (librdkafka's command-line client) against a real broker, driven as a subprocess.

kcat is installed by `make kcat` (a prerequisite of `make test`). Every run has
a timeout, so a broker that stops answering fails the test instead of hanging
it; consumers run with -e (exit at the end of every partition) or -c (exit
after a count). What kcat read back is compared with what it was given, and the
batches on disk are decoded by kafka-python, which shares no code with the
broker, to show how kcat really wrote them.
"""
from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Producer

from segment_files import COMPRESSION, batches, segment_paths

TIMEOUT = 60.0  # s: a bound on any one kcat run or wait
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
FORMAT = r"%k\t%s\t%o\t%T\n"  # key, value, offset, timestamp (ms): all checked exactly
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module", autouse=True)
def kcat_installed():
    """Fail (not skip) without kcat: the Makefile guarantees it, so a missing binary is a broken setup."""
    if KCAT is None:
        pytest.fail("neither kcat nor kafkacat is on PATH; `make kcat` installs it")


def kcat(broker, *args: str, stdin: bytes = b"", ok: bool = True) -> subprocess.CompletedProcess:
    """Run kcat against `broker`; with `ok`, a non-zero exit fails the test with kcat's stderr."""
    proc = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=stdin,
                          capture_output=True, timeout=TIMEOUT)
    if ok:
        assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr!r}"
    return proc


def produce(broker, topic: str, lines: list[bytes], *args: str, partition: int = 0) -> None:
    """Produce `lines` (one message each, `key<TAB>value`) to one partition with kcat -P."""
    kcat(broker, "-P", "-t", topic, "-p", str(partition), "-K", r"\t", *args,
         stdin=b"".join(line + b"\n" for line in lines))


def consume(broker, topic: str, *args: str) -> list[tuple[bytes, bytes, int, int]]:
    """(key, value, offset, timestamp) of every message kcat -C -e prints for `topic`, in its order."""
    out = kcat(broker, "-C", "-t", topic, "-e", "-f", FORMAT, *args).stdout
    rows = []
    for line in out.splitlines():
        key, value, offset, ts = line.split(b"\t")
        rows.append((key, value, int(offset), int(ts)))
    return rows


def on_disk(broker, topic: str, partition: int = 0) -> list:
    """Every batch of one partition as kafka-python decodes it from the segment files."""
    return [b for path in segment_paths(broker.data_dir, topic, partition) for b in batches(path, whole=False)]


def metadata(broker, topic: str, *args: str) -> dict:
    """kcat -L -J for one topic, parsed."""
    return json.loads(kcat(broker, "-L", "-J", "-t", topic, *args).stdout)


def wait_for_stderr(proc: subprocess.Popen, needle: bytes, timeout: float = TIMEOUT) -> bytes:
    """Read `proc`'s stderr until `needle` appears; fail if it does not within `timeout` s."""
    deadline = time.monotonic() + timeout
    seen = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while needle not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {needle!r} on kcat's stderr within {timeout} s: {seen!r}"
            if sel.select(remaining):
                chunk = os.read(proc.stderr.fileno(), 4096)
                assert chunk, f"kcat closed stderr (status {proc.wait(TIMEOUT)}) before {needle!r}: {seen!r}"
                seen += chunk
    return seen


@pytest.mark.parametrize("codec", CODECS)
def test_produce_with_each_codec_then_consume_from_beginning(broker, topic, codec):
    # librdkafka sends a batch uncompressed when compressing would not make it
    # smaller, and how kcat's stdin splits into batches is down to timing: so
    # every value alone is repetitive enough for every codec to shrink it.
    lines = [b"key-%04d\tvalue-%04d " % (i, i) + b"abc" * (40 + i % 40) for i in range(1000)]
    before = int(time.time() * 1000)
    produce(broker, topic, lines, "-z", codec)
    after = int(time.time() * 1000)

    got = consume(broker, topic, "-o", "beginning")
    assert [(k, v, o) for k, v, o, _ in got] == [(*line.split(b"\t"), i) for i, line in enumerate(lines)]
    assert all(before <= ts <= after for *_, ts in got), (before, after, got[0], got[-1])

    written = on_disk(broker, topic)
    assert {COMPRESSION[b.compression_type] for b in written} == {codec}
    assert sum(b.records_count for b in written) == 1000
    assert [(r.key, r.value, r.offset, r.timestamp) for b in written for r in b] == got


def test_consume_from_absolute_and_relative_offsets(broker, topic):
    produce(broker, topic, [b"k%d\tv%d" % (i, i) for i in range(10)])
    assert [o for *_, o, _ in consume(broker, topic, "-o", "7")] == [7, 8, 9]
    assert [(v, o) for _, v, o, _ in consume(broker, topic, "-o", "-2")] == [(b"v8", 8), (b"v9", 9)]
    assert consume(broker, topic, "-o", "end") == []


def test_consume_from_latest_sees_only_messages_produced_after(broker, topic):
    produce(broker, topic, [b"old%d\tbefore" % i for i in range(5)])
    proc = subprocess.Popen([KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "end",
                             "-c", "3", "-f", FORMAT], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # kcat reports reaching the end once it has resolved "end" to offset 5
        # and fetched there; only then is a later produce certain to be "after".
        wait_for_stderr(proc, f"Reached end of topic {topic} [0] at offset 5".encode())
        produce(broker, topic, [b"new%d\tafter" % i for i in range(3)])
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert [tuple(line.split(b"\t")[:3]) for line in out.splitlines()] == \
        [(b"new%d" % i, b"after", b"%d" % (5 + i)) for i in range(3)]


def test_consume_by_timestamp_and_query_offsets_for_times(broker, topic):
    # kcat cannot set a timestamp per message; librdkafka's producer can.
    base = 1_700_000_000_000
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(100):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp=base + 10 * i)
    assert p.flush(TIMEOUT) == 0

    # s@ is the first record at or after the time; e@ stops before the first at or after it.
    got = consume(broker, topic, "-o", f"s@{base + 555}", "-o", f"e@{base + 600}")
    assert got == [(b"k%d" % i, b"v%d" % i, i, base + 10 * i) for i in range(56, 60)]
    got = consume(broker, topic, "-o", f"s@{base}", "-o", f"e@{base + 30}")
    assert [o for *_, o, _ in got] == [0, 1, 2]
    assert consume(broker, topic, "-o", f"s@{base + 10_000}") == []  # after the last: nothing

    # -Q is ListOffsets by timestamp; Kafka answers offset -1 when no record is that late.
    out = kcat(broker, "-Q", "-J", "-t", f"{topic}:0:{base + 555}").stdout
    assert json.loads(out)[topic]["0"] == {"partition": 0, "offset": 56}
    out = kcat(broker, "-Q", "-J", "-t", f"{topic}:0:{base + 10_000}").stdout
    assert json.loads(out)[topic]["0"] == {"partition": 0, "offset": -1}


def test_idempotent_producer_with_acks_all_writes_each_message_once(broker, topic):
    idempotent = ("-X", "enable.idempotence=true", "-X", "acks=all", "-z", "lz4")
    first = [b"a%05d\t%05d" % (i, i) for i in range(2000)]
    second = [b"b%05d\t%05d" % (i, i) for i in range(500)]
    produce(broker, topic, first, *idempotent)
    produce(broker, topic, second, *idempotent)  # a second process: a new producer id

    got = consume(broker, topic, "-o", "beginning")
    assert [(k, v, o) for k, v, o, _ in got] == \
        [(*line.split(b"\t"), i) for i, line in enumerate(first + second)]

    written = on_disk(broker, topic)
    runs = {}
    for b in written:
        runs.setdefault(b.producer_id, []).append(b)
    assert len(runs) == 2 and all(pid >= 0 for pid in runs), sorted(runs)
    (pid_a, batches_a), (pid_b, batches_b) = sorted(runs.items(), key=lambda kv: kv[1][0].base_offset)
    # Each producer's sequence starts at 0 and runs without a gap alongside its offsets.
    assert [b.base_sequence for b in batches_a] == [b.base_offset for b in batches_a]
    assert [b.base_sequence for b in batches_b] == [b.base_offset - 2000 for b in batches_b]
    assert {b.producer_epoch for b in written} == {0}


def test_headers_round_trip_in_order_with_repeated_names(broker, topic):
    produce(broker, topic, [b"k\tv1", b"k\tv2"], "-H", "a=1", "-H", "b=two", "-H", "a=3")
    out = kcat(broker, "-C", "-t", topic, "-e", "-J").stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["offset"], r["key"], r["payload"], r["headers"]) for r in rows] == \
        [(i, "k", "v%d" % (i + 1), ["a", "1", "b", "two", "a", "3"]) for i in range(2)]
    assert [r.headers for b in on_disk(broker, topic) for r in b] == \
        [[("a", b"1"), ("b", b"two"), ("a", b"3")]] * 2


def test_key_delimiter_and_null_keys_and_values(broker, topic):
    # With -Z an empty key or value is sent as NULL, which Kafka keeps apart from b"".
    produce(broker, topic, [b"only-key\t", b"\tonly-value", b"both\tkv"], "-Z")
    out = kcat(broker, "-C", "-t", topic, "-e", "-Z", "-f", r"%k|%s|%K|%S|%o\n").stdout
    assert out.splitlines() == [b"only-key|NULL|8|-1|0", b"NULL|only-value|-1|10|1", b"both|kv|4|2|2"]
    assert [(r.key, r.value) for b in on_disk(broker, topic) for r in b] == \
        [(b"only-key", None), (None, b"only-value"), (b"both", b"kv")]


def test_metadata_listing_text_and_json(broker, topic):
    produce(broker, topic, [b"k\tv"])
    meta = metadata(broker, topic)
    assert meta["brokers"] == [{"id": 1, "name": broker.bootstrap}]
    assert meta["controllerid"] == 1
    assert meta["topics"] == [{"topic": topic, "partitions": [
        {"partition": 0, "leader": 1, "replicas": [{"id": 1}], "isrs": [{"id": 1}]}]}]

    text = kcat(broker, "-L").stdout.decode()
    assert f"broker 1 at {broker.bootstrap} (controller)" in text
    assert f'topic "{topic}" with 1 partitions:\n    partition 0, leader 1, replicas: 1, isrs: 1' in text


def test_metadata_without_auto_create_reports_unknown_topic_and_creates_nothing(broker, topic):
    meta = metadata(broker, topic, "-X", "allow.auto.create.topics=false")
    assert meta["topics"] == [{"topic": topic, "error": "Broker: Unknown topic or partition",
                               "partitions": []}]
    assert not [d for d in broker.data_dir.iterdir() if d.name.startswith(topic + "-")]


def test_produce_auto_creates_topic_with_num_partitions(start_broker, topic):
    broker = start_broker("num.partitions=3")
    # Partition 2 of a topic that does not exist yet: only a 3-partition auto-create can take it.
    produce(broker, topic, [b"k\tv"], partition=2)
    assert [p["partition"] for p in metadata(broker, topic)["topics"][0]["partitions"]] == [0, 1, 2]
    out = kcat(broker, "-C", "-t", topic, "-e", "-f", r"%p %o %k %s\n").stdout
    assert out.splitlines() == [b"2 0 k v"]
    assert sorted(d.name for d in broker.data_dir.iterdir() if d.name.startswith(topic + "-")) == \
        [f"{topic}-{p}" for p in range(3)]


def test_produce_to_missing_topic_fails_when_auto_create_is_off(start_broker, topic):
    broker = start_broker("auto.create.topics.enable=false")
    proc = kcat(broker, "-P", "-t", topic, "-X", "message.timeout.ms=3000", stdin=b"lost\n", ok=False)
    assert proc.returncode != 0 and b"Delivery failed" in proc.stderr, proc
    assert metadata(broker, topic)["topics"][0]["error"] == "Broker: Unknown topic or partition"
    assert not [d for d in broker.data_dir.iterdir() if d.name.startswith(topic + "-")]


def test_log_append_time_topic_stamps_messages_with_broker_time(start_broker, topic):
    broker = start_broker("log.message.timestamp.type=LogAppendTime")
    before = int(time.time() * 1000)
    # One batch: librdkafka sends a batch whose gzip form is larger (one tiny message) uncompressed.
    produce(broker, topic, [b"k%d\tv%d" % (i, i) for i in range(50)], "-z", "gzip", "-X", "linger.ms=200")
    after = int(time.time() * 1000)
    rows = [json.loads(line) for line in kcat(broker, "-C", "-t", topic, "-e", "-J").stdout.splitlines()]
    assert [r["offset"] for r in rows] == list(range(50))
    assert {r["tstype"] for r in rows} == {"logappend"}
    assert all(before <= r["ts"] <= after for r in rows), (before, after, rows[0])
    written = on_disk(broker, topic)
    assert {b.timestamp_type for b in written} == {1}
    assert {COMPRESSION[b.compression_type] for b in written} == {"gzip"}
