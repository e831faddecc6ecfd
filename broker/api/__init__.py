"""The Kafka APIs: one module per API key, each registering its handler here.

A handler is `async def handle(request: Request, body) -> response | None`
(None: nothing is sent, as for Produce with acks=0). It gets the body kio
decoded at the client's version and builds the response with `build`, which
takes the fields of every version and keeps those the asked version has, so a
handler is written once for all the versions it supports. ApiVersions lists
exactly what is registered.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any, Awaitable, Callable

from kio.index import load_response_schema

from logstore.broker.protocol import ErrorCode
from logstore.errors import LogStoreError

__all__ = ["Api", "REGISTRY", "Request", "api", "build", "response_type", "error_code", "load_all",
           "coordinator_call", "coordinator_error"]

HANDLER_MODULES = ("api_versions", "metadata", "produce", "fetch", "list_offsets", "find_coordinator",
                   "init_producer_id", "create_topics", "delete_topics", "delete_records", "offset_for_leader_epoch",
                   "describe_configs", "add_partitions_to_txn", "add_offsets_to_txn", "end_txn",
                   "alter_configs", "incremental_alter_configs",
                   "describe_producers", "describe_transactions", "list_transactions", "join_group", "sync_group",
                   "heartbeat", "leave_group", "offset_commit", "offset_fetch", "txn_offset_commit",
                   "describe_groups", "list_groups", "delete_groups", "offset_delete", "consumer_group_heartbeat",
                   "consumer_group_describe")


@dataclass(frozen=True)
class Api:
    """One API key as this broker serves it."""

    key: int
    name: str
    min_version: int          # advertised
    max_version: int
    handler: Callable[..., Awaitable[Any]]
    accept_from: int          # the lowest version actually decoded (Produce advertises 0, takes 3+)
    doc: str


REGISTRY: dict[int, Api] = {}


def api(key: int, min_version: int, max_version: int, *, accept_from: int | None = None):
    """Register the decorated coroutine as the handler of `key` for those versions."""
    def register(handler):
        if key in REGISTRY:
            raise RuntimeError(f"api key {key} registered twice")
        module = importlib.import_module(handler.__module__)
        REGISTRY[key] = Api(key, module.__name__.rpartition(".")[2], min_version, max_version, handler,
                            min_version if accept_from is None else accept_from, (module.__doc__ or "").strip())
        return handler
    return register


def load_all() -> dict[int, Api]:
    """Import every handler module (each registers itself)."""
    for name in HANDLER_MODULES:
        importlib.import_module(f"{__name__}.{name}")
    return REGISTRY


@dataclass
class Request:
    """What a handler knows of the request besides its body."""

    broker: Any
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""     # as Kafka shows it: "/" and the peer's address


@cache
def response_type(api_key: int, version: int, name: str | None = None):
    """The kio response class of a version, or one of its nested classes by name."""
    top = load_response_schema(api_key, version)
    if name is None:
        return top
    return getattr(importlib.import_module(top.__module__), name)


@cache
def _field_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls, **values):
    """An instance of a kio class from the fields it has among `values` (the union over versions)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def error_code(code: int) -> ErrorCode:
    """kio's ErrorCode for a Kafka error number."""
    return ErrorCode(code)


async def coordinator_call(request: Request, call, *args, fenced_from: int) -> ErrorCode:
    """Run a coordinator call in the broker's coordinator pool: NONE, or the code of its error."""
    try:
        await request.broker.coordinate(call, *args)
    except LogStoreError as exc:
        return coordinator_error(exc, request.version, fenced_from)
    return ErrorCode.none


def coordinator_error(exc: Exception, version: int, fenced_from: int) -> ErrorCode:
    """The code of a coordinator's error at this version: PRODUCER_FENCED only exists from
    `fenced_from`, older versions get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    code = ErrorCode(exc.code)
    if code == ErrorCode.producer_fenced and version < fenced_from:
        return ErrorCode.invalid_producer_epoch
    return code
