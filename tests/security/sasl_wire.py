"""Raw-socket clients that authenticate: TLS (mutual TLS with a client certificate) and SASL PLAIN or SCRAM
over SaslHandshake v1 + SaslAuthenticate v2, before any kio request is sent on the connection.

`SecureAdminClient(bootstrap, Login(...))` is logstore's AdminClient whose connection is wrapped and logged
in when it opens; every request after that is sent as the principal the login made.
"""
from __future__ import annotations

import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from logstore.broker.admin_client import AdminClient
from scram_client import RfcScramClient

SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class LoginFailed(AssertionError):
    """The broker refused the TLS or SASL login."""


@dataclass(frozen=True)
class Login:
    """How a connection authenticates: TLS when `ca` is set (with `cert`/`key`: mutual TLS), SASL when
    `mechanism` is (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."""

    mechanism: str | None = None
    user: str = ""
    password: str = ""
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


def _authenticate(client: AdminClient, token: bytes) -> bytes:
    answer = client.request(SaslAuthenticateRequest(auth_bytes=token))
    if answer.error_code != 0:
        raise LoginFailed(f"SaslAuthenticate answered {answer.error_code}: {answer.error_message}")
    return bytes(answer.auth_bytes)


def sasl_login(client: AdminClient, mechanism: str, user: str, password: str) -> None:
    """Authenticate the client's open connection with `mechanism` (PLAIN or SCRAM-SHA-*)."""
    handshake = client.request(SaslHandshakeRequest(mechanism=mechanism))
    if handshake.error_code != 0:
        raise LoginFailed(f"SaslHandshake {mechanism} answered {handshake.error_code} (offered "
                          f"{list(handshake.mechanisms)})")
    if mechanism == "PLAIN":
        _authenticate(client, f"\0{user}\0{password}".encode())
        return
    scram = RfcScramClient(SCRAM_HASHES[mechanism], user, password, secrets.token_urlsafe(18))
    server_first = _authenticate(client, scram.first())
    server_final = _authenticate(client, scram.final(server_first))
    if not scram.check(server_final):
        raise LoginFailed("the broker's SCRAM signature does not verify")


class SecureAdminClient(AdminClient):
    """An AdminClient whose connection is TLS-wrapped and SASL-authenticated as `login` says, once opened."""

    def __init__(self, bootstrap: str, login: Login, *, timeout_s: float = 30.0):
        super().__init__(bootstrap, timeout_s=timeout_s, client_id="acl-matrix")
        self.login = login

    def connect(self) -> SecureAdminClient:
        if self._socket is not None:
            return self
        super().connect()
        assert self._socket is not None and self.address is not None
        if self.login.ca is not None:
            context = ssl.create_default_context(cafile=str(self.login.ca))
            if self.login.cert is not None:
                context.load_cert_chain(str(self.login.cert), str(self.login.key))
            try:
                self._socket = context.wrap_socket(self._socket, server_hostname=self.address[0])
            except (ssl.SSLError, OSError) as exc:
                self.close()
                raise LoginFailed(f"TLS handshake with {self.address}: {exc}") from exc
        if self.login.mechanism is not None:
            try:
                sasl_login(self, self.login.mechanism, self.login.user, self.login.password)
            except BaseException:
                self.close()
                raise
        return self
