"""The SASL mechanisms a listener serves, behind one interface the connection drives.

Kafka's names: `sasl.enabled.mechanisms` lists them per listener; this broker
serves PLAIN (`logstore.broker.sasl_plain`) and SCRAM-SHA-256/512
(`logstore.broker.scram`, credentials in `logstore.broker.scram_store`).
GSSAPI (Kerberos) and OAUTHBEARER are Kafka's too, and refused here at
start-up with one line naming what is served.

The connection (SaslHandshake 17, SaslAuthenticate 36) asks
`SaslAuthenticators.server(mechanism)` for a fresh `SaslServer` per
exchange, hands it each client token with `evaluate` and sends back what it
returns, until `complete`; then `principal` is who the connection is. A
refusal is a `SaslAuthenticationError` whose message is what the client is
told (Kafka's wording; `reason` is for the broker's log); a token where none
is expected is `IllegalSaslStateError`. A server whose `blocking` is true may
spend milliseconds in `evaluate` (PBKDF2): run it off the event loop.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from logstore.broker.authorizer import KafkaPrincipal
from logstore.broker.sasl_plain import PlainServer, plain_users
from logstore.broker.scram import SCRAM_MECHANISMS, ScramServer
from logstore.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
)

if TYPE_CHECKING:
    from logstore.broker.scram_store import ScramCredentialStore

__all__ = ["MECHANISMS", "IllegalSaslStateError", "SaslAuthenticationError", "SaslAuthenticators", "SaslServer",
           "UnsupportedSaslMechanismError", "check_mechanisms"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's other mechanisms: named in the refusal as Kafka's, not served here.
KAFKA_ONLY = ("GSSAPI", "OAUTHBEARER")


class SaslServer(Protocol):
    """One SASL exchange, server side (Kafka's javax.security.sasl.SaslServer as the authenticator uses it)."""

    mechanism: str

    @property
    def complete(self) -> bool:
        """Whether the exchange succeeded."""

    def evaluate(self, token: bytes) -> bytes:
        """The next server token; raises SaslAuthenticationError (or IllegalSaslStateError out of turn)."""

    @property
    def principal(self) -> KafkaPrincipal:
        """After complete: User:<authorization id>."""

    @property
    def blocking(self) -> bool:
        """Whether evaluate may take milliseconds (PBKDF2): the caller then runs it in a thread."""


def check_mechanisms(text: str) -> tuple[str, ...]:
    """The mechanisms of a `sasl.enabled.mechanisms` value (comma-separated, Kafka's case-sensitive names,
    repeats dropped); InvalidConfigError, one readable line, for one this broker does not serve or none."""
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    served = ", ".join(MECHANISMS)
    for name in names:
        if name in KAFKA_ONLY:
            raise InvalidConfigError(f"sasl.enabled.mechanisms: {name} is not supported by this broker "
                                     f"(it serves {served})")
        if name not in MECHANISMS:
            raise InvalidConfigError(f"sasl.enabled.mechanisms: unknown mechanism {name!r} (this broker serves "
                                     f"{served})")
    if not names:
        raise InvalidConfigError(f"sasl.enabled.mechanisms is empty: a SASL listener needs one of {served}")
    return names


class SaslAuthenticators:
    """The mechanisms one listener serves, and a fresh server per exchange.

    `plain_jaas` is the listener's `listener.name.<l>.plain.sasl.jaas.config` (None: PLAIN users are those
    with SCRAM credentials only); it is parsed here, so a malformed one fails the start with one line.
    Immutable once built; `server` may be called from the event loop (it does no I/O).
    """

    def __init__(self, enabled: Sequence[str], plain_jaas: str | None, scram: ScramCredentialStore):
        for name in enabled:
            if name not in MECHANISMS:
                raise InvalidConfigError(f"sasl.enabled.mechanisms: {name!r} is not served by this broker "
                                         f"(it serves {', '.join(MECHANISMS)})")
        self.enabled: tuple[str, ...] = tuple(dict.fromkeys(enabled))
        self._scram = scram
        self._plain_users: dict[str, str] = {}
        if "PLAIN" in self.enabled and plain_jaas is not None:
            try:
                self._plain_users = plain_users(plain_jaas)
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"plain.sasl.jaas.config: {exc}") from None

    def server(self, mechanism: str) -> SaslServer:
        """A new exchange for `mechanism`; UnsupportedSaslMechanismError for one this listener does not enable."""
        if mechanism not in self.enabled:
            raise UnsupportedSaslMechanismError(
                f"Unsupported SASL mechanism {mechanism}; this listener enables {', '.join(self.enabled)}")
        if mechanism == "PLAIN":
            return PlainServer(self._plain_users, self._scram if len(self._scram) else None)
        store = self._scram
        return ScramServer(SCRAM_MECHANISMS[mechanism], lambda user: store.get(user, mechanism))
