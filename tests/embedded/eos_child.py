"""The embedding process of the exactly-once tests: copy `in` to `out` in transactions, as a service would.

Opens the data directory in-process (no broker), consumes `in` read_committed
in group `copier`, and per poll writes one `out` record per input record
(value `<partition>:<offset>` of the input) plus the consumer's offsets in one
transaction. Prints `started`, `midway` once the first partition's copies of
a transaction are written, `committed <records>` after each commit, and
`done` once every input record is copied. The test SIGKILLs it at any
moment, or names a step of the transaction coordinator (a point of
tests/storage/txn_points.py, `name` or `name:N`): the node then writes
through a file system that loses power there, dropping what was never
synced, and the process SIGKILLs itself.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))

from fault_fs import FaultFileSystem  # noqa: E402 (found through the path set just above)
from logstore.broker import embedded  # noqa: E402
from logstore.broker.config import BrokerConfig  # noqa: E402
from logstore.broker.node import Node  # noqa: E402

INPUT, OUTPUT, GROUP, TXN_ID = "in", "out", "copier", "copier-tx"
SETTINGS = {"group.initial.rebalance.delay.ms": 0}


def open_node(data_dir: str, crash_at: str | None) -> Node:
    """`embedded.open`, on a file system that loses power at `crash_at` if one is named."""
    if crash_at is None:
        return embedded.open(data_dir, SETTINGS)
    fs = FaultFileSystem(kill_on_power_loss=True)
    fs.crash_at_named(crash_at)
    # What embedded.open does, which takes no file system.
    node = Node(BrokerConfig.from_properties({**SETTINGS, "log.dirs": data_dir}), fs=fs)
    embedded._forget_members_of_earlier_processes(node)
    return node.start()


def main(data_dir: str, max_poll_records: int, crash_at: str | None = None) -> None:
    node = open_node(data_dir, crash_at)
    producer = embedded.Producer(node, {"transactional.id": TXN_ID, "linger.ms": 0})
    producer.init_transactions()
    consumer = embedded.Consumer(node, {"group.id": GROUP, "isolation.level": "read_committed",
                                        "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                        "max.poll.records": max_poll_records})
    consumer.subscribe([INPUT])
    ends = {(INPUT, p): node.store.log(INPUT, p).log_end_offset for p in range(node.store.partitions(INPUT))}
    print("started", flush=True)
    while True:
        polled = consumer.poll(0.2)
        if not polled:
            assigned = consumer.assignment()
            if sorted(assigned) == sorted(ends) and all(consumer.position(tp) >= ends[tp] for tp in ends):
                break
            continue
        producer.begin_transaction()
        count = 0
        for (_, partition), records in polled.items():
            for record in records:
                producer.send(OUTPUT, f"{partition}:{record.offset}".encode(), key=record.key)
                count += 1
            if count and count == len(records):
                producer.flush()
                print("midway", flush=True)  # records of this transaction are in the log now
        producer.send_offsets_to_transaction({tp: consumer.position(tp) for tp in polled},
                                             consumer.group_metadata())
        producer.commit_transaction()
        print(f"committed {count}", flush=True)
    consumer.close()
    producer.close()
    node.close()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
