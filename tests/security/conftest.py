"""Brokers with secured listeners (TLS, SASL) as real subprocesses, and the certificates they use."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

from broker_process import BrokerProcess, finish_brokers, free_port  # noqa: E402
from tls_certs import Certs, make_certs  # noqa: E402

CLIENT_SUBJECTS = {"alice": "/C=US/O=Example/OU=eng/CN=alice", "bob": "/C=US/O=Example/OU=ops/CN=bob"}


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    """A CA, the broker's certificate and key (also encrypted), and clients alice's and bob's."""
    return make_certs(tmp_path_factory.mktemp("certs"), CLIENT_SUBJECTS)


def _secure_factory(tmp_dir: Path, started: list[BrokerProcess]):
    def start(listeners: dict[str, str], *overrides: str) -> tuple[BrokerProcess, dict[str, int]]:
        """A broker whose `listeners` are `{name: security protocol}` in order, each on a free port (the first
        is the one the ready line names), with `overrides`; returns it and {listener name: port}."""
        ports = {name: free_port() for name in listeners}
        data_dir = tmp_dir / f"broker{len(started)}"
        data_dir.mkdir()
        first = next(iter(ports.values()))
        settings = (",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
                    ",".join(f"{name}:{protocol}" for name, protocol in listeners.items()))
        broker = BrokerProcess("127.0.0.1", first, data_dir, (
            f"listeners={settings[0]}", f"listener.security.protocol.map={settings[1]}", *overrides))
        started.append(broker)
        return broker.start(), ports
    return start


@pytest.fixture
def start_secure(tmp_path):
    """`start_secure(listeners, *overrides) -> (BrokerProcess, {listener name: port})`; every broker is
    stopped and checked at teardown."""
    started: list[BrokerProcess] = []
    yield _secure_factory(tmp_path, started)
    finish_brokers(started)


@pytest.fixture(scope="module")
def start_module_secure(tmp_path_factory):
    """`start_secure` for brokers a whole module shares."""
    started: list[BrokerProcess] = []
    yield _secure_factory(tmp_path_factory.mktemp("secure"), started)
    finish_brokers(started)
