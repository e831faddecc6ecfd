"""Kafka's listener settings on a single node: the entry of `listeners` the broker serves, and what it advertises.

Kafka's syntax (`NAME://host:port`, comma-separated, names distinct; an
empty host is every interface). A KRaft file lists the controller's listener
too (`CONTROLLER://:9093`, named in `controller.listener.names`): this broker
runs no controller quorum, so it serves the first entry that is not a
controller listener and opens none of the others (the broker names them in a
warning). The served listener's security protocol, from
`listener.security.protocol.map`, must be PLAINTEXT: there is no TLS or SASL.
Clients are told the `advertised.listeners` entry of the same name, or the
served listener itself, with an every-interface host as 127.0.0.1.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from logstore.config import _refused
from logstore.errors import InvalidConfigError

# Kafka's default listener.security.protocol.map.
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
LISTENER = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")  # Kafka's listener syntax
EVERY_INTERFACE = ("", "0.0.0.0", "::")


class ListenerConfigError(InvalidConfigError):
    """A refused listener setting; `setting` names the one to fix."""

    def __init__(self, setting: str, message: str):
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True)
class Listener:
    """One `NAME://host:port` entry (an empty host: every interface)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str, setting: str = "listeners") -> list[Listener]:
    """Kafka's `listeners` syntax: comma-separated `NAME://host:port`, names distinct."""
    found = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        match = LISTENER.fullmatch(item)
        if match is None or not match[1]:
            raise ListenerConfigError(setting, str(_refused(setting, text, f"{item} is not NAME://host:port")))
        port = int(match[3])
        if not 0 <= port <= 65535:
            raise ListenerConfigError(setting, str(_refused(setting, text, f"port {port} of {item} is not in 0-65535")))
        found.append(Listener(match[1].upper(), match[2], port))
    if not found:
        raise ListenerConfigError(setting, str(_refused(setting, text, "at least one NAME://host:port is needed")))
    if len({listener.name for listener in found}) != len(found):
        raise ListenerConfigError(setting, str(_refused(setting, text, "Each listener must have a different name")))
    return found


def controller_names(text: str) -> set[str]:
    """The listener names of `controller.listener.names`."""
    return {name.strip().upper() for name in text.split(",") if name.strip()}


def protocol_map(text: str) -> dict[str, str]:
    """`listener.security.protocol.map`: listener name → security protocol."""
    protocols = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ListenerConfigError("listener.security.protocol.map", str(_refused(
                "listener.security.protocol.map", text, f"{item} is not LISTENER_NAME:PROTOCOL")))
        protocols[name.strip().upper()] = protocol.strip().upper()
    return protocols


def served_listener(listeners: str, controllers: str, protocols: str) -> tuple[Listener, tuple[Listener, ...]]:
    """(the listener to serve, the entries of `listeners` not opened)."""
    entries = parse_listeners(listeners)
    serving = [listener for listener in entries if listener.name not in controller_names(controllers)]
    if not serving:
        raise ListenerConfigError("listeners", str(_refused(
            "listeners", listeners, f"every entry is a controller listener (controller.listener.names="
            f"{controllers}); a PLAINTEXT one for clients is needed")))
    served = serving[0]
    protocol = protocol_map(protocols).get(served.name)
    if protocol is None:
        raise ListenerConfigError("listeners", f"No security protocol defined for listener {served.name} "
                                               f"(listeners={listeners}): listener.security.protocol.map={protocols}")
    if protocol != "PLAINTEXT":
        raise ListenerConfigError("listeners", str(_refused(
            "listeners", listeners, f"{served} uses security protocol {protocol}; this broker serves PLAINTEXT only "
            "(no TLS, no SASL)")))
    return served, tuple(listener for listener in entries if listener is not served)


def advertised_listener(served: Listener, advertised: str) -> Listener:
    """What Metadata tells clients to connect to for `served`."""
    listener = served
    if advertised:
        named = {a.name: a for a in parse_listeners(advertised, "advertised.listeners")}
        if served.name not in named:
            raise ListenerConfigError("advertised.listeners", str(_refused(
                "advertised.listeners", advertised, f"it has no {served.name} entry for the listener {served}")))
        listener = named[served.name]
    if listener.host in EVERY_INTERFACE:
        listener = Listener(listener.name, "127.0.0.1", listener.port)
    return listener
