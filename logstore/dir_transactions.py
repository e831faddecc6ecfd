"""Transactions that several processes run in turn on one log dir no broker holds: Spark's writes, exactly once.

A log dir is held by one process at a time (dir_lock.py), so a writer with
many processes (Spark's tasks, its driver) takes the dir in turn (`hold_dir`:
open, work, fsync, close; a bounded wait while another holds it). There is
no coordinator: the dir's own journal, one file `<log dir>/logstore-transactions.json`,
makes every open transaction findable whatever dies when, and records what
was decided about it. It is a plain file beside Kafka's checkpoints because
Kafka refuses to start on a log dir holding a directory that is not a
topic-partition (and ignores files it does not know). It holds, rewritten
whole and atomically by each change:

    jobs.<job>.intents     each task attempt's open transaction (an intent)
    jobs.<job>.decision    commit: the producer ids that commit (all others of the job abort)
    queries.<query>        a streaming query's last committed batch id

1. A task attempt `begin`s: a fresh producer id from the dir's allocator
   (producer_ids.py, the broker's id space), epoch 0, and its intent written
   and fsynced before its first append. Its batches are transactional and
   left open (no marker): read_committed readers stop at the first of them.
   Each later hold checks the intent is still there (`extend`) before it
   appends again, and adds the partitions it is about to touch.
2. The job's driver `commit`s the producers of the tasks that succeeded: the
   decision is written first, then COMMIT markers for them and ABORT markers
   for every other intent of the job (failed attempts, speculative losers),
   the logs fsynced, and the intents removed last. A crash anywhere redoes
   the same decision on the next hold (`recover`): a marker is written only
   where the producer's transaction is still open, so redoing is harmless.
3. `abort` writes ABORT markers for every intent of the job and removes it.
4. `recover` (every driver hold; the broker at start and on every abort sweep) finishes
   decided jobs and aborts the intents of undecided ones whose
   `transaction.timeout.ms` passed: a job whose driver died leaves nothing open
   longer than its timeout after the next writer comes. A commit that comes
   after its job was aborted that way fails (INVALID_TXN_STATE) and commits nothing.

A streaming micro-batch is a job named after its query and batch id; its
commit also records the batch id under `queries`, so a batch replayed after a
driver restart commits nothing (its new transactions are aborted), and a task
of it writes nothing. A batch job's commit decision is kept an hour after it
is finished, so a task attempt that starts late writes nothing; after that
such an attempt's intent simply times out.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, field

from logstore.checkpoints import write_atomically
from logstore.errors import InvalidTxnStateError, LogDirLockedError, UnknownTopicOrPartitionError
from logstore.manager import LogManager
from logstore.producer_ids import ProducerIdAllocator

JOURNAL_FILE = "logstore-transactions.json"
DEFAULT_TIMEOUT_MS = 60_000
KEEP_DECIDED_MS = 3_600_000
"""How long a finished commit decision stays (ms): late task attempts of the job then write nothing."""
_VERSION = 2


class TransactionTimedOutError(InvalidTxnStateError):
    """A job's transactions were aborted (their timeout passed, or an abort ran) before its commit."""


class LogDirBusyError(LogDirLockedError):
    """The log dir stayed held by another process (a broker?) for longer than the writer would wait."""


@dataclass(frozen=True)
class TxnIntent:
    """One task attempt's open transaction, as its journal file holds it. Times in ms since the epoch."""

    job: str
    task: int
    attempt: int
    producer_id: int
    producer_epoch: int
    start_ms: int
    timeout_ms: int
    partitions: tuple[tuple[str, int], ...] = ()
    query: str | None = None
    batch: int | None = None

    def expired(self, now_ms: int) -> bool:
        """Whether its transaction.timeout.ms has passed."""
        return now_ms >= self.start_ms + self.timeout_ms


@dataclass(frozen=True)
class Decision:
    """What a job's driver decided: the producer ids whose transactions commit (all others of the job abort)."""

    producers: tuple[int, ...]
    time_ms: int
    query: str | None = None
    batch: int | None = None


@dataclass
class _Job:
    """A job's entry in the journal."""

    intents: list[TxnIntent] = field(default_factory=list)
    decision: Decision | None = None


@dataclass
class Recovered:
    """What one `recover` pass finished: transactions committed and aborted, jobs whose decision was pruned."""

    committed: int = 0
    aborted: int = 0
    pruned: int = 0
    jobs: list[str] = field(default_factory=list)


@contextlib.contextmanager
def hold_dir(path: str, wait_s: float) -> Iterator[LogManager]:
    """The store of `path`, held until the block ends (then closed cleanly); waits up to `wait_s` for the lock."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"log dir {path} does not exist")
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        try:
            store = LogManager(path, start_scheduler=False)
            break
        except LogDirLockedError as exc:
            if time.monotonic() + pause > deadline:
                raise LogDirBusyError(f"{exc} (waited {wait_s:g} s)") from None
            # Tasks of one job take the dir in turn; the jitter keeps them from waking together.
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.2)
    try:
        yield store
    finally:
        store.close()


class DirTransactions:
    """The transaction journal of one store's (first) log dir; every call needs the store held by this process.

    Not thread-safe: one hold, one caller. Markers carry coordinator epoch 0.
    """

    def __init__(self, store: LogManager):
        self.store = store
        self.fs = store.fs
        self.path = os.path.join(store.log_dirs[0], JOURNAL_FILE)
        # The hold is exclusive, so what this process last read or wrote is what the file holds.
        self._jobs, self._queries = self._read()

    # -- the task's side ---------------------------------------------------------------------

    def begin(self, job: str, task: int, attempt: int, timeout_ms: int = DEFAULT_TIMEOUT_MS, *,
              query: str | None = None, batch: int | None = None) -> TxnIntent | None:
        """A new transaction for one task attempt, its intent durable; None when the job is already decided
        (a late attempt, a replayed streaming batch): then the attempt writes nothing."""
        if self._decision(job) is not None or (query is not None and batch is not None
                                               and batch <= self.committed_batch(query)):
            return None
        ids = ProducerIdAllocator(self.store.log_dirs[0], self.fs, block_size=1)
        # Above every id the dir holds, as the broker's node makes sure on its start.
        ids.reserve_through(self.store.max_producer_id(scan_segments=not ids.persisted))
        intent = TxnIntent(job, task, attempt, ids.allocate(), 0, _now_ms(), timeout_ms, query=query, batch=batch)
        self._job(job).intents.append(intent)
        self._write()
        return intent

    def extend(self, intent: TxnIntent, partitions: Collection[tuple[str, int]]) -> TxnIntent:
        """Before appending again: the transaction must still be open; `partitions` join its intent."""
        intents = self._jobs[intent.job].intents if intent.job in self._jobs else []
        current = next((i for i in intents if i.producer_id == intent.producer_id), None)
        if self._decision(intent.job) is not None or current is None:
            raise TransactionTimedOutError(
                f"the transaction of task {intent.task} (attempt {intent.attempt}) of job {intent.job} was "
                f"aborted before it finished writing: transaction.timeout.ms={intent.timeout_ms} passed")
        wanted = tuple(sorted(set(current.partitions) | set(partitions)))
        if wanted != current.partitions:
            current = TxnIntent(**{**asdict(current), "partitions": wanted})
            intents[:] = [current if i.producer_id == current.producer_id else i for i in intents]
            self._write()
        return current

    # -- the driver's side -------------------------------------------------------------------

    def commit(self, job: str, producers: Collection[int], *, query: str | None = None,
               batch: int | None = None) -> int:
        """Commit the job's transactions of `producers` and abort its others; the number committed.

        A streaming batch already committed commits nothing again; a job any of whose
        `producers` was aborted meanwhile raises TransactionTimedOutError (nothing of it commits).
        """
        self.recover()
        decided = self._decision(job)
        if decided is None:
            intents = self.intents(job)
            if query is not None and batch is not None and batch <= self.committed_batch(query):
                self._finish(job, None)
                return 0
            missing = set(producers) - {i.producer_id for i in intents}
            if missing:
                self._finish(job, None)
                raise TransactionTimedOutError(
                    f"job {job} cannot commit: the transactions of producers {sorted(missing)} were aborted "
                    "(transaction.timeout.ms passed before the commit)")
            decided = self.decide(job, producers, query=query, batch=batch)
        return self._finish(job, decided)

    def decide(self, job: str, producers: Collection[int], *, query: str | None = None,
               batch: int | None = None) -> Decision:
        """Record, durably, that the job's `producers` commit: from here on it commits, whoever finishes it."""
        decided = Decision(tuple(sorted(producers)), _now_ms(), query, batch)
        self._job(job).decision = decided
        self._write()
        return decided

    def abort(self, job: str) -> int:
        """Abort every transaction of the job (a job already decided to commit is finished as committed instead)."""
        return self._finish(job, self._decision(job))

    def recover(self, now_ms: int | None = None) -> Recovered:
        """Finish every decided job, abort undecided ones with an expired transaction, prune old decisions."""
        now = _now_ms() if now_ms is None else now_ms
        found = Recovered()
        for job in self.jobs():
            decided = self._decision(job)
            intents = self.intents(job)
            if decided is not None and intents:
                found.committed += self._finish(job, decided)
                found.aborted += sum(1 for i in intents if i.producer_id not in decided.producers)
            elif decided is None and any(i.expired(now) for i in intents):
                found.aborted += len(intents)
                self._finish(job, None)
            elif decided is not None and now >= decided.time_ms + KEEP_DECIDED_MS:
                self._jobs.pop(job)
                self._write()
                found.pruned += 1
                continue
            else:
                continue
            found.jobs.append(job)
        return found

    def jobs(self) -> list[str]:
        """The jobs the journal holds."""
        return sorted(self._jobs)

    def intents(self, job: str) -> list[TxnIntent]:
        """The open transactions the journal holds for `job`."""
        return list(self._jobs[job].intents) if job in self._jobs else []

    def committed_batch(self, query: str) -> int:
        """The last batch id committed for a streaming query, -1 for none."""
        return self._queries.get(query, -1)

    # -- mechanics ---------------------------------------------------------------------------

    def _finish(self, job: str, decided: Decision | None) -> int:
        """Markers for every intent (COMMIT for the decided producers), fsync, then the intents removed."""
        intents = self.intents(job)
        committed, touched = 0, {}
        for intent in intents:
            commit = decided is not None and intent.producer_id in decided.producers
            committed += commit
            for topic, partition in intent.partitions:
                try:
                    log = self.store.log(topic, partition)
                except UnknownTopicOrPartitionError:
                    continue        # the topic was deleted meanwhile: nothing of it is left to end
                if intent.producer_id in log.producers.ongoing_transactions:
                    log.write_txn_marker(intent.producer_id, intent.producer_epoch, 0, commit=commit)
                    touched[(topic, partition)] = log
        for log in touched.values():
            log.flush()
        if decided is not None and decided.query is not None and decided.batch is not None:
            self._queries[decided.query] = max(decided.batch, self.committed_batch(decided.query))
        if decided is None or decided.query is not None:
            # A streaming batch's record is its query's last batch id: its decision need not stay.
            self._jobs.pop(job, None)
        else:
            self._job(job).intents = []
        self._write()
        return committed

    def _decision(self, job: str) -> Decision | None:
        return self._jobs[job].decision if job in self._jobs else None

    def _job(self, job: str) -> _Job:
        return self._jobs.setdefault(job, _Job())

    def _read(self) -> tuple[dict[str, _Job], dict[str, int]]:
        try:
            raw = json.loads(self.fs.read_file(self.path))
        except FileNotFoundError:
            return {}, {}
        jobs = {}
        for job, entry in raw["jobs"].items():
            intents = [TxnIntent(**{**i, "partitions": tuple((t, p) for t, p in i["partitions"])})
                       for i in entry["intents"]]
            decision = entry["decision"]
            jobs[job] = _Job(intents, None if decision is None else
                             Decision(**{**decision, "producers": tuple(decision["producers"])}))
        return jobs, {q: int(b) for q, b in raw["queries"].items()}

    def _write(self) -> None:
        jobs = {job: {"intents": [asdict(i) for i in entry.intents],
                      "decision": None if entry.decision is None else asdict(entry.decision)}
                for job, entry in self._jobs.items() if entry.intents or entry.decision is not None}
        document = {"version": _VERSION, "jobs": jobs, "queries": self._queries}
        write_atomically(self.path, json.dumps(document, indent=1).encode(), fs=self.fs)


def recover_dir_transactions(store: LogManager) -> Recovered:
    """Finish what the dir's journal holds (decided jobs, expired transactions): for an opener of the dir such
    as the broker's start, so that no transaction of a dead writer stays open past its timeout."""
    return DirTransactions(store).recover()


def _now_ms() -> int:
    return int(time.time() * 1000)
