"""One client connection: its requests take effect in the order sent, its replies go out in that order,
and what it can make the broker hold is bounded.

Kafka mutes a connection while its request is processed. Here the next
frame is not read until the request before it has taken effect: its
handler returned, or said `request.applied()` (Produce, whose append is
done and which then only waits for the group-commit fsync, so pipelined
produces share fsyncs). That is the backpressure: a client that pipelines
is read as fast as its requests are applied, no faster. Replies go out in
request order. One that is ready when nothing is owed before it (the
everyday case: a handler that finished at once) is written by the reading
task then and there; waking a writer task for it cost a turn of the loop
(6-8 us of broker CPU a single-record Produce or an OffsetCommit, measured
in bench/small_requests.py). One that waits (for an fsync) with
nothing owed before it is written by its own done callback once ready,
which costs less than the writer task's two wake-ups for it. The others
are sent by the writer task; at most `MAX_REPLIES_OWED` are owed at once
and the writer waits for the socket to drain below its high-water mark
after each, so a client that never reads its replies stops being read.

Every request read counts against the broker's `queued.max.requests` until
its handler is done, applied, or parked on an outside event
(`request.waiting()`); reading stops while the count is full. A frame over
`DECODE_OFFLOAD_BYTES` is decoded, and its answer encoded, in a worker
thread, so a large request does not stall the other connections.

A reply that is dropped (its connection closed, its encoding failed) gives
back the file ranges it holds at once, on every path. When the broker ends a
connection (a bad frame, a failed authentication), the replies owed before
it still go out, and the socket closes only once the client has them, or
after LINGER_SECONDS (`_linger`).

Security: the connection knows its listener and who its client is (the TLS
certificate's principal, or ANONYMOUS). On a SASL listener its `SaslSession`
decides which requests may be read before and after authentication (any
other closes the connection) and bounds unauthenticated frames; once
authenticated, the session's principal is the requests'. A handler may mute
the connection for a quota's throttle time (`Request.throttle`). Over TLS no
file range is sendfile'd: it is copied in 256 KiB pieces.

With `metrics.port` set, each request handled is counted with its time from
its frame read to its answer made and the error codes in its answer, and the
bytes read and sent are counted per listener (`metrics.py`: plain ints); with
`logstore.request` at DEBUG each is also one line of the request log.
"""
from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import struct
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from logstore.broker.acls import java_host
from logstore.broker.api import REGISTRY, Api, Request
from logstore.broker.authorizer import KafkaPrincipal
from logstore.broker.listeners import Listener
from logstore.broker.metrics import HANDLER_FAILED, REQUEST_LOG, request_done
from logstore.broker.protocol import (
    SENDFILE_MIN_BYTES,
    HeldSlice,
    Part,
    PreEncoded,
    ProtocolError,
    UnsupportedRequest,
    peek_api,
)
from logstore.broker.request_time import measured
from logstore.broker.send_file import send_file
from logstore.errors import SaslAuthenticationError

if TYPE_CHECKING:
    from logstore.broker.context import BrokerContext
    from logstore.broker.sasl_session import SaslSession

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
# The piece a file range is copied in when it cannot be sendfile'd (TLS).
COPY_CHUNK_BYTES = 256 * 1024
# How long a connection the broker ends (a bad frame, a failed authentication) waits for its client to
# take the replies already written and close its side, and the piece its further bytes are dropped in.
LINGER_SECONDS = 5.0
LINGER_READ_BYTES = 64 * 1024
# Why a connection task was cancelled, when that is its normal end.
IDLE = "connections.max.idle.ms"
SHUTDOWN = "shutdown"
REPLY_FAILED = "reply failed"
_NORMAL_ENDS = frozenset({(IDLE,), (SHUTDOWN,), (REPLY_FAILED,)})

# A reply in the queue: the handler's task, or a done future (an answer made without a handler).
_Reply: TypeAlias = "asyncio.Future[PreEncoded | None]"


class _Replies:
    """The replies a connection owes, in order: asyncio.Queue's part that the sender uses, without its
    per-wait lookup of the running loop (a getpid(2) syscall on Python 3.11)."""

    __slots__ = ("_loop", "_items", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._items: collections.deque[_Reply | None] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: _Reply | None) -> None:
        """Queue `item` (None: the last one) and wake the sender."""
        self._items.append(item)
        self.wake()

    def put_quietly(self, item: _Reply) -> None:
        """Queue `item` without waking the sender: the connection sends it when it is ready, or wakes it then."""
        self._items.append(item)

    def wake(self) -> None:
        """Let the sender take what is queued."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def alone(self, item: _Reply) -> bool:
        """Whether `item` is all that is queued and the sender still waits (it has not taken it)."""
        return self._waiter is not None and len(self._items) == 1 and self._items[0] is item

    def remove_alone(self) -> None:
        """Drop the one queued item `alone` said is there (it was sent without the sender)."""
        self._items.pop()

    @property
    def idle(self) -> bool:
        """Whether the sender waits for the next item, having sent everything before it."""
        return self._waiter is not None and not self._items

    async def get(self) -> _Reply | None:
        """The next item, once there is one (one reader: the connection's sender)."""
        while not self._items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    def take_all(self) -> list[_Reply | None]:
        """Everything still queued, now (the connection closes)."""
        items = list(self._items)
        self._items.clear()
        return items


class _Ticket:
    """One request's place in `queued.max.requests` and its connection's muting: the handler's `Progress`."""

    __slots__ = ("_slots", "_queued", "effect", "_gone", "_connection")

    def __init__(self, slots: asyncio.Semaphore, connection: Connection):
        self._slots = slots
        self._queued = True
        self.effect: asyncio.Future[None] = connection.loop.create_future()
        self._gone = connection.gone
        self._connection = connection

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

    def throttle(self, ms: int) -> None:
        self._connection.mute_for(ms)


class Connection:
    """A client connection of the broker: reads requests one effect at a time, writes replies in order.

    Owns its socket's streams, the replies it owes and the handler tasks it started. Runs on the event
    loop: `serve` is the connection's task, the writer a second one.
    """

    def __init__(self, broker: BrokerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 principal: KafkaPrincipal, slots: asyncio.Semaphore, codec_pool: Executor,
                 listener: Listener, session: SaslSession | None = None):
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.listener = listener
        self.session = session
        self._principal = principal         # the TLS client's, or ANONYMOUS; SASL's once authenticated
        self.peer = writer.get_extra_info("peername")
        self._slots = slots
        self._codec_pool = codec_pool
        # Kept: asyncio.get_running_loop() costs a getpid(2) syscall a call on Python 3.11, several a request.
        self.loop = loop = asyncio.get_running_loop()
        self.last_active = loop.time()      # loop time a frame was last read or a reply sent
        self.owed = 0                       # replies queued or being sent
        self.writing = False                # the writer is blocked on the socket (drain, sendfile)
        self.gone: asyncio.Future[None] = loop.create_future()
        self._replies = _Replies(loop)
        self._room = asyncio.Event()        # set while fewer than MAX_REPLIES_OWED are owed
        self._room.set()
        self._unanswered: set[_Reply] = set()
        self._task: asyncio.Task[Any] | None = None
        # sendfile cannot go through TLS: the kernel would send the file's bytes unencrypted.
        self._sendfile = not listener.tls
        self._muted_until = 0.0             # loop time before which nothing more is read (quota throttling)
        self._metrics = broker.metrics      # None: metrics off
        # The request log's level is set at start and never changes: asked once, not per request.
        self._log_requests = REQUEST_LOG.isEnabledFor(logging.DEBUG)
        if self._metrics is not None:
            self._metrics.connected(listener.name)

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sends this connection's requests: the SASL principal once authenticated, else the TLS one."""
        session = self.session
        return session.principal if session is not None and session.principal is not None else self._principal

    def mute_for(self, ms: int) -> None:
        """Read no further request for `ms` from now (a quota's throttle; the reply still goes out)."""
        self._muted_until = max(self._muted_until, self.loop.time() + ms / 1000)

    def idle_since(self) -> float | None:
        """Loop time since which nothing was read or sent, if the connection counts as idle (nothing owed,
        or its writer stuck on a client that does not read); None while it waits for a handler."""
        return self.last_active if self.owed == 0 or self.writing else None

    async def serve(self) -> None:
        """Serve requests until the client closes, sends a bad frame, or the broker stops or cancels."""
        self._task = asyncio.current_task()
        sender = self.loop.create_task(self._send_replies())
        cancelled: asyncio.CancelledError | None = None
        refused = False                     # the broker ends it: the client may still be sending
        try:
            await self._read_requests()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except AuthenticationFailed as exc:
            refused = True
            log.info("Failed authentication with %s on %s (%s)", self.peer, self.listener.name, exc)
        except ProtocolError as exc:
            refused = True
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
                if refused:
                    await _linger(self.reader, self.writer)
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
        for item in self._replies.take_all():
            if item is not None:
                _drop(item)
        for task in self._unanswered:
            _drop(task)

    async def _read_requests(self) -> None:
        broker = self.broker
        limit = broker.config["socket.request.max.bytes"]
        loop = self.loop
        # As Kafka shows it: "/" and Java's form of the address (IPv6 in full: /0:0:0:0:0:0:0:1).
        client_host = f"/{java_host(self.peer[0])}" if isinstance(self.peer, tuple) and self.peer else ""
        session = self.session
        first = True
        while not broker.closing:
            if not self._room.is_set():
                await self._room.wait()
            if self._muted_until > loop.time():
                await asyncio.sleep(self._muted_until - loop.time())
            head = await self.reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            self.last_active = loop.time()
            # Checked before reading the body, so a lying size costs no memory; before authentication
            # the bound is SASL's.
            bound, setting = ((session.max_receive, "sasl.server.max.receive.size")
                              if session is not None and not session.authenticated
                              else (limit, "socket.request.max.bytes"))
            if size < (0 if session is not None and session.raw_tokens else 8) or size > bound:
                raise ProtocolError(_bad_size(size, bound, setting, head if first else None, self.listener))
            first = False
            frame = await self.reader.readexactly(size)
            self.last_active = started = loop.time()
            if self._metrics is not None:
                self._metrics.read(self.listener.name, size + 4)
            if session is not None and session.raw_tokens:
                await self._raw_token(session, frame)
                continue
            api_key, version, correlation_id = peek_api(frame)
            if session is not None and (refusal := session.refusal(api_key, loop.time())) is not None:
                raise ProtocolError(refusal)
            api = REGISTRY.get(api_key)
            if api is not None and version > api.max_version and api.newer is not None:
                self._owe(_done(api.newer(frame, correlation_id)))
                continue
            if api is None or not api.accept_from <= version <= api.max_version:
                raise UnsupportedRequest(f"api key {api_key} version {version} is not served")
            # A whole frame is read before it takes a place, so a slow sender holds none (as in Kafka).
            await self._slots.acquire()
            ticket = _Ticket(self._slots, self)
            try:
                offload = api.offload and size > DECODE_OFFLOAD_BYTES
                client_id, body = await self._off_loop(api.decode, frame) if offload else api.decode(frame)
            except BaseException:
                ticket.waiting()
                raise
            request = Request(broker, api_key, version, correlation_id, client_id, client_host, self.principal,
                              ticket, self.listener.name, session)
            task = self._start(self._handle(api, request, body, ticket, offload, started))
            if api.replies(body):
                self._owe(task)
            else:
                self._unanswered.add(task)
                task.add_done_callback(self._answered_without_reply)
            # Muted until the request took effect: its handler is done or said so.
            await ticket.effect
            if session is not None and session.failed:
                # Its answer (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM) still goes out.
                raise AuthenticationFailed(session.failure or "authentication failed")

    async def _raw_token(self, session: SaslSession, token: bytes) -> None:
        """A bare SASL token after SaslHandshake v0: the server's token goes back as a bare frame."""
        try:
            answer = await session.authenticate(token, self.broker.coordinate)
        except SaslAuthenticationError:
            # v0 has no way to say why: the connection closes.
            raise AuthenticationFailed(session.failure or "authentication failed") from None
        self._owe(_done(PreEncoded([_SIZE.pack(len(answer)), answer])))

    def _owe(self, reply: _Reply) -> None:
        replies = self._replies
        idle = replies.idle
        if idle and reply.done() and self._sent_now(reply):
            return
        self.owed += 1
        if self.owed >= MAX_REPLIES_OWED:
            self._room.clear()
        if idle and not reply.done():
            # Nothing is owed before it: it goes out from its done callback when it can, rather than by
            # waking the sender to wait for it and again to send it (two task steps a durable Produce).
            replies.put_quietly(reply)
            reply.add_done_callback(self._ready_first)
        else:
            replies.put_nowait(reply)

    def _ready_first(self, reply: _Reply) -> None:
        """A reply owed with nothing before it is ready: sent now, unless the sender has it or must take it."""
        replies = self._replies
        if not replies.alone(reply):
            return
        if not self._sent_now(reply):
            replies.wake()
            return
        replies.remove_alone()
        self.owed -= 1
        if self.owed < MAX_REPLIES_OWED:
            self._room.set()

    def _sent_now(self, reply: _Reply) -> bool:
        """Send a reply that is ready, nothing being owed before it, from here: whether it went. Most replies
        go this way, without waking the sender for them (a turn of the loop a request). One that holds file
        ranges, a failure, or a socket with bytes still waiting to go out, is left to the sender."""
        if reply.cancelled() or reply.exception() is not None:
            return False
        response = reply.result()
        transport = self.writer.transport
        if response is not None:
            if transport.is_closing() or transport.get_write_buffer_size() or any(
                    isinstance(part, HeldSlice) for part in response.parts):
                return False
            parts = cast("Sequence[bytes]", response.parts)
            for part in parts:
                self.writer.write(part)
            response.close()
            if self._metrics is not None:
                self._metrics.sent(self.listener.name, sum(map(len, parts)))
        self.last_active = self.loop.time()
        return True

    def _start(self, handling: Coroutine[Any, Any, PreEncoded | None]) -> _Reply:
        """The handler run at once up to its first wait, as Python 3.12's eager tasks run: a done future if it
        finished there, else the task that goes on from there. Most handlers wait for nothing (an fsync on
        tmpfs included), and then cost no task and no turn of the loop."""
        context = contextvars.copy_context()   # as a task's: a handler's context variables stay its own
        try:
            waiting_on = context.run(handling.send, None)
        except StopIteration as done:
            future = self.loop.create_future()
            future.set_result(done.value)
            return future
        except asyncio.CancelledError:
            future = self.loop.create_future()
            future.cancel()
            return future
        except Exception as exc:  # noqa: BLE001 - the reply's failure, as the task's would be
            future = self.loop.create_future()
            future.set_exception(exc)
            return future
        return self.loop.create_task(_go_on(handling, waiting_on), context=context)

    def _answered_without_reply(self, task: _Reply) -> None:
        self._unanswered.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # As with a failed reply: the client cannot be told, so the connection closes.
            self._end(REPLY_FAILED)

    async def _off_loop(self, call: Callable[..., _T], *args: Any) -> _T:
        return await self.loop.run_in_executor(self._codec_pool, call, *args)

    async def _handle(self, api: Api, request: Request, body: object, ticket: _Ticket,
                      offload: bool, started: float) -> PreEncoded | None:
        """The handler's answer, encoded as the registration says (None: nothing to send); `started` is the loop
        time its frame was read (the request's total time, counted and logged, runs from there)."""
        response: Any = None
        try:
            quotas = self.broker.quotas
            handling = api.handler(request, body)
            # Timing each step costs a little: only while some client has a request_percentage quota. Every
            # handler is an `async def` (the registry's type says Awaitable), so `measured` may step it.
            response = await (measured(quotas, request, cast("Coroutine[Any, Any, Any]", handling))
                              if quotas.request.enabled else handling)
            if response is None:
                return None
            if offload:
                return await self._off_loop(api.encode, request.correlation_id, request.version, response)
            return api.encode(request.correlation_id, request.version, response)
        except Exception:
            log.exception("%s v%d from %s failed", api.name, request.version, request.client_id)
            response = HANDLER_FAILED
            raise
        finally:
            ticket.applied()
            if self._metrics is not None or self._log_requests:
                request_done(self._metrics, self._log_requests, api, request, body, response, started,
                             self.loop.time(), self.peer)

    async def _send_replies(self) -> None:
        loop = self.loop
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
            except RuntimeError:
                # uvloop refuses a write on a transport closed under it (the client reset); asyncio drops it.
                if not self.writer.transport.is_closing():
                    raise
                self._end(REPLY_FAILED)
                return
            finally:
                self.writing = False
                response.close()
            self.last_active = loop.time()
            if self._metrics is not None:
                self._metrics.sent(self.listener.name, sum(p.size if isinstance(p, HeldSlice) else len(p)
                                                           for p in response.parts))

    def _end(self, why: str) -> None:
        """End the connection from outside its reading (a failed reply, the idle reaper, shutdown)."""
        self.writer.close()
        if self._task is not None:
            self._task.cancel(why)

    def cancel(self, why: str) -> None:
        """End the connection: `IDLE` or `SHUTDOWN`."""
        self._end(why)

    async def _send_parts(self, parts: Sequence[Part]) -> None:
        for part in parts:
            if not isinstance(part, HeldSlice):
                self.writer.write(part)
            elif part.size < SENDFILE_MIN_BYTES:
                self.writer.write(part.read())
            elif not self._sendfile:
                # Through TLS (or without sendfile) a range goes in pieces: a whole 16 MiB range written at
                # once is copied through several fresh buffers (ours, asyncio's, OpenSSL's), and faulting in
                # their pages costs more than the encryption (bench/security.py, perf).
                for offset in range(0, part.size, COPY_CHUNK_BYTES):
                    self.writer.write(part.read(offset, COPY_CHUNK_BYTES))
                    await self.writer.drain()
            else:
                await send_file(self.writer, part)


class AuthenticationFailed(Exception):
    """A SASL exchange failed: the connection closes once what it is owed is sent."""


def _bad_size(size: int, bound: int, setting: str, head: bytes | None, listener: Listener) -> str:
    """Why a frame's size closes the connection, naming the likely cause of the first frame's."""
    message = f"request size {size} outside 8..{bound} ({setting})"
    if head is not None and head[0] == 0x16 and head[1] == 0x03 and not listener.tls:
        # A TLS record header (handshake, TLS 1.x) read as a Kafka size.
        message += f": a TLS client on the {listener.security_protocol} listener {listener.name}"
    return message


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Let the replies already written reach a client that may still be sending, before the socket closes.

    Closing a TCP socket with unread bytes in it makes the kernel reset the connection and drop what it
    had not delivered yet: the answers to the valid requests before a bad frame would be lost. So the
    socket's buffer is flushed, its sending side shut (the client reads the replies, then the end), and
    what the client still sends is read and dropped until it closes too, for at most LINGER_SECONDS.
    Through TLS the sending side cannot be shut alone: the buffer is flushed and the socket closed."""
    if writer.transport.is_closing():   # the client reset it: uvloop refuses any call on it
        return
    try:
        async with asyncio.timeout(LINGER_SECONDS):
            writer.transport.set_write_buffer_limits(high=0)
            await writer.drain()
            if writer.transport.is_closing() or not writer.can_write_eof():
                return
            writer.write_eof()
            while await reader.read(LINGER_READ_BYTES):
                pass
    except TimeoutError:
        pass


def _done(value: PreEncoded) -> asyncio.Future[PreEncoded | None]:
    future: asyncio.Future[PreEncoded | None] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


@types.coroutine
def _go_on(handling: Coroutine[Any, Any, _T], waiting_on: Any) -> Generator[Any, Any, _T]:
    """Drive a coroutine whose first step ran already (it yielded `waiting_on`) as its own task would."""
    while True:
        try:
            value = yield waiting_on
        except BaseException as exc:  # noqa: BLE001 - a cancellation or a failed wait: the handler's to handle
            try:
                waiting_on = handling.throw(exc)
            except StopIteration as done:
                return cast("_T", done.value)
        else:
            try:
                waiting_on = handling.send(value)
            except StopIteration as done:
                return cast("_T", done.value)


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
