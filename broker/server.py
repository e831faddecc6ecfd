"""The broker process: an asyncio server in front of a logstore store.

Each connection reads size-prefixed frames; every request becomes a task at
once (so a Produce waiting for its fsync does not hold back the next one), and
a writer task sends the replies in request order, as clients require. A frame
larger than `socket.request.max.bytes`, a header that cannot be read, or an
API version this broker does not serve closes that connection, as Kafka does;
others are untouched. A connection that neither sent a request nor
was owed a reply for `connections.max.idle.ms` is closed. Produce requests are decoded
natively (records stay views of the frame); other requests through kio.
Handlers run on the event loop and call the store directly: appends and
reads are a pwrite or pread each, and large Fetch records go out by sendfile.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import struct
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

from logstore.broker.api import REGISTRY, Request, load_all
from logstore.broker.api.api_versions import KEY as API_VERSIONS, MAX_VERSION as API_VERSIONS_MAX, response_for
from logstore.broker.config import BrokerConfig
from logstore.broker.node import Node
from logstore.broker.protocol import (
    ErrorCode,
    HeldSlice,
    PreEncoded,
    ProtocolError,
    UnsupportedRequest,
    decode_request,
    encode_response,
    peek_api,
    read_header_only,
)
from logstore.errors import InvalidConfigError, LogStoreError
from logstore.native.wire import WireError, decode_produce

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
PRODUCE = 0
# Below this a file range is read and written like any bytes; above, sendfile's
# pause of the connection's reads costs less than the copy through user space.
SENDFILE_MIN_BYTES = 64 * 1024
IDLE = "connections.max.idle.ms"
# Coordinator calls block on fsyncs; this many run at once (their fsyncs are shared by group commit).
COORDINATOR_THREADS = 16


class Broker:
    """A single-node Kafka broker: a node (store, coordinators, upkeep), the handlers, the listening socket."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        load_all()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.node = Node(config, on_appended=self._appended_elsewhere)
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
        self._connections: set[asyncio.Task] = set()
        # Per connection: when it last read a frame or sent a reply, and how many replies it owes.
        self._activity: dict[asyncio.Task, list] = {}
        self._reaper: asyncio.Task | None = None
        self._sendfile = True
        # Encoded answers that only change with the topics, per API key (Metadata).
        self.response_cache: dict[int, dict] = {}

    # -- what handlers use -------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs=None) -> int:
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

    async def coordinate(self, call, *args):
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
        self._connections.add(task)
        activity = self._activity[task] = [asyncio.get_running_loop().time(), 0]
        replies: asyncio.Queue = asyncio.Queue()
        sender = asyncio.create_task(self._send_replies(replies, writer, activity))
        peer = writer.get_extra_info("peername")
        try:
            await self._read_requests(reader, replies, peer, activity)
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

    async def _read_requests(self, reader: asyncio.StreamReader, replies: asyncio.Queue, peer, activity) -> None:
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
            if api_key == API_VERSIONS and version > API_VERSIONS_MAX:
                # KIP-511: the body cannot be read; answer v0 with our range so the client retries.
                read_header_only(frame, api_key, version)
                await replies.put(_done((correlation_id, response_for(0, ErrorCode.unsupported_version))))
                continue
            api = REGISTRY.get(api_key)
            if api is None or not api.accept_from <= version <= api.max_version:
                raise UnsupportedRequest(f"api key {api_key} version {version} is not served")
            if api_key == PRODUCE:
                try:
                    client_id, body = decode_produce(frame)
                except (WireError, UnicodeDecodeError) as exc:
                    raise ProtocolError(f"Produce v{version}: {exc}") from None
            else:
                header, body = decode_request(frame)
                client_id = header.client_id
            request = Request(self, api_key, version, correlation_id, client_id, client_host)
            task = asyncio.create_task(self._handle(api, request, body))
            if api_key == PRODUCE and body.acks == 0:
                continue  # no reply is read for acks=0
            activity[1] += 1
            await replies.put(task)

    async def _handle(self, api, request: Request, body):
        try:
            return request.correlation_id, await api.handler(request, body)
        except Exception:
            log.exception("%s v%d from %s failed", api.name, request.version, request.client_id)
            raise

    async def _send_replies(self, replies: asyncio.Queue, writer: asyncio.StreamWriter, activity) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await replies.get()
            if item is None:
                return
            try:
                correlation_id, response = await item
            except Exception:  # noqa: BLE001 - logged in _handle; the client sees the connection close
                writer.close()
                return
            finally:
                activity[0] = loop.time()
                activity[1] -= 1
            if response is None:
                continue
            if isinstance(response, PreEncoded):
                try:
                    await self._send_parts(response.parts, writer)
                finally:
                    response.close()
            else:
                for part in encode_response(correlation_id, response).parts:
                    writer.write(part)
            await writer.drain()

    async def _send_parts(self, parts: list, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if not isinstance(part, HeldSlice):
                writer.write(part)
            elif part.size < SENDFILE_MIN_BYTES or not self._sendfile:
                writer.write(part.read())
            else:
                await writer.drain()
                try:
                    await loop.sendfile(writer.transport, part, part.position, part.size, fallback=False)
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


def _done(value) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


async def run_broker(config: BrokerConfig, ready=None) -> None:
    """Run a broker until SIGTERM or SIGINT; `ready(host, port)` is called once it listens.

    A log dir that cannot be used, or a port that cannot be bound (`run` tries the port before the
    store opens: a recovery may take long), is a `StartError`.
    """
    try:
        broker = Broker(config)
    except OSError as exc:
        raise StartError(_log_dir_failure(config, exc)) from exc
    try:
        host, port = await broker.start()
    except OSError as exc:
        broker.node.close()
        raise StartError(_listen_failure(config, exc)) from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(host, port)
    await broker.serve_until(stop)


# -- the `logstore broker` process: log levels, configuration, errors a person reads ----------------

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TRACE = 5
# log4j's level names (as Kafka's --override users know them) and Python's.
LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
          "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
# Kafka's container image sets its log4j levels from these (KafkaDockerWrapper); so does this broker.
LEVEL_VARIABLES = ("KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS")


class StartError(Exception):
    """Why the broker cannot run, in words its user can act on, and the exit status (2: usage or
    configuration, 1: the machine: a port, a log dir, I/O)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def parse_log_levels(items) -> tuple[int | None, dict[str, int]]:
    """The root level and per-logger levels of (where, text) items: `LEVEL` or `LOGGER=LEVEL`, comma-separated
    lists allowed; a later item wins."""
    root, loggers = None, {}
    for where, text in items:
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, level = part.rpartition("=")
            number = LEVELS.get(level.strip().upper())
            if number is None or (sep and not name.strip()):
                raise StartError(f"{where} {part}: not LEVEL or LOGGER=LEVEL; the levels are TRACE, DEBUG, INFO, "
                                 "WARN, ERROR, FATAL, OFF", 2)
            if sep:
                loggers[name.strip()] = number
            else:
                root = number
    return root, loggers


def run(config_path: str | None, overrides: list[str], *, log_levels=(), print_config: bool = False,
        environ=None) -> int:
    """`logstore broker`: serve until a signal; the exit status (0, 1 runtime failure, 2 usage or config).

    A failure the user can fix is one or two lines on stderr; the traceback too at --log-level DEBUG.
    """
    environ = os.environ if environ is None else environ
    debug = False
    try:
        root, loggers = parse_log_levels([*((v, environ[v]) for v in LEVEL_VARIABLES if environ.get(v, "").strip()),
                                          *(("--log-level", item) for item in log_levels)])
        logging.addLevelName(TRACE, "TRACE")
        logging.basicConfig(level=logging.INFO if root is None else root, format=LOG_FORMAT)
        for name, level in loggers.items():
            logging.getLogger(name).setLevel(level)
        debug = logging.getLogger().isEnabledFor(logging.DEBUG)
        config = BrokerConfig.load(config_path, overrides, environ)
    except StartError as exc:
        return _failed(exc, debug)
    except InvalidConfigError as exc:
        return _failed(StartError(str(exc), 2), debug, exc)
    config_log = logging.getLogger(BrokerConfig.__module__)
    for line in config.warnings():
        config_log.warning("%s", line)
    if print_config:
        sys.stdout.write("".join(f"{name} = {value}\n" for name, value in config.values()))
        return 0
    try:
        _probe_listener(config)  # before the values, so a port in use is the only thing said
    except StartError as exc:
        return _failed(exc, debug)
    config_log.info("BrokerConfig values:\n%s", "\n".join(f"\t{name} = {value}" for name, value in config.values()))

    def ready(host, port):
        # One line on stdout that tests and scripts wait for.
        print(f"logstore broker listening on {f'[{host}]' if ':' in host else host}:{port}", flush=True)
    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        (uvloop.run if uvloop is not None else asyncio.run)(run_broker(config, ready))
    except StartError as exc:
        return _failed(exc, debug)
    except LogStoreError as exc:
        # A log dir held by another process (LogDirLockedError), a storage failure: the message says which.
        return _failed(StartError(str(exc), 1), debug, exc)
    except OSError as exc:
        return _failed(StartError(f"I/O error: {exc}", 1), debug, exc)
    return 0


def _failed(exc: StartError, debug: bool, cause: BaseException | None = None) -> int:
    """Say why on stderr (with the traceback of `cause` or `exc` at DEBUG); the exit status."""
    if debug:
        traceback.print_exception(cause or exc)
    sys.stderr.write(f"logstore broker: {exc}\n")
    sys.stderr.flush()
    return exc.status


def _where(config: BrokerConfig, name: str) -> str:
    origin = config.origins.get(name)
    return f"{name}={config[name]}, from {origin}" if origin else f"{name}={config[name]}, the default"


def _probe_listener(config: BrokerConfig) -> None:
    """Bind the listener's addresses once and let go (as the server will bind them: SO_REUSEADDR, IPv6-only)."""
    listener = config.listener
    if listener.port == 0:
        return
    try:
        addresses = socket.getaddrinfo(listener.host or None, listener.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
    except OSError as exc:
        raise StartError(_listen_failure(config, exc)) from exc


def _listen_failure(config: BrokerConfig, exc: OSError) -> str:
    listener = config.listener
    where = f"cannot listen on {listener.host or '*'}:{listener.port} ({_where(config, 'listeners')})"
    if isinstance(exc, socket.gaierror):
        return f"{where}: host {listener.host!r} does not resolve ({exc.strerror})"
    if exc.errno == errno.EADDRINUSE:
        return (f"{where}: the port is in use\n"
                "another process (a broker?) listens there: stop it, or give listeners another port")
    if exc.errno == errno.EACCES:
        return f"{where}: permission denied (ports below 1024 need privileges)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{where}: {listener.host} is not an address of this machine"
    return f"{where}: {exc.strerror or exc}"


def _log_dir_failure(config: BrokerConfig, exc: OSError) -> str:
    path = os.fsdecode(exc.filename) if exc.filename is not None else None
    log_dir = next((d for d in config.log_dirs if path is not None and (path == d or path.startswith(d + os.sep))),
                   None)
    if log_dir is None:  # a parent that cannot be created, or a file elsewhere
        log_dir = next((d for d in config.log_dirs if path is not None and d.startswith(path + os.sep)),
                       ",".join(config.log_dirs))
    if exc.errno in (errno.EEXIST, errno.ENOTDIR) and path is not None:
        blocking = path
        while blocking != os.path.dirname(blocking) and not os.path.lexists(blocking):
            blocking = os.path.dirname(blocking)
        why = f"{blocking} is not a directory"
    else:
        why = f"{exc.strerror or exc}" + (f" ({path})" if path and path != log_dir else
                                          "" if os.path.isdir(log_dir) else " (creating it)")
    return f"cannot use log dir {log_dir} ({_where(config, 'log.dirs')}): {why}"
