"""Transactional producers commit and abort at random while the broker is SIGKILLed and restarted.

Four producer subprocesses (txn_checker.py's `produce`) each run one
transactional id and print what their client reported for every transaction:
committed, aborted, or unknown (an error the client could not resolve; they
then start a new instance of the id). Meanwhile the broker dies again and
again: SIGKILLed by the test after a random number of further transactions,
or by a power cut at a random step of the coordinator (it runs on a file
system armed there, tests/storage/txn_points.py, and loses what was never
synced). At the end
every id is initialised once more (ending anything left open) and the checker
holds the reports against read_committed and read_uncommitted reads of every
partition: committed transactions whole, once and in order, aborted ones
absent, unknown ones whole or absent. The checker itself is shown to catch
each kind of violation on made-up reads.
"""
from __future__ import annotations

import json
import os
import random
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import txn_checker
from segment_files import batches, segment_paths
from txn_checker import check_soak, read_until

pytestmark = pytest.mark.soak

PRODUCERS = 4
PARTITIONS = 4
KILLS = 10
TIMEOUT = 120.0  # s: a bound on any single wait (a producer may sit out several restarts)
CRASH_POINTS = ("txn-prepared", "txn-marker", "txn-markers-written", "txn-completed")
CRASHING_BROKER = str(Path(__file__).with_name("crashing_broker.py"))
# At least this many hits before the power goes, so that the transactions a restart finishes (at
# most one per producer, with every partition) cannot cut it while it starts. A point's N counts
# records, not fsyncs (Prepare records and markers made durable, Complete records written,
# transactions whose markers are all durable), as the old switch counted its calls, so the bounds
# are the same; a restart's redo never counts for txn-markers-written (decided by an earlier process).
MIN_HITS = {"txn-prepared": 1, "txn-marker": PRODUCERS * PARTITIONS + 1}
MIN_HITS_OTHER = PRODUCERS + 1
# (commit/abort timeout in s, attempts) by producer: some wait out a restart, some give up
# (the outcome is unknown to them) and start a new instance of their transactional id.
PATIENCE = (("--end-timeout", "10", "--attempts", "4"), ("--end-timeout", "1.5", "--attempts", "1"))


class Fleet:
    """The producer subprocesses and the reports they print, one JSON line per transaction."""

    def __init__(self, broker, topic: str, seed: int, work: Path):
        self.reports: dict[int, list[dict]] = {i: [] for i in range(PRODUCERS)}
        self.procs: dict[int, subprocess.Popen] = {}
        self.stderr = {i: work / f"producer{i}.stderr" for i in range(PRODUCERS)}
        self._partial = {i: b"" for i in range(PRODUCERS)}
        self._sel = selectors.DefaultSelector()
        for i in range(PRODUCERS):
            with open(self.stderr[i], "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, txn_checker.__file__, "produce", "--bootstrap", broker.bootstrap,
                     "--topic", topic, "--partitions", str(PARTITIONS), "--transactional-id", f"soak-{i}",
                     "--index", str(i), "--seed", str(seed * 100 + i), *PATIENCE[i % len(PATIENCE)]],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    env={**os.environ, "PYTHONPATH": str(Path(txn_checker.__file__).parent)})
            self.procs[i] = proc
            self._sel.register(proc.stdout, selectors.EVENT_READ, i)

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.reports.values())

    def _read(self, deadline: float) -> bool:
        """Take in what the producers printed, waiting until `deadline`; False once every one has exited."""
        if not any(key.data != "broker" for key in self._sel.get_map().values()):
            return False
        for key, _ in self._sel.select(max(deadline - time.monotonic(), 0)):
            i = key.data
            if i == "broker":
                continue
            chunk = os.read(key.fd, 65536)
            if not chunk:
                self._sel.unregister(key.fileobj)
                continue
            *lines, self._partial[i] = (self._partial[i] + chunk).split(b"\n")
            self.reports[i].extend(json.loads(line) for line in lines)
        return True

    def wait_for_death(self, broker, timeout: float = TIMEOUT) -> None:
        """Until the broker dies at its crash point, taking in reports meanwhile (a full pipe would stall them)."""
        pidfd = os.pidfd_open(broker.proc.pid)
        try:
            self._sel.register(pidfd, selectors.EVENT_READ, "broker")
            deadline = time.monotonic() + timeout
            while broker.proc.poll() is None:
                assert time.monotonic() < deadline, f"the broker's crash point was not reached in {timeout} s"
                self._read(deadline)
        finally:
            self._sel.unregister(pidfd)
            os.close(pidfd)
        broker.wait_killed(TIMEOUT)
        self._read(time.monotonic())

    def wait_for(self, more: int, timeout: float = TIMEOUT) -> None:
        """Until the producers have reported `more` further transactions."""
        target = self.count + more
        deadline = time.monotonic() + timeout
        while self.count < target:
            assert time.monotonic() < deadline, f"{self.count} of {target} transactions reported in {timeout} s"
            assert self._read(deadline), f"every producer exited:\n{self.logs()}"
            for i, proc in self.procs.items():
                assert proc.poll() is None, f"producer {i} exited with {proc.returncode}:\n{self.logs(i)}"

    def finish(self, timeout: float = TIMEOUT) -> None:
        """Close their stdin (they end the transaction in hand and exit), then read to the end."""
        for proc in self.procs.values():
            proc.stdin.close()
        deadline = time.monotonic() + timeout
        while self._read(deadline):
            assert time.monotonic() < deadline, f"producers still running {timeout} s after stop:\n{self.logs()}"
        for i, proc in self.procs.items():
            assert proc.wait(max(deadline - time.monotonic(), 1)) == 0, \
                f"producer {i} exited with {proc.returncode}:\n{self.logs(i)}"
            assert not self._partial[i], f"producer {i} left half a line: {self._partial[i]!r}"

    def kill(self) -> None:
        """Teardown after a failure: no producer outlives the test."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._sel.close()

    def logs(self, *which: int) -> str:
        return "\n".join(f"--- producer {i}:\n" + self.stderr[i].read_text(errors="replace")[-3000:]
                         for i in (which or self.procs))


def test_transactions_survive_random_broker_kills(start_broker, tmp_path):
    seed = int(os.environ.get("LOGSTORE_SOAK_SEED", random.randrange(1 << 30)))
    print(f"LOGSTORE_SOAK_SEED={seed}")
    rng = random.Random(seed)
    broker = start_broker("transaction.state.log.num.partitions=5",
                          "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000")
    topic = "soak"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(TIMEOUT)

    fleet = Fleet(broker, topic, seed, tmp_path)
    kills = []
    started = time.monotonic()
    try:
        fleet.wait_for(PRODUCERS)
        for cycle in range(KILLS):
            if broker.launcher:
                fleet.wait_for_death(broker)
            else:
                fleet.wait_for(rng.randint(100, 3000))
                broker.kill()
            kills.append((broker.launcher[1] if broker.launcher else "SIGKILL", fleet.count))
            broker.launcher = ()
            if cycle % 2 == 0 and cycle < KILLS - 1:  # every other death is a power cut at a crash point
                point = rng.choice(CRASH_POINTS)
                hits = MIN_HITS.get(point, MIN_HITS_OTHER)
                per_txn = 3 if point == "txn-marker" else 1  # a transaction touches 2.7 partitions on average
                broker.launcher = (CRASHING_BROKER, f"{point}:{hits + per_txn * rng.randint(0, 3000)}")
            broker.start()
        fleet.wait_for(4 * PRODUCERS)  # progress after the last restart
        fleet.finish()
    finally:
        fleet.kill()
    soak_s = time.monotonic() - started

    # Every id once more: InitProducerId ends whatever an unknown outcome left open.
    for i in range(PRODUCERS):
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"soak-{i}"})
        p.init_transactions(TIMEOUT)
        p.close(TIMEOUT)
    closer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "soak-closer"})
    closer.init_transactions(TIMEOUT)
    closer.begin_transaction()
    last = {part: f"closer-{part}".encode() for part in range(PARTITIONS)}
    for part, v in last.items():
        closer.produce(topic, value=v, partition=part)
    closer.commit_transaction(TIMEOUT)
    closer.close(TIMEOUT)
    committed = read_until(broker.bootstrap, topic, last, "read_committed", TIMEOUT)
    uncommitted = read_until(broker.bootstrap, topic, last, "read_uncommitted", TIMEOUT)
    for reads in (committed, uncommitted):
        for part in reads:
            assert reads[part][-1] == last[part] and last[part] not in reads[part][:-1]
            del reads[part][-1]
    summary = check_soak(fleet.reports, committed, uncommitted)
    print(f"seed {seed}: {len(kills)} kills in {soak_s:.0f} s {kills}; {summary}")
    assert summary.reported["committed"] > 0 and summary.reported["aborted"] > 0
    assert summary.aborted_records_in_log > 0, "no aborted record reached the log: the check proved nothing"

    broker.stop()
    # A clean stop leaves whole files: every batch a Kafka decoder can read, CRCs intact.
    decoded = sum(1 for path in segment_paths(broker.data_dir, topic) for _ in batches(path))
    assert decoded > 0


@pytest.mark.parametrize("broken, complaint", [
    pytest.param(lambda c, u: c[0].remove(b"0/0/1/C"), "committed transaction (0, 0)", id="committed-record-lost"),
    pytest.param(lambda c, u: c[1].insert(0, b"0/1/0/A"), "aborted transaction (0, 1)", id="aborted-record-seen"),
    pytest.param(lambda c, u: c[1].append(b"1/0/0/C"), "unknown outcome is partly there", id="unknown-half-there"),
    pytest.param(lambda c, u: c[0].append(b"0/0/1/C"), "a duplicate or out of order", id="duplicate"),
    pytest.param(lambda c, u: c[0].reverse(), "a duplicate or out of order", id="out-of-order"),
    pytest.param(lambda c, u: c[0].append(b"0/9/0/C"), "which no producer reported", id="unreported"),
    pytest.param(lambda c, u: u[0].clear(), "read_uncommitted does not hold", id="uncommitted-not-superset"),
])
def test_the_checker_catches_every_kind_of_violation(broken, complaint):
    reports = {0: [{"txn": 0, "parts": [0, 0, 1], "reported": "committed"},
                   {"txn": 1, "parts": [1], "reported": "aborted"}],
               1: [{"txn": 0, "parts": [0, 1], "reported": "unknown"}]}
    committed = {0: [b"0/0/0/C", b"0/0/1/C"], 1: [b"0/0/2/C"]}
    uncommitted = {0: [b"0/0/0/C", b"0/0/1/C", b"1/0/0/C"], 1: [b"0/1/0/A", b"0/0/2/C", b"1/0/1/C"]}
    summary = check_soak(reports, committed, uncommitted)
    assert (summary.committed_records, summary.aborted_records_in_log, summary.unknown_absent) == (3, 1, 1)
    broken(committed, uncommitted)
    with pytest.raises(AssertionError, match=re.escape(complaint)):
        check_soak(reports, committed, uncommitted)
