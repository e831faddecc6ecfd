"""The sink's broker target: a job's rows through a running broker, exactly once, by KIP-939 two-phase commit.

Each task attempt is one 2PC transaction of the transactional id
`<prefix>-<job>-<task>-<attempt>`: it writes its rows (Produce v12, acks=all)
and leaves the transaction prepared; the broker never times it out. The
driver's commit first records its decision durably on the broker, as a
record keyed by the job in the compacted topic `__logstore_sink_jobs`
(created on first use, written acks=all), and only then completes every
task's transaction from its own producer instance (InitProducerId
keepPreparedTxn, checked against the producer id and epoch the task
prepared, then EndTxn commit) and aborts every other transaction of the job
(attempts that failed or lost, found by ListTransactions). A driver killed
after its decision is finished by the next job of the prefix
(`prepare_job`); one killed before it leaves prepared transactions, which
the next job aborts once they are older than `transaction.timeout.ms` (2PC
transactions never time out on the broker: this is the sink's own cleanup;
`logstore transactions list` shows them, `logstore transactions
force-terminate --transactional-id ID` ends one at once).

A streaming micro-batch is the job `<query>-<batch>`; its decision record is
keyed by the query, so the record names the query's last committed batch: a
batch replayed after a driver restart writes nothing and commits nothing.
"""
from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from kio.schema.create_topics.v5.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_transactions.v2.request import ListTransactionsRequest
from kio.schema.produce.v12.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from logstore.broker.admin_client import AdminClient, AuthenticationError, BrokerUnavailableError, error_name
from logstore.broker.admin_queries import EARLIEST, LATEST, describe_topics, list_offsets
from logstore.broker.client_security import ClientSecurity, client_security
from logstore.broker.txn_wire_producer import (
    PreparedTxnState,
    TxnProducerError,
    TxnWireProducer,
    abort_transaction,
)
from logstore.dir_writer import BATCH_BYTES
from logstore.formats import DEFAULT_FORMAT
from logstore.formats.kafka_arrow import encode_arrow
from logstore.spark.options import OptionError
from logstore.spark.sink_dir import JobRef, LogstoreCommitMessage

JOBS_TOPIC = "__logstore_sink_jobs"
REQUEST_BYTES = 4 * BATCH_BYTES
"""A task's input gathered into one Produce request (bytes): a full batch for each of 4 partitions. Fewer,
larger requests cost the broker less CPU per row; a request stays well under socket.request.max.bytes."""
REQUEST_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
COMMITTING, COMMITTED = "committing", "committed"


@dataclass(frozen=True)
class BrokerCommitMessage(LogstoreCommitMessage):
    """A task's message with the transactional id its transaction is open under."""

    transactional_id: str = ""


@dataclass(frozen=True)
class Decision:
    """A job's commit decision as recorded in JOBS_TOPIC: the transactions to commit, and how far it got."""

    prefix: str
    job: str
    state: str
    transactions: tuple[PreparedTxnState, ...]
    query: str | None = None
    batch: int | None = None

    def key(self) -> bytes:
        """One key per batch job, one per streaming query (whose last batch is what matters)."""
        return f"{self.prefix}/{'query/' + self.query if self.query else 'job/' + self.job}".encode()

    def value(self) -> bytes:
        """The record's value, JSON."""
        return json.dumps({"prefix": self.prefix, "job": self.job, "state": self.state, "query": self.query,
                           "batch": self.batch, "transactions": [
                               [t.transactional_id, t.producer_id, t.producer_epoch] for t in self.transactions]
                           }).encode()

    @staticmethod
    def parse(value: bytes) -> Decision:
        """A record's value back."""
        found = json.loads(value)
        return Decision(found["prefix"], found["job"], found["state"],
                        tuple(PreparedTxnState(t, p, e) for t, p, e in found["transactions"]),
                        found["query"], found["batch"])


class BrokerTarget:
    """A running broker with `transaction.two.phase.commit.enable=true`; pickled to the tasks."""

    def __init__(self, bootstrap: str, prefix: str, timeout_ms: int, buffer_bytes: int = REQUEST_BYTES,
                 security: Mapping[str, str] | None = None):
        self.bootstrap = bootstrap
        self.properties = dict(security or {})
        """Kafka's client properties for a secured listener (plain strings: the target is pickled)."""
        self.prefix = prefix
        self.timeout_ms = timeout_ms
        self.buffer_bytes = buffer_bytes
        """A task's input gathered before it sends a request (`write.buffer.bytes`, at most REQUEST_BYTES)."""
        self.streams: dict[str, int] = {}
        """Each streaming query of the prefix: its last committed batch (as prepare_job found it)."""

    def security(self) -> ClientSecurity:
        """How to reach the broker: its TLS context and SASL login, made in the process that connects."""
        return client_security(self.properties, "kafka. options")

    def _client(self) -> AdminClient:
        return AdminClient(self.bootstrap, client_id="logstore-sink", security=self.security())

    def prepare_job(self) -> dict[str, int]:
        """Decided jobs finished, undecided ones older than the timeout aborted; every topic's partitions."""
        try:
            with self._client() as client:
                # The driver's own id, holding no transaction: a broker without 2PC (or an ACL) refuses it here,
                # in one line naming the setting, before any task starts.
                with TxnWireProducer(self.bootstrap, client=client) as probe:
                    probe.init(f"{self.prefix}-driver", self.timeout_ms, enable_2pc=True, keep_prepared=True)
                _ensure_jobs_topic(client)
                decisions = [d for d in read_decisions(client).values() if d.prefix == self.prefix]
                for decision in decisions:
                    if decision.state == COMMITTING:
                        self._finish(client, decision, resuming=True)
                self.streams = {d.query: d.batch for d in decisions if d.query and d.batch is not None}
                for transactional_id in _open_transactions(client, re.escape(f"{self.prefix}-") + r".+-\d+-\d+",
                                                           older_than_ms=self.timeout_ms):
                    abort_transaction(client, transactional_id, self.timeout_ms)
                return {name: len(info.partitions) for name, info in describe_topics(client).items()
                        if not isinstance(info, ErrorCode)}
        except (BrokerUnavailableError, AuthenticationError) as exc:
            raise OptionError(f"kafka.bootstrap.servers: {exc}") from None
        except TxnProducerError as exc:
            raise OptionError(str(exc)) from None

    def begin(self, job: JobRef, task: int, attempt: int) -> BrokerTask:
        """A task attempt's transaction, opened with its first rows (nothing for a batch committed before)."""
        done = job.query is not None and job.batch is not None and job.batch <= self.streams.get(job.query, -1)
        return BrokerTask(self, job, f"{self.prefix}-{job.job}-{task}-{attempt}", skip=done)

    def commit(self, job: JobRef, messages: list[LogstoreCommitMessage]) -> None:
        """Record the decision, then commit the messages' transactions and abort the job's others."""
        if job.query is not None and job.batch is not None and job.batch <= self.streams.get(job.query, -1):
            return   # a replayed micro-batch: it was committed before the restart, and wrote nothing now
        prepared = tuple(PreparedTxnState(m.transactional_id, m.producer_id, m.producer_epoch)
                         for m in messages if isinstance(m, BrokerCommitMessage) and m.producer_id is not None)
        decision = Decision(self.prefix, job.job, COMMITTING, prepared, job.query, job.batch)
        with self._client() as client:
            write_decision(client, decision)
            self._finish(client, decision, resuming=False)
        if job.query is not None and job.batch is not None:
            self.streams[job.query] = job.batch

    def abort(self, job: JobRef, messages: list[LogstoreCommitMessage]) -> None:
        """Every transaction of the job aborted (those the messages name, and any other still open)."""
        with self._client() as client:
            named = {m.transactional_id for m in messages if isinstance(m, BrokerCommitMessage) and m.producer_id
                     is not None}
            for transactional_id in sorted(named | set(self._job_transactions(client, job.job))):
                abort_transaction(client, transactional_id, self.timeout_ms)

    def _job_transactions(self, client: AdminClient, job: str) -> list[str]:
        return _open_transactions(client, re.escape(f"{self.prefix}-{job}-") + r"\d+-\d+")

    def _finish(self, client: AdminClient, decision: Decision, resuming: bool) -> None:
        """Commit the decision's transactions, abort the job's others, record that it is done."""
        for prepared in decision.transactions:
            with TxnWireProducer(self.bootstrap, client=client) as producer:
                try:
                    # Resuming, an earlier driver's keep may have bumped the epoch: the same transaction still,
                    # since each id is one task attempt's (Spark's task attempt ids are never reused within an
                    # application, and a decided job starts no task again).
                    producer.complete_transaction(prepared, True, self.timeout_ms, kept_since=resuming)
                except TxnProducerError as exc:
                    # A run killed after some EndTxn left those transactions done: nothing is open under them
                    # (a decided job's ids begin nothing new: its tasks are over, a replayed batch skips).
                    if not (resuming and exc.error == "NOT_PREPARED" and producer.ongoing[0] < 0):
                        raise
        committed = {t.transactional_id for t in decision.transactions}
        for transactional_id in self._job_transactions(client, decision.job):
            if transactional_id not in committed:
                abort_transaction(client, transactional_id, self.timeout_ms)
        write_decision(client, Decision(decision.prefix, decision.job, COMMITTED, (), decision.query,
                                        decision.batch), tombstone=decision.query is None)


class BrokerTask:
    """A task attempt's 2PC transaction: begun with its first rows, prepared at the end.

    Rows are kept (the caller's arrays, no copy) until `request_bytes` have
    gathered; then one Produce request carries a batch of up to BATCH_BYTES
    from every partition with rows, and the task goes on reading its input
    while the broker appends (up to MAX_IN_FLIGHT requests unanswered). A
    partition's rows gathered from several input batches are joined (one
    copy) to make one batch of them.
    """

    def __init__(self, target: BrokerTarget, job: JobRef, transactional_id: str, skip: bool):
        self.target = target
        self.job = job
        self.transactional_id = transactional_id
        self.skip = skip
        self.producer: TxnWireProducer | None = None
        self.partitions: set[tuple[str, int]] = set()
        self.request_bytes = min(target.buffer_bytes, REQUEST_BYTES)
        self._pending: dict[tuple[str, int], tuple[list[_Rows], int]] = {}
        """Each partition's rows not sent yet, and their bytes."""
        self._pending_bytes = 0

    def write(self, topic: str, partition: int, keys: pa.Array | None, values: pa.Array,
              headers: pa.Array | None) -> None:
        """Rows of one partition, sent once enough have gathered."""
        if self.skip or not len(values):
            return
        if self.producer is None:
            self.producer = TxnWireProducer(self.target.bootstrap, client_id="logstore-sink-task",
                                            security=self.target.security())
            # A transaction left open under this id (the same batch before a driver restart) is aborted here.
            self.producer.init(self.transactional_id, self.target.timeout_ms, enable_2pc=True)
        self.partitions.add((topic, partition))
        size = sum(a.nbytes for a in (keys, values, headers) if a is not None)
        chunks, pending = self._pending.get((topic, partition), ([], 0))
        chunks.append(_Rows(keys, values, headers))
        self._pending[(topic, partition)] = (chunks, pending + size)
        self._pending_bytes += size
        while self._pending and self._pending_bytes >= self.request_bytes:
            self._send()

    def _send(self) -> None:
        """One Produce request: a batch of up to BATCH_BYTES of every partition with rows."""
        producer = self.producer
        assert producer is not None   # rows are pending only once it exists
        now = int(time.time() * 1000)
        batches = []
        for (topic, partition), (chunks, size) in list(self._pending.items()):
            rows = chunks[0] if len(chunks) == 1 else _Rows.join(chunks)
            n = len(rows.values)
            stop = max(1, min(n, BATCH_BYTES * n // max(size, 1)))
            batches.append((topic, partition, encode_arrow(
                rows.keys, rows.values, rows.headers, 0, stop, now, producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch, base_sequence=producer.sequence(topic, partition),
                transactional=True)))
            if stop < n:
                # The rest's bytes in proportion: only the trigger of the next request rests on them.
                rest = size * (n - stop) // n
                self._pending[(topic, partition)] = ([rows.slice(stop)], rest)
                self._pending_bytes -= size - rest
            else:
                del self._pending[(topic, partition)]
                self._pending_bytes -= size
        producer.produce(batches)

    def prepare(self) -> BrokerCommitMessage:
        """Everything sent and acknowledged; the prepared transaction as the commit message."""
        if self.producer is None:
            return BrokerCommitMessage(self.job, None, -1, (), 0, self.transactional_id)
        while self._pending:
            self._send()
        with self.producer as producer:
            state = producer.prepare_transaction()
            return BrokerCommitMessage(self.job, state.producer_id, state.producer_epoch,
                                       tuple(sorted(self.partitions)), producer.records, state.transactional_id)


@dataclass(frozen=True)
class _Rows:
    """Rows of one partition as Arrow columns (keys and headers None when the input has none)."""

    keys: pa.Array | None
    values: pa.Array
    headers: pa.Array | None

    def slice(self, start: int) -> _Rows:
        """The rows from `start` on (no copy)."""
        return _Rows(None if self.keys is None else self.keys.slice(start), self.values.slice(start),
                     None if self.headers is None else self.headers.slice(start))

    @staticmethod
    def join(chunks: list[_Rows]) -> _Rows:
        """The chunks' rows in one set of arrays (copied)."""
        keys = [c.keys for c in chunks if c.keys is not None]
        headers = [c.headers for c in chunks if c.headers is not None]
        return _Rows(pa.concat_arrays(keys) if keys else None, pa.concat_arrays([c.values for c in chunks]),
                     pa.concat_arrays(headers) if headers else None)


def _ensure_jobs_topic(client: AdminClient) -> None:
    topic = CreatableTopic(name=TopicName(JOBS_TOPIC), num_partitions=i32(1), replication_factor=i16(-1),
                           assignments=(), configs=(CreatableTopicConfig(name="cleanup.policy", value="compact"),))
    answer = client.request(CreateTopicsRequest(topics=(topic,), timeout=REQUEST_TIMEOUT, validate_only=False))
    (result,) = answer.topics
    if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
        raise OptionError(f"cannot create the sink's topic {JOBS_TOPIC}: {error_name(result.error_code)}"
                          f"{': ' + result.error_message if result.error_message else ''}")


def write_decision(client: AdminClient, decision: Decision, tombstone: bool = False) -> None:
    """One record in JOBS_TOPIC, acks=all (a plain produce: writing it twice changes nothing)."""
    batch = DEFAULT_FORMAT.encode_batch([decision.key()], [None if tombstone else decision.value()])
    request = ProduceRequest(transactional_id=None, acks=i16(-1), timeout=REQUEST_TIMEOUT, topic_data=(
        TopicProduceData(name=TopicName(JOBS_TOPIC), partition_data=(PartitionProduceData(index=i32(0),
                                                                                          records=Records(batch)),)),))
    (row,) = client.request(request).responses[0].partition_responses
    if row.error_code != ErrorCode.none:
        raise TxnProducerError(f"recording job {decision.job} in {JOBS_TOPIC}: {error_name(row.error_code)}")


def read_decisions(client: AdminClient) -> dict[bytes, Decision]:
    """Every job's last record in JOBS_TOPIC (keys whose last record is a tombstone left out)."""
    tp = (JOBS_TOPIC, 0)
    start, end = list_offsets(client, [tp], EARLIEST)[tp], list_offsets(client, [tp], LATEST)[tp]
    for bound in (start, end):
        if isinstance(bound, ErrorCode):
            raise TxnProducerError(f"cannot read {JOBS_TOPIC}: {error_name(bound)}")
    found: dict[bytes, Decision | None] = {}
    offset = start
    while offset < end:
        answer = client.request(FetchRequest(max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1),
                                             topics=(FetchTopic(topic=TopicName(JOBS_TOPIC), partitions=(
                                                 FetchPartition(partition=i32(0), fetch_offset=i64(offset),
                                                                partition_max_bytes=i32(1 << 20)),)),),
                                             forgotten_topics_data=()))
        row = answer.responses[0].partitions[0]
        if row.error_code != ErrorCode.none:
            raise TxnProducerError(f"cannot read {JOBS_TOPIC}: {error_name(row.error_code)}")
        before = offset
        data = row.records or b""
        for entry in DEFAULT_FORMAT.iter_entries(data):
            for record in DEFAULT_FORMAT.decode_entry(data, entry):
                if record.offset >= offset and record.key is not None:
                    found[record.key] = None if record.value is None else Decision.parse(record.value)
            offset = max(offset, DEFAULT_FORMAT.entry_bounds(data, entry).last_offset + 1)
        if offset == before:
            break   # nothing more to read below the high watermark (compaction left a gap at the end)
    return {key: decision for key, decision in found.items() if decision is not None}


def _open_transactions(client: AdminClient, pattern: str, older_than_ms: int = -1) -> list[str]:
    """Transactional ids matching `pattern` whose transaction is open (Ongoing), optionally for longer than
    `older_than_ms`."""
    answer = client.request(ListTransactionsRequest(state_filters=("Ongoing",), duration_filter=i64(older_than_ms),
                                                    transactional_id_pattern=pattern))
    if answer.error_code != ErrorCode.none:
        raise TxnProducerError(f"ListTransactions: {error_name(answer.error_code)}")
    return sorted(t.transactional_id for t in answer.transaction_states)
