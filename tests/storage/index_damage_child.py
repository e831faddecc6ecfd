"""A partition whose live index file is cut under its map; test_index_maps.py runs it in its own process.

    python tests/storage/index_damage_child.py DIR lookup|append|time-lookup
    python tests/storage/index_damage_child.py DIR full-disk-append

Opens a log in DIR with an index entry per batch, appends enough batches that
the offset and time indexes span several pages, and maps both (a read and an
offset-for-timestamp). Then it prints `ready` and waits for a line on stdin:
meanwhile the parent truncates the active segment's `.index` and
`.timeindex` to 0 bytes. Then it does the action and prints one JSON line:
`{"error": <exception class>, "code": <Kafka error name>}`, or
`{"error": null, ...}` if nothing was raised. A SIGBUS instead ends the
process with that signal, which is what the test rules out.

`full-disk-append` wants DIR on a small file system of its own: it creates
an offset index (preallocated, so sparse), fills the disk with another file,
then appends entries until one needs a block the disk does not have, and
prints the same JSON line.
"""
from __future__ import annotations

import errno
import json
import os
import sys

import logstore
from logstore.errors import LogStoreError
from logstore.index import OffsetIndex
from logstore.log import Log

CONFIG = logstore.LogConfig.from_properties({"index.interval.bytes": 1, "segment.bytes": 1 << 30})
BATCHES = 3000   # 3,000 entries: 24 KB of offset index, 36 KB of time index


def fill_the_disk(directory: str) -> None:
    """Write a file until the file system under `directory` has no block left."""
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def full_disk_append(directory: str) -> dict[str, object]:
    """Index entries into the preallocated pages of an index on a full disk."""
    index = OffsetIndex(os.path.join(directory, "00000000000000000000.index"), 0, max_index_size=1 << 20)
    index.load()   # made and preallocated now, as an append makes it, before the disk fills
    fill_the_disk(directory)
    for n in range(1, index.max_entries):
        index.append(n, n * 100)
    return {"entries": index.entries}


def main() -> int:
    """Build, wait for the cut, act, report."""
    directory, action = sys.argv[1], sys.argv[2]
    if action == "full-disk-append":
        try:
            outcome = full_disk_append(directory)
        except LogStoreError as exc:
            outcome = {"error": type(exc).__name__, "code": exc.error_name, "message": str(exc)}
        print(json.dumps(outcome), flush=True)
        return 0
    log = Log.open(directory, CONFIG)
    for n in range(BATCHES):
        log.append_records([b"v%d" % n], timestamps=1_000 + n)
    log.read(BATCHES // 2)
    log.offset_for_timestamp(1_000 + BATCHES // 2)
    print("ready", flush=True)
    sys.stdin.readline()
    outcome: dict[str, object] = {"error": None}
    try:
        if action == "lookup":
            outcome["result"] = log.read(BATCHES // 2) is not None
        elif action == "time-lookup":
            outcome["result"] = log.offset_for_timestamp(1_000 + BATCHES // 2)
        else:
            outcome["result"] = log.append_records([b"after the cut"], timestamps=1_000 + BATCHES).first_offset
    except LogStoreError as exc:
        outcome = {"error": type(exc).__name__, "code": exc.error_name, "message": str(exc),
                   "bases": [cls.__name__ for cls in type(exc).__mro__]}
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
