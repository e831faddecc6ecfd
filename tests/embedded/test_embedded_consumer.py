"""The embedded consumer: positions, resets, read_committed, and group membership with Kafka's callbacks."""
from __future__ import annotations

import ast
import pathlib
import re
import time

import pytest

from logstore.broker import embedded
from logstore.broker.coordinator.consumer_protocol import decode_subscription
from logstore.errors import InvalidConfigError, InvalidGroupIdError

DEADLINE_S = 30
# Members learn of a rebalance at their next heartbeat, as Kafka's do; short, so the tests move quickly.
HEARTBEAT_MS = 100


def _fill(node, topic, partitions, per_partition):
    node.store.create_topic(topic, partitions)
    producer = embedded.Producer(node)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, b"%d-%d" % (p, i), partition=p)
    producer.flush()


def _until(consumers, done, got: dict | None = None) -> None:
    """Poll every consumer in turn until `done()` holds; records go to `got` as (consumer index, tp) -> values."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, "the group did not settle"
        for i, consumer in enumerate(consumers):
            for tp, records in consumer.poll(0.05).items():
                if got is not None:
                    got.setdefault((i, tp), []).extend(r.value for r in records)


def test_assigned_partitions_read_in_order_within_max_poll_records(node):
    _fill(node, "t", 2, 300)
    consumer = embedded.Consumer(node, {"auto.offset.reset": "earliest", "max.poll.records": 70})
    consumer.assign([("t", 0), ("t", 1)])
    seen = {("t", 0): [], ("t", 1): []}
    while sum(map(len, seen.values())) < 600:
        polled = consumer.poll(1)
        assert 0 < sum(map(len, polled.values())) <= 70
        for tp, records in polled.items():
            seen[tp].extend(r.offset for r in records)
    assert seen == {("t", 0): list(range(300)), ("t", 1): list(range(300))}
    assert consumer.position(("t", 0)) == 300
    consumer.seek(("t", 1), 295)
    assert [r.offset for r in consumer.poll(1)[("t", 1)]] == [295, 296, 297, 298, 299]
    assert consumer.poll(0.05) == {}


def test_auto_offset_reset(node):
    _fill(node, "t", 1, 10)
    latest = embedded.Consumer(node)
    latest.assign([("t", 0)])
    assert latest.position(("t", 0)) == 10
    earliest = embedded.Consumer(node, {"auto.offset.reset": "earliest"})
    earliest.assign([("t", 0)])
    assert earliest.position(("t", 0)) == 0
    strict = embedded.Consumer(node, {"auto.offset.reset": "none", "group.id": "g"})
    strict.assign([("t", 0)])
    with pytest.raises(embedded.NoOffsetForPartitionError):
        strict.poll(0)
    with pytest.raises(InvalidConfigError):
        embedded.Consumer(node, {"auto.offset.reset": "smallest"})


def test_poll_waits_for_an_append_and_wakes_for_it(node):
    node.store.create_topic("t", 1)
    consumer = embedded.Consumer(node)
    consumer.assign([("t", 0)])
    assert consumer.poll(0) == {}
    producer = embedded.Producer(node, {"linger.ms": 0})
    producer.send("t", b"late")
    assert [r.value for r in consumer.poll(DEADLINE_S)[("t", 0)]] == [b"late"]


def test_read_committed_stops_at_an_open_transaction_and_skips_aborted_ones(node):
    node.store.create_topic("t", 1)
    plain = embedded.Producer(node, {"linger.ms": 0})
    txn = embedded.Producer(node, {"transactional.id": "tx", "linger.ms": 0})
    txn.init_transactions()
    plain.send("t", b"before")
    txn.begin_transaction()
    txn.send("t", b"aborted")
    txn.abort_transaction()
    txn.begin_transaction()
    txn.send("t", b"open")
    plain.send("t", b"after-open")
    committed = embedded.Consumer(node, {"isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    uncommitted = embedded.Consumer(node, {"auto.offset.reset": "earliest"})
    for c in (committed, uncommitted):
        c.assign([("t", 0)])
    assert [r.value for r in committed.poll(0.05).get(("t", 0), [])] == [b"before"]
    assert [r.value for r in uncommitted.poll(0.05)[("t", 0)]] == [b"before", b"aborted", b"open", b"after-open"]
    txn.commit_transaction()
    assert [r.value for r in committed.poll(1)[("t", 0)]] == [b"open", b"after-open"]


def test_a_group_splits_partitions_and_a_leaver_hands_them_over(node):
    _fill(node, "t", 4, 50)
    events = []

    def consumer(name):
        c = embedded.Consumer(node, {"group.id": "g", "auto.offset.reset": "earliest", "client.id": name,
                                     "heartbeat.interval.ms": HEARTBEAT_MS})
        c.subscribe(["t"], on_assign=lambda _, tps: events.append((name, "assign", tps)),
                    on_revoke=lambda _, tps: events.append((name, "revoke", tps)))
        return c

    a, b = consumer("a"), consumer("b")
    got: dict = {}
    _until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, got)
    assert sorted(a.assignment() + b.assignment()) == [("t", p) for p in range(4)]
    _until([a, b], lambda: sum(len(v) for v in got.values()) >= 200, got)
    # Each partition read once, whole and in order, by the member that holds it now.
    by_partition = {tp: values for (_, tp), values in got.items()}
    assert len(got) == 4 and by_partition == {("t", p): [b"%d-%d" % (p, i) for i in range(50)] for p in range(4)}
    description = node.groups.describe("g")
    assert (description.state, description.protocol_type, description.protocol_name) == ("Stable", "consumer", "range")
    assert all(decode_subscription(m.metadata).topics == ("t",) for m in description.members)
    a.commit()
    b.commit()
    held_by_b = b.assignment()
    b.close()
    assert events[-1] == ("b", "revoke", held_by_b)
    _until([a], lambda: len(a.assignment()) == 4)
    assert events[-1] == ("a", "assign", [("t", p) for p in range(4)])
    assert node.groups.describe("g").state == "Stable" and len(node.groups.describe("g").members) == 1
    # b committed what it read: a takes b's partitions over from there and finds nothing new.
    assert a.poll(0.05) == {}
    assert a.committed([("t", p) for p in range(4)]) == {("t", p): 50 for p in range(4)}


def test_cooperative_members_revoke_only_what_moves(node):
    _fill(node, "t", 6, 5)
    events = []

    def consumer(name):
        c = embedded.Consumer(node, {"group.id": "coop", "partition.assignment.strategy": "cooperative-sticky",
                                     "auto.offset.reset": "earliest", "heartbeat.interval.ms": HEARTBEAT_MS})
        c.subscribe(["t"], on_assign=lambda _, tps: events.append((name, "assign", tps)),
                    on_revoke=lambda _, tps: events.append((name, "revoke", tps)))
        return c

    a = consumer("a")
    _until([a], lambda: len(a.assignment()) == 6)
    before = set(a.assignment())
    events.clear()
    b = consumer("b")
    _until([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3)
    assert set(a.assignment()) <= before
    revoked = [tps for who, kind, tps in events if kind == "revoke"]
    # a gave up exactly the three that moved, in one revocation, and never lost the three it kept.
    assert revoked == [sorted(b.assignment())]
    assert [tps for who, kind, tps in events if who == "a" and kind == "assign"] in ([[]], [[], []])


def test_subscribe_needs_a_group_and_group_metadata_names_the_member(node):
    node.store.create_topic("t", 1)
    with pytest.raises(InvalidGroupIdError):
        embedded.Consumer(node).subscribe(["t"])
    c = embedded.Consumer(node, {"group.id": "g"})
    c.subscribe(["t"])
    _until([c], lambda: c.assignment() == [("t", 0)])
    meta = c.group_metadata()
    assert meta.group_id == "g" and meta.generation_id == 1 and meta.member_id.startswith("consumer-g-")


def test_a_topic_that_grows_is_rebalanced(node):
    node.store.create_topic("t", 1)
    c = embedded.Consumer(node, {"group.id": "g"})
    c.subscribe(["t"])
    _until([c], lambda: c.assignment() == [("t", 0)])
    node.store.create_partitions("t", 3)
    _until([c], lambda: c.assignment() == [("t", 0), ("t", 1), ("t", 2)])


def test_readme_embedded_example_runs(tmp_path, monkeypatch, capsys):
    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    example = next(b for b in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S) if "embedded.open" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, str(readme), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "assigned [('orders', 0), ('orders', 1)]"
    committed = ast.literal_eval(lines[-1])
    assert sum(committed.values()) == 3


def test_a_member_that_stops_polling_leaves_and_its_partitions_are_lost_then_regained(node):
    node.store.create_topic("t", 2)
    lost = []
    c = embedded.Consumer(node, {"group.id": "g", "max.poll.interval.ms": 200, "heartbeat.interval.ms": HEARTBEAT_MS})
    c.subscribe(["t"], on_lost=lambda _, tps: lost.append(tps))
    _until([c], lambda: len(c.assignment()) == 2)
    # No poll for longer than max.poll.interval.ms: the upkeep takes the member out of the group.
    with node.appended:
        assert node.appended.wait_for(lambda: node.groups.describe("g").members == (), DEADLINE_S)
    _until([c], lambda: lost == [[("t", 0), ("t", 1)]] and len(c.assignment()) == 2)
