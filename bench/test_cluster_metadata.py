"""Reading KRaft's `__cluster_metadata-0` against opening the store it describes.

    .venv/bin/python -m pytest -q bench/test_cluster_metadata.py --benchmark-only \\
        --benchmark-json=.benchmarks/cluster_metadata.json
    .venv/bin/python bench/test_cluster_metadata.py .benchmarks/cluster_metadata.json

Issue 22's check: a store opened over a directory Kafka wrote also replays Kafka's
metadata log, and that replay must stay small beside the open itself. Built once,
untimed:

- a store of N topics of one partition each (ten 100-byte records per partition,
  closed cleanly), with no `__cluster_metadata-0`. N is set by the open-file limit:
  an open partition holds 5 fds (its `.log`, its `.index` and `.timeindex` twice
  each), so N = min(2,000, (soft RLIMIT_NOFILE - 2,048) / 6), and
  `LOGSTORE_BENCH_TOPICS` may lower it (2,000 with this machine's 20,000);
- a metadata log of 10,000 topics as a controller writes CreateTopics: per topic
  one batch of a ConfigRecord (cleanup.policy), a TopicRecord and three
  PartitionRecords v1 (50,001 records, about 3.5 MiB), after a FeatureLevelRecord;
- the same 10,000 topics as a KRaft snapshot plus an empty log (context only).

Timed: `logstore.open` of the store (peer, the baseline; closing it is the next
round's untimed setup) and `read_cluster_metadata` of each metadata directory (ours).

Target: reading the 10,000-topic metadata log takes at most 0.2x the store's open.
"""
from __future__ import annotations

import os
import resource
import shutil
import struct
import sys
import tempfile

import pytest

import logstore
import logstore.formats.kafka as K
from logstore.checkpoints import topic_id_to_string
from logstore.cluster_metadata import encode_control_record, encode_metadata_record, read_cluster_metadata

METADATA_TOPICS = 10_000
PARTITIONS_PER_TOPIC = 3
FDS_PER_PARTITION = 5
RATIO_TARGET = 0.2
OPEN_ROUNDS, READ_ROUNDS = 10, 30
TIMESTAMP = 1_700_000_000_000


def store_topics() -> int:
    """N: as many one-partition topics as the open-file limit leaves room for, at most 2,000."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = (soft - 2048) // (FDS_PER_PARTITION + 1) if soft != resource.RLIM_INFINITY else 2000
    return max(1, min(2000, room, int(os.environ.get("LOGSTORE_BENCH_TOPICS", "2000"))))


def _topic_records(n: int, directory_id: str) -> list[bytes]:
    topic_id = topic_id_to_string(n.to_bytes(16, "big"))
    records = [encode_metadata_record("ConfigRecord", 0, {"resourceType": 2, "resourceName": f"topic-{n}",
                                                          "name": "cleanup.policy", "value": "compact"}),
               encode_metadata_record("TopicRecord", 0, {"name": f"topic-{n}", "topicId": topic_id})]
    for p in range(PARTITIONS_PER_TOPIC):
        records.append(encode_metadata_record("PartitionRecord", 1, {
            "partitionId": p, "topicId": topic_id, "replicas": [1], "isr": [1], "leader": 1, "leaderEpoch": 0,
            "partitionEpoch": 0, "directories": [directory_id]}))
    return records


def _batch(values: list[bytes], offset: int) -> bytes:
    return K.encode_batch([None] * len(values), values, base_offset=offset, timestamps=TIMESTAMP,
                          partition_leader_epoch=1)


def _control(control_type: int, data: dict, offset: int) -> bytes:
    return K.encode_batch([struct.pack(">hh", 0, control_type)], [encode_control_record(control_type, data)],
                          base_offset=offset, control=True, timestamps=TIMESTAMP)


def build_metadata_log(directory: str) -> int:
    """The 10,000-topic metadata log, one CreateTopics batch per topic; returns its record count."""
    os.makedirs(directory)
    directory_id = topic_id_to_string(b"\x07" * 16)
    data = bytearray(_batch([encode_metadata_record("FeatureLevelRecord", 0, {"name": "metadata.version",
                                                                              "featureLevel": 21})], 0))
    offset = 1
    for n in range(METADATA_TOPICS):
        records = _topic_records(n, directory_id)
        data += _batch(records, offset)
        offset += len(records)
    with open(os.path.join(directory, f"{0:020d}.log"), "wb") as f:
        f.write(data)
    return offset


def build_metadata_snapshot(directory: str, end_offset: int) -> None:
    """The same topics as a snapshot (header, 1,000 records a batch, footer) and an empty log after it."""
    os.makedirs(directory)
    directory_id = topic_id_to_string(b"\x07" * 16)
    records = [encode_metadata_record("FeatureLevelRecord", 0, {"name": "metadata.version", "featureLevel": 21})]
    for n in range(METADATA_TOPICS):
        records += _topic_records(n, directory_id)
    data = bytearray(_control(3, {"version": 0, "lastContainedLogTimestamp": TIMESTAMP}, 0))
    for start in range(0, len(records), 1000):
        data += _batch(records[start:start + 1000], 1 + start)
    data += _control(4, {"version": 0}, 1 + len(records))
    with open(os.path.join(directory, f"{end_offset:020d}-{1:010d}.checkpoint"), "wb") as f:
        f.write(data)
    open(os.path.join(directory, f"{end_offset:020d}.log"), "wb").close()


def build_store(path: str, topics: int) -> None:
    with logstore.open(path) as store:
        for n in range(topics):
            store.create_topic(f"store-topic-{n}", 1)
            store.log(f"store-topic-{n}", 0).append_records([b"v" * 100] * 10)


@pytest.fixture(scope="module")
def dirs():
    """name -> directory: the store, the metadata log and the metadata snapshot, built once."""
    root = tempfile.mkdtemp(prefix="cluster-metadata-bench-")
    paths = {"store": os.path.join(root, "store"), "log": os.path.join(root, "log", "__cluster_metadata-0"),
             "snapshot": os.path.join(root, "snapshot", "__cluster_metadata-0")}
    topics = store_topics()
    build_store(paths["store"], topics)
    records = build_metadata_log(paths["log"])
    build_metadata_snapshot(paths["snapshot"], records)
    yield paths, topics, records
    shutil.rmtree(root, ignore_errors=True)


def test_store_open(benchmark, dirs):
    """Open the store of N partitions without a metadata log, as a restart does before serving."""
    paths, topics, _ = dirs
    opened = []

    def setup():
        while opened:
            opened.pop().close()
        return (), {}

    benchmark.group = "cluster-metadata/10000-topics"
    benchmark.pedantic(lambda: opened.append(logstore.open(paths["store"])), setup=setup, rounds=OPEN_ROUNDS,
                       warmup_rounds=1)
    store = opened.pop()
    try:
        assert len(store.topics()) == topics and store.kafka_metadata is None
    finally:
        store.close()
    benchmark.extra_info.update(side="peer", what="logstore.open", topics=topics, partitions=topics,
                                fds_per_partition=FDS_PER_PARTITION,
                                fd_limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0])


@pytest.mark.parametrize("layout", ["log", "snapshot"])
def test_read_cluster_metadata(benchmark, dirs, layout):
    """Replay the 10,000-topic metadata directory, from the log or from a snapshot."""
    paths, _, records = dirs
    benchmark.group = "cluster-metadata/10000-topics" + ("" if layout == "log" else "/snapshot")
    found = benchmark.pedantic(read_cluster_metadata, args=(paths[layout],), rounds=READ_ROUNDS, warmup_rounds=1)
    assert len(found.topics) == METADATA_TOPICS and found.end_offset == records
    assert found.topics["topic-7"].partitions == PARTITIONS_PER_TOPIC
    assert found.topics["topic-7"].configs == {"cleanup.policy": "compact"}
    size = sum(os.path.getsize(os.path.join(paths[layout], n)) for n in os.listdir(paths[layout]))
    benchmark.extra_info.update(side="ours", what=f"read_cluster_metadata ({layout})", topics=METADATA_TOPICS,
                                records=records, bytes=size)


def main(argv: list[str]) -> int:
    """Print the store's open time, each metadata read, and the read's share of the open."""
    from benchjson import finish, load_groups, machine_line, met, table
    from summary import Summary

    prog = "bench/test_cluster_metadata.py"
    path = argv[1] if len(argv) > 1 else ".benchmarks/cluster_metadata.json"
    loaded = load_groups(path, prog)
    if isinstance(loaded, int):
        return loaded
    data, groups, problems = loaded
    benches = [b for sides in groups.values() for b in sides.values()]
    opening = next((b for b in benches if b["extra_info"].get("what") == "logstore.open"), None)
    if opening is None:
        problems.append("no logstore.open benchmark to compare with")
        return finish([], problems, prog)
    open_s, open_min = opening["stats"]["median"], opening["stats"]["min"]
    info = opening["extra_info"]
    rows = [("logstore.open", f"{info['topics']:,} partitions (fd limit {info['fd_limit']:,})", "-",
             f"{open_s * 1000:,.1f} ms", f"{open_min * 1000:,.1f} ms", "1.00x", "-")]
    verdicts = []
    summary = Summary("cluster_metadata", "Reading Kafka's __cluster_metadata against logstore.open", data, path)
    for bench in benches:
        extra, stats = bench["extra_info"], bench["stats"]
        if bench is opening:
            continue
        ratio = stats["median"] / open_s
        cell = "-"
        if extra["what"].endswith("(log)"):
            cell = met(ratio <= RATIO_TARGET, stats["min"] / open_min <= RATIO_TARGET)
            verdicts.append(cell)
        summary.row(f"{extra['what']} / open", ratio, verdict=None if cell == "-" else cell,
                    target=None if cell == "-" else RATIO_TARGET, op="<=", ours=f"{stats['median'] * 1000:,.1f} ms",
                    peer=f"{open_s * 1000:,.1f} ms (open)")
        rows.append((extra["what"], f"{extra['topics']:,} topics, {extra['records']:,} records",
                     f"{extra['bytes'] / 1024:,.0f} KiB", f"{stats['median'] * 1000:,.1f} ms",
                     f"{stats['min'] * 1000:,.1f} ms", f"{ratio:.3f}x", cell))
    print(machine_line(data))
    print()
    table(("timed", "over", "bytes", "median", "min", "/ open", f"<= {RATIO_TARGET:g}x"),
          ("---", "---", "---:", "---:", "---:", "---:", ":---:"), rows)
    summary.write()
    return finish(verdicts, problems, prog)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
