"""`df.write.format("logstore")` through a secured listener: Kafka's client properties as `kafka.` options.

The broker has PLAINTEXT, SASL_SSL and SASL_PLAINTEXT listeners and SCRAM
users (tests/security/sasl_brokers.py); the job writes through SASL_SSL with
SCRAM-SHA-512 and the test CA as a PEM truststore, and confluent-kafka reads
the result back at read_committed over PLAINTEXT.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1] / "security"))

from broker_process import BrokerProcess, finish_brokers  # noqa: E402
from sasl_brokers import PASSWORDS, sasl_broker, secure_factory  # noqa: E402
from spark_write_driver import rows_frame  # noqa: E402
from test_spark_write_broker import TWO_PHASE, all_stable, assert_each_row_once, read_all  # noqa: E402
from tls_certs import make_certs  # noqa: E402
from txn_helpers import create_topic  # noqa: E402

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A 2PC broker with SASL listeners, its certificates, and {listener name: port}."""
    root = tmp_path_factory.mktemp("secured-sink")
    certs = make_certs(root / "certs", {})
    started: list[BrokerProcess] = []
    broker, ports = sasl_broker(secure_factory(root, started), certs, TWO_PHASE)
    yield broker, certs, ports
    finish_brokers(started)


def _write(frame, port: int, topic: str, password: str, truststore: Path) -> None:
    (frame.write.format("logstore")
     .option("kafka.bootstrap.servers", f"127.0.0.1:{port}")
     .option("kafka.security.protocol", "SASL_SSL")
     .option("kafka.sasl.mechanism", "SCRAM-SHA-512")
     .option("kafka.sasl.jaas.config", f'{SCRAM} required username="alice" password="{password}";')
     .option("kafka.ssl.truststore.type", "PEM")
     .option("kafka.ssl.truststore.location", str(truststore))
     .option("topic", topic).mode("append").save())


def test_a_job_through_sasl_ssl_lands_once(spark, secured):
    broker, certs, ports = secured
    create_topic(broker.bootstrap, "secured", 4)
    _write(rows_frame(spark, 3000, 4), ports["SASL_SSL"], "secured", PASSWORDS["alice"], certs.ca)
    assert_each_row_once(broker.bootstrap, "secured", 3000, 4)


def test_a_refused_login_stops_the_job_in_one_line_and_writes_nothing(spark, secured):
    broker, certs, ports = secured
    create_topic(broker.bootstrap, "refused", 2)
    with pytest.raises(Exception) as caught:
        _write(rows_frame(spark, 100, 2), ports["SASL_SSL"], "refused", "wrong", certs.ca)
    said = str(caught.value)
    assert "kafka.bootstrap.servers" in said and "SASL_AUTHENTICATION_FAILED" in said, said
    assert read_all(broker.bootstrap, "refused", 2, "read_uncommitted") == {0: [], 1: []}
    assert all_stable(broker.bootstrap, "refused", 2)
