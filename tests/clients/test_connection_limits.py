"""Kafka's connection limits, the request queue, and an acceptor out of descriptors.

`max.connections`: at the limit the broker waits before accepting more (the
newer connections wait in the listen backlog and are served once one
closes). `max.connections.per.ip` (and its per-host overrides): a connection
over its address's limit is closed at once. `queued.max.requests`: requests
parked on an outside event (a long-polling Fetch) do not count, so they
cannot stop the broker from reading others. An accept that fails for want
of descriptors is retried with pauses and logged once per episode.
"""
from __future__ import annotations

import re
import resource
import socket
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from kio_wire import correlation_id, fetch_request, request_frame
from raw_wire import API_VERSIONS, TIMEOUT, api_versions_v0, assert_closed, connect, framed, header_v1, recv_frame
from test_connection_bounds import broker_fds


def _answered(s: socket.socket, correlation: int) -> None:
    assert api_versions_v0(s, correlation)[API_VERSIONS] == (0, 4)


def _not_answered_yet(s: socket.socket) -> None:
    """Nothing has arrived on `s` (checked without waiting)."""
    s.setblocking(False)
    try:
        data = s.recv(1)
    except BlockingIOError:
        return
    finally:
        s.setblocking(True)
        s.settimeout(TIMEOUT)
    raise AssertionError(f"the broker answered a connection it should not serve yet: {data!r}")


def test_at_max_connections_the_next_waits_until_one_closes(start_broker):
    broker = start_broker("max.connections=3")
    served = [connect(broker) for _ in range(3)]
    for i, s in enumerate(served):
        _answered(s, i)
    waiting = connect(broker)   # the kernel completes the handshake; the broker does not serve it
    waiting.sendall(framed(header_v1(API_VERSIONS, 0, 99)))
    # Round trips on a served connection: the broker is running, and still does not serve the fourth.
    for i in range(20):
        _answered(served[0], 100 + i)
    _not_answered_yet(waiting)
    served.pop().close()
    frame = recv_frame(waiting)
    assert correlation_id(frame) == 99
    waiting.close()
    for s in served:
        _answered(s, 200)
        s.close()


def test_a_connection_over_max_connections_per_ip_is_closed_at_once(start_broker):
    broker = start_broker("max.connections.per.ip=2")
    first, second = connect(broker), connect(broker)
    _answered(first, 1)
    _answered(second, 2)
    third = connect(broker)
    third.sendall(framed(header_v1(API_VERSIONS, 0, 3)))
    assert_closed(third)
    third.close()
    second.close()
    # A place freed: the address may connect again.
    deadline = time.monotonic() + TIMEOUT
    while True:
        again = connect(broker)
        again.sendall(framed(header_v1(API_VERSIONS, 0, 4)))
        try:
            assert correlation_id(recv_frame(again)) == 4
            break
        except (AssertionError, ConnectionError):
            # The broker may not yet have seen the second connection close: closed at once, try again.
            assert time.monotonic() < deadline, "the address was never let in again"
        finally:
            again.close()
    first.close()
    assert broker.log_text().count("closing connections from") == 1, "a rejection is logged once per episode"


def test_an_override_raises_the_limit_of_one_address(start_broker):
    broker = start_broker("max.connections.per.ip=1", "max.connections.per.ip.overrides=127.0.0.1:3")
    conns = [connect(broker) for _ in range(3)]
    for i, s in enumerate(conns):
        _answered(s, i)
    fourth = connect(broker)
    assert_closed(fourth)
    for s in (fourth, *conns):
        s.close()


def test_zero_per_ip_needs_overrides(tmp_path):
    result = subprocess.run([sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path}",
                             "--override", "max.connections.per.ip=0"], capture_output=True, text=True,
                            timeout=TIMEOUT * 3)
    assert result.returncode == 2
    assert "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides" in result.stderr


def test_parked_fetches_do_not_fill_the_request_queue(start_broker):
    broker = start_broker("queued.max.requests=2")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("empty", 1)])["empty"].result(TIMEOUT)
    pollers = [connect(broker) for _ in range(4)]
    for i, s in enumerate(pollers):
        s.sendall(request_frame(fetch_request("empty", [0], max_wait_ms=int(TIMEOUT * 1000)), i))
    # Twice as many parked Fetches as the queue holds, and another connection is still read and answered.
    other = connect(broker)
    _answered(other, 10)
    for s in pollers:
        _not_answered_yet(s)
        s.close()
    other.close()


def test_an_acceptor_out_of_descriptors_backs_off_and_logs_once(start_broker):
    broker = start_broker()
    held = [connect(broker) for _ in range(3)]
    for i, s in enumerate(held):
        _answered(s, i)
    soft, hard = resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE, (broker_fds(broker) + 2, hard))
    try:
        extra = [connect(broker) for _ in range(2)]   # the first may take the last descriptor
        refused = [connect(broker) for _ in range(3)]
        for i, s in enumerate(refused):
            s.sendall(framed(header_v1(API_VERSIONS, 0, 50 + i)))
        deadline = time.monotonic() + TIMEOUT
        while "out of file descriptors" not in broker.log_text():
            assert time.monotonic() < deadline, "the broker never ran out of descriptors"
            time.sleep(0.05)
        # Meanwhile the connections it has are served, many round trips while accept keeps failing.
        for i in range(1000):
            _answered(held[0], 100 + i)
    finally:
        resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    for s in extra:
        s.close()
    for i, s in enumerate(refused):
        assert correlation_id(recv_frame(s)) == 50 + i, "a connection left in the backlog was not served"
        s.close()
    for s in held:
        s.close()
    text = broker.log_text()
    assert text.count("out of file descriptors") == 1, text
    assert text.count("accepting connections again") == 1, text
    attempts = int(re.search(r"after (\d+) failed attempts", text)[1])
    assert attempts >= 2, "accept was not retried during the episode"
