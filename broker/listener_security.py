"""What each listener asks of its clients: TLS (and a certificate), SASL, or nothing.

Built once per listener from its security protocol and settings
(`listener.name.<l>.*` first); a setting that cannot give a listener what
its protocol promises refuses the start, so `SSL://` never serves plaintext
and `SASL_*` never serves a client that did not authenticate. A TLS
client's principal is its certificate's subject through
`ssl.principal.mapping.rules` (User:ANONYMOUS without a certificate); a SASL
client's is the one it authenticated as.

A TLS listener's key material may be replaced at run time (`ListenerTls`,
Kafka's SslFactory reconfiguration): the new keystore is checked before the
change is saved (it loads; its certificate keeps the served one's subject
and subjectAltNames unless `ssl.allow.dn.changes` / `ssl.allow.san.changes`),
then new connections get it; connections already open keep theirs.
"""
from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from logstore.broker.authorizer import ANONYMOUS, KafkaPrincipal
from logstore.broker.config import BrokerConfig
from logstore.broker.dynamic_config import listener_tls_setting
from logstore.broker.listeners import Listener
from logstore.broker.sasl_session import SaslSession
from logstore.broker.ssl_principal import PrincipalMapper, subject_alt_names, subject_dn
from logstore.broker.tls import served_certificate, server_context
from logstore.errors import InvalidConfigError, InvalidRequestError

if TYPE_CHECKING:
    from logstore.broker.sasl import SaslAuthenticators
    from logstore.broker.scram_store import ScramCredentialStore

__all__ = ["ListenerSecurity", "ListenerTls", "listener_security", "check_security"]

log = logging.getLogger(__name__)


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
    certificate: bytes | None = None
    """The DER of the certificate `tls` serves (what a replacement keystore is compared with)."""

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
                            int(str(get("sasl.server.max.receive.size"))),
                            served_certificate(config, listener.name) if listener.tls else None)


class ListenerTls:
    """The listeners' security as served now, by listener name; a TLS listener's context replaced after a
    dynamic change of its key material (`check` before the change is saved, `reload` after)."""

    def __init__(self, securities: list[ListenerSecurity]):
        self.current = {security.listener.name: security for security in securities}

    def check(self, candidate: BrokerConfig) -> None:
        """Refuse (InvalidRequestError, Kafka's words) a config whose TLS key material some listener cannot take:
        a listener that does not use TLS, a keystore that does not load, a certificate of another subject."""
        for name in candidate.settings:
            found = listener_tls_setting(name)
            dynamic = candidate.settings[name] != candidate.static_settings.get(name)
            if found is not None and dynamic and not self._serves_tls(found[0]):
                raise InvalidRequestError(f"Invalid dynamic configuration: {name}: listener {found[0]} does not "
                                          "use TLS")
        for security in self.current.values():
            if security.tls is not None:
                self._fresh(candidate, security)

    def reload(self, config: BrokerConfig) -> None:
        """Serve each TLS listener's key material as `config` now says (after `check` passed on it)."""
        for listener, security in list(self.current.items()):
            if security.tls is None:
                continue
            try:
                tls, certificate = self._fresh(config, security)
            except InvalidRequestError as exc:
                # Changed on disk since the check: keep what serves, and say why.
                log.error("listener %s keeps its TLS key material: %s", listener, exc)
                continue
            self.current[listener] = replace(security, tls=tls, certificate=certificate)

    def _serves_tls(self, listener: str) -> bool:
        security = self.current.get(listener)
        return security is not None and security.tls is not None

    @staticmethod
    def _fresh(config: BrokerConfig, security: ListenerSecurity) -> tuple[ssl.SSLContext, bytes]:
        name = security.listener.name
        try:
            tls, certificate = server_context(config, name), served_certificate(config, name)
        except InvalidConfigError as exc:
            raise InvalidRequestError(f"Validation of dynamic config update of SSLFactory failed: {exc}") from None
        old = security.certificate
        if old is None:
            return tls, certificate
        why = None
        if not _enabled(config.for_listener(name, "ssl.allow.dn.changes")) and \
                subject_dn(old) != subject_dn(certificate):
            why = f"DistinguishedName does not match: existing={{{subject_dn(old)}}}, new={{{subject_dn(certificate)}}}"
        elif not _enabled(config.for_listener(name, "ssl.allow.san.changes")) and \
                not subject_alt_names(old) <= subject_alt_names(certificate):
            # As Kafka: the new certificate may name more, not fewer.
            why = f"SubjectAltNames do not match: existing={{{_alt_names(old)}}}, new={{{_alt_names(certificate)}}}"
        if why is not None:
            raise InvalidRequestError(f"Validation of dynamic config update of SSLFactory failed: Keystore {why}")
        return tls, certificate


def _alt_names(der: bytes) -> str:
    return ", ".join(sorted(f"{tag & 0x1F}:{value.hex() if tag & 0x1F == 7 else value.decode('ascii', 'replace')}"
                            for tag, value in subject_alt_names(der)))


def _enabled(value: object) -> bool:
    return value is True or str(value).strip().lower() == "true"


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
