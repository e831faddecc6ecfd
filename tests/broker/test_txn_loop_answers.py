"""AddPartitionsToTxn and EndTxn handled on the event loop of a real in-process broker, their fsyncs of
`__transaction_state` awaited there: the answer to a failed fsync, and a request cancelled while it waits
(the broker stopping) leaving its transactional id free."""
from __future__ import annotations

import asyncio
import importlib
import os
import threading

import pytest
from kio.index import load_request_schema

from logstore.broker.api import REGISTRY, Request, build
from logstore.broker.config import BrokerConfig
from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.protocol import ErrorCode, PartitionRows
from logstore.broker.server import Broker

ADD_PARTITIONS, END_TXN = 24, 26
TXN = "loop-txn"
TOPIC = "t"
WAIT = 30


class _HeldSync:
    """From `arm()` on, the next fdatasync waits for `release` (then fails with `fail`, if given); the
    others are real."""

    def __init__(self, monkeypatch, fail: BaseException | None = None):
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self._fail = fail
        self._real = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", self)

    def arm(self) -> None:
        self.armed = True

    def __call__(self, fd: int) -> None:
        if self.armed and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT)
            if self._fail is not None:
                raise self._fail
        self._real(fd)


@pytest.fixture
def broker(tmp_path):
    """A broker in this process (no listener started) with topic `t` and a producer holding TXN."""
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0"]))
    broker.store.create_topic(TOPIC, 1)
    broker.pid, broker.epoch = broker.transactions.init_producer_id(TXN, 60_000)
    yield broker
    asyncio.run(broker.shutdown())


def _add_partitions(broker: Broker):
    cls = load_request_schema(ADD_PARTITIONS, 3)
    topic_cls = importlib.import_module(cls.__module__).AddPartitionsToTxnTopic
    body = build(cls, v3_and_below_transactional_id=TXN, v3_and_below_producer_id=broker.pid,
                 v3_and_below_producer_epoch=broker.epoch,
                 v3_and_below_topics=(build(topic_cls, name=TOPIC, partitions=(0,)),), transactions=())
    return REGISTRY[ADD_PARTITIONS].handler(Request(broker, ADD_PARTITIONS, 3, 1, "test"), body)


def _codes(answer: PartitionRows) -> list[int]:
    return answer.error_codes()


def test_an_add_whose_fsync_fails_answers_coordinator_not_available_and_leaves_the_id_free(broker, monkeypatch):
    sync = _HeldSync(monkeypatch, fail=OSError(5, "Input/output error"))

    async def run():
        sync.arm()
        handling = asyncio.ensure_future(_add_partitions(broker))
        assert await asyncio.to_thread(sync.entered.wait, WAIT)
        # Waiting on the loop, the id held: the state is not Ongoing before it is durable.
        meta = broker.transactions.describe(TXN)
        assert (meta.state, meta.pending) == (TxnState.EMPTY, TxnState.ONGOING)
        sync.release.set()
        return await handling

    assert _codes(asyncio.run(run())) == [ErrorCode.coordinator_not_available]
    meta = broker.transactions.describe(TXN)
    assert (meta.state, meta.pending) == (TxnState.EMPTY, None)


def test_an_add_cancelled_while_its_fsync_runs_leaves_the_id_free(broker, monkeypatch):
    sync = _HeldSync(monkeypatch)

    async def run():
        sync.arm()
        handling = asyncio.ensure_future(_add_partitions(broker))
        assert await asyncio.to_thread(sync.entered.wait, WAIT)
        handling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handling
        meta = broker.transactions.describe(TXN)
        assert (meta.state, meta.pending) == (TxnState.EMPTY, None)
        sync.release.set()
        # The client's retry is served.
        return await _add_partitions(broker)

    assert _codes(asyncio.run(run())) == [ErrorCode.none]
    assert broker.transactions.describe(TXN).state == TxnState.ONGOING


def test_an_add_then_an_end_on_the_loop_complete_the_transaction(broker):
    async def run():
        added = await _add_partitions(broker)
        cls = load_request_schema(END_TXN, 3)
        body = build(cls, transactional_id=TXN, producer_id=broker.pid, producer_epoch=broker.epoch, committed=True)
        ended = await REGISTRY[END_TXN].handler(Request(broker, END_TXN, 3, 2, "test"), body)
        return added, ended

    added, ended = asyncio.run(run())
    assert _codes(added) == [ErrorCode.none] and ended.error_code == ErrorCode.none
    assert broker.transactions.describe(TXN).state == TxnState.COMPLETE_COMMIT
    data = broker.store.log(TOPIC, 0)
    assert data.recovery_point == data.log_end_offset == 1   # the marker, durable before the answer
