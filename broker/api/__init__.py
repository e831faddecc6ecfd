"""The Kafka APIs: one module per API key, each registering its handler here.

A handler is `async def handle(request: Request, body: KioMessage) -> response`. The
registration (`@api`) carries everything API-specific the server needs:
the versions, how a request frame is decoded (kio, or Produce's native
decoder), whether a request gets a reply at all (Produce with acks=0 does
not), how the response is encoded (kio, or Fetch's native encoder), and
what a version above the range gets (ApiVersions' KIP-511 answer). The
server only reads frames and follows the registration.

A request takes effect before the next one of its connection is read
(Kafka's muted connection): by default when its handler returns. A handler
whose effect is in place before it is done, and that then only waits for
what group commit shares (Produce's acks=all fsync), says so with
`request.applied()`, and the connection reads on while it waits. A handler
that parks on something outside the broker's own work (data for a
long-polling Fetch, a group forming) says `request.waiting()`: it still holds
its connection, but no longer counts against `queued.max.requests`.

Handlers build responses with `build`, which takes the fields of every
version and keeps those the asked version has, so a handler is written once
for all the versions it supports; they go through `kit` for errors,
partitions and authorization. Every module of this package that registers
is found by `load_all`; ApiVersions lists exactly what is registered.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, overload

from kio.index import load_response_schema
from kio.static.protocol import ResponsePayload

from logstore.broker.authorizer import ANONYMOUS, KafkaPrincipal
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import PreEncoded, decode_kio, encode_kio

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from logstore.broker.sasl_session import SaslSession

__all__ = ["Api", "KioMessage", "REGISTRY", "Progress", "Request", "ResponsePayload", "api", "build", "response_type",
           "load_all"]

# A decoded request body, or an entity inside one (a topic, a partition, a resource), or a nested entity
# of a response: kio's dataclasses. A handler is written once for every version it serves, each version
# a different kio class picked at run time by (key, version), and reads fields by name (getattr where a
# version lacks one), so no one static type fits: Any, at this boundary only.
KioMessage: TypeAlias = Any

# The registry is the dynamic boundary between the server and the APIs: each API's decoder hands its
# handler its own body type (a kio request, or Produce's native one), and its encoder takes what that
# handler returns (a kio response, Metadata's cached bytes, Fetch's native rows), so these are Any here.
Decoder = Callable[[bytes], tuple[str | None, Any]]      # frame → (client id, body)
Encoder = Callable[[int, int, Any], PreEncoded]          # (correlation id, version, response) → frame parts
Handler = Callable[["Request", Any], Awaitable[Any]]     # (request, body) → response, or None for no reply
H = TypeVar("H", bound=Handler)
E = TypeVar("E", bound="DataclassInstance")    # a kio class


def _always(body: object) -> bool:
    return True


@dataclass(frozen=True)
class Api:
    """One API key as this broker serves it: versions, handler, and how its frames are read and written."""

    key: int
    name: str
    min_version: int          # advertised
    max_version: int
    handler: Handler
    accept_from: int          # the lowest version actually decoded (Produce advertises 0, takes 3+)
    doc: str
    decode: Decoder = decode_kio
    replies: Callable[[Any], bool] = _always      # (body) → whether the request is answered
    encode: Encoder = encode_kio
    # What a version above max_version gets instead of a closed connection: (frame, correlation id) → reply.
    newer: Callable[[bytes, int], PreEncoded] | None = None
    # Whether a large frame is decoded (and its answer encoded) in a worker thread rather than on the event
    # loop: kio's pure-Python codec, yes; a native decoder that only slices the frame, no.
    offload: bool = True


REGISTRY: dict[int, Api] = {}


def api(key: int, min_version: int, max_version: int, *, accept_from: int | None = None,
        decode: Decoder = decode_kio, replies: Callable[[Any], bool] = _always, encode: Encoder = encode_kio,
        newer: Callable[[bytes, int], PreEncoded] | None = None, offload: bool | None = None) -> Callable[[H], H]:
    """Register the decorated coroutine as the handler of `key` for those versions, with its codecs
    (`offload`: whether large frames are decoded off the event loop; by default when kio decodes them)."""
    def register(handler: H) -> H:
        if key in REGISTRY:
            raise RuntimeError(f"api key {key} registered twice")
        module = importlib.import_module(handler.__module__)
        REGISTRY[key] = Api(key, module.__name__.rpartition(".")[2], min_version, max_version, handler,
                            min_version if accept_from is None else accept_from, (module.__doc__ or "").strip(),
                            decode, replies, encode, newer, decode is decode_kio if offload is None else offload)
        return handler
    return register


def load_all() -> dict[int, Api]:
    """Import every module of this package; those that register a handler are the APIs served."""
    for module in pkgutil.iter_modules(__path__, f"{__name__}."):
        importlib.import_module(module.name)
    return REGISTRY


class Progress(Protocol):
    """How a request in flight tells its connection where it is (the server's; see the module's docstring)."""

    def applied(self) -> None:
        """The request's effect is in place: its connection may read the next request."""

    def waiting(self) -> None:
        """The handler waits on something outside the broker's work: it leaves `queued.max.requests`."""

    @property
    def gone(self) -> asyncio.Future[None]:
        """Resolved once the connection reads no more (the client closed it, or the broker is closing it):
        a parked handler should answer with what it has."""

    def throttle(self, ms: int) -> None:
        """Read nothing more from the connection for `ms` from now (Kafka's quota muting, KIP-219)."""


@dataclass
class Request:
    """What a handler knows of the request besides its body, and how it tells the server its progress."""

    broker: BrokerContext
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""     # as Kafka shows it: "/" and the peer's address
    principal: KafkaPrincipal = ANONYMOUS
    progress: Progress | None = None     # None outside a server (a test calling a handler): nothing to tell
    listener: str = "PLAINTEXT"          # the name of the listener the request came in on
    session: SaslSession | None = None   # the connection's SASL state (None: not a SASL listener)

    def applied(self) -> None:
        """The effect is in place (appended, stored): the connection reads on while this handler only waits
        for what group commit shares. Nothing this handler changes after the call is ordered."""
        if self.progress is not None:
            self.progress.applied()

    def waiting(self) -> None:
        """From here the handler parks on an outside event (appends, a rebalance): it stops counting as
        queued work, and still holds its connection until it answers."""
        if self.progress is not None:
            self.progress.waiting()

    @property
    def gone(self) -> asyncio.Future[None] | None:
        """Resolved when the connection closes (None outside a server): a parked handler can stop early."""
        return None if self.progress is None else self.progress.gone

    def throttle(self, ms: int) -> None:
        """The client went over a quota: its answer carries `ms` as throttle_time_ms, and the connection
        reads nothing more from it for that long (Kafka mutes it once the answer is sent)."""
        if self.progress is not None and ms > 0:
            self.progress.throttle(ms)


@overload
def response_type(api_key: int, version: int) -> type[ResponsePayload]: ...
@overload
def response_type(api_key: int, version: int, name: str) -> type[KioMessage]: ...


def response_type(api_key: int, version: int, name: str | None = None) -> type[ResponsePayload] | type[KioMessage]:
    """The kio response class of a version, or one of its nested classes by name."""
    return _response_class(api_key, version, name)


@cache
def _response_class(api_key: int, version: int, name: str | None) -> type[ResponsePayload] | type[KioMessage]:
    top = load_response_schema(api_key, version)
    if name is None:
        return top
    nested: type[KioMessage] = getattr(importlib.import_module(top.__module__), name)
    return nested


@cache
def _field_names(cls: type[DataclassInstance]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type[E], **values: object) -> E:
    """An instance of a kio class from the fields it has among `values` (the union over versions)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})
