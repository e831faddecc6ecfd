"""One client connection: its requests take effect in the order sent, its replies go out in that order,
and what it can make the broker hold is bounded.

Kafka mutes a connection while its request is processed. Here the next
frame is not read until the request before it has taken effect: its
handler returned, or said `request.applied()` (Produce, whose append is
done and which then only waits for the group-commit fsync, so pipelined
produces share fsyncs). That is the backpressure: a client that pipelines
is read as fast as its requests are applied, no faster. Replies are sent by
a writer task in request order; at most `MAX_REPLIES_OWED` are owed at once
and the writer waits for the socket to drain below its high-water mark
after each, so a client that never reads its replies stops being read.

Every request read counts against the broker's `queued.max.requests` until
its handler is done, applied, or parked on an outside event
(`request.waiting()`); reading stops while the count is full. A frame over
`DECODE_OFFLOAD_BYTES` is decoded, and its answer encoded, in a worker
thread, so a large request does not stall the other connections.

A reply that is dropped (its connection closed, its encoding failed) gives
back the file ranges it holds at once, on every path.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import IO, TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from logstore.broker.api import REGISTRY, Api, Request
from logstore.broker.authorizer import KafkaPrincipal
from logstore.broker.protocol import (
    SENDFILE_MIN_BYTES,
    HeldSlice,
    Part,
    PreEncoded,
    ProtocolError,
    UnsupportedRequest,
    peek_api,
)

if TYPE_CHECKING:
    from logstore.broker.context import BrokerContext

__all__ = ["Connection", "IDLE", "MAX_REPLIES_OWED", "DECODE_OFFLOAD_BYTES", "SENDFILE_MIN_BYTES"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_T = TypeVar("_T")
# kio decodes 10-30 MB/s here (bench: a Metadata, OffsetCommit, Fetch or ListOffsets frame of 16 KiB
# takes 0.5-1.6 ms), so frames up to this stay on the loop, where the hop to a thread (~0.1 ms) would
# cost more than it saves, and larger ones, which would hold every connection for milliseconds to
# seconds, go to a worker thread. Clients' everyday requests are far smaller.
DECODE_OFFLOAD_BYTES = 16 * 1024
# Replies a connection may owe before it stops being read. A producer pipelines up to 5 requests
# (max.in.flight.requests.per.connection); this leaves room for acks=all waits to overlap and bounds
# what a client that never reads can make the broker hold: this many replies (a Fetch's holds a file
# descriptor per partition with records) plus the socket's write buffer.
MAX_REPLIES_OWED = 16
# Why a connection task was cancelled, when that is its normal end.
IDLE = "connections.max.idle.ms"
SHUTDOWN = "shutdown"
REPLY_FAILED = "reply failed"
_NORMAL_ENDS = frozenset({(IDLE,), (SHUTDOWN,), (REPLY_FAILED,)})

# A reply in the queue: the handler's task, or a done future (an answer made without a handler).
_Reply: TypeAlias = "asyncio.Future[PreEncoded | None]"


class _Ticket:
    """One request's place in `queued.max.requests` and its connection's muting: the handler's `Progress`."""

    __slots__ = ("_slots", "_queued", "effect", "_gone")

    def __init__(self, slots: asyncio.Semaphore, gone: asyncio.Future[None]):
        self._slots = slots
        self._queued = True
        self.effect: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._gone = gone

    def applied(self) -> None:
        self.waiting()
        if not self.effect.done():
            self.effect.set_result(None)

    def waiting(self) -> None:
        if self._queued:
            self._queued = False
            self._slots.release()

    @property
    def gone(self) -> asyncio.Future[None]:
        return self._gone


class Connection:
    """A client connection of the broker: reads requests one effect at a time, writes replies in order.

    Owns its socket's streams, the replies it owes and the handler tasks it started. Runs on the event
    loop: `serve` is the connection's task, the writer a second one.
    """

    def __init__(self, broker: BrokerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 principal: KafkaPrincipal, slots: asyncio.Semaphore, codec_pool: Executor):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.principal = principal
        self.peer = writer.get_extra_info("peername")
        self._slots = slots
        self._codec_pool = codec_pool
        loop = asyncio.get_running_loop()
        self.last_active = loop.time()      # loop time a frame was last read or a reply sent
        self.owed = 0                       # replies queued or being sent
        self.writing = False                # the writer is blocked on the socket (drain, sendfile)
        self.gone: asyncio.Future[None] = loop.create_future()
        self._replies: asyncio.Queue[_Reply | None] = asyncio.Queue()
        self._room = asyncio.Event()        # set while fewer than MAX_REPLIES_OWED are owed
        self._room.set()
        self._unanswered: set[asyncio.Task[PreEncoded | None]] = set()
        self._task: asyncio.Task[Any] | None = None
        self._sendfile = True

    def idle_since(self) -> float | None:
        """Loop time since which nothing was read or sent, if the connection counts as idle (nothing owed,
        or its writer stuck on a client that does not read); None while it waits for a handler."""
        return self.last_active if self.owed == 0 or self.writing else None

    async def serve(self) -> None:
        """Serve requests until the client closes, sends a bad frame, or the broker stops or cancels."""
        self._task = asyncio.current_task()
        sender = asyncio.create_task(self._send_replies())
        cancelled: asyncio.CancelledError | None = None
        try:
            # PLAINTEXT is the only listener: every connection is Kafka's anonymous user.
            await self._read_requests()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except asyncio.CancelledError as exc:
            cancelled = exc
        # Nothing more will be read (Kafka closes the connection here): a parked handler answers now.
        self._stop_waiting()
        try:
            if cancelled is None:
                # The client stopped sending: what it is owed still goes out, then the connection closes.
                self._replies.put_nowait(None)
                await sender
        except asyncio.CancelledError as exc:
            cancelled = exc
        except (ConnectionError, OSError):
            pass
        finally:
            self._close(sender)
        if cancelled is not None and cancelled.args not in _NORMAL_ENDS:
            raise cancelled

    def _stop_waiting(self) -> None:
        if not self.gone.done():
            self.gone.set_result(None)

    def _close(self, sender: asyncio.Task[None]) -> None:
        """Close the socket and give back everything still owed (file ranges, queue places)."""
        self._stop_waiting()
        sender.cancel()
        self.writer.close()
        while not self._replies.empty():
            item = self._replies.get_nowait()
            if item is not None:
                _drop(item)
        for task in self._unanswered:
            _drop(task)

    async def _read_requests(self) -> None:
        broker = self.broker
        limit = broker.config["socket.request.max.bytes"]
        loop = asyncio.get_running_loop()
        client_host = f"/{self.peer[0]}" if isinstance(self.peer, tuple) and self.peer else ""
        while not broker.closing:
            await self._room.wait()
            (size,) = _SIZE.unpack(await self.reader.readexactly(4))
            self.last_active = loop.time()
            # Checked before reading the body, so a lying size costs no memory.
            if size < 8 or size > limit:
                raise ProtocolError(f"request size {size} outside 8..{limit} (socket.request.max.bytes)")
            frame = await self.reader.readexactly(size)
            self.last_active = loop.time()
            api_key, version, correlation_id = peek_api(frame)
            api = REGISTRY.get(api_key)
            if api is not None and version > api.max_version and api.newer is not None:
                self._owe(_done(api.newer(frame, correlation_id)))
                continue
            if api is None or not api.accept_from <= version <= api.max_version:
                raise UnsupportedRequest(f"api key {api_key} version {version} is not served")
            # A whole frame is read before it takes a place, so a slow sender holds none (as in Kafka).
            await self._slots.acquire()
            ticket = _Ticket(self._slots, self.gone)
            try:
                offload = api.offload and size > DECODE_OFFLOAD_BYTES
                client_id, body = await self._off_loop(api.decode, frame) if offload else api.decode(frame)
            except BaseException:
                ticket.waiting()
                raise
            request = Request(broker, api_key, version, correlation_id, client_id, client_host, self.principal,
                              ticket)
            task = asyncio.create_task(self._handle(api, request, body, ticket, offload))
            if api.replies(body):
                self._owe(task)
            else:
                self._unanswered.add(task)
                task.add_done_callback(self._answered_without_reply)
            # Muted until the request took effect: its handler is done or said so.
            await ticket.effect

    def _owe(self, reply: _Reply) -> None:
        self.owed += 1
        if self.owed >= MAX_REPLIES_OWED:
            self._room.clear()
        self._replies.put_nowait(reply)

    def _answered_without_reply(self, task: asyncio.Task[PreEncoded | None]) -> None:
        self._unanswered.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # As with a failed reply: the client cannot be told, so the connection closes.
            self._end(REPLY_FAILED)

    async def _off_loop(self, call: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._codec_pool, call, *args)

    async def _handle(self, api: Api, request: Request, body: object, ticket: _Ticket,
                      offload: bool) -> PreEncoded | None:
        """The handler's answer, encoded as the registration says (None: nothing to send)."""
        try:
            response = await api.handler(request, body)
            if response is None:
                return None
            if offload:
                return await self._off_loop(api.encode, request.correlation_id, request.version, response)
            return api.encode(request.correlation_id, request.version, response)
        except Exception:
            log.exception("%s v%d from %s failed", api.name, request.version, request.client_id)
            raise
        finally:
            ticket.applied()

    async def _send_replies(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await self._replies.get()
            if item is None:
                return
            try:
                response = await item
            except Exception:  # noqa: BLE001 - logged in _handle; the client sees the connection close
                self._end(REPLY_FAILED)
                return
            finally:
                self.last_active = loop.time()
                self.owed -= 1
                if self.owed < MAX_REPLIES_OWED:
                    self._room.set()
            if response is None:
                continue
            self.writing = True
            try:
                await self._send_parts(response.parts)
                await self.writer.drain()
            except (ConnectionError, OSError):
                self._end(REPLY_FAILED)
                return
            finally:
                self.writing = False
                response.close()
            self.last_active = loop.time()

    def _end(self, why: str) -> None:
        """End the connection from outside its reading (a failed reply, the idle reaper, shutdown)."""
        self.writer.close()
        if self._task is not None:
            self._task.cancel(why)

    def cancel(self, why: str) -> None:
        """End the connection: `IDLE` or `SHUTDOWN`."""
        self._end(why)

    async def _send_parts(self, parts: Sequence[Part]) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if not isinstance(part, HeldSlice):
                self.writer.write(part)
            elif part.size < SENDFILE_MIN_BYTES or not self._sendfile:
                self.writer.write(part.read())
            else:
                await self.writer.drain()
                try:
                    # asyncio's sendfile needs only the fileno() and seek() a HeldSlice has, not a whole IO.
                    await loop.sendfile(self.writer.transport, cast("IO[bytes]", part), part.position, part.size,
                                        fallback=False)
                except (AttributeError, NotImplementedError, asyncio.SendfileNotAvailableError):
                    # uvloop, or a transport without sendfile: copy, and stop trying.
                    self._sendfile = False
                    self.writer.write(part.read())


def _done(value: PreEncoded) -> asyncio.Future[PreEncoded | None]:
    future: asyncio.Future[PreEncoded | None] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _drop(reply: Awaitable[PreEncoded | None]) -> None:
    """Give back what an unsent reply holds, now or when its handler finishes."""
    future = cast("asyncio.Future[PreEncoded | None]", reply)
    if future.done():
        _release(future)
    else:
        future.add_done_callback(_release)


def _release(future: asyncio.Future[PreEncoded | None]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    response = future.result()
    if response is not None:
        response.close()
