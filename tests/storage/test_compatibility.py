"""Both directions: real Kafka log bytes open in logstore, and logstore's files read in kafka-python."""
from __future__ import annotations

import json
import os

import pytest
from kafka.record.memory_records import MemoryRecords

import logstore.formats.kafka as K
from logstore.config import LogConfig
from logstore.log import Log
from vector_dirs import VECTORS

REAL_BROKER = sorted(p.stem for p in VECTORS.glob("real_broker_fetch_records_*.hex"))


def _expected_offsets(entry: dict) -> list[int]:
    if "records" in entry:
        return [r["offset"] for r in entry["records"]]
    if "inner" in entry:
        return [m["offset"] for m in entry["inner"]]
    return [entry["offset"]]


@pytest.mark.parametrize("name", REAL_BROKER)
def test_real_broker_log_opens_and_every_offset_is_found(tmp_path, name):
    doc = json.loads((VECTORS / f"{name}.json").read_text())
    data = bytes.fromhex("".join((VECTORS / f"{name}.hex").read_text().split()))
    directory = tmp_path / "real-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(data)
    config = LogConfig.from_properties({"index.interval.bytes": 100})
    with Log.open(str(directory), config) as log:
        report = log.recovery_report
        valid = doc["expected"]["validBytes"]
        assert [t.position for t in report.truncations] == ([valid] if valid < len(data) else [])
        offsets = [o for e in doc["expected"]["entries"] for o in _expected_offsets(e)]
        assert [r.offset for r in log.iter_records(0)] == offsets
        assert log.log_end_offset == doc["expected"]["entries"][-1].get(
            "lastOffset", doc["expected"]["entries"][-1].get("offset")) + 1
        for offset in offsets:
            assert log.read_records(offset, 1)[0].offset == offset
        assert log.active_segment.offset_index.entries > 0


def test_files_written_by_logstore_read_in_kafka_python(tmp_path):
    config = LogConfig.from_properties({"segment.bytes": 3000, "index.interval.bytes": 500})
    expected = []
    with Log.open(str(tmp_path / "mixed-0"), config) as log:
        for i in range(60):
            codec = [K.NONE, K.GZIP, K.SNAPPY, K.LZ4, K.ZSTD][i % 5]
            values = [f"value {i}.{j} ".encode() * (j % 7) for j in range(1 + i % 9)]
            keys = [f"k{j}".encode() for j in range(len(values))]
            result = log.append_records(values, keys=keys, timestamps=1_700_000_000_000 + i, compression=codec)
            expected += [(result.first_offset + j, k, v) for j, (k, v) in enumerate(zip(keys, values))]
        assert len(log.segments) > 2
        segment_files = sorted(p for p in os.listdir(log.directory) if p.endswith(".log"))
    seen = []
    for name in segment_files:
        records = MemoryRecords((tmp_path / "mixed-0" / name).read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            seen += [(r.offset, r.key, r.value) for r in batch]
    assert seen == expected
