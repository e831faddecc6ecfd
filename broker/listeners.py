"""Kafka's listener settings on a single node: the entries of `listeners` the broker serves, their security
protocols, and what each advertises.

Kafka's syntax (`NAME://host:port`, comma-separated, names distinct, ports
distinct; an empty host is every interface). A KRaft file lists the
controller's listener too (`CONTROLLER://:9093`, named in
`controller.listener.names`): this broker runs no controller quorum, so it
serves every entry that is not a controller listener and opens none of the
others (the broker names them in a warning). Each served listener's security
protocol comes from `listener.security.protocol.map` (PLAINTEXT, SSL,
SASL_PLAINTEXT or SASL_SSL). Clients are told the `advertised.listeners`
entry of the listener they connected to, or that listener itself, with an
every-interface host as 127.0.0.1.
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
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


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
    security_protocol: str = "PLAINTEXT"

    @property
    def tls(self) -> bool:
        """Whether connections to it speak TLS (SSL, SASL_SSL)."""
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        """Whether its clients authenticate with SASL (SASL_PLAINTEXT, SASL_SSL)."""
        return self.security_protocol in SASL_PROTOCOLS

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


def served_listeners(listeners: str, controllers: str, protocols: str) -> tuple[tuple[Listener, ...],
                                                                             tuple[Listener, ...]]:
    """(the listeners to serve, each with its security protocol; the controller entries not opened)."""
    entries = parse_listeners(listeners)
    ports = [listener.port for listener in entries if listener.port != 0]
    if len(set(ports)) != len(ports):
        raise ListenerConfigError("listeners", str(_refused("listeners", listeners,
                                                            "Each listener must have a different port")))
    controller = controller_names(controllers)
    if not any(listener.name not in controller for listener in entries):
        raise ListenerConfigError("listeners", str(_refused(
            "listeners", listeners, f"every entry is a controller listener (controller.listener.names="
            f"{controllers}); one for clients is needed")))
    by_name = protocol_map(protocols)
    served = []
    for listener in entries:
        if listener.name in controller:
            continue
        protocol = by_name.get(listener.name)
        if protocol is None:
            raise ListenerConfigError("listeners", f"No security protocol defined for listener {listener.name} "
                                      f"(listeners={listeners}): listener.security.protocol.map={protocols}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ListenerConfigError("listener.security.protocol.map", str(_refused(
                "listener.security.protocol.map", protocols,
                f"{protocol} is not a security protocol: one of {', '.join(SECURITY_PROTOCOLS)}")))
        served.append(Listener(listener.name, listener.host, listener.port, protocol))
    return tuple(served), tuple(listener for listener in entries if listener.name in controller)


def advertised_listener(served: Listener, advertised: str) -> Listener:
    """What Metadata tells clients to connect to for `served`."""
    listener = served
    if advertised:
        named = {a.name: a for a in parse_listeners(advertised, "advertised.listeners")}
        if served.name not in named:
            raise ListenerConfigError("advertised.listeners", str(_refused(
                "advertised.listeners", advertised, f"it has no {served.name} entry for the listener {served}")))
        listener = named[served.name]
    host = "127.0.0.1" if listener.host in EVERY_INTERFACE else listener.host
    return Listener(listener.name, host, listener.port, served.security_protocol)
