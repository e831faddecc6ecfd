"""How logstore's clients connect to a secured broker: Kafka's client properties (the tools' `--command-config`,
the Spark sink's `kafka.`-prefixed options).

The file is what Kafka's own tools take: `security.protocol` (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL); for TLS `ssl.truststore.location` (PEM, with
`ssl.truststore.type=PEM`; else the system's CAs), a client certificate in
`ssl.keystore.location` (PEM key and chain) with `ssl.key.password`, and
`ssl.endpoint.identification.algorithm` (`https`, the default, checks the
broker's name; empty does not); for SASL `sasl.mechanism` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512) and `sasl.jaas.config` naming `username` and
`password`. The SASL exchange is SaslHandshake v1 then SaslAuthenticate v2,
as Kafka's clients run it.
"""
from __future__ import annotations

import base64
import hmac
import secrets
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from logstore.broker.config_sources import ConfigSourceError, read_properties_file
from logstore.broker.sasl_plain import parse_jaas
from logstore.broker.scram import SCRAM_MECHANISMS, ScramMechanism, salted_password, sasl_name
from logstore.errors import InvalidConfigError

__all__ = ["ClientSecurity", "ClientSecurityError", "SaslExchange", "client_security", "load_client_security"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# A client properties file holds many settings the tools do not use (client.id, timeouts...): only these
# are read, and only these must be right.
_USED = ("security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location",
         "ssl.truststore.type", "ssl.keystore.location", "ssl.keystore.type", "ssl.key.password",
         "ssl.endpoint.identification.algorithm")


class ClientSecurityError(Exception):
    """Client properties that cannot connect as they say, or a broker that refused the login; one line."""


@dataclass(frozen=True)
class ClientSecurity:
    """A tool's connection settings: TLS context (None: plaintext), SASL mechanism and credentials."""

    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """`sock` after the TLS handshake, if this protocol speaks TLS."""
        if self.tls is None:
            return sock
        try:
            return self.tls.wrap_socket(sock, server_hostname=host if self.check_hostname else None)
        except ssl.SSLError as exc:
            raise ClientSecurityError(f"TLS handshake with {host} failed: {exc.reason or exc}") from None


def load_client_security(path: str | None) -> ClientSecurity:
    """The settings of a client properties file (None: plaintext, as without --command-config)."""
    if path is None:
        return ClientSecurity()
    try:
        settings = {entry.name: entry.value for entry in read_properties_file(path)}
    except ConfigSourceError as exc:
        raise ClientSecurityError(str(exc)) from None
    return client_security(settings, path)


def client_security(properties: Mapping[str, str], path: str) -> ClientSecurity:
    """The connection settings Kafka's client `properties` name (the others are ignored); `path` says where
    they came from in error lines."""
    settings = {name: value for name, value in properties.items() if name in _USED}
    protocol = settings.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ClientSecurityError(f"{path}: security.protocol={protocol} is not one of {', '.join(PROTOCOLS)}")
    tls = _tls_context(settings, path) if protocol in ("SSL", "SASL_SSL") else None
    check = settings.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https"
    if tls is not None:
        tls.check_hostname = check
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(protocol, tls, check)
    mechanism = settings.get("sasl.mechanism", "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        raise ClientSecurityError(f"{path}: sasl.mechanism={mechanism}: this tool logs in with "
                                  f"{', '.join(MECHANISMS)}")
    if "sasl.jaas.config" not in settings:
        raise ClientSecurityError(f"{path}: sasl.jaas.config with username and password is needed for {mechanism}")
    try:
        options = parse_jaas(settings["sasl.jaas.config"])[0].options
    except InvalidConfigError as exc:
        raise ClientSecurityError(f"{path}: sasl.jaas.config: {exc}") from None
    if "username" not in options or "password" not in options:
        raise ClientSecurityError(f"{path}: sasl.jaas.config names no username and password")
    return ClientSecurity(protocol, tls, check, mechanism, options["username"], options["password"])


def _tls_context(settings: dict[str, str], path: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    truststore = settings.get("ssl.truststore.location", "")
    keystore = settings.get("ssl.keystore.location", "")
    setting = "ssl.truststore.location"
    try:
        if truststore:
            _require_pem(settings, "ssl.truststore.type", path)
            context.load_verify_locations(cafile=truststore)
        setting = "ssl.keystore.location"
        if keystore:
            _require_pem(settings, "ssl.keystore.type", path)
            context.load_cert_chain(keystore, password=settings.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        # ssl names no file in its errors: the setting being loaded does.
        raise ClientSecurityError(f"{path}: {setting}={settings[setting]}: "
                                  f"{getattr(exc, 'strerror', None) or exc}") from None
    return context


def _require_pem(settings: dict[str, str], name: str, path: str) -> None:
    if settings.get(name, "JKS").upper() != "PEM":
        raise ClientSecurityError(f"{path}: {name}={settings.get(name, 'JKS')}: this tool reads PEM files only "
                                  f"(set {name}=PEM)")


class SaslExchange:
    """The client side of one PLAIN or SCRAM login: `first()`, then `next(server token)` until `done`."""

    def __init__(self, security: ClientSecurity, nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)):
        self.mechanism = security.mechanism or ""
        self._user, self._password = security.username, security.password
        self._nonce = nonce()
        self._scram: ScramMechanism | None = SCRAM_MECHANISMS.get(self.mechanism)
        self._step = 0
        self._auth_message = b""
        self._salted = b""
        self.done = False

    def first(self) -> bytes:
        """The client's first token."""
        if self._scram is None:
            self.done = True
            return f"\0{self._user}\0{self._password}".encode()
        self._bare = f"n={sasl_name(self._user)},r={self._nonce}"
        return f"n,,{self._bare}".encode()

    def next(self, token: bytes) -> bytes | None:
        """The answer to the server's token (None once the exchange is complete); ClientSecurityError if the
        server's token is not what SCRAM expects."""
        scram = self._scram
        if scram is None or self.done:
            return None
        text = token.decode("utf-8", "replace")
        if self._step == 0:
            fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
            nonce, salt, iterations = fields.get("r", ""), fields.get("s", ""), fields.get("i", "")
            if not nonce.startswith(self._nonce) or not salt or not iterations.isdigit():
                raise ClientSecurityError(f"the broker's SCRAM answer is not a server-first message: {text!r}")
            self._salted = salted_password(scram, self._password, base64.b64decode(salt), int(iterations))
            without_proof = f"c=biws,r={nonce}"
            self._auth_message = f"{self._bare},{text},{without_proof}".encode()
            client_key = scram.hmac(self._salted, b"Client Key")
            signature = scram.hmac(scram.hash(client_key), self._auth_message)
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
            self._step = 1
            return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        expected = scram.hmac(scram.hmac(self._salted, b"Server Key"), self._auth_message)
        if not text.startswith("v=") or not hmac.compare_digest(base64.b64decode(text[2:]), expected):
            raise ClientSecurityError("the broker's SCRAM signature is wrong: it does not hold this user's "
                                      "credential")
        self.done = True
        return None
