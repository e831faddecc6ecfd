"""A file system that can lose power: LevelDB's FaultInjectionTestEnv (RocksDB's FaultInjectionTestFS) for logstore.

`FaultFileSystem` passes every call to the real file system and remembers
what a power cut would keep: per file, its content at its last fsync; per
directory, its entries at its last directory fsync. `crash()` throws the rest
away on disk: files go back to their synced content (unsynced appends cut,
in-place and mmap'd writes undone), and, unless `durable_metadata`, creates,
renames and unlinks not made durable by an fsync of their directory are
undone too. `durable_metadata=True` is the other legal outcome of a cut on a
journaling file system: every name change survived, but only synced data.

`syncfs(path)` is syncfs(2): every tracked file and directory on the file
system (device) holding `path` is synced at once, content and names.

Every fsync, fdatasync, directory fsync, syncfs and rename is a *boundary*, numbered
from 1 in `boundaries`. A rule can fail a chosen boundary (OSError, EIO or
ENOSPC) or cut the power there: the operation does not happen (`after`: it
does, and the power goes right after), the file system goes dead (every later
call raises `SimulatedPowerLoss`, a BaseException no storage handler
swallows), and the test calls `crash()` and reopens the directory with a
fresh `OsFileSystem`. A single-threaded workload crosses the same boundaries
in the same order every run, so a test counts them once and then cuts the
power at each in turn.

A full disk is modelled too: `set_free_space(n)` lets files grow by `n` more
bytes, and the write that needs more puts in what fits and raises ENOSPC (the
stray bytes past a log's end that a real disk leaves); `fail_write` makes one
chosen write fail part-way with any errno.

Limits: files are tracked from the first time this file system opens, renames
or removes them (files it never touches are taken as durable as they are); a
directory `rmtree` removes is gone at once; a crash releases the process's
locks by closing every descriptor opened here (a later `close` of one by the dead store's objects is
a no-op, so a number the OS has handed out again is never closed twice).
"""
from __future__ import annotations

import errno as errnos
import fnmatch
import os
import signal
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

from logstore.filesystem import OsFileSystem
from txn_points import TXN_POINTS

__all__ = ["Boundary", "FaultFileSystem", "NAMED_POINTS", "SimulatedPowerLoss", "TXN_POINTS"]

_STASH = ".fault-stash-"


class SimulatedPowerLoss(BaseException):
    """The power went at a crash point: nothing after it reaches the disk."""


@dataclass(frozen=True)
class Boundary:
    """One fsync, fdatasync, directory fsync or rename, numbered from 1 in the order it happened."""

    number: int
    op: str   # "fsync" (fdatasync too), "fsync_dir", "syncfs" or "rename"
    path: str
    dst: str | None = None
    synced_from: int = 0   # an fsync: the bytes it makes durable are [synced_from, synced_to)
    synced_to: int = 0

    @property
    def subject(self) -> str:
        """What a rule's pattern matches: the path, or `src -> dst` for a rename."""
        return self.path if self.dst is None else f"{self.path} -> {self.dst}"


@dataclass
class _Rule:
    op: str | None
    pattern: str | None
    nth: int
    action: str   # "crash" or "fail"
    where: Callable[[Boundary], bool] | None = None
    after: bool = False
    then: str | None = None   # after the match, act at the next boundary of this op instead
    error: int = errnos.EIO
    seen: int = 0
    waiting: bool = False

    def matches(self, b: Boundary) -> bool:
        return ((self.op is None or self.op == b.op)
                and (self.pattern is None or fnmatch.fnmatchcase(b.subject, self.pattern))
                and (self.where is None or self.where(b)))

    def fires(self, b: Boundary) -> bool:
        if self.waiting:
            return b.op == self.then
        if self.seen >= self.nth or not self.matches(b):
            return False
        self.seen += 1
        if self.seen < self.nth:
            return False
        if self.then is not None:
            self.waiting = True
            return False
        return True


# The cleaner's named points (the old crash switch's names, `name` or `name:N`) as boundaries:
# (op, pattern, after, then). N counts matches of the pattern. The transaction coordinator's are
# txn_points.TXN_POINTS: they recognise the records an fsync makes durable.
NAMED_POINTS: dict[str, tuple[str, str, bool, str | None]] = {
    # The cleaned segment is flushed; its `.cleaned` → `.swap` rename has not happened.
    "cleaner-cleaned-written": ("rename", "*.log.cleaned -> *", False, None),
    # Its `.swap` renames are durable (the directory fsync after them is done).
    "cleaner-swap-renamed": ("rename", "*.log.cleaned -> *", True, "fsync_dir"),
    # The N-th replaced segment has been renamed `.deleted` (its time index is renamed last but the txnindex).
    "cleaner-old-renamed": ("rename", "* -> *.timeindex.deleted", True, None),
    # The swap lost its suffix and that is durable.
    "cleaner-swapped": ("rename", "*.log.swap -> *", True, "fsync_dir"),
}


@dataclass
class _WriteRule:
    op: str   # "write" (pwrite and write) or "truncate"
    pattern: str
    nth: int
    error: int
    written: int
    seen: int = 0


@dataclass
class _File:
    """What a power cut keeps of one file (by inode): its first `synced` bytes, or `image` when
    writes below that length (in place, or through a writable map) made the disk differ."""

    key: tuple[int, int]
    path: str
    synced: int
    image: bytes | None = None
    mapped: bool = False
    used: int = 0   # the bytes writes put in it (what a full disk counts; growing by truncate is sparse)


def _key(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _entries(directory: str) -> dict[str, tuple[int, int]]:
    found = {}
    for name in os.listdir(directory):
        try:
            found[name] = _key(os.lstat(os.path.join(directory, name)))
        except FileNotFoundError:
            pass
    return found


class FaultFileSystem(OsFileSystem):
    """The real file system plus the memory of what is durable, crash rules and failure rules.

    Task-safe (one lock around the bookkeeping); numbering is deterministic only for one thread.
    """

    def __init__(self, *, kill_on_power_loss: bool = False, real_syncs: bool = True):
        """`real_syncs=False` skips the OS's fsyncs: what a crash keeps is this model's either way, and a
        sweep crossing thousands of boundaries then does not wait for the disk."""
        self._lock = threading.RLock()
        self._files: dict[tuple[int, int], _File] = {}
        self._fds: dict[int, tuple[int, int]] = {}
        self._own: set[int] = set()       # descriptors `open` returned and `close` has not closed
        self._dropped: set[int] = set()   # descriptors the crash closed
        self._dirs: dict[str, dict[str, tuple[int, int]]] = {}   # directory → durable entries
        self._rules: list[_Rule] = []
        self._gone = 0
        self._kill = kill_on_power_loss
        self._real_syncs = real_syncs
        self._free: int | None = None     # bytes files may still grow by; None: no limit
        self._write_rules: list[_WriteRule] = []
        self.boundaries: list[Boundary] = []
        self.dead = False
        # The machine's file data not yet written back, as `unwritten_bytes` reports it: unknown unless a
        # test says (a test of the choice between syncs sets it; the real one would make runs differ).
        self.unwritten: int | None = None

    # -- rules -------------------------------------------------------------------------------

    def crash_at(self, nth: int, op: str | None = None, pattern: str | None = None, *, after: bool = False,
                 then: str | None = None, where: Callable[[Boundary], bool] | None = None) -> None:
        """Cut the power at the `nth` boundary matching `op`, `pattern` (fnmatch on `Boundary.subject`)
        and `where` (e.g. what the bytes an fsync covers hold)."""
        self._rules.append(_Rule(op, pattern, nth, "crash", where, after, then))

    def crash_at_named(self, spec: str) -> None:
        """Cut the power at a named point of the old switch, `name` or `name:N` (see NAMED_POINTS and TXN_POINTS)."""
        name, _, nth = spec.partition(":")
        if name in TXN_POINTS:
            # Its predicate counts the records it recognises itself: the rule fires at its first match.
            op, pattern, after, where = TXN_POINTS[name](int(nth or 1), self)
            self.crash_at(1, op, pattern, after=after, where=where)
            return
        op, pattern, after, then = NAMED_POINTS[name]
        self.crash_at(int(nth or 1), op, pattern, after=after, then=then)

    def unsynced(self, pattern: str) -> list[tuple[str, int, int]]:
        """(path, synced length, length now) of each file matching `pattern` holding bytes a crash would drop."""
        found = []
        with self._lock:
            for f in self._files.values():
                if f.key[0] < 0 or not fnmatch.fnmatchcase(f.path, pattern):
                    continue
                try:
                    st = os.stat(f.path)
                except FileNotFoundError:
                    continue
                if _key(st) == f.key and st.st_size > f.synced:
                    found.append((f.path, f.synced, st.st_size))
        return found

    def fail_at(self, nth: int, op: str | None = None, pattern: str | None = None, *,
                error: int = errnos.EIO) -> None:
        """Make the `nth` matching boundary raise OSError(`error`) without doing anything."""
        self._rules.append(_Rule(op, pattern, nth, "fail", error=error))

    def fail_write(self, pattern: str, nth: int = 1, *, op: str = "write", error: int = errnos.EIO,
                   written: int = 0) -> None:
        """Make the `nth` pwrite or write (`op="truncate"`: ftruncate) of a file matching `pattern` (fnmatch on
        its path) put its first `written` bytes in the file, then raise OSError(`error`): a write the disk
        gave up on part-way (a truncate fails doing nothing)."""
        self._write_rules.append(_WriteRule(op, pattern, nth, error, written))

    def set_free_space(self, free: int | None) -> None:
        """A disk with `free` bytes left (None: no limit). A write that needs more puts in what fits and
        raises ENOSPC, as a kernel's short write followed by the call that fails; a truncate or an unlink
        gives the bytes back. Growing a file by truncate is free (sparse), and writes through maps are
        not counted."""
        with self._lock:
            self._free = free

    @property
    def free_space(self) -> int | None:
        """The bytes files may still grow by (None: no limit)."""
        return self._free

    def _injected(self, op: str, fd: int) -> _WriteRule | None:
        """The write rule that fires at this `op` on `fd`, if one does."""
        path = self._tracked(fd).path
        for rule in self._write_rules:
            if rule.op == op and fnmatch.fnmatchcase(path, rule.pattern):
                rule.seen += 1
                if rule.seen == rule.nth:
                    self._write_rules.remove(rule)
                    return rule
        return None

    def _allowance(self, fd: int, size: int, position: int) -> tuple[int, int | None]:
        """(bytes of a write of `size` at `position` that land, the errno to raise after them or None)."""
        rule = self._injected("write", fd)
        if rule is not None:
            return min(rule.written, size), rule.error
        if self._free is None:
            return size, None
        fits = max(0, self._tracked(fd).used + self._free - position)
        if fits >= size:
            return size, None
        return fits, errnos.ENOSPC

    def _grew(self, f: _File, end: int) -> None:
        """`f` holds written bytes up to `end`: what it did not hold before comes off the free space."""
        if end > f.used:
            if self._free is not None:
                self._free = max(0, self._free - (end - f.used))
            f.used = end

    def _shrunk(self, f: _File, size: int) -> None:
        """`f` was cut to `size` bytes: the written bytes past it are free again."""
        if size < f.used:
            if self._free is not None:
                self._free += f.used - size
            f.used = size

    def _boundary(self, op: str, path: str, dst: str | None = None, span: tuple[int, int] = (0, 0)) -> bool:
        """Record a boundary and apply the rules; True if the power goes right after the operation."""
        with self._lock:
            self._alive()
            b = Boundary(len(self.boundaries) + 1, op, path, dst, *span)
            self.boundaries.append(b)
            for rule in self._rules:
                if not rule.fires(b):
                    continue
                self._rules.remove(rule)
                if rule.action == "fail":
                    raise OSError(rule.error, f"injected: {os.strerror(rule.error)}", path)
                if not rule.after:
                    self._power_off()
                return True
            return False

    def _alive(self) -> None:
        if self.dead:
            if self._kill:
                # The process SIGKILLs itself once the cut is on disk: a thread that gets here meanwhile
                # waits for that, so nothing (an error logged, a reply sent) happens after the cut.
                threading.Event().wait()
            raise SimulatedPowerLoss("the power is off")

    def _power_off(self) -> None:
        self.dead = True
        if self._kill:
            # In a child process: leave on disk what a power cut leaves, then die as SIGKILL does.
            self.crash()
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedPowerLoss(f"power cut at boundary {len(self.boundaries)}: {self.boundaries[-1].subject}")

    # -- tracking ----------------------------------------------------------------------------

    def _track_dir(self, directory: str) -> None:
        directory = os.path.abspath(directory)
        if directory not in self._dirs:
            self._dirs[directory] = _entries(directory)

    def _file(self, key: tuple[int, int], path: str, size: int, allocated: int | None = None) -> _File:
        f = self._files.get(key)
        if f is None:
            # A file first seen here holds the bytes its blocks do (a preallocated index is sparse).
            used = size if allocated is None else min(size, allocated)
            f = self._files[key] = _File(key, os.path.abspath(path), size, used=used)
        return f

    def _retire(self, key: tuple[int, int]) -> None:
        """The inode `key` is being unlinked: it keeps its memory under a key the OS cannot reuse."""
        f = self._files.pop(key, None)
        if f is None:
            return
        self._gone += 1
        f.key = (-1, self._gone)
        self._files[f.key] = f
        for entries in self._dirs.values():
            for name, known in entries.items():
                if known == key:
                    entries[name] = f.key

    def _tracked(self, fd: int) -> _File:
        key = self._fds.get(fd)
        if key is None:   # opened around this file system: what it holds now counts as synced
            st = os.fstat(fd)
            key = self._fds[fd] = _key(st)
            return self._file(key, os.readlink(f"/proc/self/fd/{fd}"), st.st_size, st.st_blocks * 512)
        return self._files[key]

    def _keep_image(self, f: _File) -> None:
        """Before the disk stops holding the synced bytes as a prefix: copy them."""
        if f.image is None and f.synced:
            with open(f.path, "rb") as src:
                f.image = src.read(f.synced)

    # -- descriptors -------------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """os.open, remembering the file's synced state (an existing untracked file counts as synced)."""
        with self._lock:
            self._alive()
            self._track_dir(os.path.dirname(os.path.abspath(path)))
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None:
                f = self._file(_key(st), path, st.st_size, st.st_blocks * 512)
                if flags & os.O_TRUNC:
                    self._keep_image(f)
            fd = os.open(path, flags, mode)
            key = _key(os.fstat(fd))
            if st is None:
                self._retire(key)   # a new file on the inode number of an unlinked one
            f = self._file(key, path, 0)
            f.path = os.path.abspath(path)
            if flags & os.O_TRUNC:
                self._shrunk(f, 0)
            self._fds[fd] = key
            self._own.add(fd)
            return fd

    def close(self, fd: int) -> None:
        """Close the descriptor (allowed after a crash: the objects of the dead store let go)."""
        with self._lock:
            self._fds.pop(fd, None)
            self._own.discard(fd)
            if fd in self._dropped:
                self._dropped.discard(fd)
                return
        os.close(fd)

    def _before_write(self, fd: int, position: int) -> None:
        f = self._tracked(fd)
        if position < f.synced:
            self._keep_image(f)

    # Writes happen under the lock: a crash in another thread then never meets one half done (a file
    # length mid-batch), nor one landing after it restored the file.

    def pwrite(self, fd: int, data, position: int) -> int:
        """os.pwrite; bytes below the synced length are kept aside first; a failure rule or a full disk
        writes part of `data`, then raises."""
        with self._lock:
            self._alive()
            self._before_write(fd, position)
            return self._write_at(fd, memoryview(data), position)

    def write(self, fd: int, data) -> int:
        """os.write at the descriptor's offset (which moves on), failing as `pwrite` does."""
        with self._lock:
            self._alive()
            position = os.lseek(fd, 0, os.SEEK_CUR)
            self._before_write(fd, position)
            written = self._write_at(fd, memoryview(data), position)
            os.lseek(fd, position + written, os.SEEK_SET)
            return written

    def _write_at(self, fd: int, view: memoryview, position: int) -> int:
        allowed, error = self._allowance(fd, len(view), position)
        written = os.pwrite(fd, view[:allowed], position) if allowed else 0
        self._grew(self._tracked(fd), position + written)
        if error is not None:
            raise OSError(error, f"injected: {os.strerror(error)}", self._tracked(fd).path)
        return written

    def truncate(self, fd: int, size: int) -> None:
        """os.ftruncate; cutting into the synced bytes keeps them aside first; cutting gives space back."""
        with self._lock:
            self._alive()
            rule = self._injected("truncate", fd)
            if rule is not None:
                raise OSError(rule.error, f"injected: {os.strerror(rule.error)}", self._tracked(fd).path)
            self._before_write(fd, size)
            os.ftruncate(fd, size)
            self._shrunk(self._tracked(fd), size)

    def _sync(self, fd: int, sync) -> None:
        with self._lock:
            f = self._tracked(fd)
            power_goes = self._boundary("fsync", f.path, span=(f.synced, os.fstat(fd).st_size))
            if self._real_syncs:
                sync(fd)
            f.synced = os.fstat(fd).st_size
            f.image = None
            if f.mapped:
                # Writes through the map cannot be seen: what is on disk now is the image.
                f.image = os.pread(fd, f.synced, 0)
            if power_goes:   # still under the lock: no other thread's operation lands after the cut
                self._power_off()

    def fsync(self, fd: int) -> None:
        """os.fsync: the file's content and length become what a crash keeps."""
        self._sync(fd, os.fsync)

    def fdatasync(self, fd: int) -> None:
        """os.fdatasync, a boundary like fsync."""
        self._sync(fd, os.fdatasync)

    def mmap(self, fd: int, length: int, *, writable: bool):
        """A map; a writable one makes every write through it unsynced until the next fsync."""
        self._mapping(fd, writable)
        return super().mmap(fd, length, writable=writable)

    def map_file(self, fd: int, length: int, *, writable: bool):
        """A map holding no descriptor; as `mmap`, its writes are unsynced until an fsync of the file
        (through any descriptor: the memory is the file's, by inode)."""
        self._mapping(fd, writable)
        return super().map_file(fd, length, writable=writable)

    def _mapping(self, fd: int, writable: bool) -> None:
        with self._lock:
            self._alive()
            if writable:
                f = self._tracked(fd)
                self._keep_image(f)
                f.mapped = True

    # -- names -------------------------------------------------------------------------------

    def rename(self, src: str, dst: str) -> None:
        """os.replace, a boundary; durable once the directories are fsynced."""
        with self._lock:
            self._track_dir(os.path.dirname(os.path.abspath(src)))
            self._track_dir(os.path.dirname(os.path.abspath(dst)))
            power_goes = self._boundary("rename", src, dst)
            st = os.lstat(src)
            if stat.S_ISREG(st.st_mode):
                self._file(_key(st), src, st.st_size, st.st_blocks * 512).path = os.path.abspath(dst)
            try:
                replaced = os.lstat(dst)
            except FileNotFoundError:
                replaced = None
            if replaced is not None and stat.S_ISREG(replaced.st_mode):
                # The file the rename replaces comes back if the rename is lost.
                self._keep_image(self._file(_key(replaced), dst, replaced.st_size, replaced.st_blocks * 512))
                self._retire(_key(replaced))
            os.replace(src, dst)
            if power_goes:
                self._power_off()

    def unlink(self, path: str) -> None:
        """os.unlink; the synced content is kept while the unlink is not durable."""
        with self._lock:
            self._alive()
            self._track_dir(os.path.dirname(os.path.abspath(path)))
            st = os.lstat(path)
            f = self._file(_key(st), path, st.st_size, st.st_blocks * 512)
            self._keep_image(f)
            os.unlink(path)
            self._retire(_key(st))
            if st.st_nlink == 1:
                self._shrunk(f, 0)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """os.makedirs; each new directory is empty and unnamed for a crash until its parent is fsynced."""
        with self._lock:
            self._alive()
            path = os.path.abspath(path)
            if os.path.isdir(path):
                if not exist_ok:
                    raise FileExistsError(errnos.EEXIST, "File exists", path)
                return
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                self.makedirs(parent, exist_ok=True)
            self._track_dir(parent)
            os.mkdir(path)
            self._dirs[path] = {}

    def rmtree(self, path: str) -> None:
        """shutil.rmtree, durable at once (a limit of this model)."""
        with self._lock:
            self._alive()
            path = os.path.abspath(path)
            durable = self._dirs.get(os.path.dirname(path))
            if durable is not None:
                durable.pop(os.path.basename(path), None)
            for d in [d for d in self._dirs if d == path or d.startswith(path + os.sep)]:
                del self._dirs[d]
            super().rmtree(path)

    def fsync_dir(self, path: str) -> None:
        """fsync of a directory, a boundary: its entries now are what a crash keeps."""
        with self._lock:
            path = os.path.abspath(path)
            power_goes = self._boundary("fsync_dir", path)
            if self._real_syncs:
                super().fsync_dir(path)
            self._dirs[path] = _entries(path)
            if power_goes:
                self._power_off()

    def memory_backed(self, path: str) -> bool:
        """Never: this is a disk whose unsynced writes a power cut drops, wherever its files are."""
        return False

    def unwritten_bytes(self) -> int | None:
        """What the test set as the machine's unwritten file data (`unwritten`), not the kernel's figure."""
        return self.unwritten

    def syncfs(self, path: str) -> None:
        """syncfs(2), a boundary: every tracked file and directory on `path`'s device is what a crash keeps."""
        with self._lock:
            path = os.path.abspath(path)
            power_goes = self._boundary("syncfs", path)
            if self._real_syncs:
                super().syncfs(path)
            device = os.stat(path).st_dev
            for f in self._files.values():
                if f.key[0] != device or not os.path.lexists(f.path) or _key(os.lstat(f.path)) != f.key:
                    continue   # unlinked (its name's removal is synced below with its directory)
                with open(f.path, "rb") as src:
                    f.synced = os.fstat(src.fileno()).st_size
                    # A mapped file's disk content is what the map holds now (others need no image), kept
                    # without its zero tail: a restore pads the image with zeros to the synced length.
                    f.image = src.read().rstrip(b"\0") if f.mapped else None
            for directory in self._dirs:
                if os.path.isdir(directory) and os.stat(directory).st_dev == device:
                    self._dirs[directory] = _entries(directory)
            if power_goes:
                self._power_off()

    # -- reads (refused once the power is off) ----------------------------------------------

    def pread(self, fd: int, size: int, position: int) -> bytes:
        """os.pread."""
        self._alive()
        try:
            return os.pread(fd, size, position)
        except OSError:
            # The cut may close this descriptor between the check above and the read (another thread
            # reached the crash point): then this thread too waits to be killed, as `_alive` makes it.
            self._alive()
            raise

    def preadinto(self, fd: int, buf: memoryview, position: int) -> int:
        """os.preadv."""
        self._alive()
        try:
            return os.preadv(fd, [buf], position)
        except OSError:
            self._alive()    # as in pread
            raise

    def listdir(self, path: str) -> list[str]:
        """os.listdir."""
        self._alive()
        return os.listdir(path)

    def set_mtime(self, path: str, mtime: float) -> None:
        """os.utime."""
        self._alive()
        super().set_mtime(path, mtime)

    # -- the cut -----------------------------------------------------------------------------

    def crash(self, *, durable_metadata: bool = False) -> None:
        """Leave on disk only what was made durable; the file system is dead from now on."""
        with self._lock:
            self.dead = True
            # The dead store's objects are never used again but may still close their descriptors;
            # closing them here frees the locks and keeps a sweep of many cuts within the fd limit.
            for fd in self._own:
                os.close(fd)
            self._dropped |= self._own
            self._own.clear()
            self._fds.clear()
            if not durable_metadata:
                self._restore_names()
            for f in list(self._files.values()):
                self._restore_content(f)

    def _restore_names(self) -> None:
        wanted = {key for entries in self._dirs.values() for key in entries.values()}
        stash: dict[tuple[int, int], str] = {}
        for directory in sorted(self._dirs, key=lambda d: d.count(os.sep)):
            if not os.path.isdir(directory):
                continue
            durable = self._dirs[directory]
            for name, key in _entries(directory).items():
                if durable.get(name) == key:
                    continue
                path = os.path.join(directory, name)
                if key in wanted:   # renamed here from a durable name: moved back below
                    stash[key] = os.path.join(directory, f"{_STASH}{key[1]}")
                    self._move(key, path, stash[key])
                elif os.path.isdir(path) and not os.path.islink(path):
                    super().rmtree(path)
                else:
                    os.unlink(path)
            for name, key in durable.items():
                path = os.path.join(directory, name)
                if os.path.lexists(path):
                    continue
                source = stash.pop(key, None) or self._current_path(key)
                if source is not None:
                    self._move(key, source, path)
                elif key in self._files:   # unlinked: written back from its synced image
                    f = self._files.pop(key)
                    with open(path, "wb") as out:
                        out.write(f.image or b"")
                        out.truncate(f.synced)
                    f.key, f.path, f.image = _key(os.lstat(path)), path, None
                    self._files[f.key] = f
        for leftover in stash.values():
            if os.path.isdir(leftover):
                super().rmtree(leftover)
            elif os.path.lexists(leftover):
                os.unlink(leftover)

    def _move(self, key: tuple[int, int], src: str, dst: str) -> None:
        os.rename(src, dst)
        if key in self._files:
            self._files[key].path = dst

    def _current_path(self, key: tuple[int, int]) -> str | None:
        f = self._files.get(key)
        if f is not None and os.path.lexists(f.path) and _key(os.lstat(f.path)) == key:
            return f.path
        return None

    def _restore_content(self, f: _File) -> None:
        if not os.path.lexists(f.path) or _key(os.lstat(f.path)) != f.key:
            return
        if f.image is not None:
            # A fresh inode: a map of the old one (a dead store's index) never sees a shorter file.
            tmp = f.path + ".fault-restore"
            with open(tmp, "wb") as out:
                out.write(f.image)
                out.truncate(f.synced)
            os.replace(tmp, f.path)
        elif os.path.getsize(f.path) > f.synced:
            os.truncate(f.path, f.synced)
