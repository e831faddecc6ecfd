"""Share groups against classic consumer groups: records/s of 4 members on a 4-partition topic, same client.

    .venv/bin/python bench/share_groups.py --data-root /dev/shm                 # 1,000,000 records of 100 B
    .venv/bin/python bench/share_groups.py --data-root /dev/shm --count 200000 --rounds 3

Issue 28's target: 4 ShareConsumers (implicit acknowledgement) reach ≥ 0.5× the records/s of a classic
consumer group of 4 confluent-kafka Consumers reading the same topic, in the same run. One broker (this
checkout's `logstore broker`, fsync on as by default) holds the topic; each round reads it once with a
fresh classic group and once with a fresh share group (order swapped every other round), each member in
its own process so the Python clients do not share a GIL. A round's time runs from the group's first record
(joining, and the classic group's rebalance delay, are not counted) to the moment the members' counts add up
to every record; the table shows each round and the median ratio, and for each kind the CPU per 1M records
of the broker (from /proc) and of the four members together (their rusage): the members and the broker
share the machine's cores.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "clients"))

from broker_process import BrokerProcess, free_port  # noqa: E402 - the tests' broker launcher

TARGET = 0.5
MEMBERS = 4
PARTITIONS = 4
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (s), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _member(kind: str, bootstrap: str, group: str, topic: str, counter, span, total: int) -> None:
    """One group member: count records into `counter` until it reaches `total`; `span` gets the times the
    group's first record and its last one arrived."""
    from confluent_kafka import Consumer, ShareConsumer
    if kind == "share":
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        while counter.value < total:
            got = sum(1 for m in consumer.poll(0.2) if m.error() is None)
            if got:
                _count(counter, span, got, total)
    else:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": True})
        consumer.subscribe([topic])
        while counter.value < total:
            got = sum(1 for m in consumer.consume(1000, 0.2) if m.error() is None)
            if got:
                _count(counter, span, got, total)
    consumer.close()


def _count(counter, span, got: int, total: int) -> None:
    """Add a member's `got` records to the group's count, noting the time of the first and of the last."""
    with counter.get_lock():
        if not counter.value:
            span[0] = time.monotonic()
        counter.value += got
        if counter.value >= total:
            span[1] = time.monotonic()


def _round(kind: str, broker: BrokerProcess, topic: str, group: str, total: int) -> tuple[float, float, float]:
    """Read the whole topic with 4 members of `kind`: (records/s, broker CPU s, members' CPU s)."""
    if kind == "share":
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
        entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.incremental_alter_configs(
                [ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
            future.result(60)
    counter = mp.Value("q", 0)
    # Members leaving (a share member's last long-poll, its close) come after the last record: not counted.
    span = mp.Array("d", 2)
    cpu_before = _cpu_seconds(broker.proc.pid)
    members_before = os.times()
    members = [mp.Process(target=_member, args=(kind, broker.bootstrap, group, topic, counter, span, total))
               for _ in range(MEMBERS)]
    for m in members:
        m.start()
    for m in members:
        m.join()
    elapsed = span[1] - span[0]
    members_after = os.times()
    members_cpu = (members_after.children_user + members_after.children_system
                   - members_before.children_user - members_before.children_system)
    return total / elapsed, _cpu_seconds(broker.proc.pid) - cpu_before, members_cpu


def _produce(bootstrap: str, topic: str, count: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"x" * size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _row(kind: str, result: tuple[float, float, float], count: int) -> str:
    rate, broker_cpu, members_cpu = result
    per_million = 1e6 / count
    return (f"{kind} {rate:>10,.0f} rec/s (CPU per 1M: broker {broker_cpu * per_million:.2f} s, "
            f"members {members_cpu * per_million:.2f} s)")


def main() -> None:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-root", default=None, help="where the broker's log dir goes (e.g. /dev/shm)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.data_root) as root:
        data = Path(root) / "broker"
        data.mkdir()
        broker = BrokerProcess("127.0.0.1", free_port(), data).start()
        try:
            topic = "share-bench"
            _produce(broker.bootstrap, topic, args.count, args.size)
            rows = []
            for r in range(args.rounds):
                kinds = ("classic", "share") if r % 2 == 0 else ("share", "classic")
                result = {kind: _round(kind, broker, topic, f"{kind}-{r}", args.count) for kind in kinds}
                rows.append(result)
                ratio = result["share"][0] / result["classic"][0]
                cells = "  ".join(_row(kind, result[kind], args.count) for kind in ("classic", "share"))
                print(f"round {r + 1}: {cells}  ratio {ratio:.2f}x", flush=True)
        finally:
            broker.stop()
    ratios = [row["share"][0] / row["classic"][0] for row in rows]
    median = statistics.median(ratios)
    verdict = "meets" if median >= TARGET else "misses"
    print(f"median share/classic: {median:.2f}x ({verdict} the target of {TARGET}x); "
          f"{args.count:,} records of {args.size} B, {MEMBERS} members, {PARTITIONS} partitions")


if __name__ == "__main__":
    main()
