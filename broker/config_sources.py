"""Where broker settings come from, and the Kafka settings that mean nothing on one node.

Three sources, each later one winning (`BrokerConfig.load` merges them):

1. a server.properties file in Java's `.properties` syntax, read by the
   `javaproperties` library as `java.util.Properties.load` reads it: `\\`
   escapes and `\\uXXXX`, lines continued by a trailing `\\`, and `=`, `:`
   or whitespace between key and value;
2. the environment, as Kafka's container image takes it
   (`KafkaDockerWrapper.getServerConfigsFromEnv`) and under `LOGSTORE_` by
   the same rule: strip the prefix, lower-case, `_` → `.`, `__` → `_`,
   `___` → `-` (`KAFKA_LOG_DIRS` → `log.dirs`); a `LOGSTORE_` variable wins
   over the `KAFKA_` one naming the same setting;
3. `--override key=value`, as `kafka-server-start.sh` takes it.

Each `ConfigEntry` keeps where it came from (a file line, a variable, an
override), so a refusal names what to edit. Values are stripped of
surrounding whitespace, as Kafka's ConfigDef does.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import javaproperties

from logstore.errors import InvalidConfigError

ENV_PREFIXES = ("KAFKA_", "LOGSTORE_")
# Never settings: what Kafka's image keeps out of server.properties (ExcludeServerPropsEnv), the
# variables of Kafka's scripts, and logstore's own process switches (tests, benchmarks).
EXCLUDED_ENV = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME", "KAFKA_HOME", "KAFKA_DEBUG", "KAFKA_CLUSTER_ID",
    "LOGSTORE_SOAK_SEED", "LOGSTORE_FUZZ_SEED", "LOGSTORE_LOG_FORMAT", "LOGSTORE_EVENT_LOOP",
})
EXCLUDED_ENV_PREFIXES = ("LOGSTORE_BENCH_",)

# Kafka settings a single node has no use for: replication and ISR, the KRaft controller quorum
# and ZooKeeper, inter-broker traffic, thread counts and socket buffers (asyncio has neither
# knob). They are accepted, so Kafka's own files start a broker, and named in one warning.
SINGLE_NODE_NAMES = frozenset({
    "process.roles", "inter.broker.listener.name", "inter.broker.protocol.version",
    "control.plane.listener.name", "broker.rack", "broker.id.generation.enable", "reserved.broker.max.id",
    "initial.broker.registration.timeout.ms", "broker.heartbeat.interval.ms", "broker.session.timeout.ms",
    "metadata.log.dir", "eligible.leader.replicas.enable",
    "min.insync.replicas", "unclean.leader.election.enable", "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds", "leader.imbalance.per.broker.percentage",
    "offsets.topic.replication.factor", "offsets.commit.required.acks", "offsets.commit.timeout.ms",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
    "num.replica.fetchers", "num.replica.alter.log.dirs.threads",
    "controlled.shutdown.enable", "controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
    "num.network.threads", "num.io.threads", "background.threads",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
})
SINGLE_NODE_PREFIXES = ("zookeeper.", "controller.quorum.", "replica.", "metadata.log.")


class ConfigSourceError(InvalidConfigError):
    """A config file that cannot be read, or an override that is not `key=value`."""


@dataclass(frozen=True)
class ConfigEntry:
    """One setting as a source gave it: Kafka name, value text, and where (for messages)."""

    name: str
    value: Any
    """The text a file, variable or override gave (stripped), or the Python value code gave."""
    origin: str
    """"server.properties line 12", "environment KAFKA_LOG_DIRS", "--override"; "" when given in code."""
    from_environment: bool = False


def read_properties_file(path: str) -> list[ConfigEntry]:
    """The settings of a `.properties` file, in file order (a later duplicate wins, as in Java)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigSourceError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # what java.util.Properties.load(InputStream) reads
    return read_properties(text, path)


def read_properties(text: str, path: str = "properties") -> list[ConfigEntry]:
    """`key=value` entries of Java `.properties` text, each with its `path line N`."""
    entries = []
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                entries.append(ConfigEntry(element.key, element.value.strip(), f"{path} line {line}"))
            source = element.source
            line += source.count("\n") + source.count("\r") - source.count("\r\n")
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigSourceError(f"{path} line {line}: {exc} (Java's \\uXXXX takes four hex digits)") from None
    return entries


def environment_name(variable: str) -> str | None:
    """The setting an environment variable names (Kafka's image's rule), or None if it names none."""
    if variable in EXCLUDED_ENV or variable.startswith(EXCLUDED_ENV_PREFIXES):
        return None
    for prefix in ENV_PREFIXES:
        if variable.startswith(prefix) and len(variable) > len(prefix):
            name = variable[len(prefix):].lower().replace("_", ".")
            return name.replace("...", "-").replace("..", "_")
    return None


def read_environment(environ: Mapping[str, str]) -> list[ConfigEntry]:
    """The settings named by `KAFKA_…` then `LOGSTORE_…` variables (so a LOGSTORE_ one wins)."""
    found = []
    for prefix in ENV_PREFIXES:
        for variable in sorted(v for v in environ if v.startswith(prefix)):
            name = environment_name(variable)
            if name is not None:
                found.append(ConfigEntry(name, environ[variable].strip(), f"environment {variable}",
                                         from_environment=True))
    return found


def read_overrides(items: Iterable[str]) -> list[ConfigEntry]:
    """`key=value` items of `--override`."""
    found = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigSourceError(f"--override {item!r} is not KEY=VALUE")
        found.append(ConfigEntry(key.strip(), value.strip(), "--override"))
    return found


def means_nothing_here(name: str) -> bool:
    """Whether a Kafka setting has no use on a single node (accepted with a warning)."""
    return name in SINGLE_NODE_NAMES or name.startswith(SINGLE_NODE_PREFIXES)


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name a typo most likely meant, if any is close."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return found[0] if found else None
