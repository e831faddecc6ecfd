"""Producer ids that are never handed out twice, across restarts too.

Kafka's controller gives brokers blocks of 1000 ids; here the block's end is
written (atomically, fsynced) before any id of the block is handed out, so a
restart continues after the last block ever started. A directory Kafka wrote
has no such file: the node raises the floor above every id found there first.

The broker's node and the storage library's own transactions
(`logstore.dir_transactions`, Spark's writes into a log dir no broker holds)
share this one id space: whoever holds the dir's lock allocates from it.
"""
from __future__ import annotations

import os
import threading

from logstore.checkpoints import write_atomically
from logstore.filesystem import OS, FileSystem

BLOCK_SIZE = 1000
FILE_NAME = "logstore-producer-id-block"


class ProducerIdAllocator:
    """Hands out increasing producer ids, persisted by blocks in one file of the log dir."""

    def __init__(self, log_dir: str, fs: FileSystem = OS, *, block_size: int = BLOCK_SIZE):
        self.path = os.path.join(log_dir, FILE_NAME)
        self.fs = fs
        # A short-lived holder of the dir (one Spark task) asks for a block of 1: the next holder goes on from there.
        self.block_size = block_size
        self._lock = threading.Lock()
        try:
            self._next = int(self.fs.read_file(self.path).decode("ascii").strip() or 0)
        except FileNotFoundError:
            self._next = 0
            self.persisted = False
        else:
            self.persisted = True
        self._block_end = self._next

    def reserve_through(self, producer_id: int) -> None:
        """Never hand out `producer_id` or any id below it (ids already in the directory); persisted at once."""
        with self._lock:
            if producer_id >= self._next or not self.persisted:
                self._next = max(self._next, producer_id + 1)
                write_atomically(self.path, f"{self._next}\n".encode("ascii"), fs=self.fs)
                self._block_end = self._next
                self.persisted = True

    def allocate(self) -> int:
        """A producer id no one has had."""
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + self.block_size
                write_atomically(self.path, f"{end}\n".encode("ascii"), fs=self.fs)
                self._block_end = end
            pid = self._next
            self._next += 1
            return pid
