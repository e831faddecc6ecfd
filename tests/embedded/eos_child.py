"""The embedding process of the exactly-once tests: copy `in` to `out` in transactions, as a service would.

Opens the data directory in-process (no broker), consumes `in` read_committed
in group `copier`, and per poll writes one `out` record per input record
(value `<partition>:<offset>` of the input) plus the consumer's offsets in one
transaction. Prints `started`, `midway` once the first partition's copies of
a transaction are written, `committed <records>` after each commit, and
`done` once every input record is copied. The test SIGKILLs it at any
moment, or arms the coordinator's crash switch (LOGSTORE_CRASH_AT).
"""
from __future__ import annotations

import sys

from logstore.broker import embedded

INPUT, OUTPUT, GROUP, TXN_ID = "in", "out", "copier", "copier-tx"


def main(data_dir: str, max_poll_records: int) -> None:
    node = embedded.open(data_dir, {"group.initial.rebalance.delay.ms": 0})
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
    main(sys.argv[1], int(sys.argv[2]))
