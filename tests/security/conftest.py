"""Brokers with secured listeners (TLS, SASL) as real subprocesses, and the certificates they use."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

from broker_process import BrokerProcess, finish_brokers  # noqa: E402
from sasl_brokers import secure_factory  # noqa: E402
from tls_certs import Certs, make_certs  # noqa: E402

CLIENT_SUBJECTS = {"alice": "/C=US/O=Example/OU=eng/CN=alice", "bob": "/C=US/O=Example/OU=ops/CN=bob"}


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    """A CA, the broker's certificate and key (also encrypted), and clients alice's and bob's."""
    return make_certs(tmp_path_factory.mktemp("certs"), CLIENT_SUBJECTS)


@pytest.fixture
def start_secure(tmp_path):
    """`start_secure(listeners, *overrides) -> (BrokerProcess, {listener name: port})`; every broker is
    stopped and checked at teardown."""
    started: list[BrokerProcess] = []
    yield secure_factory(tmp_path, started)
    finish_brokers(started)


@pytest.fixture(scope="module")
def start_module_secure(tmp_path_factory):
    """`start_secure` for brokers a whole module shares."""
    started: list[BrokerProcess] = []
    yield secure_factory(tmp_path_factory.mktemp("secure"), started)
    finish_brokers(started)
