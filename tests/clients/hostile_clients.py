"""Hostile connections sending FrameGrammar's frames to one broker, run as a process of their own.

`python hostile_clients.py HOST PORT SECONDS SEED CONNECTIONS PREFIX MAX_REQUEST_BYTES` runs CONNECTIONS
threads for SECONDS, each opening one connection after another and playing a session on it: serial
requests, pipelined bursts, a flood of one small request written without reading replies (a slow
reader), reading replies one byte at a time, or an abrupt close (FIN or RST) in the middle of a frame.
It prints one JSON summary line: counts, and `anomalies` (replies out of request order, replies with
impossible sizes), each with its session seed and the frames that session sent, as a reproducer.

Its own process, so that drawing frames (pure Python) takes no GIL from the well-behaved clients.
"""
from __future__ import annotations

import json
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass

from frame_grammar import Drawn, FrameGrammar, hostile_topics
from kio_wire import decode_response

IO_TIMEOUT = 2.0  # s: how long a hostile client waits on a reply or a blocked write before moving on
MAX_REPLY_BYTES = 256 << 20
DESCRIBE_TRANSACTIONS = 65
SESSIONS = ("serial", "pipeline", "flood", "slow-reader", "abrupt")
SESSION_WEIGHTS = (30, 30, 15, 10, 15)


@dataclass
class Pending:
    """A request sent and not answered yet."""

    correlation_id: int
    api: tuple[int, int]
    answered: bool | None


class Session:
    """One connection's worth of hostile traffic, reproducible from its seed."""

    def __init__(self, host: str, port: int, seed: str, apis: dict[int, tuple[int, int]], prefix: str,
                 max_request_bytes: int, stats: Counter[str], deadline: float):
        self.rng = random.Random(seed)
        self.deadline = deadline
        self.seed = seed
        self.grammar = FrameGrammar(self.rng, apis, hostile_topics(prefix), max_request_bytes)
        self.stats = stats
        self.sent: list[bytes] = []
        self.expected: list[Pending] = []  # honestly framed frames, in the order sent
        self.desynced = False  # after a lying size prefix, the broker's framing no longer matches ours
        self.sock = socket.create_connection((host, port), timeout=IO_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.anomalies: list[dict[str, object]] = []

    def send(self, data: bytes, framed: bool, correlation_id: int, api: tuple[int, int] = (-1, -1),
             answered: bool | None = None) -> None:
        if time.monotonic() > self.deadline:
            # A broker reading slowly can make each write wait up to IO_TIMEOUT: the run still ends on time.
            raise TimeoutError("the run is over")
        self.sent.append(data)
        if framed and not self.desynced:
            self.expected.append(Pending(correlation_id, api, answered))
        else:
            self.desynced = True
        self.sock.sendall(data)
        self.stats["frames"] += 1

    def send_drawn(self, drawn: Drawn) -> None:
        self.send(drawn.data, drawn.framed, drawn.correlation_id, (drawn.api_key, drawn.version), drawn.answered)

    def anomaly(self, what: str) -> None:
        frames = []
        total = 0
        for f in self.sent:
            frames.append(f[:4096].hex())
            total += min(len(f), 4096)
            if total > 65536:
                break
        self.anomalies.append({"seed": self.seed, "what": what, "frames": frames})

    def _match(self, frame: bytes) -> bool:
        """Match a reply with the request it answers (in request order) and decode it; False on an anomaly."""
        (corr,) = struct.unpack_from(">i", frame, 0)
        at = next((i for i, p in enumerate(self.expected) if p.correlation_id == corr), None)
        if at is None:
            self.anomaly(f"a reply with correlation id {corr}, of no request pending")
            return False
        skipped = [p for p in self.expected[:at] if p.answered]
        if skipped:
            # Kafka answers requests in the order it read them: one skipped is one never answered.
            self.anomaly(f"reply {corr} before the valid requests {[p.correlation_id for p in skipped][:5]}")
            return False
        pending = self.expected[at]
        del self.expected[:at + 1]
        if pending.answered:
            try:
                decode_response(frame, *pending.api)
            except Exception as exc:  # noqa: BLE001 - any failure to read a reply is the finding
                if pending.api[0] == DESCRIBE_TRANSACTIONS and "negative timestamp" in str(exc):
                    # Kafka answers -1 as the start of no transaction; kio's datetime cannot read it.
                    return True
                self.anomaly(f"the reply to {pending.api} does not decode: {exc!r}: {frame[:256].hex()}")
                return False
        return True

    def read_replies(self, wanted: int, chunk: int = 65536) -> int:
        """Read up to `wanted` replies (checking their order); stops at a close or a wait of IO_TIMEOUT."""
        got = 0
        while got < wanted and time.monotonic() < self.deadline + IO_TIMEOUT:
            while len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer, 0)
                if not 4 <= size <= MAX_REPLY_BYTES:
                    self.anomaly(f"reply size {size}")
                    return -1
                if len(self.buffer) < 4 + size:
                    break
                frame, self.buffer = self.buffer[4:4 + size], self.buffer[4 + size:]
                got += 1
                self.stats["replies"] += 1
                if not self.desynced and not self._match(frame):
                    return -1
                if got >= wanted:
                    return got
            try:
                data = self.sock.recv(chunk)
            except TimeoutError:
                self.stats["reply-timeouts"] += 1
                return got
            except OSError:
                data = b""
            if not data:
                self.stats["closed-by-broker"] += 1
                first = next((p for p in self.expected if p.answered is not False), None)
                if not self.desynced and first is not None and first.answered:
                    self.anomaly(f"the connection closed instead of answering valid request {first}")
                return -1
            self.buffer += data
        return got

    def close(self, reset: bool = False) -> None:
        if reset:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    # -- sessions ----------------------------------------------------------------------------------

    def serial(self) -> None:
        for corr in range(self.rng.randrange(1, 20)):
            drawn = self.grammar.frame(corr)
            self.send_drawn(drawn)
            if self.read_replies(1) < 0 or self.desynced:
                return

    def pipeline(self) -> None:
        n = self.rng.randrange(5, 60)
        for corr in range(n):
            drawn = self.grammar.frame(corr)
            self.send_drawn(drawn)
        self.read_replies(n)

    def flood(self) -> None:
        """One small valid request written thousands of times without reading: the broker must bound it."""
        api = self.rng.choice([(18, 3), (3, 12), (3, 1), (32, 4), (1, 12), (10, 4), (15, 5)])
        api = api if (api[0], api[1]) in self.grammar.apis else self.rng.choice(self.grammar.apis)
        _, _, frame = self.grammar.request(0, api)
        if len(frame) > 2048:
            api = (18, 0)
            frame = self.grammar.request(0, api)[2]
        answered = None if api[0] == 0 else True  # a Produce with acks=0 is never answered
        for corr in range(self.rng.randrange(500, 5000)):
            try:
                self.send(frame[:8] + struct.pack(">i", corr) + frame[12:], True, corr, api, answered)
            except TimeoutError:
                self.stats["flood-write-blocked"] += 1
                break
        if self.rng.random() < 0.5:
            self.read_replies(len(self.expected))

    def slow_reader(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        api = (3, 12) if (3, 12) in self.grammar.apis else self.grammar.apis[0]
        _, _, frame = self.grammar.request(0, api)
        for corr in range(200):
            try:
                self.send(frame[:8] + struct.pack(">i", corr) + frame[12:], True, corr, api, True)
            except TimeoutError:
                break
        deadline = time.monotonic() + IO_TIMEOUT
        self.sock.settimeout(0.05)
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(1):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    def abrupt(self) -> None:
        drawn = self.grammar.frame(0)
        cut = self.rng.randrange(len(drawn.data) + 1)
        self.send(drawn.data[:cut], False, 0)
        self.close(reset=self.rng.random() < 0.5)

    def run(self) -> None:
        kind = self.rng.choices(SESSIONS, SESSION_WEIGHTS)[0]
        self.stats[f"session-{kind}"] += 1
        try:
            getattr(self, kind.replace("-", "_"))()
        except (TimeoutError, ConnectionError, BrokenPipeError):
            self.stats["write-refused"] += 1
        finally:
            if kind != "abrupt":
                self.close(reset=self.rng.random() < 0.3)


def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """The broker's advertised (min, max) versions per API key, through ApiVersions v0."""
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))
        size = struct.unpack(">i", _recv(s, 4))[0]
        frame = _recv(s, size)
    _, error, count = struct.unpack_from(">ihi", frame, 0)
    assert error == 0
    return {k: (lo, hi) for k, lo, hi in (struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count))}


def _recv(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def run(host: str, port: int, seconds: float, seed: int, connections: int, prefix: str,
        max_request_bytes: int) -> dict[str, object]:
    """Hostile sessions on `connections` threads for `seconds`; the summary."""
    apis = api_versions(host, port)
    stats: Counter[str] = Counter()
    anomalies: list[dict[str, object]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(index: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            local: Counter[str] = Counter()
            try:
                session = Session(host, port, f"{seed}-{index}-{n}", apis, prefix, max_request_bytes, local,
                                  deadline)
            except OSError:
                local["connect-failed"] += 1
            else:
                session.run()
                with lock:
                    anomalies.extend(session.anomalies)
            with lock:
                stats.update(local)
            n += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"seed": seed, "stats": dict(stats), "anomalies": anomalies[:20], "anomaly_count": len(anomalies)}


if __name__ == "__main__":
    h, p, secs, sd, conns, pre, limit = sys.argv[1:8]
    print(json.dumps(run(h, int(p), float(secs), int(sd), int(conns), pre, int(limit))), flush=True)
