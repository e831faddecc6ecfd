"""Transactions read back: the broker's files decoded independently, read_committed reads, and the soak.

Nothing here imports logstore: the coordinator's and the partitions' files are
decoded from Kafka's layouts (spec on-disk-format §5.5, §7, §9.4) with
kafka-python's batch decoder, so a test compares the broker with an outside
reading of what it wrote.

The soak half: `python txn_checker.py produce ...` is one transactional
producer (confluent-kafka) that commits or aborts at random and prints one JSON
line per transaction with what its client reported; `check_soak` holds those
reports against what read_committed and read_uncommitted consumers saw.
"""
from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.record.util import calc_crc32c

from segment_files import batches, segment_paths

TXN_STATE_TOPIC = "__transaction_state"
TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
              "PrepareEpochFence")
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}


# -- the broker's files ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Batch:
    """One batch of a partition file: a data batch (its values) or a transaction marker (its type)."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    marker: str | None          # "COMMIT" / "ABORT" for a control batch, else None
    values: tuple[bytes, ...]   # data batches only


def partition_batches(data_dir: Path, topic: str, partition: int, whole: bool = True) -> list[Batch]:
    """Every batch of one partition, in offset order (CRCs checked by kafka-python)."""
    found = []
    for path in segment_paths(data_dir, topic, partition):
        for b in batches(path, whole):
            records = list(b)
            marker = None
            if b.is_control_batch:
                assert len(records) == 1, f"{path}: a control batch of {len(records)} records at {b.base_offset}"
                version, kind = struct.unpack(">hh", records[0].key[:4])
                marker = CONTROL_TYPES.get(kind, f"type {kind}")
            found.append(Batch(b.base_offset, b.last_offset, b.producer_id, b.producer_epoch, b.is_transactional,
                               marker, () if marker else tuple(r.value for r in records)))
    return found


@dataclass(frozen=True)
class TxnStateRecord:
    """One persisted transition of a transactional id (TransactionLogValue v0/v1), or its tombstone."""

    offset: int
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = -1
    state: str = "Dead"         # a tombstone reads as Dead
    partitions: frozenset[tuple[str, int]] = frozenset()


class _Reader:
    """Kafka's message-schema primitives over a byte string (plain and flexible versions)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> str:
        n = self.uvarint() - 1 if flexible else self.take(">h")
        text = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return text

    def count(self, flexible: bool) -> int:
        """An array's length, -1 for null."""
        return self.uvarint() - 1 if flexible else self.take(">i")

    def skip_tags(self, flexible: bool) -> None:
        if flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                size = self.uvarint()   # read before `pos` is: `self.pos += self.uvarint()` loses the advance
                self.pos += size


def _decode_txn_value(offset: int, value: bytes) -> TxnStateRecord:
    r = _Reader(value)
    version = r.take(">h")
    assert version in (0, 1), f"TransactionLogValue version {version} at offset {offset}"
    flexible = version == 1
    producer_id, epoch, timeout_ms, status = r.take(">q"), r.take(">h"), r.take(">i"), r.take(">b")
    partitions = set()
    for _ in range(max(r.count(flexible), 0)):
        topic = r.string(flexible)
        partitions.update((topic, r.take(">i")) for _ in range(r.count(flexible)))
        r.skip_tags(flexible)
    r.take(">q"), r.take(">q")  # last update and start timestamps
    r.skip_tags(flexible)
    assert r.pos == len(value), f"{len(value) - r.pos} bytes after the TransactionLogValue at offset {offset}"
    return TxnStateRecord(offset, producer_id, epoch, timeout_ms, TXN_STATES[status], frozenset(partitions))


def txn_state_records(data_dir: Path, transactional_id: str) -> list[TxnStateRecord]:
    """Every record `__transaction_state` holds for one transactional id, in the order written."""
    found = []
    for path in segment_paths(data_dir, TXN_STATE_TOPIC):
        for b in batches(path):
            assert not b.is_control_batch and b.compression_type == 0, f"{path}: batch at {b.base_offset}"
            for record in b:
                key = _Reader(record.key)
                assert key.take(">h") == 0, f"{path}: TransactionLogKey version at {record.offset}"
                if key.string(False) != transactional_id:
                    continue
                found.append(TxnStateRecord(record.offset) if record.value is None
                             else _decode_txn_value(record.offset, record.value))
    return found


@dataclass(frozen=True)
class SnapshotEntry:
    """One producer of a `.snapshot` file (spec §7)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


_ENTRY = struct.Struct(">qhiqiqiq")
_ABORTED = struct.Struct(">hqqqq")


def latest_snapshot(partition_dir: Path) -> tuple[int, dict[int, SnapshotEntry]]:
    """The newest producer snapshot of a partition: its offset and its entries by producer id (CRC checked)."""
    paths = sorted(partition_dir.glob("*.snapshot"))
    assert paths, f"no producer snapshot in {partition_dir}"
    data = paths[-1].read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1 and crc == calc_crc32c(data[6:]), f"{paths[-1]}: version {version}, CRC mismatch"
    assert len(data) == 10 + count * _ENTRY.size, f"{paths[-1]}: {len(data)} bytes for {count} entries"
    entries = [SnapshotEntry(*_ENTRY.unpack_from(data, 10 + i * _ENTRY.size)) for i in range(count)]
    return int(paths[-1].stem), {e.producer_id: e for e in entries}


def aborted_txns(partition_dir: Path) -> list[tuple[int, int, int]]:
    """(producer id, first offset, last offset) of every `.txnindex` entry of a partition."""
    found = []
    for path in sorted(partition_dir.glob("*.txnindex")):
        data = path.read_bytes()
        for i in range(len(data) // _ABORTED.size):
            version, producer_id, first, last, _lso = _ABORTED.unpack_from(data, i * _ABORTED.size)
            assert version == 0, f"{path}: entry {i} version {version}"
            found.append((producer_id, first, last))
    return found


# -- clients ----------------------------------------------------------------------------------------

def consumer(bootstrap: str, isolation: str) -> Consumer:
    """An assign()-only consumer (librdkafka wants a group id but never joins with assign)."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-checker", "isolation.level": isolation,
                     "enable.auto.commit": False, "enable.partition.eof": False, "fetch.wait.max.ms": 100})


def read_until(bootstrap: str, topic: str, last: dict[int, bytes], isolation: str,
               timeout: float = 60.0) -> dict[int, list[bytes]]:
    """Every value of the partitions in `last` from offset 0 until each has delivered its value in `last`."""
    c = consumer(bootstrap, isolation)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in last])
        got: dict[int, list[bytes]] = {p: [] for p in last}
        waiting = set(last)
        deadline = time.monotonic() + timeout
        while waiting:
            remaining = deadline - time.monotonic()
            assert remaining > 0, (f"{isolation}: partitions {sorted(waiting)} of {topic} did not deliver their "
                                   f"last value within {timeout} s; so far {({p: len(v) for p, v in got.items()})}")
            first = c.poll(remaining)
            for m in ([first] if first is not None else []) + c.consume(1000, 0):
                assert m.error() is None, f"{isolation} consumer: {m.error()}"
                got[m.partition()].append(m.value())
                if m.value() == last[m.partition()]:
                    waiting.discard(m.partition())
        return got
    finally:
        c.close()


def stable_offsets(bootstrap: str, topic: str, partitions) -> dict[int, tuple[int, int]]:
    """(last stable offset, high watermark) per partition, from ListOffsets at each isolation level."""
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        c = consumer(bootstrap, isolation)
        try:
            ends[isolation] = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)[1]
                               for p in partitions}
        finally:
            c.close()
    return {p: (ends["read_committed"][p], ends["read_uncommitted"][p]) for p in partitions}


# -- the soak's producer ------------------------------------------------------------------------------

def soak_value(producer: int, txn: int, seq: int, intent: str) -> bytes:
    """The value of record `seq` of transaction `txn` of soak producer `producer` (intent "C" or "A")."""
    return f"{producer}/{txn}/{seq}/{intent}".encode()


def parse_soak_value(value: bytes) -> tuple[int, int, int, str]:
    """(producer, txn, seq, intent) of a `soak_value`."""
    producer, txn, seq, intent = value.decode().split("/")
    return int(producer), int(txn), int(seq), intent


def _retrying(call: Callable[[float], None], timeout: float, attempts: int) -> None:
    """Call a transactional API again while librdkafka says the error is retriable (and nothing more)."""
    for attempt in range(attempts):
        try:
            return call(timeout)
        except KafkaException as exc:
            err = exc.args[0]
            if not err.retriable() or err.fatal() or err.txn_requires_abort() or attempt == attempts - 1:
                raise


class SoakProducer:
    """One transactional id driven by confluent-kafka, recovering the way librdkafka's docs prescribe.

    Abortable errors end in abort_transaction; fatal ones (fenced, or an
    outcome librdkafka cannot resolve) in a new producer with the same
    transactional id, whose InitProducerId ends whatever the old one left open.
    """

    CALL_TIMEOUT = 10.0  # s: init_transactions, flush

    def __init__(self, bootstrap: str, transactional_id: str, end_timeout: float = 10.0, attempts: int = 4):
        """`end_timeout` (s) and `attempts`: how long commit/abort may take before the outcome is unknown."""
        self.end_timeout, self.attempts = end_timeout, attempts
        self.config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                       "transaction.timeout.ms": 10000, "message.timeout.ms": 10000, "linger.ms": 2,
                       "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 250, "retry.backoff.ms": 20,
                       "retry.backoff.max.ms": 250}
        self.instances = 0
        self.producer: Producer | None = None
        self.renew()

    def renew(self) -> None:
        """A new client instance: init_transactions fences the previous one and ends its transaction."""
        if self.producer is not None:
            _close(self.producer)
        deadline = time.monotonic() + 120  # s: through several broker restarts
        self.producer = Producer(self.config)
        self.instances += 1
        while True:
            try:
                return self.producer.init_transactions(self.CALL_TIMEOUT)
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise
                if not exc.args[0].retriable():
                    _close(self.producer)
                    self.producer = Producer(self.config)
                    self.instances += 1

    def transaction(self, producer: int, txn: int, parts: list[int], intent: str, topic: str) -> dict:
        """Run one transaction; its report: the partitions handed to the client and the reported outcome."""
        p = self.producer
        produced: list[int] = []
        try:
            p.begin_transaction()
            for seq, partition in enumerate(parts):
                p.produce(topic, value=soak_value(producer, txn, seq, intent), partition=partition)
                produced.append(partition)
            if intent == "C":
                _retrying(p.commit_transaction, self.end_timeout, self.attempts)
                return self._report(txn, produced, intent, "committed")
            p.flush(self.CALL_TIMEOUT)  # so that aborted records do reach the log
            _retrying(p.abort_transaction, self.end_timeout, self.attempts)
            return self._report(txn, produced, intent, "aborted")
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort() and not err.fatal():
                try:
                    _retrying(p.abort_transaction, self.end_timeout, self.attempts)
                    return self._report(txn, produced, intent, "aborted", str(err))
                except KafkaException as again:
                    err = again.args[0]
            self.renew()
            return self._report(txn, produced, intent, "unknown", str(err))

    def _report(self, txn: int, produced: list[int], intent: str, reported: str, error: str = "") -> dict:
        return {"txn": txn, "parts": produced, "intent": intent, "reported": reported, "error": error,
                "instance": self.instances}


def _close(p: Producer) -> None:
    try:
        p.close(0)
    except KafkaException:
        pass  # a client in a fatal state raises its error again on close; it is closed all the same


def _produce_main(args) -> None:
    """Transactions until stdin closes; one JSON line per transaction on stdout."""
    stop = threading.Event()

    def wait_for_eof():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    rng = random.Random(args.seed)
    client = SoakProducer(args.bootstrap, args.transactional_id, args.end_timeout, args.attempts)
    txn = 0
    while not stop.is_set():
        parts = [rng.randrange(args.partitions) for _ in range(rng.randint(1, 8))]
        intent = "C" if rng.random() < args.commit_ratio else "A"
        report = client.transaction(args.index, txn, parts, intent, args.topic)
        print(json.dumps(report), flush=True)
        txn += 1
    _close(client.producer)


# -- the soak's checker -------------------------------------------------------------------------------

@dataclass
class SoakSummary:
    """What the checker counted (transactions by reported outcome, records read)."""

    reported: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unknown_present: int = 0
    unknown_absent: int = 0
    committed_records: int = 0
    aborted_records_in_log: int = 0  # hidden from read_committed, seen by read_uncommitted

    def __str__(self) -> str:
        return (f"committed {self.reported['committed']}, aborted {self.reported['aborted']}, unknown "
                f"{self.reported['unknown']} ({self.unknown_present} present, {self.unknown_absent} absent); "
                f"{self.committed_records} records read_committed, {self.aborted_records_in_log} aborted "
                "records in the log")


def _is_subsequence(short: list, long: list) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def check_soak(reports: dict[int, list[dict]], committed: dict[int, list[bytes]],
               uncommitted: dict[int, list[bytes]]) -> SoakSummary:
    """Prove the soak's guarantees; `reports` by soak producer, the reads by partition (soak values only).

    Reported committed: every record there, once, in order; reported aborted:
    none there; unknown: all there or none; read_uncommitted holds
    read_committed in the same order per partition.
    """
    problems: list[str] = []
    summary = SoakSummary()
    seen: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # (producer, txn) -> (partition, seq)
    for partition, values in committed.items():
        last: dict[int, tuple[int, int]] = {}
        for value in values:
            producer, txn, seq, _intent = parse_soak_value(value)
            if last.get(producer, (-1, -1)) >= (txn, seq):
                problems.append(f"partition {partition}: {value!r} after {last[producer]} of producer {producer} "
                                "(a duplicate or out of order)")
            last[producer] = (txn, seq)
            seen[(producer, txn)].append((partition, seq))
        if not _is_subsequence(values, uncommitted.get(partition, [])):
            problems.append(f"partition {partition}: read_uncommitted does not hold read_committed in order")
    in_log = Counter(parse_soak_value(v)[:2] for values in uncommitted.values() for v in values)
    known = set()
    for producer, txns in reports.items():
        for report in txns:
            key = (producer, report["txn"])
            known.add(key)
            summary.reported[report["reported"]] += 1
            expected = sorted((p, seq) for seq, p in enumerate(report["parts"]))
            got = sorted(seen.get(key, []))
            if report["reported"] == "committed":
                summary.committed_records += len(got)
                if got != expected:
                    problems.append(f"committed transaction {key}: read_committed has {got}, expected {expected}")
            elif report["reported"] == "aborted":
                if got:
                    problems.append(f"aborted transaction {key}: read_committed has {got}")
                summary.aborted_records_in_log += in_log[key]
            elif got == expected and got:
                summary.unknown_present += 1
            elif not got:
                summary.unknown_absent += 1
            else:
                problems.append(f"transaction {key} of unknown outcome is partly there: {got} of {expected}")
    for key in sorted(set(seen) - known):
        problems.append(f"read_committed has transaction {key}, which no producer reported")
    assert not problems, f"{len(problems)} violations ({summary}):\n" + "\n".join(problems[:30])
    return summary


def main(argv=None) -> None:
    """`produce`: run one soak producer (see `_produce_main`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    produce = sub.add_parser("produce")
    produce.add_argument("--bootstrap", required=True)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partitions", type=int, required=True)
    produce.add_argument("--transactional-id", required=True)
    produce.add_argument("--index", type=int, required=True)
    produce.add_argument("--seed", type=int, required=True)
    produce.add_argument("--commit-ratio", type=float, default=0.65)
    produce.add_argument("--end-timeout", type=float, default=10.0, help="s per commit/abort call")
    produce.add_argument("--attempts", type=int, default=4, help="commit/abort calls before giving up")
    args = parser.parse_args(argv)
    _produce_main(args)


if __name__ == "__main__":
    main()
