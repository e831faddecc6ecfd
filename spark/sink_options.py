"""The sink's options and input columns, named and checked as Spark's Kafka sink names and checks them.

Columns: `value` (binary or string) is required; `key` (binary or string),
`topic` (string), `partition` (int) and `headers`
(array<struct<key: string, value: binary>>) are optional, and any other column
is left alone, as Spark's Kafka sink does. Options: `path` (or `.save(path)`),
the log dir written into; `topic`, for rows without a `topic` column or with a
null one; `transaction.timeout.ms` (default 60000), how long a task's
transaction may stay open before the next writer aborts it, and how long a
task waits for the dir; `write.buffer.bytes` (default 64 MiB), the input a task
gathers before it takes the dir to append it.

Instead of `path`, `kafka.bootstrap.servers` names a running broker to write
through (KIP-939 two-phase commit, see sink_broker.py); then
`transactional.id.prefix` names the job's transactional ids (default
`logstore-sink-<topic>`, or `logstore-sink` with a topic column), and
`transaction.timeout.ms` is how long a dead job's prepared transactions are
left before the next job of the prefix aborts them, and `write.buffer.bytes`
the input a task gathers into one Produce request (at most 2 MiB). A secured
listener takes Kafka's client properties with Spark's `kafka.` prefix, as
Spark's Kafka sink passes them to its producer: `kafka.security.protocol`
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `kafka.ssl.truststore.location`
(PEM, `kafka.ssl.truststore.type=PEM`), `kafka.ssl.keystore.location`,
`kafka.sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and
`kafka.sasl.jaas.config`; the files they name must be readable where the
driver and the executors run.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from logstore.broker.client_security import ClientSecurityError, client_security
from logstore.dir_transactions import DEFAULT_TIMEOUT_MS
from logstore.dir_writer import BUFFER_BYTES
from logstore.spark.options import OptionError

HEADERS_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


@dataclass(frozen=True)
class SinkOptions:
    """Every option and input column the sink understands."""

    path: str
    topic: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    buffer_bytes: int = BUFFER_BYTES
    key: bool = False
    topic_column: bool = False
    partition_column: bool = False
    headers: bool = False
    bootstrap: str | None = None
    """`kafka.bootstrap.servers`: write through this broker instead of into `path`."""
    prefix: str = ""
    """`transactional.id.prefix` (the broker target's)."""
    security: tuple[tuple[str, str], ...] = ()
    """The broker target's Kafka client properties (the `kafka.` options but the bootstrap servers)."""

    @property
    def where(self) -> str:
        """The target, in words, for error lines."""
        return f"broker {self.bootstrap}" if self.bootstrap else f"log dir {self.path}"


def parse_sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """Check and type a write's options and input columns; OptionError names what is wrong, in one line."""
    opts = {k.lower(): v for k, v in options.items()}
    bootstrap = opts.get("kafka.bootstrap.servers") or None
    path = opts.get("path") or ""
    if bootstrap and path:
        raise OptionError("options 'path' and 'kafka.bootstrap.servers' name two targets: give one (a log dir no "
                          "broker holds, or the broker that holds it)")
    security: tuple[tuple[str, str], ...] = ()
    if bootstrap:
        security = tuple(sorted((k.removeprefix("kafka."), v) for k, v in opts.items()
                                if k.startswith("kafka.") and k != "kafka.bootstrap.servers"))
        try:
            client_security(dict(security), "kafka. options")   # checked here, on the driver, in one line
        except ClientSecurityError as exc:
            raise OptionError(str(exc)) from None
    elif not path:
        raise OptionError("option 'path' (the log dir to write into; or .save(path)) or 'kafka.bootstrap.servers' "
                          "(a broker to write through) is required")
    if "," in path or path.startswith("["):
        raise OptionError(f"option 'path' names one log dir, got {path!r}")
    topic = opts.get("topic") or None
    prefix = opts.get("transactional.id.prefix") or (f"logstore-sink-{topic}" if topic else "logstore-sink")
    timeout = _positive(opts, "transaction.timeout.ms", DEFAULT_TIMEOUT_MS, "ms")
    buffer_bytes = _positive(opts, "write.buffer.bytes", BUFFER_BYTES, "bytes")

    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("required attribute 'value' not found (the sink writes key, value, topic, partition, "
                          "headers)")
    _check(types, "value", (BinaryType(), StringType()), "a string or binary")
    _check(types, "key", (BinaryType(), StringType()), "a string or binary")
    _check(types, "topic", (StringType(),), "a string")
    _check(types, "partition", (IntegerType(),), "an int")
    _check(types, "headers", (HEADERS_TYPE,), "array<struct<key:string,value:binary>>")
    if "topic" not in types and topic is None:
        raise OptionError("topic option required when no 'topic' attribute is present")
    return SinkOptions(path=path, topic=topic, timeout_ms=timeout, buffer_bytes=buffer_bytes, key="key" in types,
                       topic_column="topic" in types, partition_column="partition" in types,
                       headers="headers" in types, bootstrap=bootstrap, prefix=prefix, security=security)


def _positive(opts: Mapping[str, str], name: str, default: int, unit: str) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"{name} must be an integer ({unit}), got {raw!r}") from None
    if value < 1:
        raise OptionError(f"{name} must be at least 1, got {value}")
    return value


def _check(types: Mapping[str, DataType], name: str, allowed: tuple[DataType, ...], words: str) -> None:
    kind = types.get(name)
    if kind is None:
        return
    if isinstance(kind, ArrayType) and isinstance(allowed[0], ArrayType):
        # Nullability of the elements and fields does not matter, only the shape.
        element = kind.elementType
        if isinstance(element, StructType) and [(f.name, f.dataType) for f in element.fields] == \
                [("key", StringType()), ("value", BinaryType())]:
            return
    elif kind in allowed:
        return
    raise OptionError(f"{name} attribute type must be {words}, got {kind.simpleString()}")
