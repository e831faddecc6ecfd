"""The transaction coordinator as a state machine, against a model, under hypothesis.

Two producer instances share one transactional id; hypothesis interleaves
their inits, partition adds, transactional writes and ends with timeout
sweeps and restarts (a new coordinator over the reopened store). Adds and
ends come at transaction version 0 or 2 (KIP-890 part 2: an add from
Produce v12, an EndTxn v5 that bumps the epoch, answers a retry one epoch
behind with the current epoch, and aborts with nothing open). The model
says which calls must succeed and what read_committed must then show in
every partition; the partitions are read back after each step.
"""
from __future__ import annotations

import itertools
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logstore.broker.coordinator.transaction import TransactionCoordinator, TxnConfig
from logstore.broker.coordinator.txn_metadata import TV_0, TV_2
from logstore.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from logstore.manager import LogManager

TXN = "machine"
TIMEOUT = 10_000
PARTITIONS = 3
CONFIG = TxnConfig(state_partitions=3, fsync=False)
INSTANCES = st.sampled_from([0, 1])
PARTITION_SETS = st.frozensets(st.integers(0, PARTITIONS - 1), min_size=1)


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="txn-machine-")
        self.now = 1_700_000_000_000
        self.ids = itertools.count(100)
        self.store = LogManager([self.dir])
        self.store.create_topic("t", PARTITIONS)
        self.coordinator = self._coordinator()
        # The model.
        self.held = {}            # instance -> (pid, epoch) it was given
        self.holder = None        # the instance whose (pid, epoch) is current
        self.epoch = None         # the id's current epoch
        self.state = "none"       # none | empty | ongoing | committed | aborted
        self.partitions = set()
        self.pending = {p: [] for p in range(PARTITIONS)}
        self.committed = {p: [] for p in range(PARTITIONS)}
        self.sequences = {}
        self.values = itertools.count()

    def _coordinator(self):
        coordinator = TransactionCoordinator(self.store, lambda: next(self.ids), CONFIG, clock=lambda: self.now)
        coordinator.load()
        return coordinator

    def teardown(self):
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _abort_in_model(self):
        self.pending = {p: [] for p in range(PARTITIONS)}
        self.partitions = set()
        self.state = "aborted"

    @rule(instance=INSTANCES)
    def init(self, instance):
        expected_epoch = 0 if self.epoch is None else self.epoch + 1
        try:
            pid, epoch = self.coordinator.init_producer_id(TXN, TIMEOUT)
        except ConcurrentTransactionsError:
            assert self.state == "ongoing"
            self._abort_in_model()
            expected_epoch += 1
            pid, epoch = self.coordinator.init_producer_id(TXN, TIMEOUT)
        assert epoch == expected_epoch
        if self.held:
            assert pid == next(iter(self.held.values()))[0]
        self.held[instance] = (pid, epoch)
        self.holder, self.epoch, self.state = instance, epoch, "empty"
        for p in range(PARTITIONS):
            self.sequences[(instance, p)] = 0

    @precondition(lambda self: self.held)
    @rule(instance=INSTANCES, partitions=PARTITION_SETS, version=st.sampled_from([TV_0, TV_2]))
    def add(self, instance, partitions, version):
        if instance not in self.held:
            return
        pid, epoch = self.held[instance]
        call = lambda: self.coordinator.add_partitions(TXN, pid, epoch, [("t", p) for p in partitions],  # noqa: E731
                                                       version)
        if instance != self.holder:
            with pytest.raises(ProducerFencedError):
                call()
            return
        call()
        if self.state != "ongoing":
            self.state, self.partitions = "ongoing", set()
        self.partitions |= partitions

    @precondition(lambda self: self.held)
    @rule(instance=INSTANCES, partition=st.integers(0, PARTITIONS - 1))
    def write(self, instance, partition):
        if instance not in self.held:
            return
        pid, epoch = self.held[instance]
        value = b"%d" % next(self.values)
        allowed = instance == self.holder and self.state == "ongoing" and partition in self.partitions
        log_ = self.store.log("t", partition)
        end = log_.log_end_offset
        try:
            with self.coordinator.verified_write(TXN, pid, epoch, "t", partition):
                log_.append_records([value], producer_id=pid, producer_epoch=epoch,
                                    base_sequence=self.sequences[(instance, partition)], transactional=True)
        except (InvalidTxnStateError, InvalidProducerEpochError):
            assert not allowed
            assert log_.log_end_offset == end
            return
        assert allowed
        self.sequences[(instance, partition)] += 1
        self.pending[partition].append(value)

    @precondition(lambda self: self.held)
    @rule(instance=INSTANCES, commit=st.booleans())
    def end(self, instance, commit):
        if instance not in self.held:
            return
        pid, epoch = self.held[instance]
        call = lambda: self.coordinator.end_transaction(TXN, pid, epoch, commit)  # noqa: E731
        if instance != self.holder:
            with pytest.raises(ProducerFencedError):
                call()
        elif self.state == "ongoing":
            call()
            if commit:
                for p in range(PARTITIONS):
                    self.committed[p] += self.pending[p]
                self.pending = {p: [] for p in range(PARTITIONS)}
                self.state, self.partitions = "committed", set()
            else:
                self._abort_in_model()
        elif self.state == ("committed" if commit else "aborted"):
            call()  # a retry: answered again, nothing written
        else:
            with pytest.raises(InvalidTxnStateError):
                call()

    def _bump(self, instance, answer):
        """A TV_2 end moved `instance` to the next epoch: its sequences start again."""
        self.epoch += 1
        assert answer == (self.held[instance][0], self.epoch)
        self.held[instance] = answer
        for p in range(PARTITIONS):
            self.sequences[(instance, p)] = 0

    @precondition(lambda self: self.held)
    @rule(instance=INSTANCES, commit=st.booleans())
    def end_v2(self, instance, commit):
        if instance not in self.held:
            return
        pid, epoch = self.held[instance]
        call = lambda: self.coordinator.end_transaction(TXN, pid, epoch, commit, TV_2)  # noqa: E731
        ended = self.state in ("committed", "aborted")
        retry = ended and epoch == self.epoch - 1
        if epoch != self.epoch and not retry:
            with pytest.raises(ProducerFencedError):
                call()
        elif self.state == "ongoing":
            answer = call()
            if commit:
                for p in range(PARTITIONS):
                    self.committed[p] += self.pending[p]
                self.pending = {p: [] for p in range(PARTITIONS)}
                self.state, self.partitions = "committed", set()
            else:
                self._abort_in_model()
            self._bump(instance, answer)
        elif retry and self.state == ("committed" if commit else "aborted"):
            assert call() == (pid, self.epoch)   # a retry: the answer it lost, nothing written
        elif not commit and not retry:
            self._bump(instance, call())         # an abort with nothing open: a bump, no marker
            self.state = "aborted"
        else:
            with pytest.raises(InvalidTxnStateError):
                call()

    @rule()
    def time_out(self):
        self.now += TIMEOUT + 1
        aborted = self.coordinator.abort_timed_out()
        assert aborted == ([TXN] if self.state == "ongoing" else [])
        if aborted:
            self._abort_in_model()
            self.epoch += 1
            self.holder = None

    @rule()
    def restart(self):
        self.store.close()
        self.store = LogManager([self.dir])
        self.coordinator = self._coordinator()

    @invariant()
    def read_committed_shows_exactly_what_was_committed(self):
        for p in range(PARTITIONS):
            log_ = self.store.log("t", p)
            assert [r.value for r in log_.iter_records(isolation="read_committed")] == self.committed[p]
            if self.state != "ongoing" or p not in self.partitions or not self.pending[p]:
                assert log_.last_stable_offset == log_.log_end_offset


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
