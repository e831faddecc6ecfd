"""Text checkpoint files, partition.metadata and the clean-shutdown marker.

Layout (on-disk-format.md §6; marker §5.6), UTF-8 with `\\n` line endings:

    checkpoint:          <version>\\n<count>\\n<entry>\\n ... (count entries)
      offset entry:        "<topic> <partition> <offset>"
      leader-epoch entry:  "<epoch> <startOffset>"
    partition.metadata:  "version: 0\\ntopic_id: <22-char base64url UUID>" (no final newline)
    .kafka_cleanshutdown: {"version":0,"brokerEpoch":N} (older Kafka: empty)

Every file is replaced atomically by `write_atomically` (tmp, fsync, rename,
fsync the directory); a write that fails raises `StorageIOError` (a
KAFKA_STORAGE_ERROR to a client, still an `OSError`), saying whether the old
file and the directory are untouched. Readers raise `CorruptCheckpointError` naming the line.
Every function takes the `FileSystem` it goes through (`fs`, default the real one).
"""
from __future__ import annotations

import base64
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping
from typing import TypeVar

from logstore.errors import StorageError, StorageIOError
from logstore.filesystem import OS, FileSystem

StrPath = str | os.PathLike[str]
T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"

# Python's int() also takes "+1", " 1", "1_000" and non-ASCII digits; a file
# Kafka would reject must not load here.
_INT = re.compile(r"-?[0-9]+")
# Java's BufferedReader.readLine ends a line at \n, \r\n or \r.
_LINE_END = re.compile(r"\r\n|\r|\n")
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")
# Kafka's ZERO_UUID and METADATA_TOPIC_ID (the id of __cluster_metadata).
_RESERVED_IDS = frozenset({bytes(16), bytes(15) + b"\x01"})


class CorruptCheckpointError(StorageError):
    """A checkpoint or metadata file that breaks its format; `line` is 1-based."""

    error_name = "KAFKA_STORAGE_ERROR"

    def __init__(self, path: StrPath, line: int, reason: str):
        super().__init__(f"corrupt checkpoint file {os.fspath(path)}, line {line}: {reason}")
        self.path = os.fspath(path)
        self.line = line
        self.reason = reason


def fsync_dir(directory: StrPath, fs: FileSystem = OS) -> None:
    """Make a rename or unlink in `directory` durable."""
    fs.fsync_dir(os.fspath(directory))


def write_atomically(path: StrPath, data: bytes, *, fsync: bool = True, fs: FileSystem = OS) -> None:
    """Replace `path` with `data` so a crash leaves either the old or the new file.

    An I/O error raises `StorageIOError` (a KAFKA_STORAGE_ERROR that is still the `OSError`), `intact`
    when `path` and the directory are as before (the temporary file removed): what a full disk allows
    a caller to shrug off. A missing directory stays a plain `FileNotFoundError`.
    """
    target = os.fspath(path)
    tmp = target + ".tmp"
    try:
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                view = view[fs.write(fd, view):]
            if fsync:
                fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.rename(tmp, target)
    except BaseException as exc:
        intact = True
        try:
            fs.unlink(tmp)
        except FileNotFoundError:
            pass
        except OSError:
            intact = False
        if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, StorageError)):
            raise StorageIOError(f"cannot write {target}: {exc.strerror or exc}", exc, intact=intact) from exc
        raise
    if fsync:
        try:
            fs.fsync_dir(os.path.dirname(os.path.abspath(target)))
        except OSError as exc:
            if isinstance(exc, StorageError):
                raise
            raise StorageIOError(f"cannot make {target} durable: {exc.strerror or exc}", exc) from exc


def _read_lines(path: StrPath, fs: FileSystem) -> list[str]:
    """The file's lines without terminators; one final empty line is dropped."""
    data = fs.read_file(os.fspath(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(path, data.count(b"\n", 0, e.start) + 1, "not UTF-8") from None
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _parse_int(text: str) -> int:
    """A decimal integer as Java's parseInt/parseLong reads it, else ValueError."""
    if not _INT.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def read_checkpoint(path: StrPath, parse_entry: Callable[[str], T], *, version: int = 0,
                    fs: FileSystem = OS) -> list[T]:
    """The entries of a generic checkpoint; `parse_entry` raises ValueError on a bad line."""
    lines = _read_lines(path, fs)
    if not lines:
        return []
    if not _INT.fullmatch(lines[0]) or int(lines[0]) != version:
        raise CorruptCheckpointError(path, 1, f"expected version {version}, found {lines[0]!r}")
    if len(lines) == 1:
        return []
    if not _INT.fullmatch(lines[1]) or int(lines[1]) < 0:
        raise CorruptCheckpointError(path, 2, f"malformed count line {lines[1]!r}")
    count = int(lines[1])
    entries = []
    for lineno, line in enumerate(lines[2:], start=3):
        try:
            entries.append(parse_entry(line))
        except ValueError as e:
            raise CorruptCheckpointError(path, lineno, f"malformed entry {line!r} ({e})") from None
    if len(entries) > count:
        raise CorruptCheckpointError(path, count + 3, f"more entries than the count {count}")
    if len(entries) < count:
        raise CorruptCheckpointError(path, 2, f"count says {count} entries, found {len(entries)}")
    return entries


def write_checkpoint(path: StrPath, entries: list[str], version: int = 0, fs: FileSystem = OS) -> None:
    """Atomically write `entries` in the generic checkpoint format."""
    if any("\n" in e or "\r" in e for e in entries):
        raise ValueError("a checkpoint entry cannot contain a line break")
    text = f"{version}\n{len(entries)}\n" + "".join(f"{e}\n" for e in entries)
    write_atomically(path, text.encode("utf-8"), fs=fs)


def _parse_offset_entry(line: str) -> tuple[tuple[str, int], int]:
    """`"<topic> <partition> <offset>"` → ((topic, partition), offset)."""
    fields = line.split()
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields, found {len(fields)}")
    return (fields[0], _parse_int(fields[1])), _parse_int(fields[2])


class OffsetCheckpoint:
    """A log-dir offset checkpoint (recovery point, log start, high watermark).

    Owns one file holding an offset per (topic, partition). Not task-safe:
    the log manager serialises reads and writes of each file.
    """

    def __init__(self, path: StrPath, fs: FileSystem = OS):
        self.path = path
        self.fs = fs

    def read(self) -> dict[tuple[str, int], int]:
        """Offset per (topic, partition); a missing file means no partition has one yet."""
        try:
            # Duplicate keys keep the last value, as Kafka's reader does.
            return dict(read_checkpoint(self.path, _parse_offset_entry, fs=self.fs))
        except FileNotFoundError:
            return {}

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file with `offsets`, sorted so the bytes are reproducible."""
        for topic, _ in offsets:
            if not topic or topic.split() != [topic]:
                raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint")
        write_checkpoint(self.path, [f"{t} {p} {offsets[t, p]}" for t, p in sorted(offsets)], fs=self.fs)


def _parse_epoch_entry(line: str) -> tuple[int, int]:
    """`"<epoch> <startOffset>"` → (epoch, start offset)."""
    fields = line.split()
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields, found {len(fields)}")
    return _parse_int(fields[0]), _parse_int(fields[1])


def read_leader_epoch_checkpoint(path: StrPath, fs: FileSystem = OS) -> list[tuple[int, int]]:
    """(epoch, start offset) entries in file order; a missing file has none."""
    try:
        return read_checkpoint(path, _parse_epoch_entry, fs=fs)
    except FileNotFoundError:
        return []


def write_leader_epoch_checkpoint(path: StrPath, entries: list[tuple[int, int]], fs: FileSystem = OS) -> None:
    """Atomically replace the leader-epoch checkpoint with `entries`."""
    write_checkpoint(path, [f"{epoch} {offset}" for epoch, offset in entries], fs=fs)


def topic_id_to_string(b: bytes) -> str:
    """Kafka's Uuid.toString: base64url of the 16 bytes without padding."""
    if len(b) != 16:
        raise ValueError(f"a topic id is 16 bytes, not {len(b)}")
    return base64.urlsafe_b64encode(b).decode("ascii").rstrip("=")


def new_topic_id() -> bytes:
    """A random 16-byte id as Kafka's Uuid.randomUuid makes one: not reserved, not shown with a leading dash."""
    while not _usable_id(made := uuid.uuid4().bytes):
        pass
    return made


def derived_topic_id(topic: str) -> bytes:
    """The same usable id for `topic` on every call: for topics whose files carry none."""
    made = uuid.uuid5(uuid.NAMESPACE_URL, f"logstore:topic:{topic}")
    while not _usable_id(made.bytes):
        made = uuid.uuid5(made, topic)
    return made.bytes


def _usable_id(raw: bytes) -> bool:
    # A leading '-' would make the id read as a flag on any command line it is pasted into.
    return raw not in _RESERVED_IDS and not topic_id_to_string(raw).startswith("-")


def topic_id_from_string(s: str) -> bytes:
    """The 16 bytes of a 22-character base64url topic id, else ValueError."""
    # b64decode silently skips characters outside the alphabet.
    if not _TOPIC_ID.fullmatch(s):
        raise ValueError(f"not a base64url topic id: {s!r}")
    return base64.urlsafe_b64decode(s + "==")


def write_partition_metadata(path: StrPath, topic_id: bytes, fs: FileSystem = OS) -> None:
    """Atomically write partition.metadata for `topic_id` (16 bytes, not all zero)."""
    if topic_id == bytes(16):
        raise ValueError("the all-zero topic id cannot be written")
    text = f"version: 0\ntopic_id: {topic_id_to_string(topic_id)}"
    write_atomically(path, text.encode("ascii"), fs=fs)


def _metadata_value(path: StrPath, lines: list[str], lineno: int, key: str) -> str:
    """The value of line `lineno`, which must read `<key>: <value>`."""
    parts = re.split(r":\s+", lines[lineno - 1]) if lineno <= len(lines) else []
    if len(parts) != 2 or parts[0] != key:
        raise CorruptCheckpointError(path, lineno, f"expected '{key}: <value>'")
    return parts[1]


def read_partition_metadata(path: StrPath, fs: FileSystem = OS) -> bytes:
    """The 16-byte topic id recorded in a partition.metadata file."""
    lines = _read_lines(path, fs)
    version = _metadata_value(path, lines, 1, "version")
    topic_id_text = _metadata_value(path, lines, 2, "topic_id")
    if len(lines) > 2:
        raise CorruptCheckpointError(path, 3, "unexpected line after topic_id")
    # Any version >= 0 reads as version 0, so a file from a newer broker still
    # loads after a downgrade (Kafka's rule).
    if not _INT.fullmatch(version) or int(version) < 0:
        raise CorruptCheckpointError(path, 1, f"bad version {version!r}")
    try:
        topic_id = topic_id_from_string(topic_id_text)
    except ValueError as e:
        raise CorruptCheckpointError(path, 2, str(e)) from None
    if topic_id == bytes(16):
        raise CorruptCheckpointError(path, 2, "the all-zero topic id is reserved")
    return topic_id


def write_clean_shutdown_marker(log_dir: StrPath, broker_epoch: int = 0, fs: FileSystem = OS) -> None:
    """Record in `log_dir` that every log in it was closed cleanly."""
    doc = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    write_atomically(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER), doc.encode("ascii"), fs=fs)


def read_clean_shutdown_marker(log_dir: StrPath, fs: FileSystem = OS) -> bool:
    """Whether `log_dir` was shut down cleanly; older Kafka wrote an empty marker."""
    return fs.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))


def remove_clean_shutdown_marker(log_dir: StrPath, fs: FileSystem = OS) -> None:
    """Durably forget the clean shutdown, so a crash from now on triggers recovery."""
    try:
        fs.unlink(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))
    except FileNotFoundError:
        return
    fs.fsync_dir(os.fspath(log_dir))
