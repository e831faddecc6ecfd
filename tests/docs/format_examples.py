"""The log dirs behind the worked examples of docs/format/, written by logstore's own code.

`build(root)` makes, under `root`:

  example/    a store closed cleanly: topic `orders` (index.interval.bytes 150,
              so a small segment has index entries), partition 0 holding a plain
              batch, a transaction of producer 4000 committed, an idempotent
              batch of producer 7, a transaction of producer 4001 aborted and a
              plain batch (offsets 0-11, leader epochs 5 then 7); a roll at 12;
              a transaction of producer 4002 left open (offsets 12-13)
  live/       the same directory copied while the store still had it open:
              what a SIGKILL leaves (no clean-shutdown marker, the active
              segment's indexes still preallocated)
  crash/      live/ plus the first 40 bytes of a batch torn off the active segment
  recovered/  crash/ after the store opened it (recovery) and closed it
  read-only/  crash/ after a read-only view of it was opened and closed
  groups/     a store whose `__consumer_offsets` the group coordinator wrote:
              a KIP-848 consumer group `g` with members `a` and `b` on topic `t`,
              and one offset commit

Everything the docs show is deterministic (fixed topic ids, timestamps and
member ids; no background jobs), so it is what this writes, run after run. Not
shown: `.lock` (the pid of the process that held it) and the batch timestamps
of groups/ (the time of the append).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import logstore
from logstore.broker.coordinator.consumer_group import ConsumerGroupConfig
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.transaction import TransactionCoordinator, TxnConfig
from logstore.formats import kafka as K
from logstore.reader import PartitionView

T0 = 1_700_000_000_000
ORDERS_ID = bytes(range(16))
T_ID = bytes(range(16, 32))
TORN_BYTES = 40


def _batch(values: list[bytes], t: int, **producer) -> bytearray:
    timestamps = [T0 + t + i for i in range(len(values))]
    return bytearray(K.encode_batch([None] * len(values), values, None, timestamps, **producer))


def _append_orders(log) -> None:
    log.append(_batch([b"plain-0", b"plain-1"], 0), leader_epoch=5)
    log.append(_batch([b"txn-A-0", b"txn-A-1", b"txn-A-2"], 10, producer_id=4000, producer_epoch=3,
                      base_sequence=0, transactional=True), leader_epoch=7)
    log.append(_batch([b"idem-0", b"idem-1"], 20, producer_id=7, producer_epoch=0, base_sequence=0),
               leader_epoch=7)
    log.write_txn_marker(4000, 3, 2, commit=True, timestamp=T0 + 30, leader_epoch=7)
    log.append(_batch([b"txn-B-0", b"txn-B-1"], 15, producer_id=4001, producer_epoch=0, base_sequence=0,
                      transactional=True), leader_epoch=7)
    log.write_txn_marker(4001, 0, 2, commit=False, timestamp=T0 + 40, leader_epoch=7)
    log.append(_batch([b"plain-11"], 50), leader_epoch=7)


def _write_orders(root: Path) -> None:
    store = logstore.open(str(root / "example"), start_scheduler=False)
    try:
        store.create_topic("orders", 1, {"index.interval.bytes": 150}, topic_id=ORDERS_ID)
        log = store.log("orders", 0)
        _append_orders(log)
        log.roll()
        log.flush()
        store.checkpoint()
        log.append(_batch([b"txn-C-0", b"txn-C-1"], 60, producer_id=4002, producer_epoch=0, base_sequence=0,
                          transactional=True), leader_epoch=7)
        shutil.copytree(root / "example", root / "live")
    finally:
        store.close()


def _crash(root: Path) -> None:
    shutil.copytree(root / "live", root / "crash")
    torn = K.encode_batch([None], [b"plain-14"], None, [T0 + 70], base_offset=14)
    with open(root / "crash" / "orders-0" / "00000000000000000012.log", "ab") as f:
        f.write(torn[:TORN_BYTES])
    shutil.copytree(root / "crash", root / "recovered")
    logstore.open(str(root / "recovered"), start_scheduler=False).close()
    shutil.copytree(root / "crash", root / "read-only")
    PartitionView.open(str(root / "read-only" / "orders-0")).close()


class _Clock:
    now = T0

    def __call__(self) -> int:
        return self.now


def _write_groups(root: Path) -> None:
    clock = _Clock()
    store = logstore.open(str(root / "groups"), start_scheduler=False)
    try:
        store.create_topic("t", 2, topic_id=T_ID)
        ids = iter(range(1000, 2000))
        txn = TransactionCoordinator(store, lambda: next(ids),
                                     TxnConfig(state_partitions=1, offsets_partitions=1, fsync=False), clock=clock)
        groups = GroupCoordinator(store, txn, GroupConfig(
            fsync=False, initial_rebalance_delay_ms=0, consumer=ConsumerGroupConfig(
                session_timeout_ms=45_000, heartbeat_interval_ms=5_000, migration_policy="disabled")), clock=clock)
        beat = groups.consumer_group_heartbeat
        join = {"rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["t"]}
        a = beat("g", "a", 0, owned=[], **join)           # a takes both partitions
        clock.now += 10
        b = beat("g", "b", 0, owned=[], **join)           # b joins: the target gives it t-1
        clock.now += 10
        a = beat("g", "a", a.member_epoch, owned=list(a.assignment))   # a is told to revoke t-1
        clock.now += 10
        a = beat("g", "a", a.member_epoch, owned=list(a.assignment))   # ... does, and moves to epoch 2
        clock.now += 10
        beat("g", "b", b.member_epoch, owned=[])          # b gets t-1
        clock.now += 10
        groups.commit_offsets("g", "a", None, a.member_epoch, {("t", 0): (42, -1, "")}, api_version=9)
    finally:
        store.close()


def build(root) -> None:
    """Write every example log dir under `root` (see the module docstring)."""
    root = Path(root)
    _write_orders(root)
    _crash(root)
    _write_groups(root)
