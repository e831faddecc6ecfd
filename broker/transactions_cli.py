"""`logstore transactions`: inspect transactions and find hanging ones, as Kafka's kafka-transactions.sh.

The arguments are registered in `broker/admin_commands.py`; `run(args)` does the
work over one `AdminClient` connection to `--bootstrap-server`, which in
logstore is the coordinator of every transactional id and the leader of
every partition.

- `list [--state S ...] [--producer-id N ...] [--duration-filter MS]`:
  ListTransactions. A state name the broker does not know is reported on
  stderr (and under "unknownStateFilters") and matches nothing.
- `describe --transactional-id ID`: FindCoordinator, then
  DescribeTransactions.
- `describe-producers --topic T --partition N`: DescribeProducers.
- `abort --topic T --partition N (--start-offset O | --producer-id P
  --producer-epoch E --coordinator-epoch C)`: Kafka's Admin.abortTransaction,
  for a hanging transaction. With --start-offset, DescribeProducers finds the
  producer whose open transaction starts there (its epoch, and its last
  coordinator epoch, 0 if it has none); then an ABORT marker is written into
  the partition with WriteTxnMarkers (which needs CLUSTER_ACTION on the
  cluster). A negative --coordinator-epoch is sent as 0, as Kafka's tool
  does. Prints nothing. `abort --transactional-id ID` instead ends the
  open transaction of that id through its coordinator, as force-terminate
  does: the way to end a prepared two-phase-commit transaction (KIP-939),
  which its coordinator never times out and whose partitions it still
  tracks, so markers written past it would leave it listed as open.
- `force-terminate --transactional-id ID`: Kafka's
  Admin.forceTerminateTransaction (fenceProducers): InitProducerId for the id
  with its current transaction timeout, which bumps its producer's epoch
  (fencing the running producer) and aborts its open transaction; retried
  while the coordinator answers CONCURRENT_TRANSACTIONS (the abort under
  way), up to 30 s. An id the coordinator does not know is
  TRANSACTIONAL_ID_NOT_FOUND. Prints nothing.
- `find-hanging [--max-transaction-timeout MINUTES] [--topic T
  [--partition N]]`: Kafka's search. The producers of the partitions (those
  of T, or of every topic) with a transaction open whose last write is
  older than the timeout (default 15 minutes) are candidates; a candidate
  hangs unless ListTransactions finds a transactional id for its producer
  id whose DescribeTransactions shows that producer with this partition in
  its transaction (Ongoing or being completed): then the coordinator will
  still end it. Kafka requires --topic or --broker-id; one node holds every
  partition here, so without --topic every topic is searched, and
  `--broker-id` is this node's id (any other leads nothing: no rows).

Text output is Kafka's table: its column names, each column padded to its
widest cell and followed by a tab (none after the last), "None" where Kafka
prints it. `--json` prints one JSON document instead (times in ms since the
epoch, durations in ms except where named):

    list:               {"unknownStateFilters": [str],
                         "transactions": [{"transactionalId": str, "coordinatorId": int,
                                           "producerId": int, "transactionState": str}]}
    describe:           {"coordinatorId": int, "transactionalId": str, "producerId": int,
                         "producerEpoch": int, "transactionState": str, "transactionTimeoutMs": int,
                         "currentTransactionStartTimeMs": int | null, "transactionDurationMs": int | null,
                         "topicPartitions": [{"topic": str, "partition": int}]}
    describe-producers: {"topic": str, "partition": int,
                         "activeProducers": [{"producerId": int, "producerEpoch": int,
                                              "latestCoordinatorEpoch": int, "lastSequence": int,
                                              "lastTimestamp": int,
                                              "currentTransactionStartOffset": int | null}]}
    find-hanging:       {"hangingTransactions": [{"topic": str, "partition": int, "producerId": int,
                                                  "producerEpoch": int, "coordinatorEpoch": int,
                                                  "startOffset": int, "lastTimestamp": int,
                                                  "durationMinutes": int}]}
    abort:              {"topic": str, "partition": int, "producerId": int, "producerEpoch": int,
                         "coordinatorEpoch": int}  (with --transactional-id: as force-terminate)
    force-terminate:    {"transactionalId": str, "producerId": int, "producerEpoch": int}

Exit status: 0 done; 1 the broker answered with an error (its Kafka name
on stderr); 2 bad arguments, or no broker to talk to at --bootstrap-server.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TextIO

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from logstore.broker.admin_client import AdminClient, AuthenticationError, BrokerUnavailableError, error_name
from logstore.broker.client_security import ClientSecurityError, load_client_security

if TYPE_CHECKING:
    # The classes of the responses the requests below get (AdminClient.request returns them as Any).
    from kio.schema.describe_producers.v0.response import DescribeProducersResponse, ProducerState
    from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse, TransactionState
    from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
    from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
    from kio.schema.list_transactions.v1.response import ListTransactionsResponse
    from kio.schema.metadata.v9.response import MetadataResponse
    from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse

__all__ = ["run", "BrokerError", "UsageError"]

PROG = "logstore transactions"
TRANSACTION_KEY = i8(1)
MAX_BATCH = 500  # partitions per DescribeProducers, as Kafka's tool
TWO_PHASE_TIMEOUT = timedelta(milliseconds=2_147_483_647)   # KIP-939's mark of a two-phase-commit id
DEFAULT_TXN_TIMEOUT = timedelta(seconds=60)                  # Kafka's producer transaction.timeout.ms
FENCE_WAIT_S = 30.0  # how long force-terminate retries while the coordinator aborts the open transaction
# What InitProducerId answers while the coordinator cannot yet: retried, as Kafka's admin client does.
RETRIABLE = (ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress)

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
PRODUCER_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


class UsageError(Exception):
    """Arguments that cannot work together (exit status 2)."""


class BrokerError(Exception):
    """The broker answered with an error code (exit status 1)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _text(value: object) -> str:
    return "None" if value is None else str(value)


def print_table(headers: list[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: cells padded to their column's width, tab-separated."""
    cells = [headers] + [[_text(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("\t".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=out)


def _check(code: int, what: str) -> None:
    if code != ErrorCode.none:
        raise BrokerError(f"{what}: {error_name(code)}")


# -- the commands ---------------------------------------------------------------------------------------------


def _node_id(client: AdminClient) -> int:
    """The id of the broker this client talks to (Kafka's tool lists transactions per broker id)."""
    metadata: MetadataResponse = client.request(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                                include_cluster_authorized_operations=False,
                                                                include_topic_authorized_operations=False))
    if len(metadata.brokers) == 1:
        return metadata.brokers[0].node_id
    assert client.address is not None  # the request above connected
    host, port = client.address
    return next((b.node_id for b in metadata.brokers if (b.host, b.port) == (host, port)), -1)


def _list_transactions(client: AdminClient, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                       duration_ms: int = -1) -> ListTransactionsResponse:
    response: ListTransactionsResponse = client.request(ListTransactionsRequest(
        state_filters=tuple(states), producer_id_filters=tuple(ProducerId(p) for p in producer_ids),
        duration_filter=i64(duration_ms)))
    _check(response.error_code, "Failed to list transactions")
    return response


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    response = _list_transactions(client, states=args.states or (), producer_ids=args.producer_ids or (),
                                  duration_ms=-1 if args.duration_filter is None else args.duration_filter)
    node = _node_id(client)
    rows = [[t.transactional_id, node, t.producer_id, t.transaction_state] for t in response.transaction_states]
    unknown = list(response.unknown_state_filters)
    if args.as_json:
        json.dump({"unknownStateFilters": unknown,
                   "transactions": [dict(zip(("transactionalId", "coordinatorId", "producerId", "transactionState"),
                                             row)) for row in rows]}, out)
        print(file=out)
    else:
        if unknown:
            print(f"{PROG}: the broker knows no transaction state {', '.join(unknown)} (matched nothing)",
                  file=sys.stderr)
        print_table(LIST_HEADERS, rows, out)
    return 0


def _describe_transactions(client: AdminClient, ids: list[str]) -> dict[str, TransactionState | None]:
    """Each id's DescribeTransactions row; None for an id the coordinator does not know."""
    response: DescribeTransactionsResponse = client.request(DescribeTransactionsRequest(
        transactional_ids=tuple(TransactionalId(i) for i in ids)))
    found: dict[str, TransactionState | None] = {}
    for row in response.transaction_states:
        if row.error_code == ErrorCode.transactional_id_not_found:
            found[row.transactional_id] = None
        else:
            _check(row.error_code, f"Failed to describe transaction state of transactional-id "
                                   f"`{row.transactional_id}`")
            found[row.transactional_id] = row
    return found


def _start_ms(row: TransactionState) -> int | None:
    # None is how the admin client reads Kafka's -1 (kio's class says a datetime is always there).
    start: datetime | None = row.transaction_start_time
    return None if start is None else round(start.timestamp() * 1000)


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    txn_id = args.transactional_id
    coordinator: FindCoordinatorResponse = client.request(FindCoordinatorRequest(key=txn_id, key_type=TRANSACTION_KEY))
    _check(coordinator.error_code, f"Failed to find the coordinator of transactional-id `{txn_id}`")
    row = _describe_transactions(client, [txn_id]).get(txn_id)
    if row is None:
        raise BrokerError(f"Failed to describe transaction state of transactional-id `{txn_id}`: "
                          f"{error_name(ErrorCode.transactional_id_not_found)}")
    start = _start_ms(row)
    duration = None if start is None else _now_ms() - start
    partitions = [(t.topic, p) for t in row.topics for p in t.partitions]
    timeout_ms = round(row.transaction_timeout.total_seconds() * 1000)
    if args.as_json:
        json.dump({"coordinatorId": coordinator.node_id, "transactionalId": txn_id, "producerId": row.producer_id,
                   "producerEpoch": row.producer_epoch, "transactionState": row.transaction_state,
                   "transactionTimeoutMs": timeout_ms, "currentTransactionStartTimeMs": start,
                   "transactionDurationMs": duration,
                   "topicPartitions": [{"topic": t, "partition": p} for t, p in partitions]}, out)
        print(file=out)
    else:
        print_table(DESCRIBE_HEADERS, [[coordinator.node_id, txn_id, row.producer_id, row.producer_epoch,
                                        row.transaction_state, timeout_ms, start, duration,
                                        ",".join(f"{t}-{p}" for t, p in partitions)]], out)
    return 0


def _describe_producers(client: AdminClient, partitions: list[tuple[str, int]]
                        ) -> dict[tuple[str, int], tuple[ProducerState, ...]]:
    """(topic, partition) → its active producers, MAX_BATCH partitions per request."""
    found: dict[tuple[str, int], tuple[ProducerState, ...]] = {}
    for start in range(0, len(partitions), MAX_BATCH):
        by_topic: defaultdict[str, list[i32]] = defaultdict(list)
        for name, partition in partitions[start:start + MAX_BATCH]:
            by_topic[name].append(i32(partition))
        response: DescribeProducersResponse = client.request(DescribeProducersRequest(topics=tuple(
            TopicRequest(name=TopicName(t), partition_indexes=tuple(ps)) for t, ps in by_topic.items())))
        for topic in response.topics:
            for row in topic.partitions:
                where = f"{topic.name}-{row.partition_index}"
                _check(row.error_code, f"Failed to describe producers for partition {where}")
                found[(topic.name, row.partition_index)] = row.active_producers
    return found


def _describe_producers_command(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    producers = _describe_producers(client, [(args.topic, args.partition)])[(args.topic, args.partition)]
    rows = [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None] for p in producers]
    if args.as_json:
        keys = ("producerId", "producerEpoch", "latestCoordinatorEpoch", "lastSequence", "lastTimestamp",
                "currentTransactionStartOffset")
        json.dump({"topic": args.topic, "partition": args.partition,
                   "activeProducers": [dict(zip(keys, row)) for row in rows]}, out)
        print(file=out)
    else:
        print_table(PRODUCER_HEADERS, rows, out)
    return 0


def _partitions_to_search(client: AdminClient, topic: str | None, partition: int | None) -> list[tuple[str, int]]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    metadata: MetadataResponse = client.request(MetadataRequest(
        topics=None if topic is None else (MetadataRequestTopic(name=TopicName(topic)),),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    found: list[tuple[str, int]] = []
    for t in metadata.topics:
        _check(t.error_code, f"Failed to describe topic {t.name}")
        found += [(t.name, p.partition_index) for p in t.partitions]
    return sorted(found)


def _find_hanging(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    max_timeout_ms = args.max_transaction_timeout * 60_000
    partitions = _partitions_to_search(client, args.topic, args.partition)
    if args.broker_id is not None and args.broker_id != _node_id(client):
        partitions = []   # another broker leads none of this one's partitions
    now = _now_ms()
    candidates = [(tp, p) for tp, producers in _describe_producers(client, partitions).items() for p in producers
                  if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms]
    hanging: list[tuple[tuple[str, int], ProducerState]] = []
    if candidates:
        listing = _list_transactions(client, producer_ids=sorted({p.producer_id for _, p in candidates}))
        txn_ids = {t.producer_id: t.transactional_id for t in listing.transaction_states}
        described = _describe_transactions(client, sorted(set(txn_ids.values()))) if txn_ids else {}
        for tp, producer in candidates:
            txn_id = txn_ids.get(producer.producer_id)
            row = None if txn_id is None else described.get(txn_id)
            # The coordinator still owns the transaction (and will write its marker) only if the id is
            # held by this producer and the partition is in its transaction.
            owned = (row is not None and row.producer_id == producer.producer_id
                     and tp[1] in next((t.partitions for t in row.topics if t.topic == tp[0]), ()))
            if not owned:
                hanging.append((tp, producer))
    rows = [[t, p, s.producer_id, s.producer_epoch, s.coordinator_epoch, s.current_txn_start_offset,
             s.last_timestamp, (now - s.last_timestamp) // 60_000] for (t, p), s in hanging]
    if args.as_json:
        keys = ("topic", "partition", "producerId", "producerEpoch", "coordinatorEpoch", "startOffset",
                "lastTimestamp", "durationMinutes")
        json.dump({"hangingTransactions": [dict(zip(keys, row)) for row in rows]}, out)
        print(file=out)
    else:
        print_table(HANGING_HEADERS, rows, out)
    return 0


def _abort_spec(client: AdminClient, args: argparse.Namespace) -> tuple[int, int, int]:
    """(producer id, epoch, coordinator epoch) of the transaction to abort, as Kafka's tool works them out."""
    if args.start_offset is None:
        return args.producer_id, args.producer_epoch, max(args.coordinator_epoch, 0)
    producers = _describe_producers(client, [(args.topic, args.partition)])[(args.topic, args.partition)]
    found = next((p for p in producers if p.current_txn_start_offset == args.start_offset), None)
    if found is None:
        raise BrokerError(f"Could not find any open transactions starting at offset {args.start_offset} on "
                          f"partition {args.topic}-{args.partition}")
    return found.producer_id, found.producer_epoch, max(found.coordinator_epoch, 0)


def _abort(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.transactional_id is not None:
        return _force_terminate(client, args, out)
    producer_id, epoch, coordinator_epoch = _abort_spec(client, args)
    response: WriteTxnMarkersResponse = client.request(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=ProducerId(producer_id), producer_epoch=i16(epoch), transaction_result=False,
        topics=(WritableTxnMarkerTopic(name=TopicName(args.topic), partition_indexes=(i32(args.partition),)),),
        coordinator_epoch=i32(coordinator_epoch)),)))
    for marker in response.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                _check(p.error_code, f"Failed to abort the transaction of producer {producer_id} (epoch {epoch}, "
                                     f"coordinator epoch {coordinator_epoch}) on {topic.name}-{p.partition_index}")
    if args.as_json:
        json.dump({"topic": args.topic, "partition": args.partition, "producerId": producer_id,
                   "producerEpoch": epoch, "coordinatorEpoch": coordinator_epoch}, out)
        print(file=out)
    return 0


def _force_terminate(client: AdminClient, args: argparse.Namespace, out: TextIO) -> int:
    txn_id = args.transactional_id
    what = f"Failed to force-terminate transactional-id `{txn_id}`"
    coordinator: FindCoordinatorResponse = client.request(FindCoordinatorRequest(key=txn_id, key_type=TRANSACTION_KEY))
    _check(coordinator.error_code, what)
    row = _describe_transactions(client, [txn_id]).get(txn_id)
    if row is None:
        raise BrokerError(f"{what}: {error_name(ErrorCode.transactional_id_not_found)}")
    # The id's own timeout, so the producer that takes the id over next finds it as it was; a
    # two-phase-commit id's (KIP-939: Integer.MAX_VALUE) is no timeout a plain InitProducerId may ask
    # for, so it gets the producers' default, and the id is an ordinary one again, as after Kafka's.
    timeout = i32Timedelta.parse(row.transaction_timeout)
    if timeout >= TWO_PHASE_TIMEOUT:
        timeout = i32Timedelta.parse(DEFAULT_TXN_TIMEOUT)
    deadline = time.monotonic() + FENCE_WAIT_S
    pause = 0.05
    while True:
        response: InitProducerIdResponse = client.request(InitProducerIdRequest(
            transactional_id=TransactionalId(txn_id), transaction_timeout=timeout))
        if response.error_code not in RETRIABLE or time.monotonic() + pause > deadline:
            break
        time.sleep(pause)   # the coordinator is writing the abort's markers: ask again, as Kafka's client does
        pause = min(pause * 2, 1.0)
    _check(response.error_code, what)
    if args.as_json:
        json.dump({"transactionalId": txn_id, "producerId": response.producer_id,
                   "producerEpoch": response.producer_epoch}, out)
        print(file=out)
    return 0


COMMANDS: dict[str, Callable[[AdminClient, argparse.Namespace, TextIO], int]] = {
    "list": _list, "describe": _describe, "describe-producers": _describe_producers_command,
    "find-hanging": _find_hanging, "abort": _abort, "force-terminate": _force_terminate}


def _check_arguments(args: argparse.Namespace) -> None:
    if args.transactions_command == "find-hanging":
        if args.partition is not None and args.topic is None:
            raise UsageError("find-hanging: --partition requires --topic")
        if args.max_transaction_timeout < 0:
            raise UsageError(f"find-hanging: --max-transaction-timeout must be >= 0 minutes, "
                             f"not {args.max_transaction_timeout}")
    if args.transactions_command == "abort" and args.transactional_id is not None:
        given = [flag for flag, value in (("--topic", args.topic), ("--partition", args.partition),
                                          ("--start-offset", args.start_offset), ("--producer-id", args.producer_id),
                                          ("--producer-epoch", args.producer_epoch),
                                          ("--coordinator-epoch", args.coordinator_epoch)) if value is not None]
        if given:
            raise UsageError(f"abort: --transactional-id names the transaction by itself, without {given[0]}")
    elif args.transactions_command == "abort":
        for flag, value in (("--topic", args.topic), ("--partition", args.partition)):
            if value is None:
                raise UsageError(f"abort: Missing required argument {flag} (or give --transactional-id)")
        by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
        if args.start_offset is None and args.producer_id is None:
            raise UsageError("abort: The transaction to abort must be identified either with --start-offset (for "
                             "brokers on 3.0 or above) or with --producer-id, --producer-epoch, and "
                             "--coordinator-epoch (for older brokers)")
        if args.start_offset is not None and any(v is not None for v in by_producer):
            raise UsageError("abort: give --start-offset or --producer-id/--producer-epoch/--coordinator-epoch, "
                             "not both")
        if args.start_offset is None and None in by_producer:
            missing = "--producer-epoch" if args.producer_epoch is None else "--coordinator-epoch"
            raise UsageError(f"abort: Missing required argument {missing}")
    if getattr(args, "partition", None) is not None and args.partition < 0:
        raise UsageError(f"{args.transactions_command}: --partition must be >= 0, not {args.partition}")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore transactions` command; the exit status (0 ok, 1 broker error, 2 usage or no broker)."""
    return run_command(PROG, args, _check_arguments, COMMANDS[args.transactions_command], out)


def run_command(prog: str, args: argparse.Namespace, check: Callable[[argparse.Namespace], None],
                command: Callable[[AdminClient, argparse.Namespace, TextIO], int], out: TextIO | None = None) -> int:
    """An admin command's run, shared by `logstore transactions` and `logstore groups`: arguments
    checked, a client made and closed, errors printed; the exit status (0, 1 broker error, 2 usage)."""
    out = sys.stdout if out is None else out
    try:
        check(args)
        try:
            security = load_client_security(getattr(args, "command_config", None))
        except ClientSecurityError as exc:
            raise UsageError(f"--command-config {exc}") from None
        try:
            client = AdminClient(args.bootstrap_server, security=security)
        except ValueError as exc:
            raise UsageError(f"--bootstrap-server: {exc} (expected host:port[,host:port...])") from None
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        with client:
            return command(client, args, out)
    except BrokerUnavailableError as exc:
        print(f"{prog}: error: no broker at {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 2
    except AuthenticationError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except BrokerError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
