"""One SASL connection's authentication, as Kafka's SaslServerAuthenticator runs it.

Until a client is authenticated it may send only ApiVersions, SaslHandshake
and SaslAuthenticate; anything else closes the connection
(ILLEGAL_SASL_STATE), and frames are bounded by
`sasl.server.max.receive.size`, so an unauthenticated client can make the
broker do almost nothing. SaslHandshake v1 names a mechanism and the tokens
follow in SaslAuthenticate requests; after v0 (older clients) they follow as
bare size-prefixed frames. A failed exchange answers
SASL_AUTHENTICATION_FAILED after `connection.failed.authentication.delay.ms`
and closes the connection.

KIP-368: with `connections.max.reauth.ms` set, a session lasts that long
(told to the client as session_lifetime_ms); the client re-authenticates on
the same connection with the same mechanism and principal, and a request
other than the two SASL ones after the session expired closes the
connection.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import TYPE_CHECKING

from logstore.broker.authorizer import KafkaPrincipal
from logstore.errors import IllegalSaslStateError, SaslAuthenticationError

if TYPE_CHECKING:
    from logstore.broker.sasl import SaslAuthenticators, SaslServer

__all__ = ["SaslSession", "SASL_HANDSHAKE", "SASL_AUTHENTICATE", "API_VERSIONS"]

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
_BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class _State(Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "waiting for SaslAuthenticate"
    RAW_TOKENS = "waiting for a SASL token (SaslHandshake v0)"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslSession:
    """A connection's SASL state and principal. Used from the event loop, by its connection and the
    SaslHandshake/SaslAuthenticate handlers."""

    def __init__(self, authenticators: SaslAuthenticators, *, reauth_ms: int, failure_delay_ms: int,
                 max_receive: int):
        self.authenticators = authenticators
        self.reauth_ms = reauth_ms
        self.failure_delay = failure_delay_ms / 1000
        self.max_receive = max_receive
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self.expires_at: float | None = None      # loop time the session ends (KIP-368), None: never
        self._state = _State.HANDSHAKE
        self._server: SaslServer | None = None
        self._reauthenticating = False
        self.failure: str | None = None            # why authentication failed, for the broker's log

    @property
    def authenticated(self) -> bool:
        """Whether a principal is established (re-authentication in progress included)."""
        return self.principal is not None

    @property
    def failed(self) -> bool:
        """Whether authentication failed: the connection closes once its answer is sent."""
        return self._state is _State.FAILED

    @property
    def raw_tokens(self) -> bool:
        """Whether the next frame is a bare SASL token (after SaslHandshake v0), not a request."""
        return self._state is _State.RAW_TOKENS

    def refusal(self, api_key: int, now: float) -> str | None:
        """Why a request of `api_key` may not be served now (the connection then closes), or None."""
        if self._state is _State.AUTHENTICATED:
            if self.expires_at is not None and now >= self.expires_at and api_key not in _BEFORE_AUTHENTICATION:
                return (f"the SASL session of {self.principal} expired (connections.max.reauth.ms) and the client "
                        "did not re-authenticate")
            return None
        if self._state is _State.AUTHENTICATE and api_key == SASL_AUTHENTICATE:
            return None
        if self._state is _State.HANDSHAKE and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return None
        return f"unexpected request (api key {api_key}) while {self._state.value}: ILLEGAL_SASL_STATE"

    def handshake(self, mechanism: str, version: int) -> bool:
        """SaslHandshake: whether `mechanism` is enabled (if not, the connection closes after the answer)."""
        reauthenticating = self._state is _State.AUTHENTICATED
        if mechanism not in self.authenticators.enabled or reauthenticating and (
                version == 0 or mechanism != self.mechanism):
            self._state = _State.FAILED
            self.failure = (f"Unsupported SASL mechanism {mechanism}" if mechanism not in self.authenticators.enabled
                            else f"re-authentication with SaslHandshake v{version} and {mechanism} after "
                                 f"{self.mechanism}")
            return False
        self._server = self.authenticators.server(mechanism)
        self.mechanism = mechanism
        self._reauthenticating = reauthenticating
        self._state = _State.RAW_TOKENS if version == 0 else _State.AUTHENTICATE
        return True

    async def authenticate(self, token: bytes, run_blocking: Callable[[Callable[[bytes], bytes], bytes],
                                                                      Awaitable[bytes]]) -> bytes:
        """The server's answer to one client token; SaslAuthenticationError (after the failure delay) if it
        fails. `run_blocking` runs a mechanism step that may take milliseconds (PBKDF2) off the loop."""
        server = self._server
        if server is None or self._state not in (_State.AUTHENTICATE, _State.RAW_TOKENS):
            raise SaslAuthenticationError("SaslAuthenticate before a SaslHandshake")
        try:
            answer = await run_blocking(server.evaluate, token) if server.blocking else server.evaluate(token)
            if server.complete:
                self._complete(server.principal)
        except (SaslAuthenticationError, IllegalSaslStateError) as exc:
            self._state = _State.FAILED
            self.failure = exc.reason if isinstance(exc, SaslAuthenticationError) else str(exc)
            await asyncio.sleep(self.failure_delay)
            if isinstance(exc, IllegalSaslStateError):
                raise SaslAuthenticationError(str(exc)) from None
            raise
        return answer

    def _complete(self, principal: KafkaPrincipal) -> None:
        if self._reauthenticating and principal != self.principal:
            raise SaslAuthenticationError(f"Cannot change principals during re-authentication from "
                                          f"{self.principal}: {principal}")
        self.principal = principal
        self._state = _State.AUTHENTICATED
        self._server = None
        loop = asyncio.get_running_loop()
        self.expires_at = loop.time() + self.reauth_ms / 1000 if self.reauth_ms > 0 else None

    @property
    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client: ms until it must re-authenticate (0: never)."""
        return self.reauth_ms if self._state is _State.AUTHENTICATED and self.reauth_ms > 0 else 0
