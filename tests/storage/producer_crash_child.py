"""The writer that test_producer_crash.py kills with SIGKILL: idempotent and transactional
producers appending to `txn-0` until it dies.

    python tests/storage/producer_crash_child.py DIR SEED BASE_TIMESTAMP [--max-seconds S]

Opens the store in DIR with `CONFIG` (segments of 4 KB, so they roll, and
take their roll snapshots, every few dozen batches), creating topic `txn` if
it is not there, and runs `Workload(SEED, BASE_TIMESTAMP)` for ever. The
workload is a fixed, endless sequence of operations that depends on the seed
(and the base timestamp) alone, so the parent rebuilds every append from
them: `PRODUCERS` producers, some idempotent, some transactional, each
keeping its own epoch and sequences as a Kafka client does. Transactions
of several batches end in COMMIT or ABORT markers interleaved across
producers; idempotent producers now and then bump their epoch (and start
again at sequence 0); the coordinator now and then fences a transactional
producer (an ABORT marker at the next epoch), writes a marker for a
producer with no open transaction (a retried marker), or moves to a new
coordinator epoch; some batches carry no producer; some ops retry the
last batch of a producer and must be answered as duplicates.

A child on a non-empty log finds where the workload stands from the log end
offset alone (`Workload.resume_index`), so a series of children, and the
test between them, continue one workload on one directory. Every append
is checked to land at the offsets the workload gave it.

Lines on stdout (flushed one by one):

    start <log end offset> <index of the first op it runs>   once, after the open
    <n>                                                       every offset below n is durable

An acknowledgement is written only after the durable append or the flush
that made it durable returned. The child exits by itself after
--max-seconds or when its stdout is closed.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import logstore
import logstore.formats.kafka as K
from killing import print_acks

TOPIC = "txn"
# retention.ms=-1: nothing may age out under the test; producer timestamps are "now" anyway.
CONFIG = {
    "segment.bytes": 4096,
    "index.interval.bytes": 256,
    "segment.index.bytes": 4096,
    "retention.ms": -1,
}
PRODUCERS = 20
MAX_SEQ = 2**31 - 1

PLAIN = "plain"      # a batch with no producer id
DATA = "data"        # an idempotent or transactional batch
MARKER = "marker"    # a COMMIT/ABORT control batch, as the coordinator writes it
RETRY = "retry"      # a DATA op sent again: must be a duplicate, nothing appended


@dataclass(frozen=True)
class Op:
    """One step of the workload. A RETRY keeps the fields (offsets included) of the batch it re-sends."""

    index: int
    kind: str
    first_offset: int
    count: int                      # offsets the batch takes (1 for a marker)
    timestamp: int                  # ms, every record and the marker
    producer_id: int = -1
    epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    commit: bool = False            # markers
    coordinator_epoch: int = -1     # markers
    compression: int = 0
    durable: bool = False           # append(durable=True), then acknowledge
    ack: bool = False               # flush after the op, then acknowledge
    checkpoint: bool = False        # write the recovery-point checkpoint after the op

    @property
    def last_offset(self) -> int:
        return self.first_offset + self.count - 1

    @property
    def appends(self) -> bool:
        """Whether the op writes a batch (a RETRY writes nothing)."""
        return self.kind != RETRY

    @property
    def last_sequence(self) -> int:
        """Last sequence of a DATA batch, wrapping past Int32.MAX as Kafka's do."""
        return (self.base_sequence + self.count - 1) % (MAX_SEQ + 1)

    def keys(self) -> list[bytes | None]:
        return [None if self.producer_id < 0 else b"p%d" % self.producer_id] * self.count

    def values(self) -> list[bytes]:
        """The record values: a function of producer, epoch and sequence (so a retry is byte-equal)."""
        if self.producer_id < 0:
            return [b"plain@%d" % (self.first_offset + i) for i in range(self.count)]
        return [b"%d/%d/%d" % (self.producer_id, self.epoch, (self.base_sequence + i) % (MAX_SEQ + 1))
                for i in range(self.count)]


@dataclass
class _Client:
    """What a producer client knows about itself."""

    producer_id: int
    transactional: bool
    epoch: int
    next_sequence: int
    in_txn: bool = False
    txn_batches: int = 0
    last: Op | None = None          # its last DATA batch in the current epoch


class Workload:
    """The endless op sequence of one seed; `base_timestamp + index` stamps op `index`."""

    def __init__(self, seed: int, base_timestamp: int):
        self.seed = seed
        self.base_timestamp = base_timestamp

    def __iter__(self) -> Iterator[Op]:
        rng = random.Random(self.seed)
        ids = rng.sample(range(1, 1 << 48), PRODUCERS)
        clients = []
        for i, pid in enumerate(ids):
            transactional = i % 5 < 3
            # Two idempotent producers start near Int32.MAX (an unknown producer may start
            # anywhere), so their sequences wrap.
            start = MAX_SEQ - rng.randint(0, 40) if i in (3, 8) else 0
            clients.append(_Client(pid, transactional, rng.randint(0, 5), start))
        coordinator_epoch = rng.randint(0, 3)
        offset = index = 0
        until_ack = rng.randint(1, 6)
        while True:
            ts = self.base_timestamp + index
            r = rng.random()
            retriable = [c for c in clients if c.last is not None]
            if r < 0.05:
                op = Op(index, PLAIN, offset, rng.randint(1, 4), ts)
            elif r < 0.08 and retriable:
                last = rng.choice(retriable).last
                op = dataclasses.replace(last, index=index, kind=RETRY, durable=False, ack=False, checkpoint=False)
            else:
                c = rng.choice(clients)
                op = self._step(c, rng, index, offset, ts, coordinator_epoch)
                if op.kind == MARKER and rng.random() < 0.05:
                    coordinator_epoch += 1
            if op.appends:
                offset += op.count
                durable = rng.random() < 0.1
                until_ack -= 1
                ack = not durable and until_ack <= 0
                if durable or ack:
                    until_ack = rng.randint(1, 6)
                op = dataclasses.replace(op, durable=durable, ack=ack, checkpoint=rng.random() < 0.03)
            yield op
            index += 1

    @staticmethod
    def _step(c: _Client, rng: random.Random, index: int, offset: int, ts: int, coordinator_epoch: int) -> Op:
        """The next batch or marker of client `c`, its own state moved on."""
        def marker(epoch: int, commit: bool) -> Op:
            return Op(index, MARKER, offset, 1, ts, c.producer_id, epoch, commit=commit,
                      coordinator_epoch=coordinator_epoch)

        if c.transactional and c.in_txn and c.txn_batches and rng.random() < 0.3:
            c.in_txn, c.txn_batches = False, 0
            if rng.random() < 0.1:
                # InitProducerId with the transaction open: the coordinator bumps the epoch and
                # aborts with the new one; the client starts again at sequence 0.
                c.epoch += 1
                c.next_sequence, c.last = 0, None
                return marker(c.epoch, False)
            return marker(c.epoch, rng.random() < 0.6)
        if c.transactional and not c.in_txn and rng.random() < 0.04:
            return marker(c.epoch, rng.random() < 0.5)  # a retried marker: no transaction open
        if not c.transactional and rng.random() < 0.04:
            c.epoch += 1
            c.next_sequence, c.last = 0, None
        count = rng.randint(1, 5)
        op = Op(index, DATA, offset, count, ts, c.producer_id, c.epoch, c.next_sequence,
                transactional=c.transactional, compression=K.GZIP if rng.random() < 0.1 else 0)
        c.next_sequence = (c.next_sequence + count) % (MAX_SEQ + 1)
        c.last = op
        if c.transactional:
            c.in_txn = True
            c.txn_batches += 1
        return op

    def resume_index(self, log_end_offset: int) -> int:
        """The index of the first op not in a log that ends at `log_end_offset` (ValueError if that
        offset is not the end of an op). Retries right after the last appended op are run again."""
        resume = 0
        for op in self:
            if not op.appends:
                continue
            if op.first_offset >= log_end_offset:
                if op.first_offset != log_end_offset:
                    raise ValueError(f"log end offset {log_end_offset} is inside op {op}")
                return resume
            resume = op.index + 1

    def ops_from(self, index: int) -> Iterator[Op]:
        """The ops from `index` on."""
        for op in self:
            if op.index >= index:
                yield op


def apply(log, op: Op):
    """Send `op` to a Log as a producer (or the coordinator) would; returns the AppendResult."""
    if op.kind == MARKER:
        return log.write_txn_marker(op.producer_id, op.epoch, op.coordinator_epoch, commit=op.commit,
                                    timestamp=op.timestamp, durable=op.durable)
    return log.append_records(op.values(), keys=op.keys(), timestamps=op.timestamp, compression=op.compression,
                              producer_id=op.producer_id, producer_epoch=op.epoch,
                              base_sequence=op.base_sequence if op.producer_id >= 0 else -1,
                              transactional=op.transactional, durable=op.durable)


def check_applied(op: Op, result) -> None:
    """An op landed where the workload put it; a retry was a duplicate of its first write."""
    got = (result.first_offset, result.last_offset, result.duplicate)
    want = (op.first_offset, op.last_offset, op.kind == RETRY)
    if got != want:
        raise AssertionError(f"op {op} gave (first, last, duplicate) {got}, expected {want}")


def _run(store, log, ops: Iterator[Op], deadline: float) -> Iterator[int]:
    """Apply `ops` until `deadline`; yields the log end each time a durable append or a flush moved it on."""
    acked = log.log_end_offset
    for op in ops:
        if time.monotonic() >= deadline:
            break
        check_applied(op, apply(log, op))
        if op.ack:
            log.flush()
        if op.checkpoint:
            store.checkpoint()
        if (op.durable or op.ack) and log.log_end_offset > acked:
            acked = log.log_end_offset
            yield acked


def main(argv=None) -> int:
    """Run the workload until killed (or until --max-seconds, or until stdout closes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("seed", type=int)
    parser.add_argument("base_timestamp", type=int)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.max_seconds
    store = logstore.open(args.directory, CONFIG, start_scheduler=False)
    if TOPIC not in store.topics():
        store.create_topic(TOPIC)
    log = store.log(TOPIC, 0)
    workload = Workload(args.seed, args.base_timestamp)
    start = workload.resume_index(log.log_end_offset)
    return print_acks(store, (log.log_end_offset, start), _run(store, log, workload.ops_from(start), deadline))


if __name__ == "__main__":
    sys.exit(main())
