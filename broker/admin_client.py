"""A small blocking Kafka client for logstore's command-line tools: one socket, kio's codecs.

The caller builds a kio request of the version it wants and gets the kio
response of that version back; there is no ApiVersions exchange, so asking
a version the broker does not serve ends with the broker closing the
connection (`BrokerUnavailableError`). Requests are sent one at a time on
one connection, to the first bootstrap address that accepts it.

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
from functools import cache
from types import UnionType

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.serial.errors import DecodeError

from logstore.broker.array_bounds import check_and_strip

__all__ = ["AdminClient", "AdminClientError", "BrokerUnavailableError", "error_name", "parse_bootstrap"]

DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")
_CLASS_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


class AdminClientError(Exception):
    """The base of this client's errors."""


class BrokerUnavailableError(AdminClientError):
    """No broker could be reached, or the connection broke or timed out, or the answer was unreadable."""


def error_name(code) -> str:
    """Kafka's name of an error code (`TRANSACTIONAL_ID_NOT_FOUND`)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{int(code)}"


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 hosts in brackets) as (host, port) pairs; ValueError if malformed."""
    addresses = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item.strip()!r} is not host:port")
        addresses.append((host, int(port)))
    return addresses


@cache
def _nullable_times(cls):
    """`cls`, or a copy of it in which every `datetime_i64` field, nested ones too, is nullable."""
    fields = []
    changed = False
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        field_type = f.type
        if isinstance(kind, (EntityField, EntityTupleField)):
            inner = _nullable_times(kind.type_)
            if inner is not kind.type_:
                changed = True
                field_type = tuple[inner, ...] if isinstance(kind, EntityTupleField) else inner
                if isinstance(f.type, UnionType):
                    field_type = field_type | None
        elif f.metadata.get("kafka_type") == "datetime_i64" and not isinstance(f.type, UnionType):
            changed = True
            field_type = f.type | None
        options = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            options["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            options["default_factory"] = f.default_factory
        fields.append((f.name, field_type, dataclasses.field(**options)))
    if not changed:
        return cls
    namespace = {name: getattr(cls, name) for name in _CLASS_VARS if hasattr(cls, name)}
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, frozen=True, slots=True,
                                      kw_only=True)


@cache
def _request_writers(cls):
    header = cls.__header_schema__
    return header, entity_writer(header), entity_writer(cls)


@cache
def _response_readers(api_key: int, version: int):
    cls = load_response_schema(api_key, version)
    header = cls.__header_schema__
    return header, entity_reader(header), cls, entity_reader(_nullable_times(cls))


class _Buffer:
    """kio's sink."""

    def __init__(self):
        self.data = bytearray()

    def write(self, chunk) -> int:
        self.data += chunk
        return len(chunk)


class AdminClient:
    """One connection to a broker: `request(kio request) -> kio response`, blocking."""

    def __init__(self, bootstrap: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, client_id: str = "logstore-admin"):
        self.addresses = parse_bootstrap(bootstrap)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.address: tuple[str, int] | None = None
        self._socket: socket.socket | None = None
        self._correlation = itertools.count(1)

    def connect(self) -> AdminClient:
        """Open the connection (to the first address that accepts); a no-op if it is open."""
        if self._socket is not None:
            return self
        failures = []
        for host, port in self.addresses:
            try:
                self._socket = socket.create_connection((host, port), timeout=self.timeout_s)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.address = (host, port)
            return self
        raise BrokerUnavailableError(f"cannot connect to {', '.join(failures)}")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> AdminClient:
        return self.connect()

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, body):
        """Send one kio request (its class says the API key and version) and return the broker's response."""
        self.connect()
        api_key, version = body.__api_key__, body.__version__
        correlation_id = next(self._correlation)
        header_cls, write_header, write_body = _request_writers(type(body))
        buffer = _Buffer()
        buffer.write(b"\0\0\0\0")
        write_header(buffer, header_cls(request_api_key=api_key, request_api_version=version,
                                        correlation_id=correlation_id, client_id=self.client_id))
        write_body(buffer, body)
        _SIZE.pack_into(buffer.data, 0, len(buffer.data) - 4)
        try:
            self._socket.sendall(buffer.data)
            (size,) = _SIZE.unpack(self._receive(4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise ConnectionAbortedError(0, f"a response of {size} bytes")
            frame = self._receive(size)
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self._where()}: {exc.strerror or exc}") from exc
        header_cls, read_header, response_cls, read_body = _response_readers(api_key, version)
        try:
            frame = check_and_strip(header_cls, frame, 0)
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

    def _receive(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self._socket.recv(min(n - len(data), 1 << 20))
            if not chunk:
                raise ConnectionResetError(0, "the broker closed the connection (an API version it does not serve?)")
            data += chunk
        return bytes(data)

    def _where(self) -> str:
        host, port = self.address or ("?", 0)
        return f"{host}:{port}"
