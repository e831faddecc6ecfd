"""`logstore dump` of a partition's state files: producer `.snapshot`s and the text checkpoints.

Each is read with the reader the storage engine loads it with, so the dump
shows what a restart would see, and refuses what a restart would refuse:

  .snapshot                 `ProducerTable.from_snapshot` (version, size, CRC-32C;
                            Kafka's ProducerStateManager.readSnapshot). Text: one
                            line per producer, as Kafka's dumpProducerIdSnapshot:
                            "producerId: P producerEpoch: E coordinatorEpoch: C
                            currentTxnFirstOffset: OptionalLong[O] | OptionalLong.empty
                            lastTimestamp: T" and, when the entry keeps its last
                            batch, " firstSequence: F lastSequence: L lastOffset: O
                            offsetDelta: D timestamp: T". Producers come in the
                            order of the file; one listed twice shows once, with
                            its last entry (the table keeps one per id).
  leader-epoch-checkpoint   `LeaderEpochCache` (Kafka's text file: version 0, count,
                            "epoch startOffset" lines, epochs and offsets strictly
                            increasing). Text: "version: 0 count: N", then
                            "epoch: E startOffset: O" per entry. Kafka's tool
                            does not read this file.
  *-offset-checkpoint       `OffsetCheckpoint` (recovery-point, log-start,
                            replication, cleaner: version 0, count, "topic
                            partition offset" lines). Text: "version: 0 count: N",
                            then "topic: T partition: P offset: O" per entry, by
                            topic and partition. Kafka's tool does not read these.

A file the reader refuses is one problem line (its reason) for `report`.

JSON output, one document per file::

    {"file": str,
     "kind": "producerSnapshot" | "leaderEpochCheckpoint" | "offsetCheckpoint",
     "offset": int | null,          # producerSnapshot: the offset in its name
     "version": int | null,         # checkpoints: 0 once read
     "entries": [ENTRY, ...],       # [] when the file was refused
     "problems": [str, ...], "corrupt": bool}

    ENTRY  producerSnapshot:      {"producerId", "producerEpoch", "coordinatorEpoch",
                                   "currentTxnFirstOffset": int | null, "lastTimestamp",
                                   "batch": {"firstSequence", "lastSequence", "lastOffset",
                                             "offsetDelta", "timestamp"} | null}
           leaderEpochCheckpoint: {"epoch", "startOffset"}
           offsetCheckpoint:      {"topic", "partition", "offset"}
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from logstore.checkpoints import CorruptCheckpointError, OffsetCheckpoint
from logstore.dump_records import JsonDict
from logstore.dump_segment import Report, base_offset_of
from logstore.epoch_cache import LeaderEpochCache
from logstore.errors import CorruptSnapshotError
from logstore.native.producer_state import ProducerEntry, ProducerTable

CHECKPOINT_VERSION = 0


def _finish(path: Path, kind: str, entries: list[JsonDict], problem: str | None, out: TextIO, report: Report,
            as_json: bool, **fields: object) -> None:
    if problem is not None:
        report(problem)
    if as_json:
        doc = {"file": str(path), "kind": kind, **fields, "entries": entries,
               "problems": [] if problem is None else [problem], "corrupt": problem is not None}
        print(json.dumps(doc), file=out)


def producer_entry_json(entry: ProducerEntry) -> JsonDict:
    """One ProducerEntry the table read from a snapshot, under Kafka's names."""
    batch: JsonDict | None = None
    if entry.batches:
        first_seq, last_seq, first_offset, last_offset, timestamp = entry.batches[0]  # Kafka prints the head
        batch = {"firstSequence": first_seq, "lastSequence": last_seq, "lastOffset": last_offset,
                 "offsetDelta": last_offset - first_offset, "timestamp": timestamp}
    return {"producerId": entry.producer_id, "producerEpoch": entry.epoch,
            "coordinatorEpoch": entry.coordinator_epoch,
            "currentTxnFirstOffset": None if entry.txn_first_offset < 0 else entry.txn_first_offset,
            "lastTimestamp": entry.last_timestamp, "batch": batch}


def producer_line(p: JsonDict) -> str:
    """Kafka's dumpProducerIdSnapshot line of one producer entry dict."""
    first = p["currentTxnFirstOffset"]
    line = (f"producerId: {p['producerId']} producerEpoch: {p['producerEpoch']} "
            f"coordinatorEpoch: {p['coordinatorEpoch']} currentTxnFirstOffset: "
            f"{'OptionalLong.empty' if first is None else f'OptionalLong[{first}]'} "
            f"lastTimestamp: {p['lastTimestamp']}")
    b = p["batch"]
    if b is not None:
        line += (f" firstSequence: {b['firstSequence']} lastSequence: {b['lastSequence']} "
                 f"lastOffset: {b['lastOffset']} offsetDelta: {b['offsetDelta']} timestamp: {b['timestamp']}")
    return line


def dump_producer_snapshot(path: Path, *, out: TextIO, report: Report, as_json: bool = False) -> None:
    """Dump a producer-state `.snapshot`; OSError if it cannot be read."""
    data = path.read_bytes()
    entries: list[JsonDict]
    problem: str | None
    try:
        # Nothing expires here (no clock given): every entry the file holds is shown.
        table = ProducerTable.from_snapshot(data)
    except CorruptSnapshotError as exc:
        entries, problem = [], str(exc)
    else:
        entries, problem = [producer_entry_json(e) for e in table.items()], None
    if not as_json:
        for p in entries:
            print(producer_line(p), file=out)
    _finish(path, "producerSnapshot", entries, problem, out, report, as_json, offset=base_offset_of(path))


def dump_leader_epoch_checkpoint(path: Path, *, out: TextIO, report: Report, as_json: bool = False) -> None:
    """Dump a `leader-epoch-checkpoint`; OSError if it cannot be read."""
    path.stat()  # a missing file is a bad path here, not an empty cache
    problem: str | None
    try:
        pairs = LeaderEpochCache(str(path), persist=False).entries
    except CorruptCheckpointError as exc:
        pairs, problem = [], exc.reason + f" (line {exc.line})"
    else:
        problem = None
    entries = [{"epoch": epoch, "startOffset": offset} for epoch, offset in pairs]
    if not as_json and problem is None:
        print(f"version: {CHECKPOINT_VERSION} count: {len(entries)}", file=out)
        for e in entries:
            print(f"epoch: {e['epoch']} startOffset: {e['startOffset']}", file=out)
    _finish(path, "leaderEpochCheckpoint", entries, problem, out, report, as_json,
            version=None if problem else CHECKPOINT_VERSION)


def dump_offset_checkpoint(path: Path, *, out: TextIO, report: Report, as_json: bool = False) -> None:
    """Dump a log-dir offset checkpoint (recovery point, log start, replication, cleaner); OSError if
    it cannot be read."""
    path.stat()
    problem: str | None
    try:
        offsets = OffsetCheckpoint(str(path)).read()
    except CorruptCheckpointError as exc:
        offsets, problem = {}, exc.reason + f" (line {exc.line})"
    else:
        problem = None
    entries = [{"topic": t, "partition": p, "offset": offsets[t, p]} for t, p in sorted(offsets)]
    if not as_json and problem is None:
        print(f"version: {CHECKPOINT_VERSION} count: {len(entries)}", file=out)
        for e in entries:
            print(f"topic: {e['topic']} partition: {e['partition']} offset: {e['offset']}", file=out)
    _finish(path, "offsetCheckpoint", entries, problem, out, report, as_json,
            version=None if problem else CHECKPOINT_VERSION)
