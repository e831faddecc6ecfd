"""A small blocking Kafka client for logstore's command-line tools: one socket, kio's codecs.

The caller builds a kio request of the version it wants and gets the kio
response of that version back; there is no ApiVersions exchange, so asking
a version the broker does not serve ends with the broker closing the
connection (`BrokerUnavailableError`). Requests go on one connection, to
the first bootstrap address that accepts it, one at a time (`request`) or
pipelined (`send` several, then `receive` their answers in order).

Responses are read as the broker reads requests: array counts are checked
against the frame first (`array_bounds`), so a garbled or hostile answer is
an error, not a crash. kio refuses a negative `datetime_i64`, which Kafka
uses for "none" (DescribeTransactions' start time -1), so such fields are
read as nullable: None stands for -1.

Not thread-safe: one caller at a time.
"""
from __future__ import annotations

import dataclasses
import itertools
import socket
import struct
from collections.abc import Callable
from functools import cache
from types import GenericAlias, UnionType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, cast

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.serial.errors import DecodeError
from kio.static.primitive import i32

from logstore.broker.array_bounds import check_and_strip
from logstore.broker.client_security import ClientSecurity, ClientSecurityError, SaslExchange

if TYPE_CHECKING:
    from kio.serial.readers import Reader
    from kio.static.protocol import Entity, RequestHeader, RequestPayload, ResponseHeader, ResponsePayload

__all__ = ["AdminClient", "AdminClientError", "AuthenticationError", "BrokerUnavailableError", "Sent", "error_name",
           "parse_bootstrap"]

DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")
_CLASS_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")
# A kio writer as called here: with a _Buffer as its sink, and any entity of its class.
_Write: TypeAlias = Callable[["_Buffer", Any], None]


class AdminClientError(Exception):
    """The base of this client's errors."""


class AuthenticationError(AdminClientError):
    """The broker refused the login (the mechanism, or the credentials)."""


class BrokerUnavailableError(AdminClientError):
    """No broker could be reached, or the connection broke or timed out, or the answer was unreadable."""


def error_name(code: int) -> str:
    """Kafka's name of an error code (`TRANSACTIONAL_ID_NOT_FOUND`)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{int(code)}"


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 hosts in brackets) as (host, port) pairs; ValueError if malformed."""
    addresses: list[tuple[str, int]] = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item.strip()!r} is not host:port")
        addresses.append((host, int(port)))
    return addresses


@cache
def _nullable_times(cls: type[Entity]) -> type[Entity]:
    """`cls`, or a copy of it in which every `datetime_i64` field, nested ones too, is nullable."""
    fields: list[tuple[str, Any, dataclasses.Field[Any]]] = []
    changed = False
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        # Type expressions built at run time for make_dataclass: beyond what mypy can follow.
        field_type: Any = f.type
        if isinstance(kind, (EntityField, EntityTupleField)):
            inner = _nullable_times(kind.type_)
            if inner is not kind.type_:
                changed = True
                field_type = GenericAlias(tuple, (inner, ...)) if isinstance(kind, EntityTupleField) else inner
                if isinstance(f.type, UnionType):
                    field_type = field_type | None
        elif f.metadata.get("kafka_type") == "datetime_i64" and not isinstance(f.type, UnionType):
            changed = True
            field_type = field_type | None
        options: dict[str, Any] = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            options["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            options["default_factory"] = f.default_factory
        fields.append((f.name, field_type, dataclasses.field(**options)))
    if not changed:
        return cls
    namespace = {name: getattr(cls, name) for name in _CLASS_VARS if hasattr(cls, name)}
    copy = dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, frozen=True, slots=True,
                                      kw_only=True)
    # The copy has the entity's fields and class variables: an entity class to kio.
    return cast("type[Entity]", copy)


@cache
def _request_writers(cls: type[RequestPayload]) -> tuple[type[RequestHeader], _Write, _Write]:
    header = cls.__header_schema__
    # kio types a writer's sink as a stream or IO[bytes], but only ever calls its write(): _Buffer's.
    return header, cast(_Write, entity_writer(header)), cast(_Write, entity_writer(cls))


@cache
def _response_readers(api_key: int, version: int) -> tuple[
        type[ResponseHeader], Reader[ResponseHeader], type[ResponsePayload], Reader[Entity]]:
    cls = load_response_schema(api_key, version)
    header = cls.__header_schema__
    return header, entity_reader(header), cls, entity_reader(_nullable_times(cls))


class _Buffer:
    """kio's sink."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        return len(chunk)


class Sent(NamedTuple):
    """A request sent and not yet answered: what reading its answer needs."""

    api_key: int
    version: int
    correlation_id: int


class AdminClient:
    """One connection to a broker: `request(kio request) -> kio response`, blocking."""

    def __init__(self, bootstrap: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, client_id: str = "logstore-admin",
                 security: ClientSecurity | None = None):
        self.addresses = parse_bootstrap(bootstrap)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.security = security or ClientSecurity()
        self.address: tuple[str, int] | None = None
        self._socket: socket.socket | None = None
        self._correlation = itertools.count(1)

    def connect(self) -> AdminClient:
        """Open the connection (to the first address that accepts); a no-op if it is open."""
        if self._socket is not None:
            return self
        failures: list[str] = []
        for host, port in self.addresses:
            try:
                sock = socket.create_connection((host, port), timeout=self.timeout_s)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._socket = self.security.wrap(sock, host)
            except (ClientSecurityError, OSError) as exc:
                sock.close()
                raise BrokerUnavailableError(f"{host}:{port}: {exc}") from None
            self.address = (host, port)
            if self.security.mechanism:
                self._login()
            return self
        raise BrokerUnavailableError(f"cannot connect to {', '.join(failures)}")

    def _login(self) -> None:
        """SaslHandshake v1 and SaslAuthenticate v2 until the exchange completes (Kafka's clients' order)."""
        exchange = SaslExchange(self.security)
        handshake = self.request(SaslHandshakeRequest(mechanism=exchange.mechanism))
        if handshake.error_code != ErrorCode.none:
            self.close()
            raise AuthenticationError(f"{self._where()}: SASL mechanism {exchange.mechanism} refused "
                                   f"({error_name(handshake.error_code)}; the listener enables "
                                   f"{', '.join(handshake.mechanisms) or 'none'})")
        token: bytes | None = exchange.first()
        while token is not None:
            answer = self.request(SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code != ErrorCode.none:
                self.close()
                raise AuthenticationError(f"{self._where()}: {error_name(answer.error_code)}: "
                                          f"{answer.error_message}")
            try:
                token = exchange.next(answer.auth_bytes)
            except ClientSecurityError as exc:
                self.close()
                raise AuthenticationError(f"{self._where()}: {exc}") from None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> AdminClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, body: RequestPayload) -> Any:
        """Send one kio request (its class says the API key and version) and return the broker's response.

        The response is Any: its class follows from the request's only at run time (kio's index), and
        datetime fields may be None (a copy of the class). Callers annotate the class they expect.
        """
        return self.receive(self.send(body))

    def send(self, body: RequestPayload) -> Sent:
        """Send one kio request without waiting for its answer (a pipelining caller `receive`s the answers in
        the order it sent them; `request` is both at once)."""
        self.connect()
        sock = self._socket
        assert sock is not None  # connect() opened it, or raised
        api_key, version = body.__api_key__, body.__version__
        correlation_id = next(self._correlation)
        header_cls, write_header, write_body = _request_writers(type(body))
        buffer = _Buffer()
        buffer.write(b"\0\0\0\0")
        # Counted from 1 per connection, so within int32: kio's i32 in all but name.
        write_header(buffer, header_cls(request_api_key=api_key, request_api_version=version,
                                        correlation_id=cast(i32, correlation_id), client_id=self.client_id))
        write_body(buffer, body)
        _SIZE.pack_into(buffer.data, 0, len(buffer.data) - 4)
        try:
            sock.sendall(buffer.data)
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self._where()}: {exc.strerror or exc}") from exc
        return Sent(api_key, version, correlation_id)

    def receive(self, sent: Sent) -> Any:
        """The answer to `sent`, the oldest request sent and not yet answered on this connection."""
        sock = self._socket
        if sock is None:
            raise BrokerUnavailableError(f"{self._where()}: the connection closed before the answer")
        api_key, version, correlation_id = sent
        try:
            (size,) = _SIZE.unpack(self._receive(sock, 4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise ConnectionAbortedError(0, f"a response of {size} bytes")
            frame = self._receive(sock, size)
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self._where()}: {exc.strerror or exc}") from exc
        response_header_cls, read_header, response_cls, read_body = _response_readers(api_key, version)
        try:
            frame = check_and_strip(response_header_cls, frame, 0)
            header, offset = read_header(frame, 0)
            if header.correlation_id != correlation_id:
                raise ValueError(f"correlation id {header.correlation_id}, not {correlation_id}")
            frame = check_and_strip(response_cls, frame, offset)
            response, _ = read_body(frame, offset)
        except (DecodeError, KeyError, ValueError) as exc:
            self.close()
            raise BrokerUnavailableError(f"an unreadable {response_cls.__name__} v{version} from {self._where()}: "
                                         f"{exc!r}") from exc
        return response

    def _receive(self, sock: socket.socket, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(min(n - len(data), 1 << 20))
            if not chunk:
                raise ConnectionResetError(0, "the broker closed the connection (an API version it does not serve?)")
            data += chunk
        return bytes(data)

    def _where(self) -> str:
        host, port = self.address or ("?", 0)
        return f"{host}:{port}"
