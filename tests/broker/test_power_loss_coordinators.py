"""Power cuts at every boundary of the coordinators' work: transactions committed and aborted, offsets
committed plain and in a transaction (TxnOffsetCommit), by a `Node` over a `FaultFileSystem`.

Each case runs its workload once to count the boundaries it crosses after the node opened, then, from
the same starting directory, cuts the power at each in turn (and once after the last) in both legal
outcomes of a cut, reopens the directory with a real `Node` and checks it against what was
acknowledged:
- every acknowledged append is in the log exactly once, and nothing is there twice;
- a transaction whose EndTxn returned is complete before any redo: its markers are in each of its
  partitions and, committed, its records are visible to read_committed;
- once the node has finished what was decided (and aborted what was left open), every transaction is
  all or nothing, its transactional offsets with it: a decided but unacknowledged one may go either way;
- every acknowledged offset commit is the group's offset, unless a later commit (acknowledged or not)
  replaced it.
The workload is one thread: fsyncs the storage would hand to its sync pool run in the caller, a roll's
flush runs right after the step that rolled (`DeferredFlusher`, as the storage sweeps do), and neither
the node's upkeep thread nor the store's scheduler and cleaner are started, so the boundaries come in
the same order every run (checked: two counting runs must agree). The file systems skip the disk's own
fsyncs (`real_syncs=False`): what a cut keeps is the fault file system's model either way.
"""
from __future__ import annotations

import functools
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

import logstore.broker.node  # noqa: E402 (the storage helpers are found through the path set just above)
from fault_fs import FaultFileSystem  # noqa: E402
from logstore.broker.config import BrokerConfig  # noqa: E402
from logstore.broker.coordinator.txn_log import TxnState  # noqa: E402
from logstore.broker.node import Node  # noqa: E402
from logstore.formats import DEFAULT_FORMAT  # noqa: E402
from logstore.manager import LogManager  # noqa: E402
from power_loss import MODES, DeferredFlusher  # noqa: E402
from power_loss_stores import cut_step, sweep_cuts  # noqa: E402

TOPIC = "orders"
PARTITIONS = 2
PLAIN_GROUP, TXN_GROUP = "plain", "copier"
TIMEOUT_MS = 60_000
FAR_FUTURE_MS = 1 << 60   # "now" for the timeout sweep after the reopen: every open transaction has timed out
SETTINGS: dict[str, Any] = {
    "transaction.state.log.num.partitions": 2,
    "offsets.topic.num.partitions": 2,
    # Small segments: the internal topics and the data roll during the workload.
    "transaction.state.log.segment.bytes": 700,
    "offsets.topic.segment.bytes": 700,
    "log.segment.bytes": 400,
    # Small preallocated indexes: the fault file system copies a mapped file's synced image at each fsync.
    "log.index.size.max.bytes": 4096,
    # Partitions load one after the other (the store's scheduler and cleaner are not started: `_sweep`).
    "num.recovery.threads.per.data.dir": 1,
}

TopicPartition = tuple[str, int]

# ("txn", transactional id, commit (None: never ended), {partition: values}, {partition: offset} or None)
# ("offsets", {partition: offset}): a plain OffsetCommit of PLAIN_GROUP
WORKLOAD: list[tuple] = [
    ("txn", "tx-a", True, {0: [b"a1-0", b"a1-1"], 1: [b"a1-2"]}, {0: 2}),
    ("txn", "tx-b", False, {0: [b"b1-0"]}, {1: 7}),
    ("offsets", {0: 1, 1: 1}),
    ("txn", "tx-a", True, {1: [b"a2-0" * 40]}, {0: 3, 1: 1}),
    ("offsets", {0: 4}),
    ("txn", "tx-c", None, {0: [b"c1-0"]}, None),
]


@dataclass
class Txn:
    """One transaction of the workload and how far it got."""

    transactional_id: str
    commit: bool | None
    attempted: dict[int, list[bytes]]
    offsets: dict[int, int] | None
    producer_id: int = -1
    acked: dict[int, list[bytes]] = field(default_factory=dict)   # appends that returned, by partition
    offsets_acked: bool = False
    ended: bool = False   # EndTxn returned


@dataclass
class Commit:
    """One plain offset commit."""

    offsets: dict[int, int]
    acked: bool = False


@dataclass
class Journal:
    """What one run attempted and what returned before the cut, in order."""

    flusher: DeferredFlusher = field(default_factory=DeferredFlusher)
    steps: list[Txn | Commit] = field(default_factory=list)
    boundaries: int = 0   # crossed after the node opened


def _config(directory: Path) -> BrokerConfig:
    return BrokerConfig.from_properties({**SETTINGS, "log.dirs": str(directory)})


def _prepare(directory: Path) -> None:
    """The topic and both internal topics, created by a node that then stopped cleanly."""
    with Node(_config(directory)) as node:
        node.store.create_topic(TOPIC, PARTITIONS)
        node.transactions.ensure_state_topic()
        node.transactions.ensure_offsets_topic()


def _run(node: Node, fs: FaultFileSystem, journal: Journal, workload: list[tuple]) -> None:
    """Apply `workload` step by step, recording in `journal` what was attempted and what returned."""
    txns, groups = node.transactions, node.groups
    call = functools.partial(cut_step, fs, journal.flusher)
    producers: dict[str, tuple[int, int]] = {}
    sequences: dict[tuple[int, int], int] = {}
    for step in workload:
        if step[0] == "offsets":
            commit = Commit(step[1])
            journal.steps.append(commit)
            errors = call(groups.commit_offsets, PLAIN_GROUP, "", None, -1,
                          {(TOPIC, p): (o, -1, "") for p, o in commit.offsets.items()})
            assert not any(errors.values()), errors
            commit.acked = True
            continue
        _, transactional_id, decision, values, offsets = step
        txn = Txn(transactional_id, decision, values, offsets)
        journal.steps.append(txn)
        if transactional_id not in producers:
            producers[transactional_id] = call(txns.init_producer_id, transactional_id, TIMEOUT_MS)
        pid, epoch = producers[transactional_id]
        txn.producer_id = pid
        call(txns.add_partitions, transactional_id, pid, epoch, [(TOPIC, p) for p in values])
        for p, batch in values.items():
            sequence = sequences.get((pid, p), 0)
            call(_produce, node, transactional_id, pid, epoch, p, batch, sequence)
            sequences[(pid, p)] = sequence + len(batch)
            txn.acked[p] = batch
        if offsets is not None:
            call(txns.add_offsets, transactional_id, pid, epoch, TXN_GROUP)
            errors = call(groups.commit_txn_offsets, transactional_id, TXN_GROUP, pid, epoch, "", None,
                          -1, {(TOPIC, p): (o, -1, "") for p, o in offsets.items()})
            assert not any(errors.values()), errors
            txn.offsets_acked = True
        if decision is not None:
            call(txns.end_transaction, transactional_id, pid, epoch, decision)
            txn.ended = True
    journal.flusher.run()


def _produce(node: Node, transactional_id: str, pid: int, epoch: int, partition: int, values: list[bytes],
             sequence: int) -> None:
    """A transactional acks=all produce, as the Produce handler does it: appended while the coordinator
    holds off transitions, then waited for outside."""
    target = node.store.log(TOPIC, partition)
    batch = target.format.encode_batch([None] * len(values), values, producer_id=pid, producer_epoch=epoch,
                                       base_sequence=sequence, transactional=True)
    with node.transactions.verified_write(transactional_id, pid, epoch, TOPIC, partition):
        result = target.append(bytearray(batch))
    target.durable(result.last_offset + 1).result()


def _sweep(tmp_path: Path, monkeypatch, workload: list[tuple], what: str = "", modes: list[bool] = MODES) -> int:
    """Count the workload's boundaries, then cut the power at each (and once after the last) in each mode
    and check the reopened directory; the count."""
    def prepare(start: Path) -> None:
        _prepare(start)
        # No scheduler thread (retention, checkpoints, flushes) and no cleaner thread: they would cross boundaries.
        monkeypatch.setattr(logstore.broker.node, "LogManager", functools.partial(LogManager, start_scheduler=False))

    def run(node: Node, fs: FaultFileSystem, journal: Journal) -> None:
        _run(node, fs, journal, workload)

    return sweep_cuts(tmp_path, monkeypatch, prepare, Journal, lambda d, fs: Node(_config(d), fs=fs), run, _check,
                      what=what, modes=modes)


def _batches(node: Node, partition: int) -> tuple[list[tuple[int, bytes]], list[tuple[int, int, str]]]:
    """(offset, value) of every record of a partition, and (offset, producer id, COMMIT or ABORT) of every marker."""
    target = node.store.log(TOPIC, partition)
    records, markers = [], []
    for entry, batch in target.iter_batches(0):
        if entry.is_control:
            data = target.read(entry.base_offset, 1).read()
            markers.append((entry.base_offset, entry.producer_id, DEFAULT_FORMAT.read_marker(data, 0).type_name))
        else:
            records.extend((r.offset, r.value) for r in batch)
    return records, markers


def _read_committed(node: Node) -> dict[int, list[bytes]]:
    return {p: [r.value for r in node.store.log(TOPIC, p).iter_records(isolation="read_committed")]
            for p in range(PARTITIONS)}


def _offsets(node: Node, group: str) -> dict[int, int | None]:
    fetched = node.groups.fetch_offsets(group, [(TOPIC, p) for p in range(PARTITIONS)])
    return {p: getattr(fetched[(TOPIC, p)], "offset", None) for p in range(PARTITIONS)}


def _check(directory: Path, journal: Journal, where: str) -> None:
    # A file system that keeps everything (no rule, never crashed) but does not wait for the disk.
    node = Node(_config(directory), fs=FaultFileSystem(real_syncs=False))
    try:
        _check_node(node, journal, where)
    finally:
        node.close()


def _check_node(node: Node, journal: Journal, where: str) -> None:
    txns = [s for s in journal.steps if isinstance(s, Txn)]
    logs = {p: _batches(node, p) for p in range(PARTITIONS)}
    values = {p: [v for _, v in logs[p][0]] for p in logs}
    for p, found in values.items():
        assert len(found) == len(set(found)), f"{where}: {TOPIC}-{p} holds a record twice: {found}"
    for txn in txns:
        for p, batch in txn.acked.items():
            assert set(batch) <= set(values[p]), f"{where}: an acknowledged append of {txn} is lost"

    # Before any redo: an EndTxn that returned left its markers, and a commit is visible.
    committed = _read_committed(node)
    for txn in (t for t in txns if t.ended):
        for p, batch in txn.attempted.items():
            last = max(o for o, v in logs[p][0] if v in batch)
            marker = next((kind for o, pid, kind in logs[p][1] if o > last and pid == txn.producer_id), None)
            assert marker == ("COMMIT" if txn.commit else "ABORT"), f"{where}: {txn}: marker {marker} in {TOPIC}-{p}"
            assert [v for v in committed[p] if v in batch] == (batch if txn.commit else []), \
                f"{where}: {txn}: read_committed {TOPIC}-{p} = {committed[p]}"
    _check_plain_offsets(node, journal, where)

    # What a restart's upkeep does first, then the timeout sweep: after them every transaction is decided.
    node.transactions.complete_prepared()
    node.transactions.abort_timed_out(FAR_FUTURE_MS)
    for meta in node.transactions.transactions():
        assert meta.pending is None and meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                                        TxnState.COMPLETE_ABORT), f"{where}: {meta}"
    for p in range(PARTITIONS):
        target = node.store.log(TOPIC, p)
        assert target.last_stable_offset == target.log_end_offset, f"{where}: {TOPIC}-{p} has an open transaction"
    committed = _read_committed(node)
    won = []
    for txn in txns:
        present = [(p, v) for p, batch in txn.attempted.items() for v in batch if v in values[p]]
        seen = [(p, v) for p, v in present if v in committed[p]]
        assert seen in ([], present), f"{where}: {txn} is half visible: {seen} of {present}"
        won.append(bool(seen))
        if seen:   # decided by its EndTxn, which comes after every append and offset commit returned
            assert txn.commit and len(seen) == sum(map(len, txn.attempted.values())) and txn.offsets_acked is \
                (txn.offsets is not None), f"{where}: {txn} committed"
        if txn.ended:
            assert won[-1] == txn.commit, f"{where}: {txn} was acknowledged, then undone"
    for p in range(PARTITIONS):
        expected = [v for txn, w in zip(txns, won) if w for v in txn.attempted.get(p, [])]
        assert committed[p] == expected, f"{where}: read_committed {TOPIC}-{p}"
    # A transaction's offsets count exactly when its records do; the later transaction wins.
    offsets: dict[int, int | None] = dict.fromkeys(range(PARTITIONS))
    for txn, w in zip(txns, won):
        if w and txn.offsets:
            offsets.update(txn.offsets)
    assert _offsets(node, TXN_GROUP) == offsets, f"{where}: offsets of {TXN_GROUP}"
    _check_plain_offsets(node, journal, where)


def _check_plain_offsets(node: Node, journal: Journal, where: str) -> None:
    """Each partition's offset is the last acknowledged commit's, or a later unacknowledged one's."""
    possible: dict[int, set[int | None]] = {p: {None} for p in range(PARTITIONS)}
    for commit in (s for s in journal.steps if isinstance(s, Commit)):
        for p, offset in commit.offsets.items():
            possible[p] = {offset} if commit.acked else possible[p] | {offset}
    found = _offsets(node, PLAIN_GROUP)
    assert all(found[p] in possible[p] for p in found), f"{where}: offsets of {PLAIN_GROUP}: {found}, not {possible}"


def test_coordinator_state_survives_a_cut_at_every_boundary(tmp_path, monkeypatch):
    total = _sweep(tmp_path, monkeypatch, WORKLOAD)
    assert total > len(WORKLOAD)   # at least one fsync per acknowledged step


def _random_workload(rng: random.Random, count: int) -> list[tuple]:
    steps: list[tuple] = []
    for i in range(count):
        if rng.random() < 0.3:
            steps.append(("offsets", {p: rng.randrange(100) for p in rng.sample(range(PARTITIONS), rng.randint(1, 2))}))
            continue
        partitions = rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS))
        values = {p: [b"%d-%d-%d" % (i, p, j) * rng.randint(1, 8) for j in range(rng.randint(1, 3))]
                  for p in partitions}
        offsets = {p: rng.randrange(100) for p in partitions} if rng.random() < 0.5 else None
        decision = rng.choice([True, True, False]) if i < count - 1 or rng.random() < 0.5 else None
        steps.append(("txn", rng.choice(["tx-a", "tx-b", "tx-c"]), decision, values, offsets))
    return steps


@pytest.mark.soak
@pytest.mark.parametrize("round_", range(4))
def test_random_coordinator_workloads_survive_a_cut_at_every_boundary(tmp_path, monkeypatch, round_):
    seed = int(os.environ.get("LOGSTORE_SOAK_SEED", random.randrange(1 << 30))) * 100 + round_
    print(f"seed {seed}")
    rng = random.Random(seed)
    _sweep(tmp_path, monkeypatch, _random_workload(rng, rng.randint(6, 14)), what=f"seed {seed}: ")
