"""The broker's logs as an operator runs them: the request log and JSON lines, on a real broker process.

The request log (`logstore.request`, Kafka's kafka.request.logger) is off
unless named: a root `--log-level DEBUG` does not turn it on;
`--log-level logstore.request=DEBUG` (or Kafka's logger name in
KAFKA_LOG4J_LOGGERS) gives one line per request with the client's address
and id, the API and version, the time and the error codes, as many Produce
lines as the metrics count Produce requests. `LOGSTORE_LOG_FORMAT=json` makes
every line one JSON object.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import BrokerProcess, finish_brokers, free_port
from metrics_scrape import TIMEOUT, scrape, total

# `logstore broker` with --log-level flags, the BrokerProcess's settings as --override each.
_LAUNCH = ("import sys; from logstore.cli import main; "
           "sys.exit(main(['broker', *sys.argv[1].split(), *[a for o in sys.argv[2:] for a in ('--override', o)]]))")
REQUEST_LINE = re.compile(r"Completed request (?P<api>\w+) v(?P<version>\d+) from 127\.0\.0\.1:\d+ "
                          r"client_id=(?P<client>\S+) correlation_id=\d+ principal=User:ANONYMOUS "
                          r"listener=PLAINTEXT total_ms=\d+\.\d{3} errors=(?P<errors>\S+)$")


@pytest.fixture
def brokers(tmp_path):
    """`brokers(log_levels, *overrides, env=None) -> BrokerProcess`, stopped and checked at teardown."""
    started: list[BrokerProcess] = []

    def start(log_levels: str, *overrides: str, env: dict[str, str] | None = None) -> BrokerProcess:
        data_dir = tmp_path / f"broker{len(started)}"
        data_dir.mkdir()
        broker = BrokerProcess("127.0.0.1", free_port(), data_dir, overrides, env=env or {},
                               launcher=("-c", _LAUNCH, log_levels))
        started.append(broker)
        return broker.start()
    yield start
    finish_brokers(started)


def _workload(bootstrap: str, topic: str) -> None:
    """One record produced and flushed; one CreateTopics refused (INVALID_TOPIC_EXCEPTION)."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "metrics-log-test"})
    producer.produce(topic, b"one")
    assert producer.flush(TIMEOUT) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException, match="TOPIC_EXCEPTION"):
        admin.create_topics([NewTopic("no such name!", 1)])["no such name!"].result(TIMEOUT)


def _request_lines(text: str) -> list[re.Match[str]]:
    """Every request-log line's fields (each such line must have them all)."""
    found = []
    for line in text.splitlines():
        if "Completed request" in line:
            match = REQUEST_LINE.search(line)
            assert match is not None, f"a request line without its fields: {line}"
            found.append(match)
    return found


def test_the_request_log_is_off_unless_named(brokers, topic):
    broker = brokers("--log-level DEBUG")
    _workload(broker.bootstrap, topic)
    broker.stop()
    text = broker.log_text()
    assert " DEBUG " in text              # the root level took
    assert "Completed request" not in text


@pytest.mark.parametrize("how", ["--log-level", "KAFKA_LOG4J_LOGGERS"])
def test_the_request_log_names_each_request(brokers, topic, how):
    port = free_port()
    if how == "--log-level":
        broker = brokers("--log-level logstore.request=DEBUG", f"metrics.port={port}")
    else:
        broker = brokers("", f"metrics.port={port}", env={"KAFKA_LOG4J_LOGGERS": "kafka.request.logger=DEBUG"})
    _workload(broker.bootstrap, topic)
    produces = total(scrape(port), "kafka_network_requestmetrics_requests_total", request="Produce")
    broker.stop()
    lines = _request_lines(broker.log_text())
    assert len([m for m in lines if m["api"] == "Produce"]) == produces >= 1
    assert all(m["errors"] == "NONE" for m in lines if m["api"] == "Produce")
    assert {m["client"] for m in lines if m["api"] == "Produce"} == {"metrics-log-test"}
    refused = [m for m in lines if m["api"] == "CreateTopics"]
    assert [m["errors"] for m in refused] == ["INVALID_TOPIC_EXCEPTION"]
    assert {"ApiVersions", "Metadata"} <= {m["api"] for m in lines}


@pytest.mark.parametrize("flag, env", [("", {"LOGSTORE_LOG_FORMAT": "json"}), (" --log-format json", {})],
                         ids=["environment", "flag"])
def test_json_log_lines(brokers, topic, flag, env):
    broker = brokers("--log-level logstore.request=DEBUG" + flag, env=env)
    _workload(broker.bootstrap, topic)
    broker.stop()
    lines = [json.loads(line) for line in broker.log_text().splitlines()]
    assert lines and all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", line["time"]) for line in lines)
    assert any(line["logger"] == "logstore.broker.server" and "listening on" in line["message"] for line in lines)
    requests = [line for line in lines if line["logger"] == "logstore.request"]
    assert requests and all(line["level"] == "DEBUG" and REQUEST_LINE.search(line["message"]) for line in requests)


def test_an_unknown_log_format_is_a_usage_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}"],
                            env={"LOGSTORE_LOG_FORMAT": "xml", "PATH": ""}, capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 2
    assert "log format 'xml' (LOGSTORE_LOG_FORMAT): the formats are text, json" in result.stderr
