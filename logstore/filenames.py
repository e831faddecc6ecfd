"""Kafka's file and directory names, in one place: what a partition directory holds and how
each name carries its offset.

A name is the 20-digit zero-padded base offset, then a kind suffix (`.log`, `.index`, ...),
then at most one state suffix (`.cleaned`, `.swap`, `.deleted`) that a rename adds or
removes. Every module that makes or reads such a name goes through here, so a Kafka tool
and logstore agree on every file.

A partition directory being deleted is first renamed `<topic>-<partition>.<uuid>-delete`
(Kafka's logDeleteDirName), with the topic cut short so the name fits the file system's
255 bytes: a topic name may have 249 characters, and the full form would need 289. Recovery
knows both forms (`is_delete_dir`) and finishes their removal.
"""
from __future__ import annotations

import os
import re
import uuid

__all__ = ["LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "TXN_INDEX_SUFFIX", "SNAPSHOT_SUFFIX",
           "CLEANED_SUFFIX", "SWAP_SUFFIX", "DELETED_SUFFIX", "SEGMENT_SUFFIXES", "STATE_SUFFIXES",
           "offset_name", "offset_path", "parse_offset", "partition_dir_name", "parse_partition_dir",
           "DELETE_DIR", "DELETE_DIR_SUFFIX", "delete_dir_name", "is_delete_dir"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
# The files of one segment, the log first.
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
STATE_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)

OFFSET_DIGITS = 20

DELETE_DIR_SUFFIX = "-delete"
# What a file name may hold on the file systems Kafka runs on (NAME_MAX).
MAX_NAME_BYTES = 255
# Both forms end in `.<32 hex digits>-delete`: the full topic, or its first characters.
DELETE_DIR = re.compile(r".+-[0-9]+\.[0-9a-f]{32}" + re.escape(DELETE_DIR_SUFFIX))


def offset_name(offset: int, suffix: str) -> str:
    """`00000000000000000042.log` for offset 42 and suffix `.log`."""
    if offset < 0:
        raise ValueError(f"a file offset is never negative: {offset}")
    return f"{offset:0{OFFSET_DIGITS}d}{suffix}"


def offset_path(directory: str, offset: int, suffix: str) -> str:
    """The path of `offset_name(offset, suffix)` in `directory`."""
    return os.path.join(directory, offset_name(offset, suffix))


def parse_offset(name: str, suffix: str | None = None) -> int | None:
    """The offset a Kafka file name starts with, or None when the name is not one.

    With `suffix`, the name must also end in exactly that suffix (`.log`, `.log.swap`, ...).
    """
    digits, dot, rest = name.partition(".")
    if len(digits) != OFFSET_DIGITS or not digits.isdigit() or not dot:
        return None
    if suffix is not None and "." + rest != suffix:
        return None
    return int(digits)


def partition_dir_name(topic: str, partition: int) -> str:
    """`orders-3` for topic `orders`, partition 3."""
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """`orders-3` → ("orders", 3); ValueError when the name is not `<topic>-<partition>`."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


def delete_dir_name(topic: str, partition: int, unique_id: str | None = None) -> str:
    """`orders-3.<32 hex digits>-delete`, what partition 3 of `orders` is renamed to before its files go;
    the topic is cut so the name fits 255 bytes, as Kafka cuts it (topic names are ASCII)."""
    suffix = f"-{partition}.{unique_id or uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[:MAX_NAME_BYTES - len(suffix)] + suffix


def is_delete_dir(name: str) -> bool:
    """Whether `name` is a partition directory renamed for deletion, in the full form or the shortened one."""
    return DELETE_DIR.fullmatch(name) is not None
