"""`logstore broker` as a process: configuration, log levels, the listener, the node, serving until a
signal, and the lines a person reads when it cannot start.

Exit status: 0 after a clean stop, 1 when the machine refuses (a port in use,
a log dir that cannot be used, I/O), 2 for usage or configuration. Every
refusal is one or two lines on stderr naming the setting and where it came
from; the traceback follows at --log-level DEBUG. The listeners' TLS and
SASL settings are checked, and their ports probed, before the store opens (a
recovery may take long), so a missing key or a port in use is said at once.

Storage errors while serving follow Kafka: an I/O error takes its log dir
offline (its partitions answer KAFKA_STORAGE_ERROR), and once every log dir
is offline the broker stops with status 1 and one line saying why. A stop on
a full disk is still a clean stop (status 0): what cannot be written is
logged, and the log dirs left without a clean-shutdown marker are recovered
by the next start, which succeeds on a full disk too.

Logs: `--log-level` sets the root level or one logger's; the request log
(`logstore.request`, Kafka's kafka.request.logger, which is also accepted
by that name) stays at WARN unless named, so a root DEBUG does not log every
request. `LOGSTORE_LOG_FORMAT=json` (or `run(log_format="json")`) writes one
JSON object per line: time (UTC, ISO 8601), level, logger, message, and the
exception's traceback if any.

The event loop is uvloop's where it is installed (a dependency wherever it
builds): it takes 15-25 % less CPU per small request than asyncio's.
`LOGSTORE_EVENT_LOOP=asyncio` chooses asyncio's (`uvloop` insists on
uvloop: a start failure without it); the start logs which runs. Both send
file ranges by sendfile (`send_file.py`); the bytes it sent, and copied,
are logged at DEBUG at the stop.

With `metrics.port`, the metrics endpoint (`metrics.py`) is bound before
the store opens, so `/health` answers and `/ready` says 503 during a long
recovery; a port in use is a start failure.

The authorizer is Kafka's `authorizer.class.name` (empty: everything is
allowed); `run` and `run_broker` also take one ready-made, which is how a
test starts a broker process with its own, and likewise the file system the
store writes through (a test's fault-injecting one).
"""
from __future__ import annotations

import asyncio
import errno
import importlib.metadata
import json
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from logstore.broker import collector
from logstore.broker.authorizer import AUTHORIZER_SETTING, Authorizer, load_authorizer
from logstore.broker.config import BrokerConfig
from logstore.broker.listener_security import check_security
from logstore.broker.listeners import Listener
from logstore.broker.metrics import REQUEST_LOG, MetricsEndpoint
from logstore.broker.send_file import totals as sendfile_totals
from logstore.broker.server import Broker
from logstore.errors import InvalidConfigError, LogStoreError
from logstore.filesystem import OS, FileSystem

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TRACE = 5
# log4j's level names (as Kafka's --override users know them) and Python's.
LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
          "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
# Kafka's container image sets its log4j levels from these (KafkaDockerWrapper); so does this broker.
LEVEL_VARIABLES = ("KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS")
# Kafka's name of the request log, taken for ours.
KAFKA_REQUEST_LOGGER = "kafka.request.logger"
FORMAT_VARIABLE = "LOGSTORE_LOG_FORMAT"
LOG_FORMATS = ("text", "json")
LOOP_VARIABLE = "LOGSTORE_EVENT_LOOP"
EVENT_LOOPS = ("uvloop", "asyncio")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601 to the ms), level, logger, message (and exception)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        doc = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class StartError(Exception):
    """Why the broker cannot run, in words its user can act on, and the exit status (2: usage or
    configuration, 1: the machine: a port, a log dir, I/O)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


async def run_broker(config: BrokerConfig, ready: Callable[[str, int], None] | None = None,
                     authorizer: Authorizer | None = None, fs: FileSystem = OS) -> None:
    """Run a broker until SIGTERM or SIGINT; `ready(host, port)` is called once it listens.

    A log dir that cannot be used, or a port that cannot be bound (`run` tries the port before the
    store opens: a recovery may take long), is a `StartError`. Without `authorizer`, the one the
    configuration names.
    """
    if authorizer is None:
        authorizer = configured_authorizer(config, fs)
    endpoint = _metrics_endpoint(config)
    try:
        await _serve(config, ready, authorizer, fs, endpoint)
    finally:
        if endpoint is not None:
            endpoint.stop()


async def _serve(config: BrokerConfig, ready: Callable[[str, int], None] | None, authorizer: Authorizer,
                 fs: FileSystem, endpoint: MetricsEndpoint | None) -> None:
    """`run_broker` once its metrics endpoint (if any) serves."""
    try:
        broker = Broker(config, authorizer, fs, endpoint)
    except OSError as exc:
        raise StartError(_log_dir_failure(config, exc)) from exc
    try:
        host, port = await broker.start()
    except InvalidConfigError as exc:
        broker.node.close()
        raise StartError(str(exc), 2) from exc
    except OSError as exc:
        broker.node.close()
        raise StartError(_listen_failure(config, exc)) from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    offline: list[str] = []

    def every_dir_offline(reason: str) -> None:
        # Called from the thread whose write failed last: Kafka halts the broker here.
        offline.append(reason)
        loop.call_soon_threadsafe(stop.set)
    broker.store.dir_failures.on_all_offline = every_dir_offline
    # What exists now (modules, configuration, the partitions opened) lives as long as the broker.
    collector.settle()
    if ready is not None:
        ready(host, port)
    await broker.serve_until(stop)
    by_sendfile, copied = sendfile_totals()
    logging.getLogger(__name__).debug("file ranges sent: %d bytes by sendfile, %d copied (a piece per full socket)",
                                      by_sendfile, copied)
    if offline:
        raise StartError(f"stopped: every log dir is offline after an I/O error ({offline[0]})")


def _metrics_endpoint(config: BrokerConfig) -> MetricsEndpoint | None:
    """The `metrics.port` endpoint, serving (None while the port is 0); a StartError if it cannot listen."""
    try:
        endpoint = MetricsEndpoint.of(config)
    except InvalidConfigError as exc:
        raise StartError(str(exc), 2) from exc
    except OSError as exc:
        where = f"cannot serve metrics on {config['metrics.host']}:{config['metrics.port']} " \
                f"({_where(config, 'metrics.port')})"
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise StartError(f"{where}: {why}") from exc
    if endpoint is None:
        return None
    logging.getLogger(__name__).info("metrics on http://%s:%d/metrics (/health, /ready)",
                                     f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host, endpoint.port)
    return endpoint.start()


def configure_logging(root: int | None, loggers: Mapping[str, int], log_format: str = "text") -> None:
    """The process's logging: the root level (INFO unless given), each named logger's, the request log at WARN
    unless named, and the line format (`text` or `json`)."""
    logging.addLevelName(TRACE, "TRACE")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO if root is None else root, handlers=[handler])
    levels = dict(loggers)
    if KAFKA_REQUEST_LOGGER in levels:
        levels.setdefault(REQUEST_LOG.name, levels.pop(KAFKA_REQUEST_LOGGER))
    levels.setdefault(REQUEST_LOG.name, logging.WARNING)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def parse_log_levels(items: Iterable[tuple[str, str]]) -> tuple[int | None, dict[str, int]]:
    """The root level and per-logger levels of (where, text) items: `LEVEL` or `LOGGER=LEVEL`, comma-separated
    lists allowed; a later item wins."""
    root: int | None = None
    loggers: dict[str, int] = {}
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


def configured_authorizer(config: BrokerConfig, fs: FileSystem = OS) -> Authorizer:
    """The authorizer `authorizer.class.name` names (a usage error, status 2, if it names none; status 1 if
    its ACLs cannot be read)."""
    try:
        return load_authorizer(config.settings.get(AUTHORIZER_SETTING, ""), config, fs)
    except ValueError as exc:
        raise StartError(str(exc), 2) from exc
    except LogStoreError as exc:
        raise StartError(str(exc), 1) from exc


def run(config_path: str | None, overrides: list[str], *, log_levels: Iterable[str] = (), print_config: bool = False,
        environ: Mapping[str, str] | None = None, authorizer: Authorizer | None = None, fs: FileSystem = OS,
        log_format: str | None = None) -> int:
    """`logstore broker`: serve until a signal; the exit status (0, 1 runtime failure, 2 usage or config).

    A failure the user can fix is one or two lines on stderr; the traceback too at --log-level DEBUG.
    `log_format` (`text` or `json`; default `LOGSTORE_LOG_FORMAT`, else text) is the log lines' form.
    """
    environ = os.environ if environ is None else environ
    debug = False
    try:
        root, loggers = parse_log_levels([*((v, environ[v]) for v in LEVEL_VARIABLES if environ.get(v, "").strip()),
                                          *(("--log-level", item) for item in log_levels)])
        form = (log_format or environ.get(FORMAT_VARIABLE, "") or "text").strip().lower()
        if form not in LOG_FORMATS:
            raise StartError(f"log format {form!r} ({'--log-format' if log_format else FORMAT_VARIABLE}): "
                             f"the formats are {', '.join(LOG_FORMATS)}", 2)
        configure_logging(root, loggers, form)
        debug = logging.getLogger().isEnabledFor(logging.DEBUG)
        loop_name, runner = event_loop_runner(environ.get(LOOP_VARIABLE, ""))
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
        if authorizer is None:
            authorizer = configured_authorizer(config, fs)
        _check_security(config)
        for listener in config.listeners:
            _probe_listener(config, listener)  # before the values, so a port in use is the only thing said
    except StartError as exc:
        return _failed(exc, debug)
    config_log.info("BrokerConfig values:\n%s", "\n".join(f"\t{name} = {value}" for name, value in config.values()))

    def ready(host: str, port: int) -> None:
        # One line on stdout that tests and scripts wait for.
        print(f"logstore broker listening on {f'[{host}]' if ':' in host else host}:{port}", flush=True)
    logging.getLogger(__name__).info("event loop: %s", loop_name)
    try:
        runner(run_broker(config, ready, authorizer, fs))
    except StartError as exc:
        return _failed(exc, debug)
    except LogStoreError as exc:
        # A log dir held by another process (LogDirLockedError), a storage failure: the message says which.
        return _failed(StartError(str(exc), 1), debug, exc)
    except OSError as exc:
        return _failed(StartError(f"I/O error: {exc}", 1), debug, exc)
    return 0


def event_loop_runner(choice: str) -> tuple[str, Callable[[Coroutine[Any, Any, None]], None]]:
    """The event loop `LOGSTORE_EVENT_LOOP` chooses (`uvloop`, `asyncio`; empty: uvloop if installed), as the
    name the start logs and its `run`; a StartError (2) for another name, or uvloop asked for and missing."""
    choice = choice.strip().lower()
    if choice not in ("", *EVENT_LOOPS):
        raise StartError(f"{LOOP_VARIABLE}={choice}: the event loops are {', '.join(EVENT_LOOPS)}", 2)
    if choice == "asyncio":
        return f"asyncio ({LOOP_VARIABLE}=asyncio)", asyncio.run
    try:
        # A dependency where it builds (not on Windows or PyPy), so it may be absent.
        import uvloop
    except ImportError as exc:
        if choice:
            raise StartError(f"{LOOP_VARIABLE}=uvloop: uvloop is not installed ({exc})", 2) from exc
        return "asyncio (uvloop is not installed)", asyncio.run
    run: Callable[[Coroutine[Any, Any, None]], None] = uvloop.run
    return f"uvloop {importlib.metadata.version('uvloop')}", run


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


def _check_security(config: BrokerConfig) -> None:
    """Refuse, as a configuration error, a listener whose TLS or SASL settings cannot work (or a metrics port
    that is none)."""
    try:
        check_security(config)
        MetricsEndpoint.check(config)
    except InvalidConfigError as exc:
        raise StartError(str(exc), 2) from exc


def _probe_listener(config: BrokerConfig, listener: Listener) -> None:
    """Bind the listener's addresses once and let go (as the server will bind them: SO_REUSEADDR, IPv6-only)."""
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
        raise StartError(_listen_failure(config, exc, listener)) from exc


def _listen_failure(config: BrokerConfig, exc: OSError, listener: Listener | None = None) -> str:
    listener = listener or config.listener
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
