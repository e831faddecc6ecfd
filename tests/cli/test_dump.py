"""`logstore dump`, run as a real process on segment files built from the spec vectors.

Expected batch lines are rebuilt from each vector's JSON (bytes verified with
independent decoders) in the layout of Kafka's DumpLogSegments, so the
command is checked against data it did not produce.
"""
from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from dump_cli import no_traceback, ok, run_dump
from logstore import dump
from logstore.formats import kafka as K
from spec_vectors import VECTORS_DIR as VECTORS

MIXED = "real_broker_fetch_records_v1_v1c_v2_v2c_v2b_v2b_v2b_v2bc_v1b_v1bc"
TXN = "v2_computed_transactional_3_records_headers"
COMMIT = "v2_computed_control_commit"
PARTIAL = "v2_stream_with_partial_tail"
BAD_CRC = "v2_control_abort_BAD_CRC_opaque_value"
# Legacy wrappers Kafka refuses: their framing is sound but the codec cannot decode them.
REFUSED = {"v0_sarama_gzip_wrapper_EMPTY_INVALID": "compressed legacy message has no inner records",
           "v1_sarama_zstd_wrapper_INVALID_FOR_KAFKA": "zstd is not allowed in magic 0/1 messages"}
T0 = 1700000000000


def vector_bytes(name: str) -> bytes:
    return bytes.fromhex("".join((VECTORS / f"{name}.hex").read_text().split()))


def vector_entries(name: str) -> list[dict]:
    return json.loads((VECTORS / f"{name}.json").read_text())["expected"]["entries"]


def stream_vectors() -> list[str]:
    """Vectors that are a stream of log entries (a .hex with decoded entries in its .json)."""
    names = []
    for doc in sorted(VECTORS.glob("*.json")):
        expected = json.loads(doc.read_text()).get("expected")
        if (VECTORS / f"{doc.stem}.hex").exists() and isinstance(expected, dict) and expected.get("entries"):
            names.append(doc.stem)
    return names


def segment(directory: Path, base_offset: int, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(data)
    return path





def batch_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(("baseOffset: ", "offset: "))]


TS_TEXT = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime", None: "NoTimestampType"}


def kafka_line(e: dict) -> str:
    """DumpLogSegments.printBatchLevel for one expected entry of a vector."""
    if e["magic"] == 2:
        horizon = f"OptionalLong[{e['baseTimestamp']}]" if e["hasDeleteHorizon"] else "OptionalLong.empty"
        last_seq = e["lastSequence"] if e["recordCount"] else (
            -1 if e["baseSequence"] < 0 else K.increment_sequence(e["baseSequence"], e["lastOffsetDelta"]))
        head = (f"baseOffset: {e['baseOffset']} lastOffset: {e['lastOffset']} count: {e['recordCount']} "
                f"baseSequence: {e['baseSequence']} lastSequence: {last_seq} producerId: {e['producerId']} "
                f"producerEpoch: {e['producerEpoch']} partitionLeaderEpoch: {e['partitionLeaderEpoch']} "
                f"isTransactional: {str(e['isTransactional']).lower()} "
                f"isControl: {str(e['isControl']).lower()} deleteHorizonMs: {horizon}")
        timestamp = e["maxTimestamp"]
    else:
        head = f"offset: {e['offset']}"
        timestamp = -1 if e["timestamp"] is None else e["timestamp"]
    return (f"{head} position: {e['position']} {TS_TEXT[e['timestampType']]}: {timestamp} "
            f"size: {e['sizeInBytes']} magic: {e['magic']} compresscodec: {e['compression']} "
            f"crc: {e['crc']} isvalid: {str(e['crcValid']).lower()}")


def expected_records(e: dict) -> list[dict]:
    if "records" in e:
        return e["records"]
    if "inner" in e:
        return e["inner"]
    return [{"offset": e["offset"], "timestamp": e["timestamp"], "key": e["key"], "value": e["value"]}]


# ---------------------------------------------------------------------------
# Text layout


def test_mixed_v1_v2_broker_log_prints_one_kafka_line_per_entry(tmp_path):
    path = segment(tmp_path / "orders-0", 0, vector_bytes(MIXED))
    lines = ok(run_dump(path))
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    assert lines[2:] == [kafka_line(e) for e in vector_entries(MIXED)]
    assert lines[2] == ("offset: 0 position: 0 CreateTime: 1633286796965 size: 72 magic: 1 "
                        "compresscodec: none crc: 1123078385 isvalid: true")
    assert lines[6] == (
        "baseOffset: 4 lastOffset: 4 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 356 CreateTime: 1633286986079 size: 106 "
        "magic: 2 compresscodec: none crc: 179453030 isvalid: true")


@pytest.mark.parametrize("name", [n for n in stream_vectors() if n not in REFUSED and n != PARTIAL])
def test_every_vector_dumps_as_kafka_would(tmp_path, name):
    result = run_dump(segment(tmp_path, 0, vector_bytes(name)))
    entries = vector_entries(name)
    no_traceback(result)
    assert batch_lines(result.stdout.splitlines()) == [kafka_line(e) for e in entries]
    corrupt = any(not e["crcValid"] for e in entries)
    assert result.returncode == (1 if corrupt else 0), result.stderr


def test_deep_prints_every_record_of_the_mixed_log(tmp_path):
    lines = ok(run_dump("--deep", segment(tmp_path, 0, vector_bytes(MIXED))))
    records = [line for line in lines if line.startswith("| ")]
    expected = [r for e in vector_entries(MIXED) for r in expected_records(e)]
    assert [int(line.split()[2]) for line in records] == [r["offset"] for r in expected]
    assert records[0] == ("| offset: 0 CreateTime: 1633286796965 keySize: 5 valueSize: 33 isValid: true "
                          'crc: 1123078385 key: alpha payload: {"count":0,"filler":"aaaaaaaaaa"}')
    assert records[2] == ('| offset: 2 CreateTime: 1633286831051 keySize: 5 valueSize: 33 key: alpha '
                          'payload: {"count":0,"filler":"aaaaaaaaaa"}')
    assert ('| offset: 8 CreateTime: 1633287470665 keySize: 7 valueSize: 33 sequence: -1 headerKeys: [] '
            'key: epsilon payload: {"count":0,"filler":"eeeeeeeeee"}') in records
    # Each record line follows the line of the batch that holds it.
    assert lines.index(records[0]) == lines.index(batch_lines(lines)[0]) + 1


def test_transactional_batch_and_commit_marker(tmp_path):
    path = segment(tmp_path / "txn-0", 100, vector_bytes(TXN) + vector_bytes(COMMIT))
    lines = ok(run_dump("--deep", path))
    assert lines == [
        f"Dumping {path}",
        "Log starting offset: 100",
        "baseOffset: 100 lastOffset: 102 count: 3 baseSequence: 0 lastSequence: 2 producerId: 4000 "
        "producerEpoch: 3 partitionLeaderEpoch: 7 isTransactional: true isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000005 size: 125 magic: 2 "
        "compresscodec: none crc: 813695094 isvalid: true",
        "| offset: 100 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: 0 "
        "headerKeys: [trace-id,empty,nullv] key: k0 payload: v0",
        "| offset: 101 CreateTime: 1700000000005 keySize: -1 valueSize: 2 sequence: 1 headerKeys: [] "
        "payload: v1",
        "| offset: 102 CreateTime: 1700000000003 keySize: 2 valueSize: -1 sequence: 2 headerKeys: [h] "
        "key: k2",
        "baseOffset: 103 lastOffset: 103 count: 1 baseSequence: -1 lastSequence: -1 producerId: 4000 "
        "producerEpoch: 3 partitionLeaderEpoch: 7 isTransactional: true isControl: true "
        "deleteHorizonMs: OptionalLong.empty position: 125 CreateTime: 1700000000100 size: 78 magic: 2 "
        "compresscodec: none crc: 568851910 isvalid: true",
        "| offset: 103 CreateTime: 1700000000100 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 2",
    ]


def test_abort_marker_written_by_the_codec(tmp_path):
    marker = K.encode_control_batch(False, 9, 77, 1, T0, base_offset=12, partition_leader_epoch=3)
    lines = ok(run_dump("--deep", segment(tmp_path, 12, marker)))
    assert lines[2].startswith("baseOffset: 12 lastOffset: 12 count: 1 baseSequence: -1 lastSequence: -1 "
                               "producerId: 77 producerEpoch: 1 partitionLeaderEpoch: 3 "
                               "isTransactional: true isControl: true")
    assert lines[3] == (f"| offset: 12 CreateTime: {T0} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
                        "endTxnMarker: ABORT coordinatorEpoch: 9")


def test_encoded_batches_with_every_codec(tmp_path):
    data, offset = b"", 0
    for codec in (K.NONE, K.GZIP, K.SNAPPY, K.LZ4, K.ZSTD):
        data += K.encode_batch([b"k%d" % codec, None], [b"value", b"v" * 300], timestamps=[T0, T0 + 7],
                               base_offset=offset, compression=codec)
        offset += 2
    lines = ok(run_dump("--deep", segment(tmp_path, 0, data)))
    batches = batch_lines(lines)
    assert [line.split(" compresscodec: ")[1].split()[0] for line in batches] == list(K.CODEC_NAMES)
    assert all(f"CreateTime: {T0 + 7} " in line and line.endswith("isvalid: true") for line in batches)
    assert (f"| offset: 8 CreateTime: {T0} keySize: 2 valueSize: 5 sequence: -1 headerKeys: [] "
            "key: k4 payload: value") in lines
    assert (f"| offset: 9 CreateTime: {T0 + 7} keySize: -1 valueSize: 300 sequence: -1 headerKeys: [] "
            f"payload: {'v' * 300}") in lines


def test_bytes_that_are_not_printable_utf8_print_as_hex(tmp_path):
    batch = K.encode_batch([b"\x00\xff", "h\u00e9".encode(), b"k"], [b"\xc3\x28", b"line\nbreak", None],
                           headers=[[("h", b"\xff")], [], []], timestamps=T0)
    lines = ok(run_dump("--deep", segment(tmp_path, 0, batch)))
    assert lines[3].endswith("headerKeys: [h] key: 0x00ff payload: 0xc328")
    assert lines[4].endswith("key: h\u00e9 payload: 0x" + b"line\nbreak".hex())
    assert lines[5].endswith("keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: k")


def test_log_append_time_and_sequence_wraparound(tmp_path):
    batch = K.encode_batch([None] * 3, [b"a", b"b", b"c"], timestamps=T0, base_offset=40, producer_id=5,
                           producer_epoch=2, base_sequence=2147483646, log_append_time=T0 + 999)
    lines = ok(run_dump("--deep", segment(tmp_path, 40, batch)))
    assert "baseSequence: 2147483646 lastSequence: 0 producerId: 5 producerEpoch: 2" in lines[2]
    assert f" LogAppendTime: {T0 + 999} " in lines[2]
    sequences = [line.split(" sequence: ")[1].split()[0] for line in lines[3:]]
    assert sequences == ["2147483646", "2147483647", "0"]
    assert all(f"LogAppendTime: {T0 + 999} " in line for line in lines[3:])


def test_cleaned_batch_shows_its_delete_horizon(tmp_path):
    batch = bytearray(K.encode_batch([b"k"], [None], timestamps=T0))
    batch[22] |= 0x40  # hasDeleteHorizonMs, as the log cleaner sets it; baseTimestamp is the horizon
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    lines = ok(run_dump("--deep", segment(tmp_path, 0, bytes(batch))))
    assert f" deleteHorizonMs: OptionalLong[{T0}] " in lines[2] and lines[2].endswith("isvalid: true")
    assert lines[3] == f"| offset: 0 CreateTime: {T0} keySize: 1 valueSize: -1 sequence: -1 headerKeys: [] key: k"


def test_partition_directory_dumps_segments_in_base_offset_order(tmp_path):
    partition = tmp_path / "orders-3"
    later = segment(partition, 3, K.encode_batch([b"c"], [b"3"], timestamps=T0, base_offset=3))
    first = segment(partition, 0, K.encode_batch([b"a", b"b"], [b"1", b"2"], timestamps=T0))
    (partition / f"{0:020d}.index").write_bytes(b"\0" * 8)
    (partition / f"{7:020d}.log.deleted").write_bytes(b"garbage that is not read")
    (partition / "leader-epoch-checkpoint").write_text("0\n0\n")
    lines = ok(run_dump(partition))
    assert [line for line in lines if not line.startswith("baseOffset")] == [
        f"Dumping {first}", "Log starting offset: 0", f"Dumping {later}", "Log starting offset: 3"]
    assert [line.split()[1] for line in batch_lines(lines)] == ["0", "3"]


def test_several_paths_are_dumped_in_argument_order(tmp_path):
    a = segment(tmp_path / "a-0", 0, vector_bytes(COMMIT))
    b = segment(tmp_path / "b-0", 0, vector_bytes(TXN))
    lines = ok(run_dump(b, a))
    assert [line for line in lines if line.startswith("Dumping")] == [f"Dumping {b}", f"Dumping {a}"]


def test_a_file_not_named_by_offset_is_still_dumped(tmp_path):
    path = tmp_path / "captured-fetch.bin"
    path.write_bytes(vector_bytes(COMMIT))
    lines = ok(run_dump(path))
    assert lines[1] == "Log starting offset: unknown (file name is not <offset>.log)"
    assert batch_lines(lines) == [kafka_line(e) for e in vector_entries(COMMIT)]


def test_empty_segment_prints_only_the_heading(tmp_path):
    path = segment(tmp_path, 500, b"")
    assert ok(run_dump(path)) == [f"Dumping {path}", "Log starting offset: 500"]


# ---------------------------------------------------------------------------
# Partial tails and corruption


def test_partial_tail_is_reported_and_is_not_an_error(tmp_path):
    lines = ok(run_dump(segment(tmp_path, 0, vector_bytes(PARTIAL))))
    assert batch_lines(lines) == [kafka_line(e) for e in vector_entries(PARTIAL)]
    assert lines[-1] == ("Found 4 bytes of a partial entry at position 299 "
                         "(Kafka recovery would truncate the segment there)")


def test_torn_batch_at_the_end_is_a_partial_tail(tmp_path):
    good = K.encode_batch([b"k"], [b"v"], timestamps=T0)
    torn = K.encode_batch([b"k"], [b"w" * 100], timestamps=T0, base_offset=1)[:40]
    lines = ok(run_dump(segment(tmp_path, 0, good + torn)))
    assert len(batch_lines(lines)) == 1
    assert lines[-1].startswith(f"Found 40 bytes of a partial entry at position {len(good)} ")


def test_bad_crc_batch_is_printed_invalid_and_the_next_batch_still_read(tmp_path):
    bad = vector_bytes(BAD_CRC)
    path = segment(tmp_path, 0, bad + vector_bytes(COMMIT))
    result = run_dump("--deep", path)
    no_traceback(result)
    assert result.returncode == 1
    batches = batch_lines(result.stdout.splitlines())
    assert batches[0] == kafka_line(vector_entries(BAD_CRC)[0])
    assert batches[0].endswith("crc: 1704460240 isvalid: false")
    assert batches[1].startswith("baseOffset: 103 ") and f"position: {len(bad)} " in batches[1]
    assert batches[1].endswith("isvalid: true")
    assert "| offset: 0 CreateTime: 9999999 keySize: 4 valueSize: 22" in result.stdout
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: batch at position 0: record batch CRC mismatch: "
        "stored 1704460240, computed 3580583860 (at byte 17)"]


def test_legacy_message_with_bad_crc(tmp_path):
    data = bytearray(vector_bytes("v1_message_set_4_messages"))
    second = vector_entries("v1_message_set_4_messages")[1]
    data[second["position"] + 20] ^= 0x01  # inside its timestamp
    path = segment(tmp_path, 0, bytes(data))
    result = run_dump("--deep", path)
    no_traceback(result)
    assert result.returncode == 1
    batches = batch_lines(result.stdout.splitlines())
    assert len(batches) == 4
    assert batches[1].endswith(f"crc: {second['crc']} isvalid: false")
    assert f"isValid: false crc: {second['crc']}" in result.stdout
    assert f"batch at position {second['position']}: legacy message CRC mismatch" in result.stderr
    assert f"(at byte {second['position'] + 12})" in result.stderr


def test_corrupt_compressed_batch_reports_crc_and_decompression_then_continues(tmp_path):
    gz = bytearray(K.encode_batch([b"k"] * 20, [b"value %d" % i for i in range(20)], timestamps=T0,
                                  compression=K.GZIP))
    gz[80] ^= 0xFF  # inside the deflate stream (61 header + 10 gzip header bytes before it)
    after = K.encode_batch([b"k"], [b"v"], timestamps=T0, base_offset=20)
    path = segment(tmp_path, 0, bytes(gz) + after)
    result = run_dump("--deep", path)
    no_traceback(result)
    assert result.returncode == 1
    batches = batch_lines(result.stdout.splitlines())
    assert batches[0].endswith("compresscodec: gzip crc: %d isvalid: false" % K.read_header(gz).crc)
    assert batches[1].startswith("baseOffset: 20 ") and batches[1].endswith("isvalid: true")
    errors = result.stderr.splitlines()
    assert len(errors) == 2
    assert all(line.startswith(f"logstore dump: {path}: batch at position 0: ") for line in errors)
    assert "CRC mismatch" in errors[0] and "(at byte 17)" in errors[0]
    assert "gzip records section does not decompress" in errors[1] and "(at byte 61)" in errors[1]


def test_entry_the_codec_refuses_is_skipped_when_its_framing_is_sound(tmp_path):
    # A v2 entry of 32 bytes: framing says where it ends, but it is too short to be a batch.
    short = (5).to_bytes(8, "big") + (20).to_bytes(4, "big") + b"\0\0\0\0" + b"\x02" + b"\0" * 15
    after = K.encode_batch([b"k"], [b"v"], timestamps=T0, base_offset=6)
    path = segment(tmp_path, 5, short + after)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert batch_lines(result.stdout.splitlines()) == [
        "baseOffset: 5 position: 0 size: 32 magic: 2 isvalid: false",
        *[kafka_line_of(after, 32)]]
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: batch at position 0: "
        "record batch length 20 is below the minimum 49 (at byte 8)"]


def kafka_line_of(batch: bytes, position: int) -> str:
    """The expected line of a batch the codec wrote, placed at `position`."""
    h = K.read_header(batch)
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} isTransactional: false isControl: false "
            f"deleteHorizonMs: OptionalLong.empty position: {position} CreateTime: {h.max_timestamp} "
            f"size: {len(batch)} magic: 2 compresscodec: none crc: {h.crc} isvalid: true")


def test_batch_with_an_unknown_codec_is_refused_and_skipped(tmp_path):
    batch = bytearray(K.encode_batch([b"k"], [b"v"], timestamps=T0))
    batch[22] |= 0x07  # codec 7, CRC recomputed so only the codec is wrong
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    after = K.encode_batch([b"k"], [b"v"], timestamps=T0, base_offset=1)
    path = segment(tmp_path, 0, bytes(batch) + after)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert batch_lines(result.stdout.splitlines())[1] == kafka_line_of(after, len(batch))
    assert "batch at position 0: unknown compression codec 7 (at byte 21)" in result.stderr


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_legacy_wrapper_kafka_refuses_is_reported(tmp_path, name):
    path = segment(tmp_path, 0, vector_bytes(name))
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    entry = vector_entries(name)[0]
    assert batch_lines(result.stdout.splitlines()) == [
        f"offset: {entry['offset']} position: 0 size: {entry['sizeInBytes']} magic: {entry['magic']} "
        "isvalid: false"]
    assert f"{path}: batch at position 0: {REFUSED[name]} (at byte" in result.stderr


def test_zero_filled_tail_stops_with_the_byte_position(tmp_path):
    good = K.encode_batch([b"k"], [b"v"], timestamps=T0)
    path = segment(tmp_path, 0, good + b"\0" * 64)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert len(batch_lines(result.stdout.splitlines())) == 1
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: cannot read past position {len(good)}: "
        f"entry size 0 is below the minimum 14 (at byte {len(good) + 8})"]


def test_short_zero_tail_is_a_partial_entry_as_kafka_reads_it(tmp_path):
    good = K.encode_batch([b"k"], [b"v"], timestamps=T0)
    lines = ok(run_dump(segment(tmp_path, 0, good + b"\0" * 16)))
    assert lines[-1].startswith(f"Found 16 bytes of a partial entry at position {len(good)} ")


def test_unknown_magic_stops_reading(tmp_path):
    good = K.encode_batch([b"k"], [b"v"], timestamps=T0)
    alien = bytearray(K.encode_batch([b"k"], [b"v"], timestamps=T0, base_offset=1))
    alien[16] = 7
    path = segment(tmp_path, 0, good + bytes(alien) + good)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert len(batch_lines(result.stdout.splitlines())) == 1
    assert (f"cannot read past position {len(good)}: unknown magic byte 7 "
            f"(at byte {len(good) + 16})") in result.stderr


def test_random_bytes_are_not_a_log(tmp_path):
    for seed in range(4):
        path = segment(tmp_path / f"r{seed}", 0, random.Random(seed).randbytes(4096))
        result = run_dump(path)
        no_traceback(result)
        assert result.returncode == 1, result.stdout
        [line] = result.stderr.splitlines()
        assert line.startswith(f"logstore dump: {path}: cannot read past position 0: ")
        assert "(at byte " in line


def test_text_file_is_not_a_log(tmp_path):
    path = tmp_path / "notes.log"
    path.write_text("This is not a Kafka log segment, just some text.\n" * 20)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: cannot read past position 0: unknown magic byte 102 in an entry "
        "that runs past the end of the file (at byte 16)"]


# ---------------------------------------------------------------------------
# Paths and usage


def test_nonexistent_path(tmp_path):
    missing = tmp_path / "nope-0"
    result = run_dump(missing)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"logstore dump: {missing}: no such file or directory"]


def test_directory_without_log_files(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n0\n")
    result = run_dump(tmp_path)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"logstore dump: {tmp_path}: no .log segment files in this directory"]


def test_missing_path_among_good_ones_still_dumps_the_rest(tmp_path):
    good = segment(tmp_path / "t-0", 0, vector_bytes(COMMIT))
    bad = segment(tmp_path / "u-0", 0, vector_bytes(BAD_CRC))
    result = run_dump(good, tmp_path / "missing.log", bad)
    no_traceback(result)
    assert result.returncode == 2  # a bad path outranks corrupt data
    assert [line for line in result.stdout.splitlines() if line.startswith("Dumping")] == [
        f"Dumping {good}", f"Dumping {bad}"]
    assert len(result.stderr.splitlines()) == 2


@pytest.mark.parametrize("argv", [[], ["dump"], ["dump", "--no-such-flag", "x"], ["frobnicate"]])
def test_usage_errors_exit_2(argv):
    result = subprocess.run([sys.executable, "-m", "logstore", *argv],
                            capture_output=True, text=True, timeout=60)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: logstore")


def test_help_documents_hex_output_and_exit_codes():
    result = subprocess.run([sys.executable, "-m", "logstore", "dump", "--help"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "not printable UTF-8 are shown as 0x-prefixed hex" in text
    assert "Exit status: 0" in text and "1 corrupt data found" in text


def test_installed_console_script(tmp_path):
    script = Path(sys.executable).parent / "logstore"
    # `make test` installs the project, and with it the console script, into this venv.
    assert script.exists(), f"console script not installed next to {sys.executable}"
    path = segment(tmp_path, 0, vector_bytes(COMMIT))
    result = subprocess.run([str(script), "dump", str(path)], capture_output=True, text=True, timeout=60)
    assert ok(result)[2] == kafka_line(vector_entries(COMMIT)[0])


# ---------------------------------------------------------------------------
# JSON


HEADER_KEYS = {2: ["position", "sizeInBytes", "magic", "baseOffset", "lastOffset", "lastOffsetDelta",
                   "batchLength", "partitionLeaderEpoch", "crc", "crcValid", "attributes", "compression",
                   "timestampType", "baseTimestamp", "maxTimestamp", "isTransactional", "isControl",
                   "hasDeleteHorizon", "producerId", "producerEpoch", "baseSequence", "recordCount"],
               1: ["position", "sizeInBytes", "magic", "offset", "crc", "crcValid", "attributes",
                   "compression", "timestampType", "timestamp"]}
HEADER_KEYS[0] = HEADER_KEYS[1]


def dump_json(*args) -> tuple[subprocess.CompletedProcess, list[dict]]:
    result = run_dump("--json", *args)
    no_traceback(result)
    return result, [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("name", [n for n in stream_vectors() if n not in REFUSED])
def test_json_matches_the_vector_decoding(tmp_path, name):
    data = vector_bytes(name)
    path = segment(tmp_path, 0, data)
    result, [doc] = dump_json("--deep", path)
    entries = vector_entries(name)
    assert (doc["file"], doc["logStartOffset"], doc["sizeInBytes"]) == (str(path), 0, len(data))
    assert len(doc["batches"]) == len(entries)
    for got, exp in zip(doc["batches"], entries):
        keys = HEADER_KEYS[exp["magic"]]
        assert {k: got[k] for k in keys} == {k: exp[k] for k in keys}
        if exp["magic"] == 2 and exp["recordCount"]:
            # An empty batch has lastSequence = incrementSequence(base, delta) in Kafka; the vectors say null.
            assert got["lastSequence"] == exp["lastSequence"]
        assert got["errors"] == ([] if exp["crcValid"] else [
            {"position": exp["position"] + 17 if exp["magic"] == 2 else exp["position"] + 12,
             "message": got["errors"][0]["message"]}])
        want = expected_records(exp)
        assert len(got["records"]) == len(want)
        for record, expected in zip(got["records"], want):
            assert record["offset"] == expected["offset"]
            # Magic 0 messages inside a magic 1 wrapper have no timestamp: -1 here, null in the vectors.
            assert record["timestamp"] == expected["timestamp"] or (
                record["timestamp"] == -1 and expected["timestamp"] is None)
            assert (record["key"], record["value"]) == (expected["key"], expected["value"])
            for field in ("sequence", "headers", "controlKey"):
                if field in expected:
                    assert record[field] == expected[field]
            if "endTxnMarker" in expected:
                epoch = expected["endTxnMarker"]["coordinatorEpoch"]
                assert record["endTxnMarker"] == {"coordinatorEpoch": epoch}
    expect_tail = len(data) - sum(e["sizeInBytes"] for e in entries)
    assert doc["partialTail"] == (None if expect_tail == 0 else
                                  {"position": len(data) - expect_tail, "bytes": expect_tail})
    assert doc["error"] is None
    assert doc["corrupt"] is (result.returncode == 1) is any(not e["crcValid"] for e in entries)


def test_json_without_deep_has_no_records(tmp_path):
    result, [doc] = dump_json(segment(tmp_path, 100, vector_bytes(TXN) + vector_bytes(COMMIT)))
    assert result.returncode == 0
    assert doc["logStartOffset"] == 100
    assert [b["baseOffset"] for b in doc["batches"]] == [100, 103]
    assert all("records" not in b for b in doc["batches"])
    assert doc["batches"][1]["isControl"] is True and doc["batches"][1]["deleteHorizonMs"] is None


def test_json_one_document_per_file_with_corruption_and_errors(tmp_path):
    partition = tmp_path / "p-0"
    segment(partition, 0, vector_bytes(BAD_CRC))
    first = K.encode_batch([b"\x00\xff"], [b"ok"], timestamps=T0, base_offset=1)
    segment(partition, 1, first + b"\0" * 40)
    segment(partition, 2, vector_bytes(PARTIAL))
    result, docs = dump_json("--deep", partition)
    assert result.returncode == 1
    assert [d["logStartOffset"] for d in docs] == [0, 1, 2]
    bad, zeros, tail = docs
    assert bad["corrupt"] is True and bad["batches"][0]["crcValid"] is False
    assert bad["batches"][0]["errors"][0]["position"] == 17
    assert zeros["batches"][0]["records"][0]["key"] == {"hex": "00ff"}
    assert zeros["batches"][0]["records"][0]["value"] == {"hex": "6f6b", "utf8": "ok"}
    assert zeros["error"] == {"position": len(first) + 8, "entryPosition": len(first),
                              "message": "entry size 0 is below the minimum 14"}
    assert zeros["corrupt"] is True
    assert tail["partialTail"] == {"position": 299, "bytes": 4} and tail["corrupt"] is False
    assert len(result.stderr.splitlines()) == 2


def test_json_refused_entry(tmp_path):
    name = "v0_sarama_gzip_wrapper_EMPTY_INVALID"
    result, [doc] = dump_json(segment(tmp_path, 0, vector_bytes(name)))
    assert result.returncode == 1
    entry = vector_entries(name)[0]
    assert doc["batches"] == [{"position": 0, "sizeInBytes": entry["sizeInBytes"], "magic": 0,
                               "offset": entry["offset"], "crcValid": None,
                               "errors": [{"position": 0, "message": REFUSED[name]}]}]


# ---------------------------------------------------------------------------
# In process


def test_run_in_process_writes_to_the_given_streams(tmp_path):
    path = segment(tmp_path, 0, vector_bytes(BAD_CRC))
    out, err = io.StringIO(), io.StringIO()
    assert dump.run([str(path)], deep=True, out=out, err=err) == dump.CORRUPT
    assert "isvalid: false" in out.getvalue() and "(at byte 17)" in err.getvalue()


def test_segment_scan_over_a_plain_buffer():
    data = vector_bytes(TXN) + vector_bytes(COMMIT) + b"\0" * 5
    scan = dump.SegmentScan(data, deep=True)
    batches = list(scan)
    assert [b["baseOffset"] for b in batches] == [100, 103]
    assert batches[1]["records"][0]["controlKey"] == {"version": 0, "type": 1, "typeName": "COMMIT"}
    assert scan.partial_tail == {"position": len(data) - 5, "bytes": 5}
    assert (scan.error, scan.corrupt) == (None, False)
