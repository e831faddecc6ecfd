"""The mapping of an offset or time index file: `MappedIndex`, the base of `OffsetIndex` and `TimeIndex`.

An index holds no descriptor: its file is mapped with `FileSystem.map_file`
and the descriptor closed at once, and reopened for a moment only to resize
or fsync it. Kafka's LazyIndex: the file is mapped the first time its entries
are needed (a lookup, an append), and a trim, which is what a segment that
stops being active gets, unmaps it again; a sanity check maps it only while
it runs. Creating and growing the file wait for that first map too: a new
index has no file, and `make_active` only notes the size, so a partition
that is created, or opened and closed, without an append never creates,
grows or trims an index file (10,000 of them restart in a few syscalls
each); an index known to hold no entry answers lookups without its file.
Kafka rebuilds a missing index of a segment, so a directory with none is
still one Kafka opens. A file cut under its map, or a write into a
preallocated page a full disk cannot back, raises `IndexAccessError` (a `StorageError`) from the access
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
    reserved_slots = 0   # slots past which the native core calls the index full (the time index keeps one)
    core_type: type[_Core]

    def __init__(self, path: str, base_offset: int, max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
                 *, writable: bool = True, exists: bool | None = None, fs: FileSystem = OS) -> None:
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
        self._target: int | None = None    # the length `make_active` asked for, given at the next map
        # Around everything that names the file or swaps the map: a reader's first lookup and the flush thread
        # reopen it by name while the log's owner may rename or delete it (never the lookups themselves).
        self._lock: threading.RLock = threading.RLock()
        # A plain attribute, not a property: lookups read it at full speed once mapped.
        self.core: _Core = cast("_Core", _Unmapped(self))  # cast: it forwards to the core it maps
        # `exists`: what the caller's listing of the directory says (None: ask the file system, and a
        # read-only index needs its file; told there is none, it is an empty one).
        self._present: bool = fs.exists(path) if exists is None else exists
        if not self._present and not writable and exists is None:
            raise FileNotFoundError(path)
        if path.startswith(_ANONYMOUS):
            self._fd = fs.open(path, os.O_RDWR if writable else os.O_RDONLY)
        if not self._present:
            self._length, self._entries = 0, 0
            if writable:
                # Made at its full size by the first use that needs a file (`_load`).
                self._target = self._round(max_index_size)

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

    def _load(self, *, grow: bool = True) -> None:
        """Map the file (the first use of an unmapped index), first giving it the length `make_active`
        asked for unless not `grow`; a closed index, or one with no file, gets an empty core."""
        with self._lock:
            if self._loaded:
                return
            if self._target is not None and grow:
                self.resize(self._target)
            if self._closed or not self._present:
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
        """The core for a moment: an index not in use is mapped only for the `with`, as it is."""
        if self._loaded:
            yield self.core
            return
        self._load(grow=False)
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
        """The file's length in bytes (0 while there is no file)."""
        with self._lock:
            if not self._present:
                return 0
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
    def idle_and_empty(self) -> bool:
        """Whether the index is unmapped and known to hold no entry: lookups need no file."""
        return not self._loaded and self._entries == 0

    @property
    def exists(self) -> bool:
        """Whether the file exists (a new index has none until its first use)."""
        return self._present

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
        """Whether the segment must roll before the next entry (asked of an index not grown yet: whether
        it will be once grown, without making its file)."""
        if not self._loaded and self._target is not None:
            entries = self.entries
            return entries >= max(self._target // self.entry_size, entries) - self.reserved_slots
        return self.core.is_full

    def load(self) -> None:
        """Map the file now, with the room `make_active` asked for: what an append does first, so that a
        file that cannot be made fails the append that needs it."""
        if not self._loaded:
            self._load()

    def resize(self, size: int) -> bool:
        """Set the file length (rounded down to whole entries, never below the entries held), creating
        the file if there is none."""
        with self._lock:
            entries = self.entries
            length = max(self._round(size), entries * self.entry_size)
            if self._present and length == self.length:
                self._target = None
                return False
            was_mapped = self._loaded
            self._unload()
            with self._descriptor(create=True) as fd:
                self._present = True   # made by the open, whatever the truncate does
                self.fs.truncate(fd, length)
            # Only now: a growth that failed (a full disk) is tried again by the next use.
            self._length, self._entries, self._target = length, entries, None
            if was_mapped:
                self._load()
            return True

    def trim(self, *, create: bool = True) -> None:
        """Cut the file to its entries, as Kafka does when a segment stops being active, and unmap it
        (the next use maps it again). An index with no file gets an empty one if `create`."""
        with self._lock:
            self._target = None
            if not self._present:
                if create and self.writable:
                    self.resize(0)
                return
            if not self._loaded and self._entries is None and self.writable:
                return   # untouched since opened: trusted to be whole entries already
            self._unload()
            self.resize(0)

    def make_active(self) -> None:
        """Give the file room for appends, `segment.index.bytes`: at once if mapped, else at the next map."""
        with self._lock:
            if self._loaded:
                self.resize(self.max_index_size)
            else:
                self._target = self._round(self.max_index_size)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        if self._loaded:
            self.core.set_entries(0)
        else:
            self._entries = 0
        self.make_active()

    def truncate_to(self, offset: int) -> None:
        """Drop the entries at or above `offset`."""
        if not self.idle_and_empty:
            self.core.truncate_to(offset)

    def flush(self) -> None:
        """Write the mapped pages, and the file's length after a trim, to disk.

        Always an fsync, mapped or not: writes through an earlier map of the file (an index object
        closed without a flush) are the file's too, and this is what makes them durable."""
        with self._lock:
            if not self.writable or self._closed or not self._present:
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
                    self.trim(create=False)
            finally:
                self._unload()
                self._closed = True
                # Empty from now on, as a released core reads; never mapped again.
                self.core, self._loaded = self.core_type(None, self.base_offset, 0, self.path), True
                if self._fd >= 0:
                    self.fs.close(self._fd)
                    self._fd = -1

    def rename(self, path: str) -> None:
        """Move the file (if there is one); a mapping follows it."""
        with self._lock:
            if self._present:
                self.fs.rename(self.path, path)
            self.path = path
            if self._loaded:
                self.core.path = path

    def delete(self) -> None:
        """Close and remove the file."""
        with self._lock:
            self.close(trim=False)
            if self._present:
                self.fs.unlink(self.path)
                self._present = False

    def check_length(self) -> None:
        """Kafka's length rule: a whole number of entries."""
        if self.length % self.entry_size:
            raise CorruptIndexError(f"{self.path}: length {self.length} is not a multiple of {self.entry_size}")
