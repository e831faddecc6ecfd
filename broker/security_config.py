"""The broker's security settings under Kafka's names: TLS, SASL, authorization, quotas.

Kafka lets most of them be set per listener, as
`listener.name.<listener name, lower case>.<setting>` (KIP-103), and the
SASL login settings only so, per mechanism:
`listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`. `for_listener`
reads a setting as one listener sees it: its prefixed value if given, else
the broker-wide one.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SECURITY_SETTINGS", "LISTENER_SETTINGS", "MECHANISM_SETTINGS", "listener_setting_name",
           "parse_listener_setting", "for_listener"]

# name → (default, parser); Kafka's defaults.
SECURITY_SETTINGS: dict[str, tuple[Any, type]] = {
    # TLS (only PEM key material: ssl.keystore.type / ssl.truststore.type must say PEM).
    "ssl.keystore.type": ("JKS", str),
    "ssl.keystore.location": ("", str),
    "ssl.keystore.password": ("", str),
    "ssl.key.password": ("", str),
    "ssl.keystore.key": ("", str),
    "ssl.keystore.certificate.chain": ("", str),
    "ssl.truststore.type": ("JKS", str),
    "ssl.truststore.location": ("", str),
    "ssl.truststore.password": ("", str),
    "ssl.truststore.certificates": ("", str),
    "ssl.client.auth": ("none", str),
    "ssl.protocol": ("TLSv1.3", str),
    "ssl.enabled.protocols": ("TLSv1.2,TLSv1.3", str),
    "ssl.cipher.suites": ("", str),
    "ssl.principal.mapping.rules": ("DEFAULT", str),
    "ssl.endpoint.identification.algorithm": ("https", str),
    # Whether a listener's keystore replaced at run time may change the certificate's subject or its
    # subjectAltNames (Kafka refuses either by default).
    "ssl.allow.dn.changes": (False, bool),
    "ssl.allow.san.changes": (False, bool),
    # SASL.
    "sasl.enabled.mechanisms": ("GSSAPI", str),
    "sasl.mechanism.inter.broker.protocol": ("GSSAPI", str),
    "connections.max.reauth.ms": (0, int),
    "connection.failed.authentication.delay.ms": (100, int),
    "sasl.server.max.receive.size": (524_288, int),
    # Authorization (StandardAuthorizer).
    "super.users": ("", str),
    "allow.everyone.if.no.acl.found": (False, bool),
    # Client quotas.
    "quota.window.num": (11, int),
    "quota.window.size.seconds": (1, int),
}
# Settings a listener may override with `listener.name.<listener>.<setting>`.
LISTENER_SETTINGS = frozenset({
    *(name for name in SECURITY_SETTINGS if name.startswith("ssl.")),
    "sasl.enabled.mechanisms", "connections.max.reauth.ms", "connection.failed.authentication.delay.ms",
    "sasl.server.max.receive.size", "max.connections", "max.connections.per.ip",
})
# Settings given per listener and SASL mechanism only: `listener.name.<listener>.<mechanism>.<setting>`.
MECHANISM_SETTINGS = frozenset({"sasl.jaas.config"})
_PREFIXED = re.compile(r"listener\.name\.([^.]+)\.(.+)")
_MECHANISM = re.compile(r"((?:[a-z0-9]+-)*[a-z0-9]+)\.(.+)")


def listener_setting_name(listener: str, name: str, mechanism: str | None = None) -> str:
    """The full name of `name` for `listener` (and a SASL mechanism): Kafka's lower-case prefix."""
    middle = f"{mechanism.lower()}." if mechanism else ""
    return f"listener.name.{listener.lower()}.{middle}{name}"


def parse_listener_setting(name: str) -> tuple[str, str | None, str] | None:
    """(listener name, mechanism or None, setting) of a `listener.name.` setting this broker knows, or None."""
    match = _PREFIXED.fullmatch(name)
    if match is None:
        return None
    listener, rest = match[1].upper(), match[2]
    if rest in LISTENER_SETTINGS:
        return listener, None, rest
    mechanism = _MECHANISM.fullmatch(rest)
    if mechanism is not None and mechanism[2] in MECHANISM_SETTINGS:
        return listener, mechanism[1].upper(), mechanism[2]
    return None


def for_listener(settings: Mapping[str, Any], listener: str, name: str, mechanism: str | None = None) -> Any:
    """`name` as `listener` sees it: its `listener.name.` value if set, else the broker-wide one (None if
    neither: a per-mechanism setting has no broker-wide value)."""
    prefixed = listener_setting_name(listener, name, mechanism)
    if prefixed in settings:
        return settings[prefixed]
    return settings.get(name)
