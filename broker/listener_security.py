"""What each listener asks of its clients: TLS (and a certificate), SASL, or nothing.

Built once per listener from its security protocol and settings
(`listener.name.<l>.*` first); a setting that cannot give a listener what
its protocol promises refuses the start, so `SSL://` never serves plaintext
and `SASL_*` never serves a client that did not authenticate. A TLS
client's principal is its certificate's subject through
`ssl.principal.mapping.rules` (User:ANONYMOUS without a certificate); a SASL
client's is the one it authenticated as.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.broker.authorizer import ANONYMOUS, KafkaPrincipal
from logstore.broker.config import BrokerConfig
from logstore.broker.listeners import Listener
from logstore.broker.sasl_session import SaslSession
from logstore.broker.ssl_principal import PrincipalMapper, subject_dn
from logstore.broker.tls import server_context
from logstore.errors import InvalidConfigError

if TYPE_CHECKING:
    from logstore.broker.sasl import SaslAuthenticators
    from logstore.broker.scram_store import ScramCredentialStore

__all__ = ["ListenerSecurity", "listener_security", "check_security"]


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener's TLS context, principal rules and SASL mechanisms (each None when not asked)."""

    listener: Listener
    tls: ssl.SSLContext | None = None
    principals: PrincipalMapper | None = None
    sasl: SaslAuthenticators | None = None
    reauth_ms: int = 0
    failure_delay_ms: int = 100
    max_receive: int = 524_288

    def new_session(self) -> SaslSession | None:
        """A new connection's SASL state (None on a listener without SASL)."""
        if self.sasl is None:
            return None
        return SaslSession(self.sasl, reauth_ms=self.reauth_ms, failure_delay_ms=self.failure_delay_ms,
                           max_receive=self.max_receive)

    def tls_principal(self, tls: ssl.SSLObject | None) -> KafkaPrincipal:
        """The principal of a TLS client: its certificate's mapped subject, or ANONYMOUS without one;
        `ssl_principal.NoMatchingRule` if no rule applies (the connection is then refused)."""
        if tls is None or self.principals is None:
            return ANONYMOUS
        der = tls.getpeercert(binary_form=True)
        if not der:
            return ANONYMOUS
        return KafkaPrincipal("User", self.principals.name(subject_dn(der)))


def listener_security(config: BrokerConfig, listener: Listener,
                      scram: ScramCredentialStore | None = None) -> ListenerSecurity:
    """What `listener` asks of clients; InvalidConfigError if its settings cannot give it."""
    def get(name: str, mechanism: str | None = None) -> object:
        return config.for_listener(listener.name, name, mechanism)

    tls = principals = sasl = None
    if listener.tls:
        tls = server_context(config, listener.name)
        principals = PrincipalMapper(str(get("ssl.principal.mapping.rules")))
    if listener.sasl:
        from logstore.broker.sasl import SaslAuthenticators, check_mechanisms

        mechanisms = check_mechanisms(str(get("sasl.enabled.mechanisms")))
        if scram is None:
            raise InvalidConfigError(f"listener {listener}: SASL needs the broker's credential store")
        jaas = get("sasl.jaas.config", "PLAIN")
        sasl = SaslAuthenticators(mechanisms, str(jaas) if jaas else None, scram)
    return ListenerSecurity(listener, tls, principals, sasl, int(str(get("connections.max.reauth.ms"))),
                            int(str(get("connection.failed.authentication.delay.ms"))),
                            int(str(get("sasl.server.max.receive.size"))))


def check_security(config: BrokerConfig) -> None:
    """Refuse (InvalidConfigError) settings that cannot give some listener its security protocol, before the
    store opens."""
    for listener in config.listeners:
        if listener.tls:
            server_context(config, listener.name)
            PrincipalMapper(str(config.for_listener(listener.name, "ssl.principal.mapping.rules")))
        if listener.sasl:
            from logstore.broker.sasl import check_mechanisms
            from logstore.broker.sasl_plain import plain_users

            mechanisms = check_mechanisms(str(config.for_listener(listener.name, "sasl.enabled.mechanisms")))
            jaas = config.for_listener(listener.name, "sasl.jaas.config", "PLAIN")
            if "PLAIN" in mechanisms and jaas:
                try:
                    plain_users(str(jaas))
                except InvalidConfigError as exc:
                    raise InvalidConfigError(f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config: "
                                             f"{exc}") from None
