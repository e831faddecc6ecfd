"""One task attempt's transactional writes into a log dir no broker holds (see dir_transactions.py).

Rows come in as Arrow columns already sent to their partition; they are kept
(as the caller's arrays, no copy) until `buffer_bytes` have gathered, then the
dir is taken once: the transaction begun (or checked still open), every
buffered partition's rows encoded natively into transactional batches of at
most `BATCH_BYTES` with the producer's sequences, appended, fsynced, and the
dir let go. `prepare` writes what is left and returns the transaction's intent,
which the job's driver commits or aborts; nothing is visible to a
read_committed reader before then.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from logstore.dir_transactions import DEFAULT_TIMEOUT_MS, DirTransactions, TxnIntent, hold_dir
from logstore.formats.kafka_arrow import encode_arrow

if TYPE_CHECKING:
    from logstore.log import Log

BATCH_BYTES = 512 * 1024
"""Target size of one encoded batch (bytes): well under Kafka's default max.message.bytes."""
BUFFER_BYTES = 64 * 1024 * 1024
"""Input bytes gathered before the dir is taken to append them."""


@dataclass(frozen=True)
class JobTask:
    """Who writes: the job, the task and its attempt (Spark's partition id and task attempt id)."""

    job: str
    task: int
    attempt: int
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    query: str | None = None
    batch: int | None = None


class DirTaskWriter:
    """One task attempt's transaction on the log dir at `path`; used by one thread.

    `write` hands over rows of one partition; the arrays must stay unchanged
    until `prepare` (they are read when the dir is next taken).
    """

    def __init__(self, path: str, who: JobTask, *, wait_s: float | None = None, buffer_bytes: int = BUFFER_BYTES):
        self.path = path
        self.who = who
        # The lock is waited for as long as a transaction may stay open.
        self.wait_s = who.timeout_ms / 1000 if wait_s is None else wait_s
        self.buffer_bytes = buffer_bytes
        self.intent: TxnIntent | None = None
        self.skipped = False
        """True once the job turned out decided already (a late attempt, a replayed batch): nothing is written."""
        self.rows_written = 0
        self._sequences: dict[tuple[str, int], int] = {}
        self._pending: dict[tuple[str, int], list[tuple[pa.Array | None, pa.Array, pa.Array | None]]] = \
            defaultdict(list)
        self._pending_bytes = 0

    def write(self, topic: str, partition: int, keys: pa.Array | None, values: pa.Array,
              headers: pa.Array | None = None) -> None:
        """Rows for `topic`-`partition` (keys and values binary or string, headers Spark's Kafka headers type)."""
        if self.skipped or not len(values):
            return
        self._pending[(topic, partition)].append((keys, values, headers))
        self._pending_bytes += sum(a.nbytes for a in (keys, values, headers) if a is not None)
        if self._pending_bytes >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        """Append what is buffered, in one hold of the dir."""
        if not self._pending or self.skipped:
            self._pending.clear()
            return
        who = self.who
        with hold_dir(self.path, self.wait_s) as store:
            journal = DirTransactions(store)
            if self.intent is None:
                self.intent = journal.begin(who.job, who.task, who.attempt, who.timeout_ms,
                                            query=who.query, batch=who.batch)
                if self.intent is None:
                    self.skipped = True
                    self._pending.clear()
                    return
            for topic, partition in self._pending:
                store.log(topic, partition)      # an unknown partition fails before anything is appended
            self.intent = journal.extend(self.intent, list(self._pending))
            now = int(time.time() * 1000)
            for tp, chunks in self._pending.items():
                log = store.log(*tp)
                for keys, values, headers in chunks:
                    self._append(log, tp, keys, values, headers, now)
                log.flush()
        self._pending.clear()
        self._pending_bytes = 0

    def _append(self, log: Log, tp: tuple[str, int], keys: pa.Array | None, values: pa.Array,
                headers: pa.Array | None, now_ms: int) -> None:
        assert self.intent is not None
        n = len(values)
        size = sum(a.nbytes for a in (keys, values, headers) if a is not None)
        step = max(1, min(n, BATCH_BYTES * n // max(size, 1)))
        for start in range(0, n, step):
            stop = min(n, start + step)
            sequence = self._sequences.get(tp, 0)
            batch = encode_arrow(keys, values, headers, start, stop, now_ms,
                                 producer_id=self.intent.producer_id, producer_epoch=self.intent.producer_epoch,
                                 base_sequence=sequence, transactional=True)
            log.append(bytearray(batch))
            self._sequences[tp] = log.format.increment_sequence(sequence, stop - start)
            self.rows_written += stop - start

    def prepare(self) -> TxnIntent | None:
        """Write what is left; the open transaction for the driver to decide on (None: nothing was written)."""
        self.flush()
        return None if self.skipped else self.intent
