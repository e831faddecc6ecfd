"""A change of dynamic broker configs, as Kafka's DynamicBrokerConfig makes one: checked, kept, then applied.

`alter_broker_configs` makes a BROKER resource's dynamic configs ("" the
cluster-wide default, else this node's id) what the request leaves them. It
checks in Kafka's order (DynamicBrokerConfig.validateConfigs, then the
reconfigurables' validateReconfiguration), each refusal INVALID_REQUEST as
Kafka's ConfigAdminManager answers it:

1. a name Kafka knows that cannot change at run time: "Cannot update these
   configs dynamically: Set(a, b)" (a name no broker knows is refused here
   too, where Kafka would keep it as a custom config with no effect: this
   broker refuses unknown names at start as well, so a typo never passes);
2. each value as the static config's (`Invalid value v for configuration
   x: ...`);
3. the result together: the connection limits, min/max compaction lag, every
   topic's config under the new defaults (an override may now conflict),
   thread counts within half and double of the current value ("Invalid
   dynamic configuration: ...").

Then, unless `validate_only`, `broker-configs` is replaced in every log dir
(durable before the answer), the BrokerConfig's settings and log defaults
swapped, the store's live Logs given their new configs, and each registered
reconfigurable (the acceptor's connection limits) told. Changes run one at a
time under the config's `alter_lock`, taken before the store's lock.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from logstore.broker.acceptor import ConnectionSettingError, check_connection_settings
from logstore.broker.config import ALIASES, BROKER_SETTINGS, BrokerConfig, _known_names
from logstore.broker.config_sources import closest_name, means_nothing_here
from logstore.broker.dynamic_config import (
    CLUSTER_DEFAULT,
    DYNAMIC_CONFIGS,
    NO_EFFECT,
    THREAD_COUNTS,
    DynamicConfigs,
    is_dynamic,
    listener_tls_setting,
    parse_no_effect,
    write_dynamic_configs,
)
from logstore.broker.security_config import parse_listener_setting
from logstore.config import LogConfig
from logstore.errors import InvalidConfigError, InvalidRequestError
from logstore.log_cleaner import LIVE_CLEANER_SETTINGS
from logstore.manager import SCHEDULE_DEFAULTS, LogManager

__all__ = ["alter_broker_configs", "current_value", "is_known"]

# What the store takes of the broker settings (LogManager's `settings`).
_STORE_SETTINGS = frozenset(SCHEDULE_DEFAULTS) | LIVE_CLEANER_SETTINGS


def current_value(config: BrokerConfig, name: str) -> Any:
    """The value a dynamic config has now: this node's dynamic value, the cluster default's, the static one,
    else the default."""
    if name in BROKER_SETTINGS:
        return config[name]
    for resource in (str(config.static_settings["node.id"]), CLUSTER_DEFAULT):
        held = config.dynamic.of(resource)
        if name in held:
            return held[name]
    static = config.static_values()
    if name in static:
        return static[name]
    return NO_EFFECT[name][0] if name in NO_EFFECT else None


def _check_names(names: list[str]) -> None:
    fixed = sorted(name for name in names if not is_dynamic(name) and is_known(name))
    if fixed:
        raise InvalidRequestError(f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    unknown = sorted(name for name in names if not is_dynamic(name))
    if unknown:
        near = closest_name(unknown[0], DYNAMIC_CONFIGS)
        raise InvalidRequestError(f"Unknown broker config name: {unknown[0]}"
                                  + (f"; did you mean {near}?" if near else ""))


def is_known(name: str) -> bool:
    """Whether Kafka (and so this broker's static config) knows the name."""
    return (name in _known_names() or name in ALIASES or means_nothing_here(name)
            or parse_listener_setting(name) is not None)


def _check_threads(config: BrokerConfig, wanted: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Kafka's DynamicThreadPool and LogCleaner checks of a thread count that changes."""
    for name in THREAD_COUNTS | {"log.cleaner.threads"}:
        if name not in wanted:
            continue
        new = int(settings[name]) if name in settings else parse_no_effect(name, wanted[name])
        old = int(current_value(config, name))
        if new == old:
            continue
        if name == "log.cleaner.threads":
            why = ("Log cleaner threads should be at least 1" if new < 1 else
                   f"Log cleaner threads cannot be reduced to less than half the current value {old}"
                   if new < old // 2 else
                   f"Log cleaner threads cannot be increased to more than double the current value {old}"
                   if new > old * 2 else "")
        else:
            prefix = f"Dynamic thread count update validation failed for {name}={new}"
            why = (f"{prefix}, value should be at least 1" if new <= 0 else
                   f"{prefix}, value should be at least half the current value {old}" if new < old // 2 else
                   f"{prefix}, value should not be greater than double the current value {old}"
                   if new > old * 2 else "")
        if why:
            raise InvalidRequestError(f"Invalid dynamic configuration: {why}")


Change = Mapping[str, str] | Callable[[dict[str, str]], Mapping[str, str]]


def alter_broker_configs(config: BrokerConfig, store: LogManager, resource: str, change: Change, *,
                         validate_only: bool = False) -> None:
    """Make the whole dynamic config of the BROKER resource `resource` ("" or this node's id, checked by the
    caller) `change`, or what `change` makes of the current one (called under the lock, so concurrent changes
    do not lose each other's; it may raise its own refusal), or raise InvalidRequestError with Kafka's message
    (StorageError if the file cannot be written: then nothing is applied). Blocks on fsyncs: run it off the
    event loop."""
    with config.alter_lock:
        wanted = change(config.dynamic.of(resource)) if callable(change) else change
        _check_names(list(wanted))
        dynamic = config.dynamic.replaced(resource, wanted)
        try:
            settings, log_properties = config.overlaid(dynamic, strict=True)
            check_connection_settings(settings)
            log_config = LogConfig.from_properties(log_properties)
        except (InvalidConfigError, ConnectionSettingError) as exc:
            raise InvalidRequestError(str(exc)) from None
        _check_threads(config, wanted, settings)
        tls = sorted(name for name in wanted if listener_tls_setting(name) is not None)
        if tls and resource == CLUSTER_DEFAULT:
            raise InvalidRequestError("Cannot update these configs at default cluster level, broker id must be "
                                      f"specified: {','.join(tls)}")
        store_settings = {name: settings[name] for name in _STORE_SETTINGS}
        try:
            store.reconfigure(log_config, store_settings, validate_only=True)
        except InvalidConfigError as exc:
            raise InvalidRequestError(f"Invalid dynamic configuration: {exc}") from None
        candidate = replace(config, settings=settings, log_properties=log_properties)
        for validate in list(config.validators):
            validate(candidate)
        # Key material given again unchanged is read again, as Kafka reloads a keystore file that changed.
        if validate_only or (dynamic.resources == config.dynamic.resources and not tls):
            return
        if dynamic.resources != config.dynamic.resources:
            try:
                write_dynamic_configs(store.log_dirs, dynamic, store.fs)
            except BaseException:
                # The generation may be on disk in some log dir: the next change must not write it again.
                config.dynamic = DynamicConfigs(dynamic.generation, config.dynamic.resources)
                raise
        config.apply_dynamic(dynamic)
        store.reconfigure(config.log_config, store_settings)
        for reconfigurable in list(config.reconfigurables):
            reconfigurable(config)
