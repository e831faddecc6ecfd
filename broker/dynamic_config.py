"""The broker configs Kafka lets an admin change at run time, and the `broker-configs` file that keeps them.

Kafka's DynamicBrokerConfig: (Incremental)AlterConfigs on the BROKER resource
sets configs of this broker (the resource named by its node id) or the
cluster-wide default (the empty name); they take precedence over the
configs the broker started with: dynamic per-broker > dynamic cluster
default > static (server.properties, environment, `--override`) > default.
Only the names of Kafka's reconfigurable list can be set (`DYNAMIC_CONFIGS`:
its DynamicBrokerConfig.AllDynamicConfigs as far as this broker knows the
names), each with its effect here:

- the broker-level defaults of topic configs (`log.retention.ms`,
  `log.segment.bytes`, `message.max.bytes`, `compression.type`, ...: the first
  broker synonym of each, as Kafka's DynamicLogConfig): every topic without
  an override of its own runs with the new value at once;
- `max.connections`, `max.connections.per.ip`,
  `max.connections.per.ip.overrides`: the next connections accepted;
- `producer.id.expiration.ms`: the next expiry check of every partition;
- the cleaner's buffer sizes and backoff: its next round (`CLEANER_CONFIGS`;
  a round under way is aborted, as Kafka restarts its cleaner threads);
  `log.cleaner.threads` checked as Kafka checks it and kept (one cleaner
  thread runs whatever it says);
- a TLS listener's key material (`listener.name.<l>.ssl.keystore.*`,
  `ssl.key.password`, `ssl.truststore.*`: Kafka's SslConfigs
  RECONFIGURABLE_CONFIGS, `listener_tls_setting`), per broker only: its next
  connections; the new certificate must keep the served one's subject and
  subjectAltNames unless `ssl.allow.dn.changes` / `ssl.allow.san.changes`;
  given again unchanged, the files are read again (a rotated certificate);
- `num.recovery.threads.per.data.dir`: kept, and taken at the next start
  (`NEXT_START`);
- Kafka's thread counts and replication throttles, which mean nothing on one
  asyncio node: kept and shown, with no effect (`NO_EFFECT`).

The file: one at the root of every log dir, each a full copy (as `topic-configs`):

    {"version": 0, "generation": <n>, "resources": {"": {"log.retention.ms": "3600000"}, "1": {...}}}

keyed by resource name ("" the cluster default, else a node id), values as
Kafka keeps them (text). Each write replaces every copy atomically with the
generation raised by one, and the copy with the highest generation wins on
open (`logstore.generation_files`): a crash leaves the older state or the
newer one. A copy that breaks the layout is a `CorruptCheckpointError`
naming it; a name or value it holds that this broker cannot take (a hand
edit, an older version) is left out with a warning, as Kafka ignores an
invalid stored dynamic config.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from logstore.broker.security_config import parse_listener_setting
from logstore.checkpoints import CorruptCheckpointError
from logstore.config import BROKER_NAMES, INT_MAX, LONG_MAX
from logstore.filesystem import OS, FileSystem
from logstore.generation_files import GenerationFile
from logstore.log_cleaner import CLEANER_DEFAULTS, LIVE_CLEANER_SETTINGS

__all__ = ["BROKER_CONFIGS_FILE", "CLEANER_CONFIGS", "CLUSTER_DEFAULT", "CONNECTION_CONFIGS", "DYNAMIC_CONFIGS",
           "LOG_CONFIGS", "NEXT_START", "NO_EFFECT", "TLS_CONFIGS", "DynamicConfigs", "is_dynamic",
           "listener_tls_setting", "read_dynamic_configs", "write_dynamic_configs"]

log = logging.getLogger(__name__)

BROKER_CONFIGS_FILE = "broker-configs"
BROKER_CONFIGS_COPIES = GenerationFile(BROKER_CONFIGS_FILE, "resources")
CLUSTER_DEFAULT = ""  # the BROKER resource name of the cluster-wide default
_NODE_ID = re.compile(r"[0-9]+")

# Kafka's DynamicLogConfig.ReconfigurableConfigs: the first broker synonym of every topic config.
LOG_CONFIGS = frozenset(BROKER_NAMES)
# Kafka's SocketServer.ReconfigurableConfigs that exist here (max.connection.creation.rate does not).
CONNECTION_CONFIGS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})
# Kafka's DynamicProducerStateManagerConfig (transaction.partition.verification.enable does not exist here).
PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms"})
# Kafka's LogCleaner.RECONFIGURABLE_CONFIGS that exist here, and DynamicThreadPool's recovery threads: Kafka
# restarts its cleaner threads or resizes the pool; here the cleaner and the loader take them when they start.
# Kafka's LogCleaner.RECONFIGURABLE_CONFIGS that exist here.
CLEANER_CONFIGS = LIVE_CLEANER_SETTINGS | frozenset({"log.cleaner.threads"} & set(CLEANER_DEFAULTS))
NEXT_START: dict[str, str] = {
    "num.recovery.threads.per.data.dir": "partitions are loaded (recovered) only when the broker starts",
}
_ASYNCIO = "requests are served by one asyncio event loop, and blocking work by pools of fixed size"
_REPLICATION = "one node has no followers: nothing is replicated"
# Kafka's dynamic configs with no use on one node: name → (Kafka's default, Kafka's type, why no effect).
NO_EFFECT: dict[str, tuple[int, str, str]] = {
    "num.io.threads": (8, "INT", _ASYNCIO),
    "num.network.threads": (3, "INT", _ASYNCIO),
    "background.threads": (10, "INT", _ASYNCIO),
    "num.replica.fetchers": (1, "INT", _REPLICATION),
    "leader.replication.throttled.rate": (LONG_MAX, "LONG", _REPLICATION),
    "follower.replication.throttled.rate": (LONG_MAX, "LONG", _REPLICATION),
    "replica.alter.log.dirs.io.max.bytes.per.second": (LONG_MAX, "LONG",
                                                       "partitions are not moved between log dirs here"),
}
# Thread counts Kafka keeps within half and double of the current value (DynamicThreadPool, SocketServer).
THREAD_COUNTS = frozenset({"num.io.threads", "num.network.threads", "background.threads", "num.replica.fetchers",
                           "num.recovery.threads.per.data.dir"})
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: a listener's key material, set by its `listener.name.<l>.` name.
TLS_CONFIGS = frozenset({"ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
                         "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
                         "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates"})
DYNAMIC_CONFIGS = (LOG_CONFIGS | CONNECTION_CONFIGS | PRODUCER_STATE_CONFIGS | CLEANER_CONFIGS | frozenset(NEXT_START)
                   | frozenset(NO_EFFECT))


def listener_tls_setting(name: str) -> tuple[str, str] | None:
    """(listener, setting) of a listener's dynamic TLS config (`listener.name.ssl.ssl.keystore.location`), or
    None for any other name."""
    parsed = parse_listener_setting(name)
    if parsed is None or parsed[1] is not None or parsed[2] not in TLS_CONFIGS:
        return None
    return parsed[0], parsed[2]


def is_dynamic(name: str) -> bool:
    """Whether `name` may be set at run time (a name of DYNAMIC_CONFIGS or a listener's TLS key material)."""
    return name in DYNAMIC_CONFIGS or listener_tls_setting(name) is not None


def parse_no_effect(name: str, value: Any) -> int:
    """A value of a NO_EFFECT config as Kafka's ConfigDef takes it (INT or LONG, at least 0; a thread count at
    least 1 is checked with the other thread counts); ValueError with Kafka's reason."""
    _, kind, _ = NO_EFFECT[name]
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"Not a number of type {kind}") from None
    largest = INT_MAX if kind == "INT" else LONG_MAX
    if not -largest - 1 <= number <= largest:
        raise ValueError(f"Not a number of type {kind}")
    if number < 0 and name not in THREAD_COUNTS:
        raise ValueError("Value must be at least 0")
    return number


@dataclass(frozen=True)
class DynamicConfigs:
    """What `broker-configs` holds: each BROKER resource's configs (name → Kafka's text of the value), under
    the generation of the file they were read from or are written as. Frozen: a change is a new one."""

    generation: int = 0
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def of(self, resource: str) -> dict[str, str]:
        """The configs of a resource ("" the cluster default, else a node id); {} if it has none."""
        return dict(self.resources.get(resource, {}))

    def replaced(self, resource: str, configs: Mapping[str, str]) -> DynamicConfigs:
        """These configs with the resource's replaced by `configs` (none: the resource is dropped), one
        generation on."""
        resources = {name: dict(held) for name, held in self.resources.items() if name != resource}
        if configs:
            resources[resource] = dict(configs)
        return DynamicConfigs(self.generation + 1, resources)


def _read_copy(path: str, fs: FileSystem) -> tuple[int, DynamicConfigs]:
    generation, body = BROKER_CONFIGS_COPIES.read(path, fs)
    for resource, configs in body.items():
        if resource != CLUSTER_DEFAULT and not _NODE_ID.fullmatch(resource):
            raise CorruptCheckpointError(path, 1, f"resource {resource!r} is neither \"\" nor a node id")
        if not isinstance(configs, dict) or not configs:
            raise CorruptCheckpointError(path, 1, f"resource {resource!r}: expected a non-empty object of configs")
        for name, value in configs.items():
            if not isinstance(value, str):
                raise CorruptCheckpointError(path, 1, f"resource {resource!r}: {name}={value!r} is not text")
    return generation, DynamicConfigs(generation, body)


def read_dynamic_configs(log_dirs: Iterable[str], fs: FileSystem = OS) -> DynamicConfigs:
    """The newest copy of `broker-configs` among the log dirs (none: no dynamic config, generation 0)."""
    found = BROKER_CONFIGS_COPIES.read_newest(log_dirs, lambda path: _read_copy(path, fs))
    return found[1] if found is not None else DynamicConfigs()


def write_dynamic_configs(log_dirs: Iterable[str], configs: DynamicConfigs, fs: FileSystem = OS, *,
                          make_dirs: bool = False) -> None:
    """Replace every log dir's copy with `configs`, each durable before the next (StorageIOError if one fails);
    `make_dirs`: a log dir not made yet is made first (a tool run before the broker's first start)."""
    BROKER_CONFIGS_COPIES.write(log_dirs, configs.generation,
                                {name: dict(held) for name, held in configs.resources.items()}, fs,
                                make_dirs=make_dirs)
