"""The mapping of an offset or time index file: `MappedIndex`, the base of `OffsetIndex` and `TimeIndex`.

An index holds no descriptor: its file is mapped with `FileSystem.map_file`
and the descriptor closed at once, and reopened for a moment only to resize
or fsync it. Kafka's LazyIndex: the file is mapped the first time its entries
are needed (a lookup, an append), and a trim, which is what a segment that
stops being active gets, unmaps it again; a sanity check maps it only while
it runs. A file cut under its map, or a write into a preallocated page a full
disk cannot back, raises `IndexAccessError` (a `StorageError`) from the access
that faults, where SIGBUS would end the process (`native/map_guard.h`).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from logstore.errors import LogStoreError
from logstore.filesystem import OS, FileSystem
from logstore.native.index import OffsetIndexCore, TimeIndexCore

if TYPE_CHECKING:
    from logstore.native.file_map import FileMap

__all__ = ["DEFAULT_MAX_INDEX_SIZE", "CorruptIndexError", "MappedIndex"]

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024

# A file only a descriptor names (`memfd_create`, reached through /proc): it cannot be reopened by name once
# its creator closes that descriptor, so the index keeps one of its own.
_ANONYMOUS = "/proc/self/fd/"

_Core = TypeVar("_Core", OffsetIndexCore, TimeIndexCore)


class CorruptIndexError(LogStoreError):
    """An index file that fails its sanity check; the loader rebuilds it from the log."""

    error_name = "CORRUPT_MESSAGE"


class _Unmapped:
    """What an index's `core` is until the file is mapped: asked for anything, it maps the file and
    answers from the core it got (so a caller may hold `index.core.append` from before the map)."""

    __slots__ = ("_index",)

    def __init__(self, index: MappedIndex[Any]):
        self._index = index

    def __getattr__(self, name: str) -> Any:
        self._index._load()
        return getattr(self._index.core, name)


class MappedIndex(Generic[_Core]):
    """An index file, mapped while in use, with its first `entries` slots valid.

    Owns the file and, while mapped, its map; never a descriptor at rest (but
    for an anonymous file). `core` is the native view of the map: the first
    access maps the file. Mapping, reopening by name, renaming and closing
    are serialised by the index's own lock (a leaf), so a reader's first
    lookup or the flush thread's fsync never reopens a name a rename is
    changing; appends, truncations and resizes are serialised by the
    segment's owner (the log lock), as before.
    """

    entry_size = 0
    core_type: type[_Core]

    def __init__(self, path: str, base_offset: int, max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
                 *, writable: bool = True, fs: FileSystem = OS) -> None:
        # Annotated: mypy defers this method (it calls the decorated `_descriptor`) and then cannot infer them.
        self.path: str = path
        self.base_offset: int = base_offset
        self.max_index_size: int = max_index_size
        self.writable: bool = writable
        self.fs: FileSystem = fs
        self._map: FileMap | None = None
        self._length: int | None = None    # the file's length in bytes, once read
        self._entries: int | None = None   # while unmapped: the valid entries, None until known
        self._closed: bool = False
        self._fd: int = -1                 # only an anonymous file's (see _ANONYMOUS)
        self._loaded: bool = False         # whether `core` is the native view of a map (or the closed one)
        # Around everything that names the file or swaps the map: a reader's first lookup and the flush thread
        # reopen it by name while the log's owner may rename or delete it (never the lookups themselves).
        self._lock: threading.RLock = threading.RLock()
        # A plain attribute, not a property: lookups read it at full speed once mapped.
        self.core: _Core = cast("_Core", _Unmapped(self))  # cast: it forwards to the core it maps
        new = not fs.exists(path)
        if new and not writable:
            raise FileNotFoundError(path)
        if path.startswith(_ANONYMOUS):
            self._fd = fs.open(path, os.O_RDWR if writable else os.O_RDONLY)
        if new:
            length = self._round(max_index_size)
            with self._descriptor(create=True) as fd:
                fs.truncate(fd, length)
            self._length, self._entries = length, 0

    @contextmanager
    def _descriptor(self, *, create: bool = False) -> Iterator[int]:
        """A descriptor of the file for one operation (the kept one of an anonymous file)."""
        if self._fd >= 0:
            yield self._fd
            return
        flags = (os.O_RDWR | (os.O_CREAT if create else 0)) if self.writable else os.O_RDONLY
        fd = self.fs.open(self.path, flags, 0o644)
        try:
            yield fd
        finally:
            self.fs.close(fd)

    def _load(self) -> None:
        """Map the file (the first use of an unmapped index); a closed index gets an empty core."""
        with self._lock:
            if self._loaded:
                return
            if self._closed:
                self.core, self._loaded = self.core_type(None, self.base_offset, 0, self.path), True
                return
            with self._descriptor() as fd:
                length = self.fs.size(fd)
                mapped = self.fs.map_file(fd, length, writable=self.writable) if length else None
            core: _Core | None = None
            try:
                if mapped is not None:
                    # Lookups are binary searches. And without this, the first fault on a fresh, sparse
                    # index reads around it, zero-filling megabytes of holes: 3-4 ms per file here, paid
                    # inside the append that rolls.
                    mapped.advise_random()
                slots = length // self.entry_size
                known = self._entries
                core = self.core_type(mapped, self.base_offset, slots if known is None else min(known, slots),
                                      self.path)
                if known is None and not self.writable and slots:
                    # A live writer preallocates the file; its zero-filled tail is not entries.
                    core.set_entries(self._written_entries(core, slots))
            except BaseException:
                if core is not None:
                    core.release()
                if mapped is not None:
                    mapped.close()
                raise
            self._map, self._length, self._entries = mapped, length, None
            self.core, self._loaded = core, True

    def _unload(self) -> None:
        """Unmap, remembering the entries for the next `_load`."""
        with self._lock:
            if self._loaded:
                self._entries = self.core.entries
                self.core.release()
                self.core, self._loaded = cast("_Core", _Unmapped(self)), False  # cast: as in __init__
            if self._map is not None:
                self._map.close()
                self._map = None

    @contextmanager
    def _borrowed(self) -> Iterator[_Core]:
        """The core for a moment: an index not in use is mapped only for the `with`."""
        if self._loaded:
            yield self.core
            return
        self._load()
        try:
            yield self.core
        finally:
            self._unload()

    def _written_entries(self, core: _Core, slots: int) -> int:
        """How many leading slots hold entries: past slot 0, offsets strictly increase, so a slot
        whose offset is the base offset (and its timestamp, if any, 0) is preallocated zeros."""
        lo, hi = 1, slots
        while lo < hi:
            mid = (lo + hi) // 2
            if self._is_unwritten(core.entry(mid)):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _is_unwritten(self, entry: tuple[int, int]) -> bool:
        raise NotImplementedError

    def _round(self, size: int) -> int:
        return size // self.entry_size * self.entry_size

    @property
    def length(self) -> int:
        """The file's length in bytes."""
        with self._lock:
            if self._length is None:
                with self._descriptor() as fd:
                    self._length = self.fs.size(fd)
            return self._length

    @property
    def entries(self) -> int:
        """How many entries the index holds."""
        if self._loaded:
            return self.core.entries
        if self._entries is None:
            if not self.writable:
                return self.core.entries   # only the map tells written slots from preallocated ones
            # A file not touched since it was opened is trusted whole (see the module docstring).
            return self.length // self.entry_size
        return self._entries

    @property
    def mapped(self) -> bool:
        """Whether the file is mapped now (it is between its first use and the next trim or close)."""
        return self._map is not None

    @property
    def max_entries(self) -> int:
        """How many entries fit in the file at its current length."""
        return self.length // self.entry_size

    @property
    def is_full(self) -> bool:
        """Whether the segment must roll before the next entry."""
        return self.core.is_full

    def resize(self, size: int) -> bool:
        """Set the file length (rounded down to whole entries, never below the entries held)."""
        with self._lock:
            entries = self.entries
            length = max(self._round(size), entries * self.entry_size)
            if length == self.length:
                return False
            was_mapped = self._loaded
            self._unload()
            with self._descriptor() as fd:
                self.fs.truncate(fd, length)
            self._length, self._entries = length, entries
            if was_mapped:
                self._load()
            return True

    def trim(self) -> None:
        """Cut the file to its entries, as Kafka does when a segment stops being active, and unmap it
        (the next use maps it again)."""
        with self._lock:
            if not self._loaded and self._entries is None and self.writable:
                return   # untouched since opened: trusted to be whole entries already
            self._unload()
            self.resize(0)

    def make_active(self) -> None:
        """Grow the file back to `segment.index.bytes` so appends have room."""
        self.resize(self.max_index_size)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        if self._loaded:
            self.core.set_entries(0)
        else:
            self._entries = 0
        self.make_active()

    def truncate_to(self, offset: int) -> None:
        """Drop the entries at or above `offset`."""
        self.core.truncate_to(offset)

    def flush(self) -> None:
        """Write the mapped pages, and the file's length after a trim, to disk.

        Always an fsync, mapped or not: writes through an earlier map of the file (an index object
        closed without a flush) are the file's too, and this is what makes them durable."""
        with self._lock:
            if not self.writable or self._closed:
                return
            if self._map is not None:
                self._map.sync()
            with self._descriptor() as fd:
                self.fs.fsync(fd)

    def close(self, *, trim: bool = True) -> None:
        """Trim (when writable) and unmap; the index then reads as empty."""
        with self._lock:
            if self._closed:
                return
            try:
                if trim and self.writable:
                    self.trim()
            finally:
                self._unload()
                self._closed = True
                # Empty from now on, as a released core reads; never mapped again.
                self.core, self._loaded = self.core_type(None, self.base_offset, 0, self.path), True
                if self._fd >= 0:
                    self.fs.close(self._fd)
                    self._fd = -1

    def rename(self, path: str) -> None:
        """Move the file; a mapping follows it."""
        with self._lock:
            self.fs.rename(self.path, path)
            self.path = path
            if self._loaded:
                self.core.path = path

    def delete(self) -> None:
        """Close and remove the file."""
        with self._lock:
            self.close(trim=False)
            self.fs.unlink(self.path)

    def check_length(self) -> None:
        """Kafka's length rule: a whole number of entries."""
        if self.length % self.entry_size:
            raise CorruptIndexError(f"{self.path}: length {self.length} is not a multiple of {self.entry_size}")
