"""The broker's segment files read by an independent decoder: kafka-python's MemoryRecords.

Nothing here imports logstore: what the broker wrote must make sense to a
Kafka codec that shares no code with it.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kafka.record.memory_records import MemoryRecords

COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def segment_paths(data_dir: Path, topic: str | None = None, partition: int | None = None) -> list[Path]:
    """Every `*.log` under `data_dir` (or under one topic's, or one partition's, directory), in offset order."""
    if topic is None:
        return sorted(data_dir.glob("*-*/*.log"))
    pattern = f"{topic}-{'*' if partition is None else partition}"
    return sorted(p for d in data_dir.glob(pattern) if d.name.rpartition("-")[0] == topic
                  for p in sorted(d.glob("*.log")))


def batches(path: Path, whole: bool = True) -> Iterator:
    """Every batch of one segment file, its CRC checked, as kafka-python decodes it.

    `whole`: the file must end exactly after its last batch (true of a segment
    after a clean stop; a running broker may be mid-write).
    """
    data = path.read_bytes()
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"{path}: CRC mismatch in the batch at offset {batch.base_offset}"
        yield batch
    if whole:
        assert records.valid_bytes() == len(data), \
            f"{path}: {len(data) - records.valid_bytes()} bytes after the last whole batch"
