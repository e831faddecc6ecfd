"""An embedded node on a fresh directory per test (no initial rebalance delay, so groups form at once)."""
from __future__ import annotations

import pytest

from logstore.broker import embedded


@pytest.fixture
def node(tmp_path):
    """A running embedded node over `tmp_path/data`, closed at teardown."""
    opened = embedded.open(str(tmp_path / "data"), {"group.initial.rebalance.delay.ms": 0})
    yield opened
    opened.close()
