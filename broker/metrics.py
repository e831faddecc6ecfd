"""What the broker counts per request, the request log, and the HTTP endpoint Prometheus scrapes.

`metrics.port` (0: off) and `metrics.host` open one HTTP listener with three
paths: `/metrics`, Prometheus exposition through `prometheus_client` (its
text format, or OpenMetrics when the scraper asks for it); `/health`, 200
while the process serves; `/ready`, 200 once every partition is loaded, the
coordinators have loaded their state and the listeners are bound, 503 before
(and again from shutdown on). It is served by its own thread, started before
the store opens, so a scrape never runs on the event loop and `/health`
answers during a long recovery.

On the hot path only plain numbers move (`RequestMetrics`): each request
bumps its API's count, its errors by code and a bucket of its total time
(from the frame read to the answer encoded); a Produce adds its topics'
appended messages and bytes once per request, a Fetch its topics' bytes out.
Everything that already exists as state (offsets, sizes, groups, lag,
transactions, fsync and cleaner figures) is read at scrape time by the
collector (`metrics_collector.py`). Labels are bounded by what the broker
holds (topics, partitions, groups, listeners, API keys, error codes), never
by what a client sends: client ids are not labels.

The request log is the logger `logstore.request` (Kafka's
kafka.request.logger): WARN by default, one DEBUG line per answered request
with `--log-level logstore.request=DEBUG`.
"""
from __future__ import annotations

import logging
import socket
import threading
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import fields, is_dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, get_args, get_origin

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder

from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.protocol import NATIVE_ANSWERS
from logstore.errors import ERROR_CODES, InvalidConfigError, LogStoreError

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from logstore.broker.api import Api, Request
    from logstore.broker.config import BrokerConfig

__all__ = ["HANDLER_FAILED", "MetricsEndpoint", "REQUEST_LOG", "RequestMetrics", "TIME_MS_BUCKETS", "TXN_MS_BUCKETS",
           "api_name", "request_done"]

REQUEST_LOG = logging.getLogger("logstore.request")
# Upper bounds (inclusive) of the request total-time buckets, ms.
TIME_MS_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
                   30000.0)
# Upper bounds (inclusive) of the transaction-duration buckets, ms.
TXN_MS_BUCKETS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000)
# Scrapes served at once; another connection is closed unanswered (a scrape is bounded, so is their number).
MAX_SCRAPES = 4
# A scraper that stops sending or reading holds its thread no longer than this (s).
SCRAPE_SOCKET_TIMEOUT = 30.0
# What a handler that raised answered, as the request log and the error counts see it.
HANDLER_FAILED = object()
_JOIN_GROUP = 11
_FETCH = 1
_END_TXN = 26
_CONSUMER_GROUP_HEARTBEAT = 68


def api_name(module: str) -> str:
    """Kafka's request name (`ListOffsets`) of an API module's name (`list_offsets`)."""
    return "".join(part.capitalize() for part in module.split("_"))


class RequestMetrics:
    """The broker's per-request counters: plain ints bumped on the event loop, read by the scrape thread.

    Only the loop writes (no lock); the scrape copies each dict whole, which the GIL makes one step, so a
    scrape sees every request counted or not, never a dict that changes under it. Times are ms.
    """

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], int] = {}       # (api key, version) → requests answered
        self.errors: dict[tuple[int, int], int] = {}         # (api key, error code) → times in answers
        self.time_counts: dict[int, list[int]] = {}          # api key → counts per TIME_MS_BUCKETS (+ one above)
        self.time_sums: dict[int, float] = {}                # api key → total ms
        self.topics_in: dict[str, list[int]] = {}            # topic → [messages, bytes, produce requests, failed]
        self.topics_out: dict[str, list[int]] = {}           # topic → [bytes, fetch requests, failed]
        self.listener_bytes_in: dict[str, int] = {}
        self.listener_bytes_out: dict[str, int] = {}
        self.listener_connections: dict[str, int] = {}       # connections accepted, ever
        self.completed_rebalances = 0                        # classic groups' (a JoinGroup leader answer each)
        self.consumer_rebalances = 0                         # consumer groups' (group epoch bumps)
        self.consumer_epochs: dict[str, int] = {}            # consumer group → highest member epoch answered
        self.txn_durations: list[int] = [0] * (len(TXN_MS_BUCKETS) + 1)
        self.txn_duration_sum_ms = 0

    def produced(self, results: Iterable[tuple[str, Iterable[Any]]]) -> None:
        """A Produce's partition rows (kit `PartitionResult`s of `(AppendResult, Log)`): per topic one request,
        its appended records and bytes (a retried duplicate adds none), and whether a partition failed.

        A topic is counted from its first append on: names a client made up (a topic that does not exist)
        never take memory here, as Kafka keeps no stats of unknown topics."""
        topics = self.topics_in
        for topic, rows in results:
            records = size = 0
            failed = appended = False
            for row in rows:
                outcome = row.outcome
                if outcome.ok:
                    done = outcome.result[0]
                    records += done.record_count
                    size += done.size
                    appended = True
                else:
                    failed = True
            counts = topics.get(topic)
            if counts is None:
                if not appended:
                    continue
                counts = topics[topic] = [0, 0, 0, 0]
            counts[0] += records
            counts[1] += size
            counts[2] += 1
            counts[3] += failed

    def connected(self, listener: str) -> None:
        """A connection was accepted on `listener`."""
        self.listener_connections[listener] = self.listener_connections.get(listener, 0) + 1

    def read(self, listener: str, size: int) -> None:
        """`size` bytes came in on `listener`."""
        self.listener_bytes_in[listener] = self.listener_bytes_in.get(listener, 0) + size

    def sent(self, listener: str, size: int) -> None:
        """`size` bytes went out on `listener`."""
        self.listener_bytes_out[listener] = self.listener_bytes_out.get(listener, 0) + size

    def answered(self, api_key: int, version: int, ms: float, codes: Iterable[int]) -> None:
        """One request answered after `ms`, with these error codes in its answer."""
        key = (api_key, version)
        self.requests[key] = self.requests.get(key, 0) + 1
        errors = self.errors
        for code in codes:
            slot = (api_key, code)
            errors[slot] = errors.get(slot, 0) + 1
        counts = self.time_counts.get(api_key)
        if counts is None:
            counts = self.time_counts[api_key] = [0] * (len(TIME_MS_BUCKETS) + 1)
            self.time_sums[api_key] = 0.0
        counts[bisect_left(TIME_MS_BUCKETS, ms)] += 1
        self.time_sums[api_key] += ms

    def fetched(self, topics: Iterable[tuple[str, Iterable[tuple[Any, ...]]]]) -> None:
        """A Fetch's answer rows (`fetch.FetchRow`s): per topic one request, its record bytes, whether it failed
        (counted from the topic's first partition read without an error, as `produced` counts)."""
        out = self.topics_out
        for topic, rows in topics:
            size, failed, read = 0, False, False
            for row in rows:
                if row[1]:
                    failed = True
                else:
                    read = True
                records = row[6]
                size += len(records) if isinstance(records, bytes) else records.size
            counts = out.get(topic)
            if counts is None:
                if not read:
                    continue
                counts = out[topic] = [0, 0, 0]
            counts[0] += size
            counts[1] += 1
            counts[2] += failed

    def transaction_ended(self, ms: int) -> None:
        """A transaction committed or aborted `ms` after it began."""
        self.txn_durations[bisect_left(TXN_MS_BUCKETS, ms)] += 1
        self.txn_duration_sum_ms += ms


# -- error codes of an answer ----------------------------------------------------------------------

# Per kio class: its error-code fields, its fields of nested entities (tuples of them) and of one nested entity.
_Plan = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    """Where a kio class keeps error codes and nested entities, from its fields' declared types (once)."""
    plan = _PLANS.get(cls)
    if plan is None:
        codes, many, one = [], [], []
        for f in fields(cls):
            args = get_args(f.type)
            if f.name == "error_code":
                codes.append(f.name)
            elif get_origin(f.type) is tuple and args and isinstance(args[0], type) and is_dataclass(args[0]):
                many.append(f.name)
            elif isinstance(f.type, type) and is_dataclass(f.type):
                one.append(f.name)
        plan = _PLANS[cls] = (tuple(codes), tuple(many), tuple(one))
    return plan


def _kio_codes(entity: Any, into: list[int]) -> None:
    """Append every `error_code` of a kio entity and of the entities nested in it."""
    codes, many, one = _plan(type(entity))
    for name in codes:
        into.append(getattr(entity, name))
    for name in many:
        for item in getattr(entity, name):
            _kio_codes(item, into)
    for name in one:
        nested = getattr(entity, name)
        if nested is not None:
            _kio_codes(nested, into)


def error_codes(api_key: int, response: Any) -> list[int]:
    """The error codes an answer carries, each as often as it appears (Kafka's errorCounts)."""
    if response is None:
        return []
    if response is HANDLER_FAILED:
        return [-1]   # UNKNOWN_SERVER_ERROR: the connection closes, as Kafka's does on an unexpected error
    codes: list[int] = []
    if api_key == _FETCH:
        codes.append(0)   # the top-level error: no fetch sessions, never set
        for _, rows in response.topics:
            codes.extend(row[1] for row in rows)
    elif isinstance(response, NATIVE_ANSWERS):
        codes.extend(response.error_codes())
    elif is_dataclass(response):
        _kio_codes(response, codes)
    return codes


# -- the per-request hook ----------------------------------------------------------------------------

def request_done(metrics: RequestMetrics | None, log_it: bool, api: Api, request: Request, body: Any,
                 response: Any, started: float, now: float, peer: Any) -> None:
    """Count a handled request (if metrics are on) and log it (`log_it`: `logstore.request` is at DEBUG);
    `response` is the handler's answer (None: none), times are the loop's, in s."""
    ms = (now - started) * 1000
    codes = error_codes(api.key, response)
    if metrics is not None:
        metrics.answered(api.key, request.version, ms, codes)
        if response is not None and response is not HANDLER_FAILED:
            _observe(metrics, api.key, request, body, response)
    if log_it:
        counted: dict[int, int] = {}
        for code in codes:
            counted[code] = counted.get(code, 0) + 1
        errors = ",".join(f"{_error_name(c)}:{n}" if n > 1 else _error_name(c) for c, n in sorted(counted.items()))
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        REQUEST_LOG.debug("Completed request %s v%d from %s client_id=%s correlation_id=%d principal=%s "
                          "listener=%s total_ms=%.3f errors=%s", api_name(api.name), request.version, client,
                          request.client_id, request.correlation_id, request.principal, request.listener, ms,
                          errors or "NONE")


def _error_name(code: int) -> str:
    known = ERROR_CODES.get(code)
    return known.name if known is not None else str(code)


def _observe(metrics: RequestMetrics, api_key: int, request: Request, body: Any, response: Any) -> None:
    """What some answers say beyond their error codes."""
    if api_key == _FETCH:
        metrics.fetched(response.topics)
    elif api_key == _JOIN_GROUP:
        # One leader answer per generation: a classic group completed a rebalance (Kafka counts it there).
        if response.error_code == 0 and response.member_id and response.leader == response.member_id:
            metrics.completed_rebalances += 1
    elif api_key == _END_TXN and response.error_code == 0:
        _transaction_ended(metrics, request, body.transactional_id)
    elif api_key == _CONSUMER_GROUP_HEARTBEAT and response.error_code == 0:
        _consumer_epoch(metrics, body.group_id, response.member_epoch)


def _consumer_epoch(metrics: RequestMetrics, group_id: str, epoch: int) -> None:
    """Count a KIP-848 group's epoch bumps (Kafka's consumer-group-rebalance-count) from its members' epochs,
    which reach each group epoch in turn: a group first seen at epoch 1 is new (its creation counts), one
    first seen later was made before this process started (its past bumps are not counted again)."""
    seen = metrics.consumer_epochs.get(group_id)
    if seen is None:
        metrics.consumer_epochs[group_id] = epoch
        if epoch == 1:
            metrics.consumer_rebalances += 1
    elif epoch > seen:
        metrics.consumer_epochs[group_id] = epoch
        metrics.consumer_rebalances += epoch - seen


def _transaction_ended(metrics: RequestMetrics, request: Request, transactional_id: str) -> None:
    """Time a transaction that EndTxn just completed (the coordinator keeps when it began and ended)."""
    try:
        meta = request.broker.transactions.describe(transactional_id)
    except LogStoreError:
        return   # expired meanwhile: nothing to time
    if meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and meta.start_ms >= 0:
        metrics.transaction_ended(max(meta.last_update_ms - meta.start_ms, 0))


# -- the HTTP endpoint ---------------------------------------------------------------------------------

class _Server(ThreadingHTTPServer):
    """One thread per scrape, at most MAX_SCRAPES at once."""

    daemon_threads = True
    endpoint: MetricsEndpoint

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily):
        self.address_family = family
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = SCRAPE_SOCKET_TIMEOUT
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        endpoint = self.server.endpoint
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._answer(200, b"ok\n")
        elif path == "/ready":
            ready = endpoint.ready
            self._answer(200 if ready else 503, b"ready\n" if ready else f"{endpoint.state}\n".encode())
        elif path in ("/metrics", "/"):
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            try:
                body = encoder(endpoint.registry)
            except Exception:
                logging.getLogger(__name__).exception("a scrape failed")
                self._answer(500, b"scrape failed\n")
                return
            self._answer(200, body, content_type)
        else:
            self._answer(404, b"not found: /metrics, /health and /ready are served\n")

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Scrapes are not logged (one line every few seconds would drown the broker's log)."""


class MetricsEndpoint:
    """The `metrics.port` listener: its registry (process metrics, then the broker's collector once attached),
    readiness, and the thread serving it.

    Started before the store opens; `ready` is set by the broker once it serves and cleared when it stops.
    Task-safe: `ready`, `state` and `attach` may be called from any thread.
    """

    def __init__(self, host: str, port: int):
        self.host = host
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.ready = False
        self.state = "loading"
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        self._server = _Server((str(address[0]), int(address[1])), family)
        self._server.endpoint = self
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="metrics-http", daemon=True)
        self._collector: Collector | None = None

    @staticmethod
    def check(config: BrokerConfig) -> None:
        """InvalidConfigError for a `metrics.port` outside 0..65535 (Kafka's words)."""
        port = config["metrics.port"]
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"Invalid value {port} for configuration metrics.port: "
                                     "a port (1-65535), or 0 for no metrics endpoint")

    @classmethod
    def of(cls, config: BrokerConfig) -> MetricsEndpoint | None:
        """The endpoint `metrics.port` asks for, bound (not yet serving); None while it is 0. OSError if the
        address cannot be bound; InvalidConfigError for a port outside 0..65535."""
        cls.check(config)
        port = config["metrics.port"]
        return cls(config["metrics.host"], port) if port else None

    def start(self) -> MetricsEndpoint:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def attach(self, collector: Collector) -> None:
        """Serve `collector`'s metrics beside the process's (the broker's, once it exists)."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
        self._collector = collector
        self.registry.register(collector)

    def set_ready(self, ready: bool, state: str) -> None:
        """What `/ready` answers from now on (`state` is the body of a 503)."""
        self.state = state
        self.ready = ready

    def stop(self) -> None:
        """Stop serving and close the socket (waits for the serving loop, not for scrapes under way)."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

