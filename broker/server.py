"""The broker: an asyncio server in front of a logstore node, knowing no API in particular.

Each connection reads size-prefixed frames; every request becomes a task at
once (so a Produce waiting for its fsync does not hold back the next one), and
a writer task sends the replies in request order, as clients require. A frame
larger than `socket.request.max.bytes`, a header that cannot be read, or an
API version this broker does not serve closes that connection, as Kafka does;
others are untouched. A connection that neither sent a request nor
was owed a reply for `connections.max.idle.ms` is closed. What differs by API
(how a frame is decoded, whether it is answered, how the answer is encoded,
what a too-new version gets) is the registration's (`logstore.broker.api`).
Handlers run on the event loop and call the store directly: appends and
reads are a pwrite or pread each, and large file ranges go out by sendfile.
The process around it (configuration, signals, exit codes) is `startup.py`.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeAlias, TypeVar, cast

from logstore.broker.api import REGISTRY, Api, Request, load_all
from logstore.broker.authorizer import ANONYMOUS, AllowAll, Authorizer, KafkaPrincipal
from logstore.broker.config import BrokerConfig
from logstore.broker.node import Node
from logstore.broker.protocol import HeldSlice, Part, PreEncoded, ProtocolError, UnsupportedRequest, peek_api
from logstore.filesystem import OS, FileSystem

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# Below this a file range is read and written like any bytes; above, sendfile's
# pause of the connection's reads costs less than the copy through user space.
SENDFILE_MIN_BYTES = 64 * 1024
IDLE = "connections.max.idle.ms"
# Coordinator calls block on fsyncs; this many run at once (their fsyncs are shared by group commit).
COORDINATOR_THREADS = 16

_T = TypeVar("_T")
# A connection's replies in request order (each the handler's task, or a done future); None ends the queue.
_Replies: TypeAlias = "asyncio.Queue[Awaitable[PreEncoded | None] | None]"
# A connection's [when it last read a frame or sent a reply (loop time), how many replies it owes].
_Activity: TypeAlias = list[float]


class Broker:
    """A single-node Kafka broker: a node (store, coordinators, upkeep), the handlers, the listening socket.

    It is the handlers' `BrokerContext`; `authorizer` decides what each principal may do (by default
    everything, as Kafka without an authorizer).
    """

    def __init__(self, config: BrokerConfig, authorizer: Authorizer | None = None, fs: FileSystem = OS):
        self.config = config
        self.authorizer = authorizer if authorizer is not None else AllowAll()
        load_all()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.node = Node(config, on_appended=self._appended_elsewhere, fs=fs)
        self.node_id = self.node.node_id
        self.cluster_id = self.node.cluster_id
        self.store = self.node.store
        self.producer_ids = self.node.producer_ids
        self.transactions = self.node.transactions
        self.groups = self.node.groups
        self._coordinator_pool = ThreadPoolExecutor(COORDINATOR_THREADS, thread_name_prefix="coordinator")
        self.closing = False
        self._appended = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        # Per connection: when it last read a frame or sent a reply, and how many replies it owes.
        self._activity: dict[asyncio.Task[Any], _Activity] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._sendfile = True
        # Encoded answers that only change with the topics, per API key (Metadata).
        self.response_cache: dict[int, dict[Hashable, bytes]] = {}

    # -- what handlers use -------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str | None] | None = None) -> int:
        """Create a topic (Kafka's name rules); returns its partition count."""
        return self.store.create_topic(name, partitions, configs).partitions

    def delete_topic(self, name: str) -> None:
        """Delete a topic, its directories and every group's offsets of it (blocks on fsyncs)."""
        self.node.delete_topic(name)

    def appended_event(self) -> asyncio.Event:
        """Set at the next append: what a long-polling Fetch waits on."""
        return self._appended

    def notify_appended(self) -> None:
        """Wake the Fetches waiting for data."""
        self._appended.set()
        self._appended = asyncio.Event()

    def _appended_elsewhere(self) -> None:
        # Called from a coordinator thread (markers written): read_committed fetches may pass the new LSO.
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.notify_appended)

    async def coordinate(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run a (blocking) coordinator call in the coordinator pool."""
        return await asyncio.get_running_loop().run_in_executor(self._coordinator_pool, call, *args)

    # -- serving -------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port)."""
        listener = self.config.listener
        self._server = await asyncio.start_server(self._serve, listener.host or None, listener.port,
                                                  reuse_address=True)
        host, port = self._server.sockets[0].getsockname()[:2]
        self._reaper = asyncio.create_task(self._close_idle_connections())
        self._loop = asyncio.get_running_loop()
        log.info("logstore broker %d listening on %s:%d (cluster %s)", self.node_id, host, port, self.cluster_id)
        return host, port

    async def _close_idle_connections(self) -> None:
        """Close connections with nothing read or owed for `connections.max.idle.ms`, as Kafka does."""
        idle = self.config["connections.max.idle.ms"] / 1000
        loop = asyncio.get_running_loop()
        while not self.closing:
            await asyncio.sleep(min(max(idle / 4, 0.05), 30.0))
            now = loop.time()
            for task, (last, owed) in list(self._activity.items()):
                if owed == 0 and now - last > idle:
                    log.info("closing a connection idle for %.0f ms (connections.max.idle.ms)", (now - last) * 1000)
                    task.cancel(IDLE)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # asyncio runs each connection's callback as a task
        self._connections.add(task)
        activity = self._activity[task] = [asyncio.get_running_loop().time(), 0]
        replies: _Replies = asyncio.Queue()
        sender = asyncio.create_task(self._send_replies(replies, writer, activity))
        peer = writer.get_extra_info("peername")
        try:
            # PLAINTEXT is the only listener: every connection is Kafka's anonymous user.
            await self._read_requests(reader, replies, peer, activity, ANONYMOUS)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError as exc:
            if not (self.closing or exc.args == (IDLE,)):
                raise
            # shutdown() or the idle reaper cancelled this connection: end normally, or Python
            # 3.11's StreamReaderProtocol logs the cancellation as an unhandled exception.
        finally:
            await replies.put(None)
            try:
                await sender
            except (ConnectionError, asyncio.CancelledError):
                pass
            writer.close()
            self._connections.discard(task)
            self._activity.pop(task, None)

    async def _read_requests(self, reader: asyncio.StreamReader, replies: _Replies, peer: object,
                             activity: _Activity, principal: KafkaPrincipal) -> None:
        limit = self.config["socket.request.max.bytes"]
        loop = asyncio.get_running_loop()
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""
        while not self.closing:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            activity[0] = loop.time()
            # Checked before reading the body, so a lying size costs no memory.
            if size < 8 or size > limit:
                raise ProtocolError(f"request size {size} outside 8..{limit} (socket.request.max.bytes)")
            frame = await reader.readexactly(size)
            activity[0] = loop.time()
            api_key, version, correlation_id = peek_api(frame)
            api = REGISTRY.get(api_key)
            if api is not None and version > api.max_version and api.newer is not None:
                activity[1] += 1
                await replies.put(_done(api.newer(frame, correlation_id)))
                continue
            if api is None or not api.accept_from <= version <= api.max_version:
                raise UnsupportedRequest(f"api key {api_key} version {version} is not served")
            client_id, body = api.decode(frame)
            request = Request(self, api_key, version, correlation_id, client_id, client_host, principal)
            task = asyncio.create_task(self._handle(api, request, body))
            if not api.replies(body):
                continue
            activity[1] += 1
            await replies.put(task)

    async def _handle(self, api: Api, request: Request, body: object) -> PreEncoded | None:
        """The handler's answer, encoded as the registration says (None: nothing to send)."""
        try:
            response = await api.handler(request, body)
            return None if response is None else api.encode(request.correlation_id, request.version, response)
        except Exception:
            log.exception("%s v%d from %s failed", api.name, request.version, request.client_id)
            raise

    async def _send_replies(self, replies: _Replies, writer: asyncio.StreamWriter, activity: _Activity) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await replies.get()
            if item is None:
                return
            try:
                response = await item
            except Exception:  # noqa: BLE001 - logged in _handle; the client sees the connection close
                writer.close()
                return
            finally:
                activity[0] = loop.time()
                activity[1] -= 1
            if response is None:
                continue
            try:
                await self._send_parts(response.parts, writer)
            finally:
                response.close()
            await writer.drain()

    async def _send_parts(self, parts: Sequence[Part], writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if not isinstance(part, HeldSlice):
                writer.write(part)
            elif part.size < SENDFILE_MIN_BYTES or not self._sendfile:
                writer.write(part.read())
            else:
                await writer.drain()
                try:
                    # asyncio's sendfile needs only the fileno() and seek() a HeldSlice has, not a whole IO.
                    await loop.sendfile(writer.transport, cast("IO[bytes]", part), part.position, part.size,
                                        fallback=False)
                except (AttributeError, NotImplementedError, asyncio.SendfileNotAvailableError):
                    # uvloop, or a transport without sendfile: copy, and stop trying.
                    self._sendfile = False
                    writer.write(part.read())

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Start the upkeep, serve until `stop` is set, then shut down cleanly."""
        # Only now, after the ready line: a crash in the redo of a decided transaction is then seen
        # by a caller that already knows the broker came up.
        self.node.start()
        await stop.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop listening, end the connections, close the store (checkpoints, snapshots, marker)."""
        self.closing = True
        self.notify_appended()
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        # Coordinator calls already running finish their writes before the store closes.
        await asyncio.get_running_loop().run_in_executor(None, self._coordinator_pool.shutdown)
        self.node.close()
        log.info("logstore broker %d stopped", self.node_id)


def _done(value: PreEncoded) -> asyncio.Future[PreEncoded | None]:
    future: asyncio.Future[PreEncoded | None] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future

