"""Accepting connections within Kafka's limits, and backing off when the process runs out of descriptors.

Kafka's ConnectionQuotas: `max.connections` bounds the connections served
at once (at the limit the acceptor waits, and newer connections wait in the
listen backlog); `max.connections.per.ip` (with per-host exceptions in
`max.connections.per.ip.overrides`, `host:count,...`) closes a connection
over its address's limit at once. When accept fails for want of
descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) the connection stays
in the backlog: the acceptor retries with a growing pause and logs one line
when such an episode starts and one when it ends, however many attempts
failed in between.

The three limits are dynamic broker configs, as in Kafka: a `ConnectionQuotas`
made with `of_config` takes each change to them for the connections accepted
after it (those already served stay, as Kafka leaves them).
"""
from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from logstore.config import _refused
from logstore.errors import InvalidConfigError

if TYPE_CHECKING:
    from logstore.broker.config import BrokerConfig

__all__ = ["Acceptor", "ConnectionQuotas", "ConnectionSettingError", "Serve", "parse_ip_overrides",
           "check_connection_settings"]

log = logging.getLogger(__name__)

OVERRIDES = "max.connections.per.ip.overrides"
# accept(2) failures that leave the connection in the backlog until something is released.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# A connection that went away between the backlog and accept(2): nothing to do but accept the next.
GONE_BEFORE_ACCEPT = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EAGAIN})
FIRST_PAUSE = 0.01   # s, after the first failed accept of an episode; doubled after each failure
LONGEST_PAUSE = 1.0  # s

Serve = Callable[[socket.socket, tuple[str, int]], Coroutine[Any, Any, None]]


class ConnectionSettingError(InvalidConfigError):
    """A refused connection limit; `setting` names the one to fix."""

    def __init__(self, setting: str, message: str):
        super().__init__(message)
        self.setting = setting


def parse_ip_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: comma-separated `host:count` (the last `:` splits, so an IPv6
    address may stand as the host)."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise ConnectionSettingError(OVERRIDES, str(_refused(OVERRIDES, text, f"{item} is not host:count")))
        overrides[host.strip()] = int(count)
    return overrides


def check_connection_settings(settings: Mapping[str, object]) -> None:
    """Kafka's checks of the connection limits together."""
    overrides = parse_ip_overrides(str(settings[OVERRIDES]))
    if settings["max.connections.per.ip"] == 0 and not overrides:
        raise ConnectionSettingError("max.connections.per.ip", str(_refused(
            "max.connections.per.ip", 0,
            "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set")))


class ConnectionQuotas:
    """Connections served now, per address and in all, against Kafka's limits.

    Used from the event loop, made there: `admit` counts a connection of an address under its limit, every
    admitted connection is given back with `release`; `slot` waits for a place under `max.connections`.
    `reconfigure` may be called from any thread: the new limits are taken on the loop.
    """

    def __init__(self, max_connections: int, per_ip: int, overrides: dict[str, int]):
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = _resolved(overrides)
        self.counts: dict[str, int] = {}
        self.served = 0                      # places taken with `slot`
        self._waiting: list[asyncio.Future[None]] = []
        self._rejected: set[str] = set()
        self._loop = asyncio.get_running_loop()

    @classmethod
    def of_config(cls, config: BrokerConfig) -> ConnectionQuotas:
        """The limits of `config`, following its dynamic changes (made on the event loop)."""
        quotas = cls(config["max.connections"], config["max.connections.per.ip"],
                     parse_ip_overrides(config["max.connections.per.ip.overrides"]))
        config.reconfigurables.append(quotas.reconfigured)
        return quotas

    def reconfigured(self, config: BrokerConfig) -> None:
        """Take `config`'s limits for the connections accepted from now on (from any thread)."""
        # Host names are resolved here, in the caller's thread, not on the loop.
        limits = (config["max.connections"], config["max.connections.per.ip"],
                  _resolved(parse_ip_overrides(config["max.connections.per.ip.overrides"])))
        if self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._take(*limits)
        else:
            self._loop.call_soon_threadsafe(self._take, *limits)

    def _take(self, max_connections: int, per_ip: int, overrides: dict[str, int]) -> None:
        if (max_connections, per_ip, overrides) != (self.max_connections, self.per_ip, self.overrides):
            log.info("connection limits now max.connections=%d, max.connections.per.ip=%d, overrides %s",
                     max_connections, per_ip, overrides or "none")
        self.max_connections, self.per_ip, self.overrides = max_connections, per_ip, overrides
        self._rejected.clear()
        self._wake()

    def limit(self, address: str) -> int:
        """How many connections `address` may hold."""
        return self.overrides.get(address, self.per_ip)

    def admit(self, address: str) -> bool:
        """Count a connection of `address`, or refuse it (False) if that address is at its limit."""
        count = self.counts.get(address, 0)
        if count >= self.limit(address):
            if address not in self._rejected:
                # One line per address until it drops below its limit: a client retrying in a loop
                # does not fill the log.
                self._rejected.add(address)
                log.info("closing connections from %s: it has the maximum of %d (max.connections.per.ip)",
                         address, self.limit(address))
            return False
        self.counts[address] = count + 1
        return True

    def release(self, address: str) -> None:
        """A connection of `address` ended."""
        count = self.counts[address] - 1
        if count:
            self.counts[address] = count
        else:
            del self.counts[address]
        self._rejected.discard(address)

    async def slot(self) -> None:
        """Wait until fewer than `max.connections` are served, and take a place."""
        while self.served >= self.max_connections:
            room: asyncio.Future[None] = self._loop.create_future()
            self._waiting.append(room)
            try:
                await room
            finally:
                if room in self._waiting:
                    self._waiting.remove(room)
        self.served += 1

    def free_slot(self) -> None:
        """Give back a place taken with `slot`."""
        self.served -= 1
        self._wake()

    def _wake(self) -> None:
        """Let every waiting `slot` look again (each takes a place only if there is one)."""
        waiting, self._waiting = self._waiting, []
        for room in waiting:
            if not room.done():
                room.set_result(None)


def _resolved(overrides: dict[str, int]) -> dict[str, int]:
    """The overrides by address: a host name counts for each address it resolves to (Kafka resolves once)."""
    by_address = {}
    for host, count in overrides.items():
        try:
            by_address[str(ipaddress.ip_address(host))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("ignoring %s=%s for %s: it does not resolve (%s)", OVERRIDES, count, host, exc)
            continue
        for info in infos:
            by_address[str(info[4][0])] = count
    return by_address


class Acceptor:
    """Accepts on the listening sockets and hands each admitted connection to its socket's `serve` as a task.

    Owns the listening sockets and the connection tasks it started (`connections`); used from the event loop.
    """

    def __init__(self, listening: Iterable[tuple[socket.socket, Serve]], quotas: ConnectionQuotas):
        self.listening = list(listening)
        self.sockets = [sock for sock, _ in self.listening]
        self.quotas = quotas
        self.connections: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._failed = 0              # accepts failed in the current out-of-resources episode
        self._failing_since = 0.0

    def start(self) -> None:
        """Start accepting on every socket."""
        self._loops = [asyncio.create_task(self._accept(sock, serve)) for sock, serve in self.listening]

    def close(self) -> None:
        """Stop accepting and close the listening sockets (the connections go on)."""
        for task in self._loops:
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def _accept(self, sock: socket.socket, serve: Serve) -> None:
        loop = asyncio.get_running_loop()
        pause = FIRST_PAUSE
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in GONE_BEFORE_ACCEPT:
                    continue
                self._failure(exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            pause = FIRST_PAUSE
            self._recovered()
            address = str(peer[0])
            if not self.quotas.admit(address):
                conn.close()
                continue
            try:
                # At max.connections this accept loop waits here, holding the one connection it took,
                # and the backlog holds the rest (Kafka's acceptor does the same).
                await self.quotas.slot()
            except BaseException:
                conn.close()
                self.quotas.release(address)
                raise
            task: asyncio.Task[None] = asyncio.create_task(serve(conn, peer))
            self.connections.add(task)
            task.add_done_callback(self._ended(address))

    def _ended(self, address: str) -> Callable[[asyncio.Task[None]], None]:
        """What gives a connection's places back when its task ends."""
        def ended(task: asyncio.Task[None]) -> None:
            self.connections.discard(task)
            self.quotas.release(address)
            self.quotas.free_slot()
        return ended

    def _failure(self, exc: OSError) -> None:
        if self._failed == 0:
            self._failing_since = time.monotonic()
            why = "out of file descriptors or memory" if exc.errno in OUT_OF_RESOURCES else "failing"
            log.warning("cannot accept connections, %s (%s): they wait in the backlog; retrying with pauses up "
                        "to %.0f s, logged again once an accept succeeds", why, exc, LONGEST_PAUSE)
        self._failed += 1

    def _recovered(self) -> None:
        if self._failed:
            log.warning("accepting connections again, after %d failed attempts in %.1f s", self._failed,
                        time.monotonic() - self._failing_since)
            self._failed = 0
