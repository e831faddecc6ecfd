"""The README's transactional producer example runs as written against a real broker."""
from __future__ import annotations

import pathlib
import re

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_transaction_example_commits_across_two_partitions(start_broker):
    broker = start_broker("transaction.state.log.num.partitions=3")
    example = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
                   if "commit_transaction" in b and "127.0.0.1:9092" in b)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("orders", 2, 1)]).values():
        future.result()
    exec(compile(example.replace("127.0.0.1:9092", broker.bootstrap), str(README), "exec"), {})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readme",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        got = {}
        for partition in (0, 1):
            low, high = consumer.get_watermark_offsets(TopicPartition("orders", partition), timeout=10)
            # The committed record, then the COMMIT marker: the read_committed end is past both.
            assert (low, high) == (0, 2)
            consumer.assign([TopicPartition("orders", partition, 0)])
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            got[partition] = message.value()
        assert got == {0: b"one", 1: b"two"}
    finally:
        consumer.close()
