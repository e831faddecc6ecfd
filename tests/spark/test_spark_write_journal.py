"""The sink's mechanism in the storage library, without Spark: `logstore.dir_transactions` and `dir_writer`
deciding, redoing and timing out transactions in a real log dir."""
from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import logstore
from logstore.dir_transactions import JOURNAL_FILE, DirTransactions, TransactionTimedOutError, hold_dir
from logstore.dir_writer import DirTaskWriter, JobTask
from logstore.read_committed import READ_COMMITTED


def write(path, job, task, attempt, values, *, timeout_ms=60_000, query=None, batch=None):
    """One task attempt's rows into partition 0 of `t`; its prepared intent (None: it wrote nothing)."""
    writer = DirTaskWriter(str(path), JobTask(job, task, attempt, timeout_ms, query=query, batch=batch))
    writer.write("t", 0, None, pa.array(values, pa.binary()))
    return writer.prepare()


def visible(path):
    """Partition 0's read_committed values, and whether its last stable offset is its end."""
    with hold_dir(str(path), 5) as store:
        log = store.log("t", 0)
        return [r.value for r in log.iter_records(isolation=READ_COMMITTED)], \
            log.last_stable_offset == log.log_end_offset


@pytest.fixture
def path(tmp_path):
    with logstore.open(str(tmp_path)) as store:
        store.create_topic("t", 1)
    return tmp_path


def test_commit_makes_the_chosen_attempts_visible_and_aborts_the_others(path):
    winner = write(path, "job", 0, 0, [b"a", b"b"])
    loser = write(path, "job", 0, 1, [b"a", b"b"])        # a speculative copy of the same task
    other = write(path, "job", 1, 0, [b"c"])
    assert visible(path) == ([], False)
    with hold_dir(str(path), 5) as store:
        assert DirTransactions(store).commit("job", [winner.producer_id, other.producer_id]) == 2
    assert visible(path) == ([b"a", b"b", b"c"], True)
    assert loser.producer_id not in (winner.producer_id, other.producer_id)
    # A late attempt of a decided job writes nothing.
    assert write(path, "job", 2, 0, [b"late"]) is None
    assert visible(path) == ([b"a", b"b", b"c"], True)


def test_a_decision_interrupted_after_its_record_is_finished_by_the_next_holder(path):
    intent = write(path, "job", 0, 0, [b"x"])
    aborted = write(path, "job", 1, 0, [b"y"])
    with hold_dir(str(path), 5) as store:
        # What a driver killed right after recording its decision leaves: the decision, no marker.
        DirTransactions(store).decide("job", [intent.producer_id])
    with hold_dir(str(path), 5) as store:
        found = DirTransactions(store).recover()
    assert (found.committed, found.aborted) == (1, 1) and aborted is not None
    assert visible(path) == ([b"x"], True)
    with hold_dir(str(path), 5) as store:       # and again: nothing left to do, nothing written twice
        assert DirTransactions(store).recover().committed == 0
    assert visible(path) == ([b"x"], True)


def test_expired_transactions_are_aborted_and_their_job_cannot_commit(path):
    intent = write(path, "job", 0, 0, [b"x"], timeout_ms=1)
    with hold_dir(str(path), 5) as store:
        found = DirTransactions(store).recover(now_ms=intent.start_ms + 1)
    assert found.aborted == 1
    assert visible(path) == ([], True)
    with hold_dir(str(path), 5) as store, pytest.raises(TransactionTimedOutError, match="were aborted"):
        DirTransactions(store).commit("job", [intent.producer_id])
    assert visible(path) == ([], True)


def test_a_replayed_streaming_batch_commits_nothing_twice(path):
    first = write(path, "q-0", 0, 0, [b"r0"], query="q", batch=0)
    stale = write(path, "q-1", 0, 0, [b"r1"], query="q", batch=1)      # its driver died before committing
    with hold_dir(str(path), 5) as store:
        DirTransactions(store).commit("q-0", [first.producer_id], query="q", batch=0)
    # The restarted query replays batch 0 (Spark never recorded its commit) and then batch 1.
    assert write(path, "q-0", 0, 0, [b"r0"], query="q", batch=0) is None
    with hold_dir(str(path), 5) as store:
        assert DirTransactions(store).commit("q-0", [], query="q", batch=0) == 0
    replayed = write(path, "q-1", 0, 0, [b"r1"], query="q", batch=1)
    with hold_dir(str(path), 5) as store:
        journal = DirTransactions(store)
        assert journal.commit("q-1", [replayed.producer_id], query="q", batch=1) == 1
        assert journal.committed_batch("q") == 1 and journal.jobs() == []
    assert stale.producer_id != replayed.producer_id
    assert visible(path) == ([b"r0", b"r1"], True)


def test_producer_ids_continue_above_the_broker_allocators_file(path):
    from logstore.broker.producer_ids import ProducerIdAllocator
    broker_ids = ProducerIdAllocator(str(path))
    taken = broker_ids.allocate()
    intent = write(path, "job", 0, 0, [b"x"])
    assert intent.producer_id > taken
    assert ProducerIdAllocator(str(path)).allocate() > intent.producer_id


def test_the_journal_leaves_the_dir_one_kafka_can_open(path):
    """Kafka's log manager stops on any directory of a log dir not named like `<topic>-<partition>`."""
    done = write(path, "job", 0, 0, [b"a"])
    write(path, "open-job", 0, 0, [b"b"])
    with hold_dir(str(path), 5) as store:
        DirTransactions(store).commit("job", [done.producer_id])
        assert DirTransactions(store).jobs() == ["job", "open-job"]
    entries = sorted(os.listdir(path))
    assert JOURNAL_FILE in entries
    directories = [e for e in entries if (path / e).is_dir()]
    assert directories == ["t-0"]
    assert all(re.fullmatch(r".+-\d+", d) for d in directories)
