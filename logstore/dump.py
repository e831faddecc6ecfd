"""`logstore dump`: what Kafka's kafka-dump-log prints for the files of a log dir.

A file is recognised by its name, as Kafka's tool does (the suffix after
the last dot), and handed to the module that reads its kind; each module's
docstring gives its text layout and its JSON document:

  *.log, *.checkpoint          segments, and KRaft snapshots (`<end offset>-<epoch>.checkpoint`,
                               `bootstrap.checkpoint`): logstore.dump_segment prints what
                               logstore.dump_records reads
  *.index, *.timeindex,        indexes, checked against the .log beside them:
  *.txnindex                   logstore.dump_index
  *.snapshot                   producer state: logstore.dump_state
  leader-epoch-checkpoint,     text checkpoints (Kafka's tool does not read them):
  *-offset-checkpoint          logstore.dump_state

Kafka's other files in a log dir (meta.properties, quorum-state,
partition.metadata, .lock, .kafka_cleanshutdown, *.deleted, *.cleaned,
*.swap, *.tmp, *.part, *.json, *.properties, ...) are skipped with "Ignoring
unknown file FILE" on stderr, as Kafka does; that alone is not an error. A
file with any other name is read as a segment (a captured fetch body, say),
without a base offset. A directory stands for its *.log segments, in
base-offset order.

The text of every file starts with "Dumping FILE". JSON output is one
document per file, each on its own line, with "file" and "kind" first
("ignored" for a skipped file). Problems go to stderr, one line each:
"logstore dump: FILE: WHAT".

Record decoders (`DumpOptions.decoder`, Kafka's --offsets-decoder,
--transaction-log-decoder, --cluster-metadata-decoder) render each data
record's key and value as JSON; this layer holds none of the broker's
record schemas, so the caller passes them in (`logstore.cli` does, from
`logstore.broker.coordinator.record_json`). `cluster_metadata_decoder()` is
the one built here, on `logstore.cluster_metadata`.

Exit status (`run`): 0 all files intact (a partial tail is fine, an ignored
file too), 1 corrupt data found (in any file), 2 a path that does not exist,
cannot be read, is a directory without .log files, is an index without the
.log it indexes, or is an index not named <offset>.<suffix>.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from logstore.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from logstore.cluster_metadata import decode_metadata_record
from logstore.dump_index import dump_offset_index, dump_time_index, dump_txn_index
from logstore.dump_records import (
    JsonDict,
    RecordDecoder,
    SegmentScan,
    UnknownRecordType,
    bytes_json,
    json_value,
    text_of,
)
from logstore.dump_segment import base_offset_of, batch_line, dump_segment, record_line
from logstore.dump_state import dump_leader_epoch_checkpoint, dump_offset_checkpoint, dump_producer_snapshot

__all__ = ["BAD_PATH", "CORRUPT", "OK", "DumpOptions", "DumpPathError", "RecordDecoder", "SegmentScan",
           "UnknownRecordType", "base_offset_of", "batch_line", "bytes_json", "cluster_metadata_decoder",
           "dump_file", "file_kind", "record_line", "run", "segment_files", "text_of"]

OK, CORRUPT, BAD_PATH = 0, 1, 2
PROG = "logstore dump"

# File kinds.
SEGMENT, KRAFT_SNAPSHOT, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, PRODUCER_SNAPSHOT = (
    "log", "kraftSnapshot", "offsetIndex", "timeIndex", "txnIndex", "producerSnapshot")
EPOCH_CHECKPOINT, OFFSET_CHECKPOINT, IGNORED = "leaderEpochCheckpoint", "offsetCheckpoint", "ignored"

_BY_SUFFIX = {".log": SEGMENT, ".checkpoint": KRAFT_SNAPSHOT, ".index": OFFSET_INDEX, ".timeindex": TIME_INDEX,
              ".txnindex": TXN_INDEX, ".snapshot": PRODUCER_SNAPSHOT}
_BY_NAME = {LEADER_EPOCH_CHECKPOINT: EPOCH_CHECKPOINT, RECOVERY_POINT_CHECKPOINT: OFFSET_CHECKPOINT,
            LOG_START_OFFSET_CHECKPOINT: OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT: OFFSET_CHECKPOINT,
            "cleaner-offset-checkpoint": OFFSET_CHECKPOINT}
# What else Kafka (and logstore) keep in a log dir: names that say they are not segments.
_KNOWN_OTHERS = {"meta.properties", "quorum-state", "partition.metadata", "cleaner-state.json",
                 "kafka-metadata-applied", "topic-configs", "acls", "scram-credentials", "client-quotas"}
_OTHER_SUFFIXES = {".deleted", ".cleaned", ".swap", ".tmp", ".part", ".json", ".properties", ".metadata",
                   ".lock", ".kafka_cleanshutdown"}


class DumpPathError(Exception):
    """A command-line path that names nothing dumpable."""


@dataclass(frozen=True)
class DumpOptions:
    """kafka-dump-log's switches, as one value.

    `print_data` (--print-data-log) prints each record's key and payload and
    implies `deep` (--deep-iteration: a line per record); `decoder` renders
    keys and payloads (and implies `print_data`); `max_bytes` reads only
    the first bytes of segments; `verify_index_only` checks indexes without
    listing them; `index_sanity_check` runs only the loader's index check.
    """

    print_data: bool = False
    deep: bool = False
    skip_record_metadata: bool = False
    decoder: RecordDecoder | None = None
    max_bytes: int | None = None
    verify_index_only: bool = False
    index_sanity_check: bool = False
    as_json: bool = False

    @property
    def prints_data(self) -> bool:
        """Whether record keys and payloads are printed."""
        return self.print_data or self.decoder is not None

    @property
    def iterates_records(self) -> bool:
        """Whether every record gets a line."""
        return self.deep or self.prints_data


def _metadata_record(key: bytes | None, value: bytes | None) -> tuple[None, JsonDict]:
    record = decode_metadata_record(value)
    payload = {"type": record.type_name, "version": record.version, "data": json_value(record.data)}
    if record.note is not None:  # a type or version this reader does not know: shown, not an error
        payload["note"] = record.note
    return None, payload


def cluster_metadata_decoder() -> RecordDecoder:
    """--cluster-metadata-decoder: a KRaft metadata record's value as {"type", "version", "data"}
    (Kafka's MetadataRecordType name, the record's version, its fields under Kafka's JSON names);
    metadata records have no key."""
    return RecordDecoder("cluster metadata decoder", _metadata_record)


def file_kind(path: Path) -> str:
    """What a file holds, judged by its name (module docstring)."""
    name = path.name
    if name in _BY_NAME:
        return _BY_NAME[name]
    suffix = name[name.rfind("."):] if "." in name else ""
    if suffix in _BY_SUFFIX:
        return _BY_SUFFIX[suffix]
    if name in _KNOWN_OTHERS or suffix in _OTHER_SUFFIXES:
        return IGNORED
    return SEGMENT


def segment_files(path: Path) -> list[Path]:
    """The files to dump for one argument: the file itself, or a directory's *.log by base offset."""
    if path.is_dir():
        logs = [p for p in path.glob("*.log") if p.is_file()]
        if not logs:
            raise DumpPathError(f"{path}: no .log segment files in this directory")
        return sorted(logs, key=lambda p: (base_offset_of(p) is None, base_offset_of(p) or 0, p.name))
    if not path.exists():
        raise DumpPathError(f"{path}: no such file or directory")
    return [path]


class _Problems:
    """The stderr lines about one file, and the status they set."""

    def __init__(self, path: Path, err: TextIO):
        self.path, self.err = path, err
        self.status = OK

    def __call__(self, message: str, status: int = CORRUPT) -> None:
        print(f"{PROG}: {self.path}: {message}", file=self.err)
        self.status = max(self.status, status)


def dump_path(path: Path, options: DumpOptions, out: TextIO, err: TextIO) -> int:
    """Dump one existing file (any kind) to `out`, problems to `err`; return its exit status."""
    report = _Problems(path, err)
    kind = file_kind(path)
    if not options.as_json:
        print(f"Dumping {path}", file=out)
    if kind == IGNORED:
        if options.as_json:
            print(json.dumps({"file": str(path), "kind": IGNORED}), file=out)
        print(f"Ignoring unknown file {path}", file=err)
        return OK
    try:
        _dispatch(path, kind, options, out, report)
    except BrokenPipeError:
        raise  # stdout's reader went away: the command stops quietly
    except OSError as exc:
        report(f"cannot read: {exc.strerror or exc}", BAD_PATH)
    return report.status


def _dispatch(path: Path, kind: str, o: DumpOptions, out: TextIO, report: _Problems) -> None:
    if kind in (SEGMENT, KRAFT_SNAPSHOT):
        dump_segment(path, out=out, report=report, as_json=o.as_json, deep=o.iterates_records,
                     print_data=o.prints_data, skip_metadata=o.skip_record_metadata, decoder=o.decoder,
                     max_bytes=o.max_bytes)
    elif kind in (OFFSET_INDEX, TIME_INDEX, TXN_INDEX):
        path.stat()  # a missing or unreadable index is a bad path, before anything is said about it
        base_offset = base_offset_of(path)
        if base_offset is None:
            report(f"cannot tell the base offset: the name is not <offset>{path.suffix}", BAD_PATH)
        elif kind == TXN_INDEX:
            dump_txn_index(path, base_offset, out=out, report=report, as_json=o.as_json)
        else:
            beside = path.with_name(f"{path.name.split('.', 1)[0]}.log")
            log_path: Path | None = beside
            if not beside.is_file():
                report(f"no {beside.name} beside it: its entries are not checked against the log", BAD_PATH)
                log_path = None
            dump = dump_offset_index if kind == OFFSET_INDEX else dump_time_index
            dump(path, base_offset, log_path, out=out, report=report, as_json=o.as_json,
                 verify_only=o.verify_index_only, sanity_only=o.index_sanity_check)
    elif kind == PRODUCER_SNAPSHOT:
        dump_producer_snapshot(path, out=out, report=report, as_json=o.as_json)
    elif kind == EPOCH_CHECKPOINT:
        dump_leader_epoch_checkpoint(path, out=out, report=report, as_json=o.as_json)
    else:
        dump_offset_checkpoint(path, out=out, report=report, as_json=o.as_json)


def dump_file(path: Path, *, deep: bool = False, as_json: bool = False,
              out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump one file, printing record keys and payloads with `deep`; return its exit status."""
    return dump_path(Path(path), DumpOptions(print_data=deep, as_json=as_json), out or sys.stdout,
                     err or sys.stderr)


def run(paths: Sequence[str], options: DumpOptions | None = None, *, deep: bool = False, as_json: bool = False,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Dump every path (a file of any kind, or a partition directory's segments); return the exit status.

    Without `options`, `deep` prints every record with its key and payload and `as_json` picks JSON.
    """
    options = options or DumpOptions(print_data=deep, as_json=as_json)
    out, err = out or sys.stdout, err or sys.stderr
    status = OK
    for arg in paths:
        try:
            files = segment_files(Path(arg))
        except DumpPathError as exc:
            print(f"{PROG}: {exc}", file=err)
            status = max(status, BAD_PATH)
            continue
        for path in files:
            status = max(status, dump_path(path, options, out, err))
    return status
