"""A real `logstore broker` subprocess on a free loopback port, for real Kafka clients.

`broker` is one broker per test module (tests there use their own topic
names); `start_broker(*overrides)` starts more, for tests that need their own
settings, a clean stop in the middle, or a SIGKILL and a restart on the same
directory and port. Every broker a test started is stopped at teardown with
SIGTERM, which must end it with status 0, leave Kafka's clean-shutdown marker
in its log dir, and have logged no traceback (a handler that raised would
otherwise hide behind a client's retries).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from broker_process import BrokerProcess, finish_brokers, free_port


def _factory(tmp_dir: Path, started: list[BrokerProcess]):
    def start_broker(*overrides: str) -> BrokerProcess:
        """A new broker on a free port with its own log dir, `overrides` as `key=value`."""
        data_dir = tmp_dir / f"broker{len(started)}"
        data_dir.mkdir()
        broker = BrokerProcess("127.0.0.1", free_port(), data_dir, tuple(overrides))
        started.append(broker)
        return broker.start()
    return start_broker


@pytest.fixture
def start_broker(tmp_path):
    """`start_broker(*overrides) -> BrokerProcess`; all are stopped and checked at teardown."""
    started: list[BrokerProcess] = []
    yield _factory(tmp_path, started)
    finish_brokers(started)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker for the module, with default settings: (host, port, data_dir) and more."""
    started: list[BrokerProcess] = []
    yield _factory(tmp_path_factory.mktemp("broker"), started)()
    finish_brokers(started)


@pytest.fixture
def topic(request):
    """A topic name of its own for each test (the module's broker is shared)."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return "".join(c for c in name if c.isalnum() or c in "-.")[:200]
