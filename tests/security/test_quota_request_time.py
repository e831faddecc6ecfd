"""The request-time hook of `request_percentage` quotas: a handler's time on the loop and in the pool is charged
to its client, and an answer over the quota carries the throttle time and mutes the connection."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from logstore.broker.api import Request
from logstore.broker.protocol import EndTxnAnswer, PartitionRows
from logstore.broker.quotas import ClientQuotas
from logstore.broker.request_time import in_pool, measured, with_throttle_time


@dataclass(frozen=True)
class _Answer:
    throttle_time: timedelta
    value: int


class _Progress:
    def __init__(self) -> None:
        self.muted_ms = 0

    def throttle(self, ms: int) -> None:
        self.muted_ms = ms


def test_loop_and_pool_time_are_charged_and_an_answer_over_the_quota_is_throttled(tmp_path):
    quotas = ClientQuotas([str(tmp_path)], 11, 1)
    quotas.request.set_quotas({(("client-id", "busy"),): 1.0})     # 1 % of a thread: 10 ms per second
    pool = ThreadPoolExecutor(1)
    progress = _Progress()
    request = Request(broker=None, api_key=19, version=7, correlation_id=1, client_id="busy", progress=progress)

    async def handler() -> _Answer:
        end = time.perf_counter() + 0.06
        while time.perf_counter() < end:      # 60 ms on the loop
            pass
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(pool, in_pool(time.sleep), 0.06)   # 60 ms in the pool
        return _Answer(timedelta(0), 7)

    answer = asyncio.run(measured(quotas, request, handler()))
    # 120 ms of a thread over the 10 s window is 1.2 %: over a 1 % quota, throttled by one window at most.
    assert answer.value == 7
    assert 0 < answer.throttle_time.total_seconds() * 1000 <= 1000
    assert progress.muted_ms == answer.throttle_time.total_seconds() * 1000


def test_a_client_without_a_quota_is_never_throttled(tmp_path):
    quotas = ClientQuotas([str(tmp_path)], 11, 1)
    quotas.request.set_quotas({(("client-id", "busy"),): 1.0})
    progress = _Progress()
    request = Request(broker=None, api_key=19, version=7, correlation_id=1, client_id="idle", progress=progress)

    async def handler() -> _Answer:
        time.sleep(0.2)
        return _Answer(timedelta(0), 1)

    assert asyncio.run(measured(quotas, request, handler())).throttle_time == timedelta(0)
    assert progress.muted_ms == 0


def test_natively_encoded_answers_carry_the_throttle_time_too():
    # OffsetCommit, Produce and AddPartitionsToTxn answer PartitionRows, EndTxn an EndTxnAnswer: their native
    # encoders write `throttle_ms`.
    rows = PartitionRows(0, [("t", [(0, 0)])])
    assert with_throttle_time(rows, 250) == PartitionRows(250, [("t", [(0, 0)])])
    assert with_throttle_time(EndTxnAnswer(0, 0, 5, 1), 250) == EndTxnAnswer(250, 0, 5, 1)
    assert with_throttle_time(_Answer(timedelta(0), 3), 250) == _Answer(timedelta(milliseconds=250), 3)
