"""Exactly-once copiers through many SIGKILLs of copiers and of the broker, at seeded random points.

Four copiers (eos_copier.py) copy a keyed 8-partition input in one group,
with a partition.assignment.strategy drawn from the seed. At random points of
the copy (by records copied) the test
- SIGKILLs a copier inside a transaction and restarts it at once (its
  init_transactions aborts what its predecessor left open), or only at the
  next point (the others take its partitions over after its session timeout,
  the broker aborts its transaction after its timeout);
- SIGSTOPs a copier inside a transaction until the others hold its partitions
  (a zombie: when it carries on, the broker must fence its commit);
- SIGKILLs the broker and restarts it at once, sometimes with a copier;
- or restarts the broker on a file system that loses power at a random step
  of a commit (after PrepareCommit, between markers, after the markers, after
  Complete: tests/storage/txn_points.py), dropping what was never synced,
  and restarts it once it died there.
Once every slot runs again and the group's committed offsets reach the
input's end offsets, the output read read_committed must hold every input
record exactly once, in each key's order. LOGSTORE_SOAK_SEED=<n> replays a
run's choices (the timing of the processes still varies).
"""
from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from eos_copier import BROKER_SETTINGS, CopierFleet, check_copy, group_offsets, produce_input, read_output

pytestmark = pytest.mark.soak

COPIERS = 4
PARTITIONS = 8
RECORDS = 30000
POINTS = 24  # disruptions, spread over the copy
TIMEOUT = 60.0  # s: a bound on any single wait (a copier may sit out a takeover and a restart)
OPTIONS = ("--rate", "250", "--txn-records", "25", "--txn-ms", "200")
STRATEGIES = ("cooperative-sticky", "range", "roundrobin")
ACTIONS = ("copier", "copier", "copier-later", "zombie", "broker", "broker-and-copier", "crash")
CRASH_POINTS = ("txn-prepared", "txn-marker", "txn-markers-written", "txn-completed")
CRASHING_BROKER = str(Path(__file__).with_name("crashing_broker.py"))
# Hits before the power may go, so that what a restart finishes (at most one transaction per copier,
# on every output partition and one offsets partition) cannot cut it before it listens. A point's N
# counts records, not fsyncs (Prepare records and markers made durable, Complete records written,
# transactions whose markers are all durable), as the old switch counted its calls: a restart's redo
# writes at most one marker per partition of each copier's transaction and one Complete each, as
# before; it never counts for txn-markers-written (decided by an earlier process), which keeps the
# others' bound anyway.
MIN_HITS = {"txn-marker": COPIERS * (PARTITIONS + 1) + 1}
MIN_HITS_OTHER = COPIERS + 1


class Disruptions:
    """What the soak does to the copiers and the broker, and a record of it."""

    def __init__(self, broker, fleet: CopierFleet, rng: random.Random):
        self.broker, self.fleet, self.rng = broker, fleet, rng
        self.happened: list[str] = []
        self.down: list[int] = []  # copier slots killed and not restarted yet
        self.zombies: Counter[str] = Counter()  # how each zombie's transaction ended

    def revive_broker(self) -> None:
        """Restart the broker on the real file system if its crash point was reached (called between events)."""
        broker = self.broker
        if broker.launcher and not broker.running:
            broker.wait_killed(TIMEOUT)
            self.happened.append(f"crash {broker.launcher[1]}")
            broker.launcher = ()
            broker.start()

    def wait_until(self, done, what: str, timeout: float = TIMEOUT) -> None:
        """The fleet's `wait_until`, reviving the broker meanwhile."""
        self.fleet.wait_until(done, what, timeout, self.revive_broker)

    def restart_down(self) -> None:
        """Restart the copiers killed to be restarted later."""
        for slot in self.down:
            self.fleet.start(slot)
        self.down.clear()

    def _pick_copier(self) -> int:
        """A copier holding partitions, once inside a transaction with records in the log (if its input
        has not run dry)."""
        fleet = self.fleet
        slot = self.rng.choice([slot for slot in fleet.procs if fleet.assignment[slot]] or list(fleet.procs))
        fleet.wait(lambda: fleet.open_records[slot] > 0, 5, self.revive_broker)
        return slot

    def kill_copier(self, point: int, later: bool) -> None:
        """SIGKILL a copier; restart it now, or at the next point if `later`."""
        slot = self._pick_copier()
        self.fleet.kill(slot)
        self.happened.append(f"kill copier {slot}{' (restarted later)' if later else ''}@{point}")
        if later:
            self.down.append(slot)
        else:
            self.fleet.start(slot)

    def zombie(self, point: int) -> None:
        """Stop a copier until the others hold its partitions; its transaction must not commit then."""
        fleet = self.fleet
        slot = self.rng.choice([slot for slot in fleet.procs if fleet.assignment[slot]] or list(fleet.procs))
        pause = fleet.pause_in_transaction(slot, 5, self.revive_broker)
        self.wait_until(lambda: fleet.moved_on_without(slot),
                        f"the group moving on without copier {slot}")
        mark = len(fleet.events[slot])
        fleet.resume(slot)
        ended = ("committed", "aborted", "renewed", "lost")
        self.wait_until(lambda: any(e["event"] in ended for e in fleet.events[slot][mark:]),
                        f"zombie {slot} carrying on")
        outcome = next(e for e in fleet.events[slot][mark:] if e["event"] in ended)
        # Unless it had sent its offsets already (then the others wait for its transaction to end), it
        # must not commit: its offsets come with a generation that is no more.
        assert not pause.holding or pause.committing or outcome["event"] != "committed", \
            f"zombie {slot} committed after the group moved on without it: {outcome}\n" + "\n".join(
                f"{s}: {e}" for s in fleet.events for e in fleet.events[s][pause.marks[s]:]
                if e["event"] not in ("delivered", "committing"))
        self.zombies[("in-commit " if pause.committing else "") + outcome["event"]] += 1
        self.happened.append(f"zombie {slot}@{point}")

    def kill_broker(self, point: int) -> None:
        """SIGKILL the broker and restart it."""
        if self.broker.running:
            self.broker.kill()
            self.happened.append(f"kill broker@{point}")
            self.broker.start()

    def arm_crash(self, point: int) -> None:
        """Restart the broker on a file system armed at a crash point; `revive_broker` restarts it once the
        power went there."""
        broker = self.broker
        if broker.launcher or not broker.running:
            return
        name = self.rng.choice(CRASH_POINTS)
        broker.launcher = (CRASHING_BROKER, f"{name}:{MIN_HITS.get(name, MIN_HITS_OTHER) + self.rng.randint(0, 200)}")
        broker.kill()
        broker.start()
        self.happened.append(f"kill broker, armed {broker.launcher[1]}@{point}")

    def disarm(self) -> None:
        """A crash point not reached: restart the broker on the real file system."""
        if self.broker.launcher:
            self.broker.kill()
            self.broker.launcher = ()
            self.broker.start()


def test_copiers_copy_exactly_once_through_random_kills(start_broker, tmp_path):
    seed = int(os.environ.get("LOGSTORE_SOAK_SEED", random.randrange(1 << 30)))
    print(f"LOGSTORE_SOAK_SEED={seed}")
    rng = random.Random(seed)
    strategy = rng.choice(STRATEGIES)
    broker = start_broker(*BROKER_SETTINGS, "transaction.state.log.num.partitions=5")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in ("in", "out")]).values():
        future.result(TIMEOUT)
    source = produce_input(broker.bootstrap, "in", RECORDS, PARTITIONS, aborted_every=1000)

    def copied_all() -> bool:
        try:
            return broker.running and group_offsets(broker.bootstrap, "copiers", "in",
                                                    PARTITIONS) == source.end_offsets
        except KafkaException:
            return False  # the power went at the crash point meanwhile

    started = time.monotonic()
    fleet = CopierFleet(broker.bootstrap, tmp_path, "copiers", "in", "out", COPIERS,
                        (*OPTIONS, "--strategy", strategy))
    soak = Disruptions(broker, fleet, rng)
    try:
        for point in sorted(rng.sample(range(500, RECORDS * 9 // 10), POINTS)):
            soak.wait_until(lambda: fleet.copied >= point, f"{point} records copied")
            soak.restart_down()
            action = rng.choice(ACTIONS)
            if action == "zombie":
                soak.zombie(point)
            if action in ("copier", "copier-later", "broker-and-copier"):
                soak.kill_copier(point, later=action == "copier-later")
            if action in ("broker", "broker-and-copier"):
                soak.kill_broker(point)
            if action == "crash":
                soak.arm_crash(point)
        soak.restart_down()
        soak.wait_until(copied_all, "the group's offsets at the input's end", 4 * TIMEOUT)
        soak.disarm()
        fleet.finish(TIMEOUT)
    finally:
        fleet.close()
    soak_s = time.monotonic() - started

    committed = read_output(broker.bootstrap, "out", PARTITIONS, "read_committed", TIMEOUT)
    uncommitted = read_output(broker.bootstrap, "out", PARTITIONS, "read_uncommitted", TIMEOUT)
    summary = check_copy(source, committed, uncommitted)
    print(f"seed {seed}, {strategy}, {soak_s:.0f} s: {'; '.join(soak.happened)}\n{summary}; copiers reported "
          f"{fleet.count('aborted')} aborted, {fleet.count('renewed')} renewed, {fleet.count('lost')} lost; "
          f"zombies {dict(soak.zombies)}")
    assert summary.copied == RECORDS
    assert summary.aborted_copies_in_log > 0, "no copier transaction was aborted: the kills proved nothing"
