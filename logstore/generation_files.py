"""The files logstore keeps whole in every log dir under a generation number, where Kafka uses its metadata log.

`topic-configs`, `acls`, `scram-credentials` and `client-quotas` share one layout, a copy at the root of
every log dir:

    {"version": <format version>, "generation": <n>, "<body>": <an object or a list>}

Each write replaces every copy atomically (`write_atomically`: temporary file, fsync, rename, directory
fsync) with the generation its owner raised by one; on open the copy with the highest generation wins, so a
crash between two log dirs leaves the older document or the newer one, never a mix. A copy that breaks the
layout is a `CorruptCheckpointError` naming the file. What the body holds is its file's module's to check.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from logstore.checkpoints import CorruptCheckpointError, write_atomically
from logstore.filesystem import OS, FileSystem

__all__ = ["GenerationFile"]

T = TypeVar("T")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class GenerationFile:
    """One such file: its name in a log dir, the key of its body, whether the body is a list (else an object),
    and the format version it is written in and accepts."""

    name: str
    body: str
    body_is_list: bool = False
    version: int = 0

    def encode(self, generation: int, body: object) -> bytes:
        """A copy's bytes for a generation of `body` (JSON-ready)."""
        doc = {"version": self.version, "generation": generation, self.body: body}
        return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False).encode("utf-8")

    def decode(self, path: str, data: bytes) -> tuple[int, Any]:
        """(generation, body) of a copy's bytes, the body a list or an object as the file says and otherwise
        unchecked; CorruptCheckpointError naming `path` if they break the layout."""
        try:
            doc = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(path, data.count(b"\n", 0, exc.start) + 1, "not UTF-8") from None
        except json.JSONDecodeError as exc:
            raise CorruptCheckpointError(path, exc.lineno, exc.msg) from None
        if not isinstance(doc, dict) or set(doc) != {"version", "generation", self.body}:
            raise CorruptCheckpointError(path, 1, f"expected an object of version, generation and {self.body}")
        if not _is_int(doc["version"]) or doc["version"] != self.version:
            raise CorruptCheckpointError(path, 1, f"expected version {self.version}, found {doc['version']!r}")
        if not _is_int(doc["generation"]) or doc["generation"] < 0:
            raise CorruptCheckpointError(path, 1, f"bad generation {doc['generation']!r}")
        if not isinstance(doc[self.body], list if self.body_is_list else dict):
            kind = "a list" if self.body_is_list else "an object"
            raise CorruptCheckpointError(path, 1, f"{self.body} is not {kind}")
        return doc["generation"], doc[self.body]

    def read(self, path: str, fs: FileSystem = OS) -> tuple[int, Any]:
        """(generation, body) of one copy, as `decode`; FileNotFoundError if there is none."""
        return self.decode(path, fs.read_file(path))

    def read_newest(self, log_dirs: Iterable[str], read: Callable[[str], tuple[int, T]]) -> tuple[int, T] | None:
        """What `read(path)` makes of the copy with the highest generation (the first of equals), trying every
        log dir's; None if no log dir has one."""
        newest: tuple[int, T] | None = None
        for log_dir in log_dirs:
            try:
                found = read(os.path.join(log_dir, self.name))
            except (FileNotFoundError, NotADirectoryError):
                continue
            if newest is None or found[0] > newest[0]:
                newest = found
        return newest

    def write(self, log_dirs: Iterable[str], generation: int, body: object, fs: FileSystem = OS, *,
              make_dirs: bool = False) -> None:
        """Replace the copy in every log dir with `generation` of `body`, each durable before the next is
        written (StorageIOError if a write fails). `make_dirs`: a log dir not made yet (a tool run before the
        broker's first start) is made first and its name synced, as Kafka makes log dirs."""
        data = self.encode(generation, body)
        for log_dir in log_dirs:
            if make_dirs and not fs.isdir(log_dir):
                fs.makedirs(log_dir, exist_ok=True)
                fs.fsync_dir(os.path.dirname(os.path.abspath(log_dir)))
            write_atomically(os.path.join(log_dir, self.name), data, fs=fs)
