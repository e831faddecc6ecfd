"""The leader-epoch cache of a partition (on-disk-format.md §6.1).

Entry (epoch, start_offset): `epoch` is a leader epoch and `start_offset` the
first offset this log holds from that epoch. The cache mirrors Kafka's
LeaderEpochFileCache and persists itself to a `leader-epoch-checkpoint` file.
"""
from __future__ import annotations

from logstore.checkpoints import (
    CorruptCheckpointError,
    StrPath,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from logstore.filesystem import OS, FileSystem

INITIAL_LEADER_EPOCH = 0   # the epoch a store's appends carry (a single node never changes leader)
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start offset) pairs of one partition, backed by its leader-epoch-checkpoint.

    Owns the checkpoint file at `path`; with `persist` every change rewrites it
    atomically, and an unchanged cache never touches it. Invariants: epochs and
    start offsets (log offsets) are ≥ 0 and strictly increasing.
    Not task-safe: the partition's Log serialises every call.
    """

    def __init__(self, path: StrPath, *, persist: bool = True, exists: bool = True, fs: FileSystem = OS):
        """`exists` False: a listing just made has no checkpoint file, so there is nothing to read."""
        self.path = path
        self.persist = persist
        self.fs = fs
        entries = read_leader_epoch_checkpoint(path, fs) if exists else []
        for i, (epoch, offset) in enumerate(entries):
            previous = entries[i - 1] if i else (-1, -1)  # so the first must be >= (0, 0)
            if epoch <= previous[0] or offset <= previous[1]:
                raise CorruptCheckpointError(path, i + 3, f"entry ({epoch}, {offset}): epochs and "
                                             "start offsets must be >= 0 and strictly increasing")
        self._entries = entries

    @property
    def entries(self) -> list[tuple[int, int]]:
        """A copy of the (epoch, start offset) pairs, oldest first."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch, or None while the cache is empty."""
        return self._entries[-1][0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`, dropping entries that contradict it."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._entries and self._entries[-1][0] == epoch and start_offset >= self._entries[-1][1]:
            return  # batches later in the current epoch
        kept = [(e, o) for e, o in self._entries if e < epoch and o < start_offset]
        self._replace(kept + [(epoch, start_offset)])

    def truncate_from_end(self, end_offset: int, *, lead: int | None = None) -> None:
        """Forget epochs starting at or after `end_offset`, the new log end offset.

        With `lead`, a cache left empty then holds that epoch from `end_offset`, as Kafka's leader assigns
        its epoch on taking the partition after its loader truncated (`makeLeader`): one write at most, none
        when that is what the file already holds (a new partition's `0 0`, which its creation wrote)."""
        if end_offset < 0:
            raise ValueError(f"invalid end offset {end_offset}")
        entries = [(e, o) for e, o in self._entries if o < end_offset]
        if lead is not None and not entries:
            entries = [(lead, end_offset)]
        self._replace(entries)

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget offsets below `start_offset`, the new log start offset."""
        if start_offset < 0:
            raise ValueError(f"invalid start offset {start_offset}")
        removed = [(e, o) for e, o in self._entries if o <= start_offset]
        if not removed:
            return
        # The epoch in force at the new start keeps covering it, so a lookup of
        # that epoch still finds where the remaining log begins.
        kept = self._entries[len(removed):]
        self._replace([(removed[-1][0], start_offset)] + kept)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor: (largest epoch ≤ `epoch`, the offset where it ended)."""
        if epoch < 0 or not self._entries or epoch > self._entries[-1][0]:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._entries[-1][0]:
            return epoch, log_end_offset  # the epoch still being written
        higher = next(i for i, (e, _) in enumerate(self._entries) if e > epoch)
        if higher == 0:
            # History below the first entry was deleted; Kafka answers with the
            # requested epoch and the first start offset so a follower
            # truncates to where this log begins.
            return epoch, self._entries[0][1]
        return self._entries[higher - 1][0], self._entries[higher][1]

    def clear(self) -> None:
        """Forget every entry."""
        self._replace([])

    def _replace(self, entries: list[tuple[int, int]]) -> None:
        """Install `entries`, writing the checkpoint only if they differ."""
        if entries == self._entries:
            return
        if self.persist:
            write_leader_epoch_checkpoint(self.path, entries, self.fs)
        self._entries = entries
