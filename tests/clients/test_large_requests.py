"""A large request is decoded off the event loop: other connections are answered meanwhile.

The big request is a Fetch naming one partition 300,000 times (10 MB that
kio takes about a third of a second to decode, and that the kit then
collapses to one partition, so decoding is nearly all its cost). The
ordering is the check, not a time: the frame's last byte is sent only
once the broker has taken all the others off its socket, and an ApiVersions
on another connection right after it must be answered first.
"""
from __future__ import annotations

import select
import socket
import time

from kio_wire import correlation_id, decode_response, request_frame
from raw_wire import API_VERSIONS, TIMEOUT, api_versions_v0, connect, framed, header_v1, recv_frame
from test_connection_bounds import FETCH, fetch, topic_with_records

REPEATS = 300_000


def _queues(local: socket.socket, remote: socket.socket) -> tuple[int, int]:
    """(bytes `local` sent that `remote`'s kernel has not acknowledged, bytes `remote`'s process has not yet
    read), from /proc/net/tcp (both loopback IPv4 sockets of this network namespace)."""
    ports = {(local.getsockname()[1], remote.getsockname()[1]): "tx",
             (remote.getsockname()[1], local.getsockname()[1]): "rx"}
    found = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            key = (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16))
            if key in ports:
                tx, rx = fields[4].split(":")
                found[ports[key]] = int(tx, 16) if ports[key] == "tx" else int(rx, 16)
    return found["tx"], found["rx"]


class _BrokerSide:
    """The broker's end of a connection, as /proc/net/tcp names it (its port is the listener's)."""

    def __init__(self, broker):
        self.port = broker.port

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def _until_taken(s: socket.socket, broker) -> None:
    """Wait until every byte sent on `s` has reached the broker's process (its socket's queues are empty)."""
    deadline = time.monotonic() + TIMEOUT
    while _queues(s, _BrokerSide(broker)) != (0, 0):
        assert time.monotonic() < deadline, "the broker did not read what was sent"
        time.sleep(0.001)


def test_another_connection_is_answered_while_a_large_request_is_decoded(start_broker):
    broker = start_broker()
    topic_with_records(broker, "large")
    big = connect(broker)
    small = connect(broker)
    assert api_versions_v0(small, 1)[API_VERSIONS] == (0, 4)   # accepted and served before the big one
    # max_bytes=1: the first row carries its batch (KIP-74), no other could; the kit keeps one row anyway.
    frame = request_frame(fetch("large", [0] * REPEATS, max_bytes=1), 7)
    assert len(frame) > 8 << 20
    big.sendall(frame[:-1])
    _until_taken(big, broker)
    big.sendall(frame[-1:])
    _until_taken(big, broker)
    # The broker holds the whole frame now and is decoding it.
    small.sendall(framed(header_v1(API_VERSIONS, 0, 2)))
    ready, _, _ = select.select([big, small], [], [], TIMEOUT * 3)
    assert ready == [small], "the large request's answer came first: the loop was held while decoding it"
    assert correlation_id(recv_frame(small)) == 2
    big.settimeout(TIMEOUT * 3)
    correlation, response = decode_response(recv_frame(big), FETCH, 12)
    assert correlation == 7
    ((partition,),) = [t.partitions for t in response.responses]
    assert partition.error_code == 0 and partition.records
    big.close()
    small.close()
