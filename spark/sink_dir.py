"""The sink's targets: what a task and the driver do to make a job's rows appear all at once or not at all.

A target is one small interface (`SinkTarget`), so that a second one (a
running broker through KIP-939's two-phase commit) plugs in beside the log
dir's: on the driver, `prepare_job` (check, clean up what dead jobs left);
in each task, `begin` a transaction, `write` Arrow columns of one partition,
`prepare` → the commit message; on the driver again, `commit` or `abort` the
job with every task's message. `DirTarget` is the log dir's, over the storage
library's `dir_transactions`.
"""
from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from logstore.dir_transactions import DirTransactions, hold_dir
from logstore.dir_writer import BUFFER_BYTES, DirTaskWriter, JobTask
from logstore.spark.options import OptionError

if TYPE_CHECKING:
    from logstore.manager import LogManager


@dataclass(frozen=True)
class JobRef:
    """A write job: a batch write's own id, or a streaming query's micro-batch."""

    job: str
    query: str | None = None
    batch: int | None = None


@dataclass(frozen=True)
class LogstoreCommitMessage(WriterCommitMessage):
    """What a task tells the driver: its job and its open transaction (producer_id None: it wrote nothing)."""

    job: JobRef
    producer_id: int | None
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]
    rows: int


class TargetTask(Protocol):
    """One task attempt's transaction in a target."""

    def write(self, topic: str, partition: int, keys: pa.Array | None, values: pa.Array,
              headers: pa.Array | None) -> None:
        """Rows of one partition (Arrow columns)."""

    def prepare(self) -> LogstoreCommitMessage:
        """Everything written, the transaction left open for the driver."""


class SinkTarget(Protocol):
    """Where a job's rows go: a log dir here; a broker is the other kind."""

    def prepare_job(self) -> dict[str, int]:
        """On the driver before the job: clean up dead jobs' leftovers; the partition count of every topic."""

    def begin(self, job: JobRef, task: int, attempt: int) -> TargetTask:
        """A task attempt's transaction."""

    def commit(self, job: JobRef, messages: list[LogstoreCommitMessage]) -> None:
        """Make the job's rows of `messages` visible at once, and nothing else of the job."""

    def abort(self, job: JobRef, messages: list[LogstoreCommitMessage]) -> None:
        """Leave nothing of the job visible."""


class DirTarget:
    """A log dir no broker holds: tasks append through the storage library, the driver writes the markers."""

    def __init__(self, path: str, timeout_ms: int, buffer_bytes: int = BUFFER_BYTES):
        self.path = path
        self.timeout_ms = timeout_ms
        self.buffer_bytes = buffer_bytes

    def _hold(self) -> AbstractContextManager[LogManager]:
        return hold_dir(self.path, self.timeout_ms / 1000)

    def prepare_job(self) -> dict[str, int]:
        """Leftovers of dead jobs finished; the topics' partition counts."""
        if not os.path.isdir(self.path):
            raise OptionError(f"log dir {self.path} does not exist (the sink writes into existing topics)")
        with self._hold() as store:
            DirTransactions(store).recover()
            return store.topics()

    def begin(self, job: JobRef, task: int, attempt: int) -> DirTask:
        """A task attempt's transaction (begun in the dir with its first rows)."""
        who = JobTask(job.job, task, attempt, self.timeout_ms, query=job.query, batch=job.batch)
        return DirTask(job, DirTaskWriter(self.path, who, buffer_bytes=self.buffer_bytes))

    def commit(self, job: JobRef, messages: list[LogstoreCommitMessage]) -> None:
        """COMMIT markers for the messages' transactions, ABORT for every other of the job."""
        producers = [m.producer_id for m in messages if m.producer_id is not None]
        with self._hold() as store:
            DirTransactions(store).commit(job.job, producers, query=job.query, batch=job.batch)

    def abort(self, job: JobRef, messages: list[LogstoreCommitMessage]) -> None:
        """ABORT markers for every transaction of the job."""
        with self._hold() as store:
            DirTransactions(store).abort(job.job)


class DirTask:
    """A task attempt's transaction in a log dir."""

    def __init__(self, job: JobRef, writer: DirTaskWriter):
        self.job = job
        self.writer = writer

    def write(self, topic: str, partition: int, keys: pa.Array | None, values: pa.Array,
              headers: pa.Array | None) -> None:
        """Rows of one partition, appended when enough have gathered."""
        self.writer.write(topic, partition, keys, values, headers)

    def prepare(self) -> LogstoreCommitMessage:
        """What is left appended; the open transaction as the commit message."""
        intent = self.writer.prepare()
        if intent is None:
            return LogstoreCommitMessage(self.job, None, -1, (), 0)
        return LogstoreCommitMessage(self.job, intent.producer_id, intent.producer_epoch, intent.partitions,
                                     self.writer.rows_written)
