"""Checkpoints, partition.metadata and the clean-shutdown marker (on-disk-format.md §6, §5.6).

The spec's example texts and the segment_txn vector directory are read and
rewritten byte for byte; every rejection rule has a case naming the line at
fault; atomic replacement is checked by a leftover `.tmp` and a failed rename.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import logstore.checkpoints as C
from logstore.checkpoints import (
    CorruptCheckpointError,
    OffsetCheckpoint,
    read_checkpoint,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
    write_checkpoint,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from spec_vectors import VECTORS_DIR

SEGMENT_TXN = VECTORS_DIR / "segment_txn"
TOPIC_ID = bytes(range(16))


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _corrupt_line(path: Path, read=read_leader_epoch_checkpoint) -> int:
    with pytest.raises(CorruptCheckpointError) as info:
        read(path)
    assert str(path) in str(info.value)
    return info.value.line


@pytest.fixture(scope="module")
def segment_txn() -> Path:
    if not SEGMENT_TXN.is_dir():
        pytest.fail(f"test vectors not found at {SEGMENT_TXN}")
    return SEGMENT_TXN


# ---------------------------------------------------------------------------
# The spec's examples and the segment_txn vectors


def test_leader_epoch_spec_example_round_trips(tmp_path):
    path = _write(tmp_path / "leader-epoch-checkpoint", "0\n2\n5 0\n7 2\n")
    assert read_leader_epoch_checkpoint(path) == [(5, 0), (7, 2)]
    out = tmp_path / "out"
    write_leader_epoch_checkpoint(out, [(5, 0), (7, 2)])
    assert out.read_bytes() == b"0\n2\n5 0\n7 2\n"


def test_offset_spec_example_reads_and_rewrites_sorted(tmp_path):
    path = _write(tmp_path / C.RECOVERY_POINT_CHECKPOINT,
                  "0\n2\norders 0 12\n__consumer_offsets 13 220\n")
    offsets = OffsetCheckpoint(path).read()
    assert offsets == {("orders", 0): 12, ("__consumer_offsets", 13): 220}
    OffsetCheckpoint(path).write(offsets)
    assert path.read_bytes() == b"0\n2\n__consumer_offsets 13 220\norders 0 12\n"


def test_cluster_metadata_reserved_topic_id():
    assert C.topic_id_from_string("AAAAAAAAAAAAAAAAAAAAAQ") == bytes(15) + b"\x01"
    assert C.topic_id_to_string(bytes(15) + b"\x01") == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_vector_leader_epoch_checkpoint(segment_txn, tmp_path):
    original = segment_txn / C.LEADER_EPOCH_CHECKPOINT
    assert read_leader_epoch_checkpoint(original) == [(5, 0), (7, 2)]
    write_leader_epoch_checkpoint(tmp_path / "out", [(5, 0), (7, 2)])
    assert (tmp_path / "out").read_bytes() == original.read_bytes() == b"0\n2\n5 0\n7 2\n"


def test_vector_partition_metadata(segment_txn, tmp_path):
    original = segment_txn / C.PARTITION_METADATA
    assert read_partition_metadata(original) == TOPIC_ID
    write_partition_metadata(tmp_path / "out", TOPIC_ID)
    assert (tmp_path / "out").read_bytes() == original.read_bytes()
    assert original.read_bytes() == b"version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw"


def test_vector_recovery_point_checkpoint(segment_txn, tmp_path):
    original = segment_txn / C.RECOVERY_POINT_CHECKPOINT
    assert OffsetCheckpoint(original).read() == {("orders", 0): 12}
    OffsetCheckpoint(tmp_path / "out").write({("orders", 0): 12})
    assert (tmp_path / "out").read_bytes() == original.read_bytes() == b"0\n1\norders 0 12\n"


# ---------------------------------------------------------------------------
# Generic format: what reads as empty, what is rejected


@pytest.mark.parametrize("text", ["", "0", "0\n", "0\n0\n", "0\n0"])
def test_empty_file_or_version_line_only_reads_as_no_entries(tmp_path, text):
    assert read_checkpoint(_write(tmp_path / "cp", text), str.split) == []


def test_missing_file_propagates_from_generic_reader(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_checkpoint(tmp_path / "absent", str.split)


def test_missing_files_read_as_empty_for_typed_readers(tmp_path):
    assert OffsetCheckpoint(tmp_path / "absent").read() == {}
    assert read_leader_epoch_checkpoint(tmp_path / "absent") == []


def test_final_line_without_newline_is_accepted(tmp_path):
    assert read_leader_epoch_checkpoint(_write(tmp_path / "cp", "0\n1\n5 0")) == [(5, 0)]


def test_crlf_line_endings_are_accepted_like_javas_readline(tmp_path):
    path = _write(tmp_path / "cp", "0\r\n2\r\n5 0\r\n7 2\r\n")
    assert read_leader_epoch_checkpoint(path) == [(5, 0), (7, 2)]


def test_entry_fields_split_on_any_whitespace(tmp_path):
    assert read_leader_epoch_checkpoint(_write(tmp_path / "cp", "0\n1\n5 \t 9\n")) == [(5, 9)]


@pytest.mark.parametrize("text, line", [
    ("1\n0\n", 1),                # wrong version
    ("-0x\n0\n", 1),              # malformed version
    ("+0\n0\n", 1),               # Java-legal sign, but Kafka never writes it
    ("\n", 1),                    # blank version line
    ("0\n2\n5 0\n", 2),           # count says more than there are
    ("0\n1\n5 0\n7 2\n", 4),      # an entry beyond the count
    ("0\n0\n5 0\n", 3),
    ("0\n-1\n", 2),               # negative count
    ("0\nx\n", 2),                # malformed count
    ("0\n1\n5\n", 3),             # too few fields
    ("0\n1\n5 0 1\n", 3),         # too many fields
    ("0\n1\n5 x\n", 3),           # not a number
    ("0\n1\n5 1_0\n", 3),         # Python-only integer syntax
    ("0\n1\n5 0\n\n", 4),         # a blank line is an entry, and a malformed one
    ("0\n2\n5 0\n\xff 2\n", 4),   # not UTF-8 (written as latin-1 below)
])
def test_leader_epoch_checkpoint_rejections(tmp_path, text, line):
    path = _write(tmp_path / "cp", text.encode("latin-1"))
    assert _corrupt_line(path) == line


@pytest.mark.parametrize("text, line", [
    ("0\n1\norders 0\n", 3),
    ("0\n1\norders x 12\n", 3),
    ("0\n1\norders 0 12 extra\n", 3),
    ("0\n2\norders 0 12\n", 2),
    ("1\n1\norders 0 12\n", 1),
])
def test_offset_checkpoint_rejections(tmp_path, text, line):
    path = _write(tmp_path / "cp", text)
    assert _corrupt_line(path, lambda p: OffsetCheckpoint(p).read()) == line


def test_corrupt_checkpoint_error_is_a_kafka_storage_error(tmp_path):
    path = _write(tmp_path / "cp", "7\n0\n")
    with pytest.raises(CorruptCheckpointError) as info:
        read_leader_epoch_checkpoint(path)
    err = info.value
    assert (err.error_name, err.code, err.retriable) == ("KAFKA_STORAGE_ERROR", 56, True)
    assert (err.path, err.line) == (str(path), 1)
    assert "line 1" in str(err)


def test_generic_reader_honours_its_version_argument(tmp_path):
    path = tmp_path / "cp"
    write_checkpoint(path, ["a", "b"], version=3)
    assert path.read_bytes() == b"3\n2\na\nb\n"
    assert read_checkpoint(path, str.strip, version=3) == ["a", "b"]
    assert _corrupt_line(path, lambda p: read_checkpoint(p, str.strip)) == 1


def test_entries_with_line_breaks_are_refused(tmp_path):
    with pytest.raises(ValueError):
        write_checkpoint(tmp_path / "cp", ["a\nb"])
    assert not (tmp_path / "cp").exists()


def test_topic_names_that_would_break_the_format_are_refused(tmp_path):
    for topic in ("two words", ""):
        with pytest.raises(ValueError):
            OffsetCheckpoint(tmp_path / "cp").write({(topic, 0): 1})


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(
    st.tuples(st.text("abcXYZ019._-", min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
    st.integers(-1, 2**63 - 1), max_size=20))
def test_offset_checkpoint_round_trips(tmp_path_factory, offsets):
    path = tmp_path_factory.mktemp("cp") / C.LOG_START_OFFSET_CHECKPOINT
    OffsetCheckpoint(path).write(offsets)
    assert OffsetCheckpoint(path).read() == offsets
    lines = path.read_text().splitlines()[2:]
    assert lines == sorted(lines, key=lambda line: (line.split()[0], int(line.split()[1])))


# ---------------------------------------------------------------------------
# partition.metadata


def test_partition_metadata_has_no_trailing_newline(tmp_path):
    path = tmp_path / C.PARTITION_METADATA
    write_partition_metadata(path, TOPIC_ID)
    assert path.read_bytes() == b"version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw"
    assert read_partition_metadata(path) == TOPIC_ID


@given(st.binary(min_size=16, max_size=16).filter(any))
def test_topic_id_string_round_trips(raw):
    text = C.topic_id_to_string(raw)
    assert len(text) == 22 and C.topic_id_from_string(text) == raw


@pytest.mark.parametrize("text", [
    "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n",   # a final newline
    "version:   0\ntopic_id:\tAAECAwQFBgcICQoLDA0ODw",  # any whitespace after the colon
    "version: 3\ntopic_id: AAECAwQFBgcICQoLDA0ODw",     # newer versions read as 0 (downgrade)
])
def test_partition_metadata_accepted_variants(tmp_path, text):
    assert read_partition_metadata(_write(tmp_path / "pm", text)) == TOPIC_ID


@pytest.mark.parametrize("text, line", [
    ("", 1),
    ("version: 0", 2),
    ("version: -1\ntopic_id: AAECAwQFBgcICQoLDA0ODw", 1),
    ("version: x\ntopic_id: AAECAwQFBgcICQoLDA0ODw", 1),
    ("version:0\ntopic_id: AAECAwQFBgcICQoLDA0ODw", 1),       # ":\s+" needs whitespace
    ("topic_id: AAECAwQFBgcICQoLDA0ODw\nversion: 0", 1),
    ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", 2),      # all-zero id is reserved
    ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0OD", 2),       # 21 characters
    ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODwA", 2),     # 23 characters
    ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0O+w", 2),      # '+' is not base64url
    ("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\nx: y", 3),
])
def test_partition_metadata_rejections(tmp_path, text, line):
    assert _corrupt_line(_write(tmp_path / "pm", text), read_partition_metadata) == line


def test_invalid_topic_ids_are_not_written(tmp_path):
    for bad in (bytes(16), bytes(15)):
        with pytest.raises(ValueError):
            write_partition_metadata(tmp_path / "pm", bad)
    assert not (tmp_path / "pm").exists()


# ---------------------------------------------------------------------------
# Atomic replacement


def test_leftover_tmp_from_a_crash_does_not_affect_reading(tmp_path):
    path = tmp_path / C.LEADER_EPOCH_CHECKPOINT
    write_leader_epoch_checkpoint(path, [(5, 0)])
    _write(tmp_path / (path.name + ".tmp"), "0\n1\n9")  # a crash mid-write
    assert read_leader_epoch_checkpoint(path) == [(5, 0)]
    write_leader_epoch_checkpoint(path, [(5, 0), (6, 4)])
    assert read_leader_epoch_checkpoint(path) == [(5, 0), (6, 4)]
    assert sorted(os.listdir(tmp_path)) == [C.LEADER_EPOCH_CHECKPOINT]


def test_write_fsyncs_the_file_and_its_directory(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd)))
    C.write_atomically(tmp_path / "f", b"x")
    assert synced == [str(tmp_path / "f.tmp"), str(tmp_path)]
    synced.clear()
    C.write_atomically(tmp_path / "f", b"y", fsync=False)
    assert synced == [] and (tmp_path / "f").read_bytes() == b"y"


def test_failed_rename_keeps_the_old_file_and_removes_the_tmp(tmp_path, monkeypatch):
    path = tmp_path / "f"
    C.write_atomically(path, b"old")

    def fail(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        C.write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


# ---------------------------------------------------------------------------
# Clean-shutdown marker


def test_clean_shutdown_marker_lifecycle(tmp_path):
    assert not C.read_clean_shutdown_marker(tmp_path)
    C.write_clean_shutdown_marker(tmp_path, broker_epoch=42)
    assert (tmp_path / C.CLEAN_SHUTDOWN_MARKER).read_bytes() == b'{"version":0,"brokerEpoch":42}'
    assert C.read_clean_shutdown_marker(tmp_path)
    C.remove_clean_shutdown_marker(tmp_path)
    assert not C.read_clean_shutdown_marker(tmp_path)
    C.remove_clean_shutdown_marker(tmp_path)  # already gone: no error
    assert os.listdir(tmp_path) == []


def test_clean_shutdown_marker_defaults_to_epoch_zero(tmp_path):
    C.write_clean_shutdown_marker(tmp_path)
    assert (tmp_path / C.CLEAN_SHUTDOWN_MARKER).read_bytes() == b'{"version":0,"brokerEpoch":0}'


def test_empty_clean_shutdown_marker_from_older_kafka_counts(tmp_path):
    (tmp_path / C.CLEAN_SHUTDOWN_MARKER).touch()
    assert C.read_clean_shutdown_marker(tmp_path)


def test_new_topic_id_skips_reserved_and_dash_led_ids(monkeypatch):
    dash_led = C.topic_id_from_string("-" + "A" * 21)
    wanted = C.topic_id_from_string("B" * 22)
    made = iter([bytes(16), dash_led, bytes(15) + b"\x01", wanted])
    monkeypatch.setattr(C.uuid, "uuid4", lambda: uuid.UUID(bytes=next(made)))
    assert C.new_topic_id() == wanted


@settings(max_examples=300)
@given(st.text(min_size=1, max_size=40))
def test_derived_topic_id_is_stable_and_usable(topic):
    made = C.derived_topic_id(topic)
    assert made == C.derived_topic_id(topic)
    assert made not in (bytes(16), bytes(15) + b"\x01") and not C.topic_id_to_string(made).startswith("-")


def test_derived_topic_id_rehashes_a_dash_led_id():
    def first_try(name):
        return C.topic_id_to_string(uuid.uuid5(uuid.NAMESPACE_URL, f"logstore:topic:{name}").bytes)
    name = next(f"t{i}" for i in range(10_000) if first_try(f"t{i}").startswith("-"))
    assert not C.topic_id_to_string(C.derived_topic_id(name)).startswith("-")
