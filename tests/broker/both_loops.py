"""Tests that run on both event loops the broker may serve on: asyncio's and uvloop's."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

LOOPS = pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])


def run_on(new_loop: Callable[[], asyncio.AbstractEventLoop], test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run the coroutine function `test` to its end on a fresh loop made by `new_loop`."""
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(test())
