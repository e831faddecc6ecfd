"""`logstore dump` over every kind of file a log dir holds, run as a real process.

The files are written by logstore itself (a store with appends, a roll, an
aborted and a committed transaction, an idempotent producer and one left in
an open transaction, leader epochs); what the dump must print is rebuilt here
from the bytes with `struct` and Kafka's layouts (index entries, aborted
transactions, producer snapshot entries, batch framing), and from what the
appends returned, never from logstore's readers.
"""
from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

import logstore
import logstore.formats.kafka as K
from dump_cli import json_docs, no_traceback, ok, run_dump
from logstore import dump

T0 = 1_700_000_000_000
TOPIC = "orders"






# ---------------------------------------------------------------------------
# Kafka's layouts, read with struct


def batch_framing(data: bytes) -> list[dict]:
    """Each v2 batch of a segment: position, base and last offset, max timestamp (on-disk-format.md §2)."""
    found, pos = [], 0
    while pos + 61 <= len(data):
        base, size = struct.unpack_from(">qi", data, pos)
        assert data[pos + 16] == 2
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        (max_ts,) = struct.unpack_from(">q", data, pos + 35)
        found.append({"position": pos, "base": base, "last": base + delta, "maxTimestamp": max_ts})
        pos += 12 + size
    assert pos == len(data)
    return found


def index_entries(path: Path, base: int) -> list[tuple[int, int]]:
    """(offset, position) of an .index: relative offset int32, position int32 per 8-byte slot."""
    data = path.read_bytes()
    return [(base + rel, pos) for rel, pos in struct.iter_unpack(">ii", data)]


def time_index_entries(path: Path, base: int) -> list[tuple[int, int]]:
    """(timestamp, offset) of a .timeindex: timestamp int64, relative offset int32 per 12-byte slot."""
    return [(ts, base + rel) for ts, rel in struct.iter_unpack(">qi", path.read_bytes())]


def aborted_txns(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(version, producer id, first offset, last offset, last stable offset) per 34-byte entry."""
    return list(struct.iter_unpack(">hqqqq", path.read_bytes()))


def snapshot_entries(path: Path) -> list[dict]:
    """Kafka's ProducerSnapshot v1: version int16, crc uint32, count int32, then 46-byte entries."""
    data = path.read_bytes()
    version, _crc, count = struct.unpack_from(">hIi", data, 0)
    assert version == 1 and len(data) == 10 + 46 * count
    entries = []
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first in struct.iter_unpack(">qhiqiqiq", data[10:]):
        entries.append(dict(pid=pid, epoch=epoch, last_seq=last_seq, last_offset=last_offset, delta=delta, ts=ts,
                            coord=coord, txn_first=txn_first))
    return entries


def kafka_snapshot_line(e: dict) -> str:
    """DumpLogSegments.dumpProducerIdSnapshot for one entry (first sequence = last - delta, no wrap here)."""
    first = "OptionalLong.empty" if e["txn_first"] < 0 else f"OptionalLong[{e['txn_first']}]"
    line = (f"producerId: {e['pid']} producerEpoch: {e['epoch']} coordinatorEpoch: {e['coord']} "
            f"currentTxnFirstOffset: {first} lastTimestamp: {e['ts']}")
    if e["last_offset"] >= 0:
        line += (f" firstSequence: {e['last_seq'] - e['delta']} lastSequence: {e['last_seq']} "
                 f"lastOffset: {e['last_offset']} offsetDelta: {e['delta']} timestamp: {e['ts']}")
    return line


# ---------------------------------------------------------------------------
# A store written by logstore


@dataclass
class Store:
    root: Path
    part: Path
    facts: dict

    def file(self, name: str) -> Path:
        return self.part / name


def seg(offset: int, suffix: str) -> str:
    return f"{offset:020d}{suffix}"


def write_store(root: Path) -> Store:
    m = logstore.open(str(root))
    m.create_topic(TOPIC, 1, config={"segment.bytes": 700, "index.interval.bytes": 1})
    log = m.log(TOPIC, 0)
    facts = {}
    def batch(values, timestamps, **producer):
        return bytearray(K.encode_batch([None] * len(values), values, timestamps=timestamps, **producer))

    log.append(bytearray(K.encode_batch([b"k0", b"k1"], [b"v0", b"v1"], timestamps=T0)), leader_epoch=0)
    facts["txn1"] = log.append(batch([b"t0", b"t1"], T0 + 1, producer_id=7, producer_epoch=0, base_sequence=0,
                                     transactional=True))
    facts["idem"] = log.append(batch([b"i0"], T0 + 2, producer_id=9, producer_epoch=3, base_sequence=0))
    facts["abort"] = log.write_txn_marker(7, 0, 5, commit=False, timestamp=T0 + 3)
    facts["epoch1"] = log.append(bytearray(K.encode_batch([b"x"], [b"y"], timestamps=T0 + 4)), leader_epoch=1)
    log.roll()
    facts["roll"] = log.log_end_offset
    facts["txn2"] = log.append(batch([b"r" * 100] * 3, [T0 + 10, T0 + 12, T0 + 11], producer_id=7, producer_epoch=1,
                                     base_sequence=0, transactional=True), leader_epoch=2)
    facts["commit"] = log.write_txn_marker(7, 1, 5, commit=True, timestamp=T0 + 13, leader_epoch=2)
    facts["open"] = log.append(batch([b"o"], T0 + 14, producer_id=11, producer_epoch=0, base_sequence=0,
                                     transactional=True), leader_epoch=2)
    facts["end"] = log.log_end_offset
    m.close()
    return Store(root, root / f"{TOPIC}-0", facts)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return write_store(tmp_path_factory.mktemp("store") / "data")


@pytest.fixture
def copy(store, tmp_path) -> Store:
    """A copy of the store's partition directory, to damage."""
    part = tmp_path / f"{TOPIC}-0"
    shutil.copytree(store.part, part)
    return Store(tmp_path, part, store.facts)


def test_the_store_holds_every_kind_of_file(store):
    roll = store.facts["roll"]
    names = {p.name for p in store.part.iterdir()}
    assert {seg(0, ".log"), seg(0, ".index"), seg(0, ".timeindex"), seg(0, ".txnindex"), seg(roll, ".log"),
            seg(roll, ".index"), seg(roll, ".timeindex"), seg(roll, ".snapshot"),
            seg(store.facts["end"], ".snapshot"), "leader-epoch-checkpoint", "partition.metadata"} <= names


# ---------------------------------------------------------------------------
# Each kind, text


def test_offset_index_lists_entries_that_name_their_batches(store):
    for base in (0, store.facts["roll"]):
        path = store.file(seg(base, ".index"))
        entries = index_entries(path, base)
        batches = {b["position"]: b for b in batch_framing(store.file(seg(base, ".log")).read_bytes())}
        assert entries and all(batches[pos]["last"] == offset for offset, pos in entries)
        lines = ok(run_dump(path))
        assert lines == [f"Dumping {path}"] + [f"offset: {o} position: {p}" for o, p in entries]


def test_time_index_lists_max_timestamp_entries(store):
    for base in (0, store.facts["roll"]):
        path = store.file(seg(base, ".timeindex"))
        entries = time_index_entries(path, base)
        assert entries
        lines = ok(run_dump(path))
        assert lines == [f"Dumping {path}"] + [f"timestamp: {t} offset: {o}" for t, o in entries]
    # The committed transaction's batch holds the segment's largest timestamp, out of record order.
    assert (T0 + 13, store.facts["commit"].last_offset) in time_index_entries(
        store.file(seg(store.facts["roll"], ".timeindex")), store.facts["roll"])


def test_txnindex_lists_the_aborted_transaction(store):
    path = store.file(seg(0, ".txnindex"))
    [entry] = aborted_txns(path)
    version, pid, first, last, lso = entry
    assert (version, pid, first, last) == (0, 7, store.facts["txn1"].first_offset, store.facts["abort"].last_offset)
    assert ok(run_dump(path)) == [
        f"Dumping {path}",
        f"version: 0 producerId: 7 firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}"]


def test_producer_snapshots_print_kafkas_lines(store):
    for offset in (store.facts["roll"], store.facts["end"]):
        path = store.file(seg(offset, ".snapshot"))
        entries = snapshot_entries(path)
        lines = ok(run_dump(path))
        assert lines[0] == f"Dumping {path}"
        assert sorted(lines[1:]) == sorted(kafka_snapshot_line(e) for e in entries)
    by_pid = {e["pid"]: e for e in snapshot_entries(store.file(seg(store.facts["end"], ".snapshot")))}
    assert (by_pid[7]["epoch"], by_pid[7]["coord"], by_pid[7]["txn_first"]) == (1, 5, -1)
    assert (by_pid[9]["epoch"], by_pid[9]["last_offset"]) == (3, store.facts["idem"].last_offset)
    assert by_pid[11]["txn_first"] == store.facts["open"].first_offset
    line = next(x for x in ok(run_dump(store.file(seg(store.facts["end"], ".snapshot")))) if "producerId: 11 " in x)
    assert f"currentTxnFirstOffset: OptionalLong[{store.facts['open'].first_offset}]" in line


def test_leader_epoch_and_offset_checkpoints(store):
    epochs = store.file("leader-epoch-checkpoint")
    text = epochs.read_text().splitlines()
    pairs = [line.split() for line in text[2:]]
    assert text[:2] == ["0", str(len(pairs))] and [p[0] for p in pairs] == ["0", "1", "2"]
    assert ok(run_dump(epochs)) == [f"Dumping {epochs}", f"version: 0 count: {len(pairs)}",
                                    *[f"epoch: {e} startOffset: {o}" for e, o in pairs]]
    recovery = store.root / "recovery-point-offset-checkpoint"
    assert ok(run_dump(recovery)) == [f"Dumping {recovery}", "version: 0 count: 1",
                                      f"topic: {TOPIC} partition: 0 offset: {store.facts['end']}"]


def test_every_file_of_the_store_dumps_and_kafkas_other_files_are_ignored(store):
    files = sorted(p for p in store.root.rglob("*") if p.is_file())
    result = run_dump("--files", ",".join(map(str, files)))
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("Dumping ")] == [
        f"Dumping {p}" for p in files]
    ignored = {p for p in files if p.name in (".lock", ".kafka_cleanshutdown", "partition.metadata", "topic-configs")}
    assert set(result.stderr.splitlines()) == {f"Ignoring unknown file {p}" for p in ignored}


# ---------------------------------------------------------------------------
# JSON


def test_json_documents_for_every_kind(store):
    roll = store.facts["roll"]
    paths = [store.file(seg(0, ".index")), store.file(seg(roll, ".timeindex")), store.file(seg(0, ".txnindex")),
             store.file(seg(store.facts["end"], ".snapshot")), store.file("leader-epoch-checkpoint"),
             store.root / "log-start-offset-checkpoint", store.file("partition.metadata")]
    result = run_dump("--json", *paths)
    assert result.returncode == 0, result.stderr
    index, time_index, txn, snapshot, epochs, starts, ignored = json_docs(result)
    assert [d["kind"] for d in (index, time_index, txn, snapshot, epochs, starts, ignored)] == [
        "offsetIndex", "timeIndex", "txnIndex", "producerSnapshot", "leaderEpochCheckpoint", "offsetCheckpoint",
        "ignored"]
    assert index["entries"] == [{"offset": o, "position": p} for o, p in index_entries(paths[0], 0)]
    assert (index["baseOffset"], index["logFile"], index["corrupt"]) == (0, str(store.file(seg(0, ".log"))), False)
    assert time_index["entries"] == [{"timestamp": t, "offset": o} for t, o in time_index_entries(paths[1], roll)]
    assert txn["entries"] == [dict(zip(("version", "producerId", "firstOffset", "lastOffset", "lastStableOffset"), e))
                              for e in aborted_txns(paths[2])]
    expected = {e["pid"]: e for e in snapshot_entries(paths[3])}
    assert snapshot["offset"] == store.facts["end"]
    for p in snapshot["entries"]:
        e = expected[p["producerId"]]
        assert (p["producerEpoch"], p["coordinatorEpoch"], p["lastTimestamp"]) == (e["epoch"], e["coord"], e["ts"])
        assert p["currentTxnFirstOffset"] == (None if e["txn_first"] < 0 else e["txn_first"])
        assert p["batch"] == {"firstSequence": e["last_seq"] - e["delta"], "lastSequence": e["last_seq"],
                              "lastOffset": e["last_offset"], "offsetDelta": e["delta"], "timestamp": e["ts"]}
    assert len(snapshot["entries"]) == len(expected)
    assert [(e["epoch"], e["startOffset"]) for e in epochs["entries"]][0] == (0, 0)
    assert starts["entries"] == [{"topic": TOPIC, "partition": 0, "offset": 0}]
    assert ignored == {"file": str(paths[6]), "kind": "ignored"}


# ---------------------------------------------------------------------------
# Checks against the log, and damage


def test_offset_index_that_contradicts_its_log(copy):
    path = copy.file(seg(0, ".index"))
    entries = index_entries(path, 0)
    batches = batch_framing(copy.file(seg(0, ".log")).read_bytes())
    data = bytearray(path.read_bytes())
    struct.pack_into(">ii", data, 0, entries[0][0] + 1, entries[0][1])   # the batch there ends elsewhere
    struct.pack_into(">ii", data, 8, entries[1][0], entries[1][1] + 1)   # inside a batch
    struct.pack_into(">ii", data, 16, entries[2][0], 99_999)             # past the end of the log
    path.write_bytes(bytes(data))
    log = seg(0, ".log")
    size = copy.file(log).stat().st_size
    problems = [f"logstore dump: {path}: Index offset: {entries[0][0] + 1}, log offset: {entries[0][0]} "
                f"(batch at position {entries[0][1]})",
                f"logstore dump: {path}: Index position {entries[1][1] + 1} is not the start of a batch in {log}",
                f"logstore dump: {path}: Index position 99999 is past the end of {log} ({size} bytes)"]
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert result.stderr.splitlines() == problems
    assert len(result.stdout.splitlines()) == 1 + len(entries)
    verify = run_dump("--verify-index-only", path)
    assert (verify.returncode, verify.stdout.splitlines(), verify.stderr.splitlines()) == (
        1, [f"Dumping {path}"], problems)
    assert batches  # the framing the entries were taken from


def test_time_index_that_contradicts_its_log(copy):
    roll = copy.facts["roll"]
    path = copy.file(seg(roll, ".timeindex"))
    txn2, commit = copy.facts["txn2"], copy.facts["commit"]
    right = struct.pack(">qi", T0 + 12, txn2.last_offset - roll)       # the batch's largest record timestamp
    early = struct.pack(">qi", T0 + 13, txn2.last_offset - 1 - roll)   # no batch ends at that offset
    stale = struct.pack(">qi", T0 + 10, commit.last_offset - roll)     # not the marker's timestamp, and lower
    path.write_bytes(right + early + stale)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 1
    assert result.stdout.splitlines()[1:] == [f"timestamp: {T0 + 12} offset: {txn2.last_offset}",
                                              f"timestamp: {T0 + 13} offset: {txn2.last_offset - 1}",
                                              f"timestamp: {T0 + 10} offset: {commit.last_offset}"]
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: Indexed offset: {txn2.last_offset - 1}, found log offset: {txn2.last_offset}",
        f"logstore dump: {path}: Index timestamp: {T0 + 10}, log timestamp: {T0 + 13}",
        f"logstore dump: {path}: Index timestamp: {T0 + 10}, Previously indexed timestamp: {T0 + 13}"]


def test_index_sanity_check(copy):
    index, time_index = copy.file(seg(0, ".index")), copy.file(seg(0, ".timeindex"))
    assert ok(run_dump("--index-sanity-check", index, time_index)) == [
        f"Dumping {index}", f"{index} passed sanity check.", f"Dumping {time_index}",
        f"{time_index} passed sanity check."]
    with open(index, "ab") as f:
        f.write(b"\0\0\0")
    length = index.stat().st_size
    result = run_dump("--index-sanity-check", index)
    no_traceback(result)
    assert (result.returncode, result.stdout.splitlines()) == (1, [f"Dumping {index}"])
    assert result.stderr.splitlines() == [
        f"logstore dump: {index}: failed sanity check: length {length} is not a multiple of 8"]


def test_empty_index(tmp_path):
    (tmp_path / seg(5, ".log")).write_bytes(b"")
    path = tmp_path / seg(5, ".index")
    path.write_bytes(b"")
    assert ok(run_dump(path)) == [f"Dumping {path}", f"{path} is empty."]


def test_index_without_its_log_is_a_bad_path(copy):
    path = copy.file(seg(0, ".index"))
    copy.file(seg(0, ".log")).unlink()
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: no {seg(0, '.log')} beside it: its entries are not checked against the log"]
    assert result.stdout.splitlines()[1:] == [f"offset: {o} position: {p}" for o, p in index_entries(path, 0)]


def test_damaged_snapshot_checkpoint_and_txnindex_are_corrupt(copy):
    snapshot = copy.file(seg(copy.facts["end"], ".snapshot"))
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 0x01
    snapshot.write_bytes(bytes(data))
    epochs = copy.file("leader-epoch-checkpoint")
    epochs.write_text("0\n2\n3 0\n1 5\n")
    txn = copy.file(seg(0, ".txnindex"))
    txn.write_bytes(b"\x01\x00" + txn.read_bytes()[2:])
    result = run_dump(snapshot, epochs, txn)
    no_traceback(result)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"Dumping {snapshot}", f"Dumping {epochs}", f"Dumping {txn}"]
    errors = result.stderr.splitlines()
    assert len(errors) == 3
    assert errors[0].startswith(f"logstore dump: {snapshot}: snapshot CRC mismatch")
    assert errors[1] == (f"logstore dump: {epochs}: entry (1, 5): epochs and start offsets must be >= 0 and "
                         "strictly increasing (line 4)")
    assert errors[2].startswith(f"logstore dump: {txn}: ") and "unknown aborted-transaction version" in errors[2]
    [doc] = json_docs(run_dump("--json", snapshot))
    assert (doc["entries"], doc["corrupt"], len(doc["problems"])) == ([], True, 1)


def test_txnindex_entry_of_another_version(copy):
    txn = copy.file(seg(0, ".txnindex"))
    txn.write_bytes(b"\x00\x07" + txn.read_bytes()[2:])
    result = run_dump(txn)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"Dumping {txn}"]
    assert result.stderr.splitlines() == [f"logstore dump: {txn}: unknown aborted-transaction version 7 at byte 0"]


def test_torn_txnindex_entry_is_a_partial_tail(copy):
    txn = copy.file(seg(0, ".txnindex"))
    txn.write_bytes(txn.read_bytes() + b"\0" * 5)
    lines = ok(run_dump(txn))
    assert lines[-1] == "Found 5 bytes of a partial entry at position 34 (the reader ignores them)"


def test_index_named_without_a_base_offset_is_a_bad_path(tmp_path):
    path = tmp_path / "orders.index"
    path.write_bytes(b"\0" * 8)
    result = run_dump(path)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"logstore dump: {path}: cannot tell the base offset: the name is not <offset>.index"]


def test_missing_files_among_files_option(store, tmp_path):
    good = store.file("leader-epoch-checkpoint")
    missing = tmp_path / seg(3, ".snapshot")
    result = run_dump("--files", f"{good},{missing}")
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"logstore dump: {missing}: no such file or directory"]


def test_unknown_files_are_ignored_as_kafka_does(tmp_path):
    files = [tmp_path / "meta.properties", tmp_path / "quorum-state", tmp_path / f"{seg(0, '.log')}.deleted",
             tmp_path / f"{seg(0, '.log')}.swap", tmp_path / "00000000000000000000-0000000001.checkpoint.part"]
    for f in files:
        f.write_text("not a segment\n")
    result = run_dump(*files)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [f"Dumping {f}" for f in files]
    assert result.stderr.splitlines() == [f"Ignoring unknown file {f}" for f in files]


# ---------------------------------------------------------------------------
# Segment switches


def test_deep_iteration_prints_records_without_their_data(store):
    path = store.file(seg(0, ".log"))
    records = [line for line in ok(run_dump("--deep-iteration", path)) if line.startswith("| ")]
    assert records[0] == f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 2 sequence: -1 headerKeys: []"
    assert all("key:" not in r and "payload:" not in r for r in records)
    data = [line for line in ok(run_dump("--print-data-log", path)) if line.startswith("| ")]
    assert data[0] == records[0] + " key: k0 payload: v0"
    assert len(data) == len(records) == store.facts["epoch1"].last_offset + 1


def test_skip_record_metadata_leaves_keys_and_payloads(store):
    path = store.file(seg(0, ".log"))
    lines = ok(run_dump("--print-data-log", "--skip-record-metadata", path))
    assert [line for line in lines if line.startswith("|")] == [
        "| key: k0 payload: v0", "| key: k1 payload: v1", "| payload: t0", "| payload: t1", "| payload: i0",
        "| key: x payload: y"]  # the ABORT marker is a control record: left out


def test_max_bytes_reads_only_whole_batches(store):
    path = store.file(seg(0, ".log"))
    batches = batch_framing(path.read_bytes())
    limit = batches[2]["position"] + 10  # two whole batches and the start of the third
    lines = ok(run_dump("--max-bytes", limit, path))
    assert [int(line.split()[1]) for line in lines if line.startswith("baseOffset")] == [
        b["base"] for b in batches[:2]]
    assert not any(line.startswith("Found ") for line in lines)
    [doc] = json_docs(run_dump("--json", "--max-bytes", limit, path))
    assert (len(doc["batches"]), doc["maxBytes"], doc["partialTail"]) == (2, limit, None)


def test_non_consecutive_offsets_are_listed_after_the_entries(tmp_path):
    path = tmp_path / seg(0, ".log")
    path.write_bytes(K.encode_batch([b"a", b"b"], [b"1", b"2"], timestamps=T0)
                     + K.encode_batch([b"c"], [b"3"], timestamps=T0, base_offset=7)
                     + K.encode_batch([b"d"], [b"4"], timestamps=T0, base_offset=9))
    lines = ok(run_dump("--deep-iteration", path))
    assert lines[-3:] == [f"Non-consecutive offsets in {path}", "  1 is followed by 7", "  7 is followed by 9"]
    [doc] = json_docs(run_dump("--json", "--deep-iteration", path))
    assert doc["nonConsecutiveOffsets"] == [[1, 7], [7, 9]]
    assert not any(line.startswith("Non-consecutive") for line in ok(run_dump(path)))  # shallow: not looked at


def test_positional_paths_and_files_option_mix(store):
    a, b, c = store.file(seg(0, ".txnindex")), store.file("leader-epoch-checkpoint"), store.file(seg(0, ".index"))
    lines = ok(run_dump(a, "--files", f"{b},{c}"))
    assert [line for line in lines if line.startswith("Dumping")] == [f"Dumping {a}", f"Dumping {b}", f"Dumping {c}"]


@pytest.mark.parametrize("name, kind", [
    ("00000000000000000000.log", "log"), ("00000000000000000100-0000000003.checkpoint", "kraftSnapshot"),
    ("bootstrap.checkpoint", "kraftSnapshot"), ("00000000000000000000.index", "offsetIndex"),
    ("00000000000000000000.timeindex", "timeIndex"), ("00000000000000000000.txnindex", "txnIndex"),
    ("00000000000000000042.snapshot", "producerSnapshot"), ("leader-epoch-checkpoint", "leaderEpochCheckpoint"),
    ("replication-offset-checkpoint", "offsetCheckpoint"), ("cleaner-offset-checkpoint", "offsetCheckpoint"),
    ("meta.properties", "ignored"), (".lock", "ignored"), ("00000000000000000000.index.deleted", "ignored"),
    ("captured-fetch.bin", "log")])
def test_file_kinds_follow_the_name(name, kind):
    assert dump.file_kind(Path(name)) == kind
