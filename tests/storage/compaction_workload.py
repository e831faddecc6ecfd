"""Keyed workloads for the cleaner tests, applied alike to a log that gets cleaned and a twin that does not.

A workload is a list of operations:

    ("plain", records, codec)          a batch without a producer
    ("idem", pid, records, codec)      an idempotent producer's batch (its next sequence)
    ("txn", pid, records, codec)       a batch in the producer's transaction (opened by the first one)
    ("end", pid, commit)               the transaction's COMMIT or ABORT marker, if one is open
    ("clean", advance_ms)              time passes, then a cleaner round (only the cleaned log)

`records` are (key, value) pairs; a None value is a tombstone. Every append
carries the workload clock's timestamp, so both logs hold identical bytes.
"""
from __future__ import annotations

from hypothesis import strategies as st

from logstore.cleaner import Cleaner, log_to_clean
from logstore.log import Log

BASE_TIMESTAMP = 1_700_000_000_000
KEYS = [b"key-%d" % i for i in range(6)]
IDEMPOTENT = (7, 8)
TRANSACTIONAL = (20, 21, 22)
CODECS = (0, 1, 3, 4)   # none, gzip, lz4, zstd

records = st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=0, max_size=40))),
                   min_size=1, max_size=6)
operations = st.lists(st.one_of(
    st.tuples(st.just("plain"), records, st.sampled_from(CODECS)),
    st.tuples(st.just("idem"), st.sampled_from(IDEMPOTENT), records, st.sampled_from(CODECS)),
    st.tuples(st.just("txn"), st.sampled_from(TRANSACTIONAL), records, st.sampled_from(CODECS)),
    st.tuples(st.just("end"), st.sampled_from(TRANSACTIONAL), st.booleans()),
    st.tuples(st.just("clean"), st.integers(0, 3_000)),
), min_size=1, max_size=60)


class Workload:
    """Applies operations to `logs` alike; cleans only `logs[0]`, with `cleaner`."""

    def __init__(self, logs: list[Log], cleaner: Cleaner | None = None):
        self.logs = logs
        self.now = BASE_TIMESTAMP
        self.cleaner = cleaner
        self.checkpoint: int | None = None
        self.sequences: dict[int, int] = {}
        self.open: set[int] = set()
        self.rounds = []
        self.last_cleanable = None

    def _append(self, pairs, codec: int, **producer) -> None:
        self.now += 1
        keys = [k for k, _ in pairs]
        values = [v for _, v in pairs]
        for target in self.logs:
            target.append_records(values, keys=keys, timestamps=self.now, compression=codec, **producer)

    def _producer(self, pid: int, count: int, transactional: bool) -> dict:
        sequence = self.sequences.get(pid, 0)
        self.sequences[pid] = sequence + count
        return {"producer_id": pid, "producer_epoch": 0, "base_sequence": sequence, "transactional": transactional}

    def apply(self, op) -> None:
        """Run one operation."""
        kind = op[0]
        if kind == "plain":
            self._append(op[1], op[2])
        elif kind == "idem":
            self._append(op[2], op[3], **self._producer(op[1], len(op[2]), False))
        elif kind == "txn":
            self.open.add(op[1])
            self._append(op[2], op[3], **self._producer(op[1], len(op[2]), True))
        elif kind == "end":
            if op[1] in self.open:
                self.open.discard(op[1])
                self.now += 1
                for target in self.logs:
                    target.write_txn_marker(op[1], 0, 0, commit=op[2], timestamp=self.now)
        elif kind == "clean":
            self.now += op[1]
            self.clean()
        else:
            raise ValueError(f"unknown operation {op!r}")

    def clean(self):
        """One cleaner round over the first log at the workload's time, if anything is dirty."""
        cleanable = self.last_cleanable = log_to_clean(self.logs[0], self.checkpoint, self.now)
        if cleanable.cleanable_bytes <= 0:
            return None
        self.cleaner._clock = lambda: self.now
        stats = self.cleaner.clean(cleanable)
        self.checkpoint = stats.end_offset
        self.rounds.append(stats)
        return stats


def all_records(target: Log) -> dict[int, tuple]:
    """offset -> (timestamp, key, value, headers) of every record, control records included."""
    found = {}
    last = -1
    for record in target.iter_records(include_control=True):
        assert record.offset > last, f"offset {record.offset} after {last}"
        last = record.offset
        found[record.offset] = (record.timestamp, record.key, record.value, record.headers)
    return found


def latest_values(target: Log) -> dict[bytes, bytes]:
    """What a read_committed consumer of the whole log ends with: the latest value per key."""
    latest: dict[bytes, bytes] = {}
    for record in target.iter_records(isolation="read_committed"):
        if record.value is None:
            latest.pop(record.key, None)
        else:
            latest[record.key] = record.value
    return latest
