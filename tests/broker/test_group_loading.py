"""The group coordinator while it loads `__consumer_offsets` partition by partition, in-process.

A broker listens before its groups are loaded, as Kafka's does: a call for a
group whose partition is not loaded yet answers COORDINATOR_LOAD_IN_PROGRESS
(retriable), one whose partition failed to load COORDINATOR_NOT_AVAILABLE, and
a transaction marker written to a loading partition is applied once its
groups are in. The broker process and real clients are in
tests/clients/test_group_load_in_progress.py.
"""
from __future__ import annotations

import threading

import pytest

from logstore.broker.coordinator.group_loading import PartitionLoads
from logstore.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    StorageError,
)
from test_group_coordinator import GROUP, TXN, Clock, Env, begin, form_group, txn_commit

OTHER = "group-b"


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path, Clock())


def reopened(env: Env) -> tuple[Env, range]:
    """The store reopened under fresh coordinators whose group load has begun but read nothing yet, and
    the partitions to load."""
    env.store.close()
    fresh = Env(env.path, env.clock, env.config, env.ids)
    fresh.txn.load()
    return fresh, fresh.groups.begin_load()


def other_group(env: Env) -> str:
    """A group id in another `__consumer_offsets` partition than GROUP's."""
    return next(g for g in (f"{OTHER}-{i}" for i in range(100))
                if env.groups.partition_of(g) != env.groups.partition_of(GROUP))


def test_a_group_answers_load_in_progress_until_its_partition_is_loaded(env):
    formed = form_group(env, 1)
    env.commit({("t", 0): 7}, member=formed.leader, generation=formed.generation)
    other = other_group(env)
    env.commit({("t", 1): 8}, group=other)
    env, partitions = reopened(env)
    try:
        assert env.groups.loading
        for call in (lambda: env.groups.fetch_offsets(GROUP, None), lambda: env.groups.describe(GROUP),
                     lambda: env.groups.heartbeat(GROUP, formed.generation, formed.leader),
                     lambda: env.commit({("t", 0): 9}, member=formed.leader, generation=formed.generation),
                     lambda: env.groups.leave_group(GROUP, [(formed.leader, None)])):
            with pytest.raises(CoordinatorLoadInProgressError):
                call()
        assert isinstance(env.join(formed.leader).exception(timeout=0), CoordinatorLoadInProgressError)
        assert [d.error.__class__ for d in env.groups.consumer_group_describe([GROUP])] == [
            CoordinatorLoadInProgressError]
        assert {g: e.__class__ for g, e in env.groups.delete_groups([GROUP]).items()} == {
            GROUP: CoordinatorLoadInProgressError}

        env.groups.load_partition(env.groups.partition_of(GROUP))
        # Its group is back, members and offsets; the other partition's group still waits.
        assert env.fetched() == {("t", 0): 7}
        assert env.member_ids() == {formed.leader}
        with pytest.raises(CoordinatorLoadInProgressError):
            env.groups.fetch_offsets(other, None)
        assert env.groups.loading

        for partition in partitions:
            if partition != env.groups.partition_of(GROUP):
                env.groups.load_partition(partition)
        assert not env.groups.loading and env.groups.wait_loaded(timeout=0)
        assert env.fetched(group=other) == {("t", 1): 8}
        assert env.groups.group_count() == 2
    finally:
        env.store.close()


def test_a_marker_of_a_loading_partition_ends_its_transaction_once_the_partition_is_in(env):
    env.commit({("t", 0): 1})
    pid, epoch = begin(env)
    txn_commit(env, pid, epoch, {("t", 0): 9})
    env, partitions = reopened(env)
    try:
        # The transaction coordinator finishes the transaction while the groups load.
        env.txn.end_transaction(TXN, pid, epoch, True)
        for partition in partitions:
            env.groups.load_partition(partition)
        assert env.fetched([("t", 0)], require_stable=True) == {("t", 0): 9}
    finally:
        env.store.close()


def test_markers_wait_for_their_partition_and_go_in_log_order():
    lock = threading.RLock()
    loads = PartitionLoads(lock)
    with lock:
        loads.begin(range(3))
        assert loads.defer_marker(1, 500, True) and loads.defer_marker(1, 501, False)
        assert loads.loaded(1) == [(500, True), (501, False)]
        assert not loads.defer_marker(1, 502, True)  # loaded: the caller applies it now
        loads.failed(2, StorageError("bad batch"))
        assert loads.defer_marker(2, 503, True)  # a failed partition serves nothing: dropped
        assert loads.loading
        assert loads.loaded(0) == []
    assert not loads.loading and loads.wait(timeout=0)
    assert loads.refusal(0) is None and loads.refusal(1) is None
    assert isinstance(loads.refusal(2), CoordinatorNotAvailableError)


def test_an_abandoned_load_leaves_nothing_waiting():
    lock = threading.RLock()
    loads = PartitionLoads(lock)
    with lock:
        loads.begin(range(2))
        loads.loaded(0)
        loads.abandon("the broker is stopping")
    assert not loads.loading and loads.wait(timeout=0)
    assert loads.refusal(0) is None
    assert "stopping" in str(loads.refusal(1)) and isinstance(loads.refusal(1), CoordinatorNotAvailableError)


def test_a_partition_that_fails_to_load_answers_coordinator_not_available(env):
    env.commit({("t", 0): 1})
    env, partitions = reopened(env)
    try:
        mine = env.groups.partition_of(GROUP)
        env.groups.fail_partition(mine, StorageError("a corrupt batch"))
        for partition in partitions:
            if partition != mine:
                env.groups.load_partition(partition)
        assert not env.groups.loading
        with pytest.raises(CoordinatorNotAvailableError, match="a corrupt batch"):
            env.groups.fetch_offsets(GROUP, None)
    finally:
        env.store.close()


def test_a_topic_deleted_during_the_load_leaves_no_offsets_in_groups_loaded_after(env):
    env.commit({("t", 0): 1, ("u", 0): 2})
    env, partitions = reopened(env)
    try:
        removed: list[int] = []
        deleting = threading.Thread(target=lambda: removed.append(env.groups.delete_topic_offsets("u")))
        deleting.start()
        for partition in partitions:
            env.groups.load_partition(partition)
        deleting.join()
        assert removed == [1]
        assert env.fetched() == {("t", 0): 1}
    finally:
        env.store.close()
