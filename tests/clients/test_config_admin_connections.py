"""max.connections and max.connections.per.ip changed at run time: the next connections follow them."""
from __future__ import annotations

import time

from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

from kio_wire import correlation_id
from raw_wire import (
    API_VERSIONS,
    TIMEOUT,
    api_versions_v0,
    assert_closed,
    connect,
    framed,
    header_v1,
    kio_round_trip,
    recv_frame,
)


def _set(broker, correlation: int, **configs: str) -> None:
    """IncrementalAlterConfigs SET on this broker's resource, on a connection of its own (closed after)."""
    body = incremental_v1.IncrementalAlterConfigsRequest(resources=(incremental_v1.AlterConfigsResource(
        resource_type=4, resource_name="1", configs=tuple(
            incremental_v1.AlterableConfig(name=n, config_operation=0, value=v) for n, v in configs.items())),),
        validate_only=False)
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            (answer,) = kio_round_trip(broker, 44, 1, body, correlation).responses
            break
        except ConnectionError:
            # Refused while the broker has not yet seen an earlier connection close (a SET is idempotent).
            assert time.monotonic() < deadline, "never served"
    assert (answer.error_code, answer.error_message) == (0, None)


def _served(broker, correlation: int):
    """A connection the broker serves (retried while it has not yet seen an earlier one close)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        s = connect(broker)
        s.sendall(framed(header_v1(API_VERSIONS, 0, correlation)))
        try:
            assert correlation_id(recv_frame(s)) == correlation
            return s
        except (AssertionError, ConnectionError):
            s.close()
            assert time.monotonic() < deadline, "never served"


def test_connection_limits_change_without_a_restart(start_broker):
    broker = start_broker()
    _set(broker, 1, **{"max.connections.per.ip": "2"})
    first, second = _served(broker, 2), _served(broker, 3)
    third = connect(broker)
    third.sendall(framed(header_v1(API_VERSIONS, 0, 4)))
    assert_closed(third)   # over the new per-address limit: closed at once
    third.close()
    first.close()
    _set(broker, 5, **{"max.connections.per.ip": "10", "max.connections": "2"})
    first = _served(broker, 6)
    waiting = connect(broker)   # the third connection waits under max.connections=2, as Kafka's acceptor does
    waiting.sendall(framed(header_v1(API_VERSIONS, 0, 7)))
    assert api_versions_v0(second, 8)[API_VERSIONS] == (0, 4)
    second.close()
    assert correlation_id(recv_frame(waiting)) == 7
    for s in (first, waiting):
        s.close()
    broker.kill()
    broker.start()
    # Kept: the limit holds after a SIGKILL and a restart.
    kept = [_served(broker, 10), _served(broker, 11)]
    late = connect(broker)
    late.sendall(framed(header_v1(API_VERSIONS, 0, 12)))
    kept[0].close()
    assert correlation_id(recv_frame(late)) == 12
    for s in (kept[1], late):
        s.close()
