"""After a clean stop, kafka-python's own decoder reads every segment file the broker wrote.

Small segments (log.segment.bytes) make the broker roll several files per
partition, and the topics mix every codec, so the check covers file names,
batch boundaries across rolls, CRCs, compression attributes and producer ids.
"""
from __future__ import annotations

import random

from kafka import KafkaProducer

from segment_files import COMPRESSION, batches, segment_paths

TIMEOUT = 15.0  # s
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def test_kafka_python_decodes_every_segment_after_a_clean_stop(start_broker):
    broker = start_broker("log.segment.bytes=8192", "num.partitions=2")
    rng = random.Random(5)
    produced: dict[tuple[str, int], list[bytes]] = {}
    codecs_of: dict[tuple[str, int], set[str]] = {}
    # One topic per codec, and one topic written with each codec in turn (several per file).
    plan = [(f"codec-{c or 'none'}", [c]) for c in CODECS] + [("mixed", CODECS)]
    for topic, codecs in plan:
        for codec in codecs:
            p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                              compression_type=codec, linger_ms=5, batch_size=4096)
            try:
                futures = []
                for partition in (0, 1):
                    # Hex text: compressible (so every codec is kept) but not to nothing.
                    values = [b"%s/%s/%d/%05d " % (topic.encode(), (codec or "none").encode(), partition, i)
                              + rng.randbytes(8 + i % 32).hex().encode() for i in range(400)]
                    produced.setdefault((topic, partition), []).extend(values)
                    codecs_of.setdefault((topic, partition), set()).add(codec or "none")
                    futures += [p.send(topic, value=v, partition=partition) for v in values]
                p.flush(timeout=TIMEOUT)
                for f in futures:
                    f.get(timeout=TIMEOUT)
            finally:
                p.close(timeout=TIMEOUT)
    broker.stop()  # SIGTERM: exit 0 and the clean-shutdown marker, checked

    paths = segment_paths(broker.data_dir)
    assert {(p.parent.name.rpartition("-")[0], int(p.parent.name.rpartition("-")[2])) for p in paths} == \
        set(produced)
    found: dict[tuple[str, int], list[bytes]] = {}
    seen_codecs: dict[tuple[str, int], set[str]] = {}
    files_per_partition: dict[tuple[str, int], int] = {}
    for path in paths:
        topic, _, partition = path.parent.name.rpartition("-")
        key = (topic, int(partition))
        files_per_partition[key] = files_per_partition.get(key, 0) + 1
        file_batches = list(batches(path))  # CRCs checked, no bytes after the last batch
        assert file_batches, f"{path} holds no batch"
        assert int(path.stem) == file_batches[0].base_offset, f"{path.name} does not name its first offset"
        values = found.setdefault(key, [])
        for batch in file_batches:
            assert batch.magic == 2 and batch.producer_id >= 0 and not batch.is_transactional
            assert batch.base_offset == len(values), f"{path}: a gap or overlap at {batch.base_offset}"
            records = list(batch)
            assert [r.offset for r in records] == list(range(batch.base_offset, batch.last_offset + 1))
            values.extend(r.value for r in records)
            seen_codecs.setdefault(key, set()).add(COMPRESSION[batch.compression_type])
    assert found == produced
    # kafka-python sends a batch uncompressed when compressing would not make it smaller.
    assert {k: v - {"none"} for k, v in seen_codecs.items()} == {k: v - {"none"} for k, v in codecs_of.items()}
    assert min(files_per_partition.values()) >= 2, f"expected rolled segments: {files_per_partition}"
