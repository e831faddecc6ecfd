"""Two exactly-once copiers in one group through a broker kill, a copier kill and a zombie: each record once.

The copiers (eos_copier.py, subprocesses) consume an input topic
read_committed, copy each record into a transaction with their consumer's
positions and commit. The broker is SIGKILLed and restarted under open
transactions of both. Copier 0 is SIGKILLed inside a transaction: after its
session times out copier 1 takes its partitions over, resuming at the offsets
its last committed transaction stored (its open one is aborted by the
broker's transaction timeout). Copier 0 comes back; then copier 1 is stopped
(SIGSTOP) inside a transaction until copier 0 holds its partitions, and when
it carries on, its commit must be refused (KIP-447: its offsets come with a
generation that is over) and its transaction aborted. Once the group's
committed offsets reach the input's end offsets, the output read
read_committed must hold every input record exactly once, in each key's
order, and none of the input's aborted records. The checker itself is shown
to catch each kind of violation on made-up reads.
"""
from __future__ import annotations

import re

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from eos_copier import BROKER_SETTINGS, CopierFleet, Copy, Input, check_copy, group_offsets, produce_input, read_output

RECORDS = 2400
PARTITIONS = 4
TIMEOUT = 30.0  # s: a bound on any single wait
# Paced so that the kills land while there is input left to copy.
OPTIONS = ("--rate", "150", "--txn-records", "20", "--txn-ms", "200")


def create_topics(bootstrap: str, *names: str) -> None:
    """Topics of PARTITIONS partitions each."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names]).values():
        future.result(TIMEOUT)


def test_two_copiers_copy_exactly_once_through_kills_and_a_zombie(start_broker, tmp_path):
    broker = start_broker(*BROKER_SETTINGS)
    create_topics(broker.bootstrap, "in", "out")
    source = produce_input(broker.bootstrap, "in", RECORDS, PARTITIONS)
    fleet = CopierFleet(broker.bootstrap, tmp_path, "copiers", "in", "out", 2, OPTIONS)
    try:
        fleet.wait_until(lambda: fleet.copied >= 300 and all(fleet.open_records.values()),
                         "both copying, each with records of an open transaction in the log", TIMEOUT)
        broker.kill()
        broker.start()
        fleet.wait_copied(200, TIMEOUT)

        fleet.wait_until(lambda: fleet.open_records[0] >= 5, "copier 0 inside a transaction", TIMEOUT)
        taken = set(fleet.assignment[0])
        fleet.kill(0)
        # Copier 1 commits offsets of copier 0's partitions: it holds them and got past their open transaction.
        mark = len(fleet.events[1])
        fleet.wait_until(lambda: taken <= {int(p) for e in fleet.events[1][mark:] if e["event"] == "committed"
                                           for p in e["offsets"]}, "copier 1 took over", TIMEOUT)
        assert fleet.assignment[1] == set(range(PARTITIONS))
        fleet.start(0)

        # Copier 1 stopped inside a transaction, before it sent its offsets, until copier 0 holds its
        # partitions: when it carries on, its commit (offsets of its old generation) must fail.
        pause = fleet.pause_in_transaction(1, TIMEOUT)
        assert pause.holding and not pause.committing, pause
        fleet.wait_until(lambda: fleet.moved_on_without(1) and fleet.assignment[0] == set(range(PARTITIONS)),
                         "copier 0 took over from the zombie", TIMEOUT)
        mark = len(fleet.events[1])
        fleet.resume(1)
        ended = ("committed", "aborted", "renewed")
        fleet.wait_until(lambda: any(e["event"] in ended for e in fleet.events[1][mark:]),
                         "the zombie ending its transaction", TIMEOUT)
        outcome = next(e for e in fleet.events[1][mark:] if e["event"] in ended)
        assert outcome["event"] != "committed" and outcome["records"] > 0, outcome

        fleet.wait_until(lambda: group_offsets(broker.bootstrap, "copiers", "in", PARTITIONS) == source.end_offsets,
                         "the group's offsets at the input's end", TIMEOUT)
        fleet.finish(TIMEOUT)
    finally:
        fleet.close()

    committed = read_output(broker.bootstrap, "out", PARTITIONS, "read_committed")
    uncommitted = read_output(broker.bootstrap, "out", PARTITIONS, "read_uncommitted")
    summary = check_copy(source, committed, uncommitted)
    print(f"{summary}; the zombie: {outcome}")
    assert summary.copied == RECORDS
    assert summary.aborted_copies_in_log > 0, "no copier transaction was aborted: the kills proved nothing"


def _made_up() -> tuple[Input, list[Copy]]:
    source = Input({(0, 0): (b"a", b"r0"), (0, 1): (b"a", b"r1"), (1, 0): (b"b", b"r2")}, {0: 2, 1: 1})
    copies = [Copy(0, 0, b"a", b"r0!", (0, 0)), Copy(0, 1, b"a", b"r1!", (0, 1)), Copy(1, 0, b"b", b"r2!", (1, 0))]
    return source, copies


@pytest.mark.parametrize("broken, complaint", [
    pytest.param(lambda c: c.pop(1), "1 input records not copied", id="lost"),
    pytest.param(lambda c: c.append(Copy(1, 1, b"b", b"r2!", (1, 0))), "copied 2 times", id="duplicate"),
    pytest.param(lambda c: c.append(Copy(1, 1, b"junk", b"junk!", (1, 5))), "no such input record", id="junk"),
    pytest.param(lambda c: c.__setitem__(2, Copy(1, 0, b"b", b"r2?", (1, 0))), "the input there is", id="altered"),
    pytest.param(lambda c: c.__setitem__(0, Copy(0, 2, b"a", b"r0!", (0, 0))), "out of input order",
                 id="reordered"),
])
def test_the_checker_catches_every_kind_of_violation(broken, complaint):
    source, copies = _made_up()
    assert check_copy(source, copies, copies).copied == 3
    broken(copies)
    with pytest.raises(AssertionError, match=re.escape(complaint)):
        check_copy(source, copies, copies + [Copy(1, 9, b"b", b"r2!", (1, 0))])


def test_the_checker_wants_read_uncommitted_to_hold_read_committed():
    source, copies = _made_up()
    with pytest.raises(AssertionError, match="read_uncommitted misses 1"):
        check_copy(source, copies, copies[1:])
