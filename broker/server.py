"""The broker: an asyncio server in front of a logstore node, knowing no API in particular.

Every listener of `listeners` is bound, each with what its security
protocol asks (`listener_security.py`: a TLS handshake, with the client's
certificate as its principal; a SASL session). The acceptor (`acceptor.py`)
admits connections within `max.connections` and `max.connections.per.ip`;
each is a `Connection` (`connection.py`),
which reads one request at a time, as Kafka's muted connections do (the
next frame is read once the request before it took effect), and sends the
replies in request order. A frame larger than `socket.request.max.bytes`,
a header that cannot be read, or an API version this broker does not serve
closes that connection, as Kafka does; others are untouched. A connection
that neither sent a request nor was owed a reply for
`connections.max.idle.ms` (or whose replies the client stopped reading for
that long) is closed. What differs by API (how a frame is decoded, whether
it is answered, how the answer is encoded, what a too-new version gets) is
the registration's (`logstore.broker.api`). Handlers run on the event loop
and call the store directly: appends and reads are a pwrite or pread each,
and large file ranges go out by sendfile. Long-polling Fetches park on
their partitions (`fetch_waiters.py`). The process around it
(configuration, signals, exit codes) is `startup.py`. With a metrics
endpoint (`metrics.py`), the broker counts its requests, serves its
collector there and says it is ready once it listens.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from logstore.broker.acceptor import Acceptor, ConnectionQuotas, Serve
from logstore.broker.api import load_all
from logstore.broker.authorizer import AllowAll, Authorizer
from logstore.broker.config import BrokerConfig
from logstore.broker.connection import IDLE, SHUTDOWN, Connection
from logstore.broker.durable_waits import Durable, LoopInbox, until_durable
from logstore.broker.fetch_waiters import FetchWaiters, TopicPartition
from logstore.broker.listener_security import ListenerSecurity, ListenerTls, listener_security
from logstore.broker.listeners import Listener
from logstore.broker.metrics import MetricsEndpoint, RequestMetrics
from logstore.broker.metrics_collector import BrokerCollector
from logstore.broker.node import Node
from logstore.broker.quotas import ClientQuotas
from logstore.broker.request_time import in_pool
from logstore.broker.scram_store import ScramCredentialStore, kafka_credentials
from logstore.broker.ssl_principal import NoMatchingRule
from logstore.broker.standard_authorizer import StandardAuthorizer
from logstore.filesystem import OS, FileSystem

log = logging.getLogger(__name__)

# Coordinator calls block on fsyncs; this many run at once (their fsyncs are shared by group commit).
COORDINATOR_THREADS = 16
# Large frames are decoded and their answers encoded here; kio holds the GIL, so more threads would
# not decode faster, only let more large requests wait half-done.
CODEC_THREADS = 2
LISTEN_BACKLOG = 100

_T = TypeVar("_T")


class Broker:
    """A single-node Kafka broker: a node (store, coordinators, upkeep), the handlers, the listening sockets.

    It is the handlers' `BrokerContext`; `authorizer` decides what each principal may do (by default
    everything, as Kafka without an authorizer). With `endpoint` (the `metrics.port` one, already serving
    /health), its requests are counted and its collector served there.
    """

    def __init__(self, config: BrokerConfig, authorizer: Authorizer | None = None, fs: FileSystem = OS,
                 endpoint: MetricsEndpoint | None = None):
        self.config = config
        self.authorizer = authorizer if authorizer is not None else AllowAll()
        load_all()
        self.bound: list[tuple[Listener, str, int]] = []   # each listener served, with its bound address
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: LoopInbox | None = None
        self.node = Node(config, on_appended=self._appended_elsewhere, fs=fs, load_groups_in_background=True)
        self.node_id = self.node.node_id
        self.cluster_id = self.node.cluster_id
        self.store = self.node.store
        self.producer_ids = self.node.producer_ids
        self.transactions = self.node.transactions
        self.groups = self.node.groups
        self.share = self.node.share
        self.group_configs = self.node.group_configs
        self.group_setting = self.node.group_setting
        try:
            self.quotas = ClientQuotas.of_broker(config, fs)
            # A directory Kafka wrote: its users and ACLs seed our files while they have none, once the
            # store holds the dirs' locks and has read the metadata log.
            kafka = self.store.kafka_metadata.cluster if self.store.kafka_metadata is not None else None
            self.scram = ScramCredentialStore(config.log_dirs, fs,
                                              kafka=kafka_credentials(kafka.scram_credentials) if kafka else None)
            if isinstance(self.authorizer, StandardAuthorizer):
                self.authorizer.take_kafka_acls(kafka.acls if kafka else None)
        except BaseException:
            # A corrupt credentials or quotas file: the store is open and its dirs locked; give them back.
            self.node.close()
            raise
        self._coordinator_pool = ThreadPoolExecutor(COORDINATOR_THREADS, thread_name_prefix="coordinator")
        self._codec_pool = ThreadPoolExecutor(CODEC_THREADS, thread_name_prefix="codec")
        self.closing = False
        self.fetch_waiters = FetchWaiters()
        self._acceptor: Acceptor | None = None
        self._tls = ListenerTls([])
        self.connections: set[Connection] = set()
        # queued.max.requests: requests read whose handlers still work (not done, applied or parked).
        self._queued = asyncio.Semaphore(config["queued.max.requests"])
        self._reaper: asyncio.Task[None] | None = None
        # Encoded answers that only change with the topics, per API key (Metadata).
        self.response_cache: dict[int, dict[Hashable, bytes]] = {}
        self.endpoint = endpoint
        self.metrics: RequestMetrics | None = None
        if endpoint is not None:
            self.metrics = RequestMetrics()
            endpoint.attach(BrokerCollector(self, self.metrics))

    # -- what handlers use -------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str | None] | None = None) -> int:
        """Create a topic (Kafka's name rules); returns its partition count."""
        return self.store.create_topic(name, partitions, configs).partitions

    def delete_topic(self, name: str) -> None:
        """Delete a topic, its directories and every group's offsets of it (blocks on fsyncs)."""
        self.node.delete_topic(name)

    def notify_appended(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Wake the Fetches parked on these partitions (None: every parked Fetch)."""
        self.fetch_waiters.wake(partitions)

    async def wait_for_appends(self, partitions: Collection[TopicPartition], timeout: float,
                               gone: asyncio.Future[None] | None = None) -> None:
        """Return at the next append to one of `partitions`, after `timeout` s, when `gone` resolves, or at
        shutdown."""
        if not self.closing:
            await self.fetch_waiters.wait(partitions, timeout, gone)

    def _appended_elsewhere(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        # Markers written (read_committed fetches may pass the new LSO), by a coordinator thread or, for a
        # transaction step run on the loop, by the loop itself: then without a wake-up of the loop.
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        wanted = None if partitions is None else list(partitions)
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            loop.call_soon(self.notify_appended, wanted)
        else:
            loop.call_soon_threadsafe(self.notify_appended, wanted)

    async def coordinate(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run a (blocking) coordinator call in the coordinator pool."""
        # in_pool: the call's time in the pool counts toward its request's request_percentage quota.
        return await asyncio.get_running_loop().run_in_executor(self._coordinator_pool, in_pool(call), *args)

    async def until_durable(self, waits: Sequence[tuple[Durable, int]], timeout: float) -> list[BaseException | None]:
        """Wait until each (log, offset) is durable below offset, at most `timeout` s: per wait None, the
        storage error that failed it, or NotDurableInTime."""
        if self._inbox is None:
            self._inbox = LoopInbox(asyncio.get_running_loop())
        return await until_durable(self._inbox, waits, timeout)

    # -- serving -------------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Listen on every listener; returns the first one's bound (host, port) (all are in `bound`)."""
        self._loop = asyncio.get_running_loop()
        securities = [listener_security(self.config, listener, self.scram)
                      for listener in self.config.listeners]
        # Each connection takes its listener's security as served then: TLS key material may change at run time.
        self._tls = ListenerTls(securities)
        self.config.validators.append(self._tls.check)
        self.config.reconfigurables.append(self._tls.reload)
        listening: list[tuple[socket.socket, Serve]] = []
        try:
            for security in securities:
                listener = security.listener
                sockets = _listening_sockets(listener.host or None, listener.port)
                listening += [(sock, self._server_of(security)) for sock in sockets]
                host, port = sockets[0].getsockname()[:2]
                self.bound.append((listener, host, port))
        except OSError:
            for sock, _ in listening:
                sock.close()
            raise
        quotas = ConnectionQuotas.of_config(self.config)
        self._acceptor = Acceptor(listening, quotas)
        self._acceptor.start()
        self._reaper = asyncio.create_task(self._close_idle_connections())
        for listener, host, port in self.bound:
            log.info("logstore broker %d listening on %s:%d (%s, %s; cluster %s)", self.node_id, host, port,
                     listener.name, listener.security_protocol, self.cluster_id)
        if self.endpoint is not None:
            # Partitions and the transaction coordinator loaded (the node's constructor), listeners bound:
            # ready. Groups may still be loading: they answer COORDINATOR_LOAD_IN_PROGRESS until they are.
            self.endpoint.set_ready(True, "ready")
        return self.bound[0][1], self.bound[0][2]

    async def _close_idle_connections(self) -> None:
        """Close connections with nothing read or owed for `connections.max.idle.ms`, as Kafka does."""
        idle = self.config["connections.max.idle.ms"] / 1000
        loop = asyncio.get_running_loop()
        while not self.closing:
            await asyncio.sleep(min(max(idle / 4, 0.05), 30.0))
            now = loop.time()
            for connection in list(self.connections):
                since = connection.idle_since()
                if since is not None and now - since > idle:
                    log.info("closing a connection idle for %.0f ms (connections.max.idle.ms)", (now - since) * 1000)
                    connection.cancel(IDLE)

    def _server_of(self, security: ListenerSecurity) -> Serve:
        """What serves a connection accepted on `security`'s listener (with its security as served now)."""
        current, name = self._tls.current, security.listener.name

        async def serve(sock: socket.socket, peer: tuple[str, int]) -> None:
            await self._serve(sock, peer, current[name])
        return serve

    async def _serve(self, sock: socket.socket, peer: tuple[str, int], security: ListenerSecurity) -> None:
        try:
            reader, writer = await _streams(sock, security.tls, self.config["connections.max.idle.ms"] / 1000)
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            sock.close()
            why = (f"TLS handshake failed on {security.listener.name}, a plaintext client on a TLS listener?"
                   if isinstance(exc, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(exc)
                   else f"TLS handshake failed on {security.listener.name}" if security.tls else "")
            log.info("dropping a connection from %s before it was served: %s%s", peer, f"{why}: " if why else "",
                     exc or type(exc).__name__)
            return
        try:
            principal = security.tls_principal(writer.get_extra_info("ssl_object"))
        except NoMatchingRule as exc:
            log.info("Failed authentication with %s on %s (%s)", peer, security.listener.name, exc)
            writer.close()
            return
        connection = Connection(self, reader, writer, principal, self._queued, self._codec_pool, security.listener,
                                security.new_session())
        self.connections.add(connection)
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)

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
        if self.endpoint is not None:
            self.endpoint.set_ready(False, "stopping")
        self.fetch_waiters.wake()
        if self._reaper is not None:
            self._reaper.cancel()
        tasks: set[asyncio.Task[None]] = set()
        if self._acceptor is not None:
            self._acceptor.close()
            tasks = set(self._acceptor.connections)
        for connection in list(self.connections):
            connection.cancel(SHUTDOWN)
        await asyncio.gather(*tasks, return_exceptions=True)
        # Coordinator calls already running finish their writes before the store closes.
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._coordinator_pool.shutdown)
        await loop.run_in_executor(None, self._codec_pool.shutdown)
        self.node.close()
        log.info("logstore broker %d stopped", self.node_id)


async def _streams(sock: socket.socket, tls: ssl.SSLContext | None,
                   handshake_timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over an accepted socket, after the server side of a TLS handshake if `tls`."""
    if tls is None:
        return await asyncio.open_connection(sock=sock)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 16, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    # A client that never finishes its handshake holds a connection slot no longer than an idle one would.
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, ssl=tls,
                                                      ssl_handshake_timeout=min(handshake_timeout, 60.0))
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def _listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address of `host` (None: every interface), as
    asyncio's start_server makes them."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # One socket per family, as asyncio binds them: the IPv6 one must not claim IPv4 too.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
