"""SASL PLAIN (RFC 4616) as Kafka serves it, and the JAAS text its users come from.

The token is `[authzid] NUL authcid NUL passwd` in UTF-8. The users are
Kafka's: the `user_<name>="<password>"` options of the listener's
`listener.name.<l>.plain.sasl.jaas.config`, e.g.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

(`username`/`password` are the broker's own client login, not a user
here). A user without a `user_<name>` option may still log in with PLAIN
when it has SCRAM credentials (SCRAM-SHA-512 first, then SCRAM-SHA-256):
the password is salted and iterated as the stored credential says and
compared with its stored key, so no password need be kept in clear. That
runs PBKDF2 (milliseconds), so a PLAIN exchange that may fall back is
`blocking`; an unknown user costs the same PBKDF2 over a dummy credential,
so the time taken does not say whether the user exists.

Answers, as Kafka's PlainSaslServer: an unknown user or a wrong password
is "Authentication failed: Invalid username or password"; an authorization
id other than the user gets Kafka's own line; a malformed token, an empty
user or password get Kafka's generic "invalid credentials" line.

The JAAS text is parsed as Kafka's JaasConfig parses it (Java's
StreamTokenizer): `<login module> <flag> (<name>=<value>)* ;`, values bare
words or quoted with `"` or `'` (backslash escapes as in Java: `\\"`,
`\\\\`, `\\n`, octal), `//` and `/* */` comments. A listener's text holds
exactly one login module (Kafka: "should be 1 module"), here Kafka's
PlainLoginModule; anything else is refused at start-up with one line.
"""
from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from logstore.broker.authorizer import KafkaPrincipal
from logstore.broker.scram import SCRAM_MECHANISMS, ScramCredential, invalid_credentials, salted_password
from logstore.errors import IllegalSaslStateError, InvalidConfigError, SaslAuthenticationError

__all__ = ["JaasEntry", "PLAIN_LOGIN_MODULE", "PlainServer", "ScramLookup", "parse_jaas", "plain_users"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USER_PREFIX = "user_"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_BAD_PASSWORD = "Authentication failed: Invalid username or password"
_OTHER_AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"
# SCRAM-SHA-512 first, as the brief and the stronger hash suggest; both are tried only if the first is absent.
_FALLBACK = ("SCRAM-SHA-512", "SCRAM-SHA-256")
# What an unknown user's PLAIN login is charged: PBKDF2 over this, so it takes as long as a known one's.
_DUMMY = ScramCredential(b"\0" * 32, b"\0" * 64, b"", 4096)


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a JAAS text: its class name, control flag (lower case) and options."""

    login_module: str
    flag: str
    options: dict[str, str]


# -- JAAS text ----------------------------------------------------------------------------------

_WORD, _QUOTED, _PUNCT = "word", "quoted", "punct"
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _quoted(text: str, pos: int) -> tuple[str, int]:
    """The value of the quoted string opening at `pos` and the position after it (Java's escapes)."""
    quote, i, out = text[pos], pos + 1, []
    while i < len(text) and text[i] != quote:
        c = text[i]
        if c in "\r\n":
            break
        if c == "\\" and i + 1 < len(text):
            i += 1
            c = text[i]
            if c in "01234567":
                digits = 3 if c <= "3" else 2
                end = i
                while end < len(text) and end - i < digits and text[end] in "01234567":
                    end += 1
                out.append(chr(int(text[i:end], 8)))
                i = end
                continue
            out.append(_ESCAPES.get(c, c))
        else:
            out.append(c)
        i += 1
    if i >= len(text) or text[i] != quote:
        raise InvalidConfigError(f"unterminated quoted value starting at character {pos + 1}")
    return "".join(out), i + 1


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, value, 1-based position) of each token, as Kafka's StreamTokenizer setup splits the text."""
    tokens, i = [], 0
    while i < len(text):
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise InvalidConfigError(f"unterminated /* comment at character {i + 1}")
                i = end + 2
            else:
                # `//` and, as Java's comment character, a lone `/`: the rest of the line.
                while i < len(text) and text[i] not in "\r\n":
                    i += 1
        elif c in "\"'":
            value, end = _quoted(text, i)
            tokens.append((_QUOTED, value, i + 1))
            i = end
        elif c in ";=":
            tokens.append((_PUNCT, c, i + 1))
            i += 1
        else:
            start = i
            while i < len(text) and text[i] > " " and text[i] not in "/\"';=":
                i += 1
            tokens.append((_WORD, text[start:i], start + 1))
    return tokens


def parse_jaas(text: str) -> list[JaasEntry]:
    """The login modules of a `sasl.jaas.config` text; InvalidConfigError (one readable line) if malformed."""
    tokens = _tokens(text)
    entries, i = [], 0
    if not tokens:
        raise InvalidConfigError("Login module not specified in JAAS config")
    while i < len(tokens):
        kind, module, at = tokens[i]
        if kind == _PUNCT:
            raise InvalidConfigError(f"expected a login module class at character {at}, found {module!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] == _PUNCT:
            raise InvalidConfigError(f"Login module control flag not specified in JAAS config (after {module})")
        flag = tokens[i + 1][1]
        if flag.lower() not in CONTROL_FLAGS:
            raise InvalidConfigError(f"Invalid login module control flag '{flag}' in JAAS config "
                                     f"(expected one of {', '.join(CONTROL_FLAGS)})")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][:2] != (_PUNCT, ";"):
            kind, key, at = tokens[i]
            if kind == _PUNCT:
                raise InvalidConfigError(f"expected an option name at character {at}, found {key!r}")
            if i + 2 >= len(tokens) or tokens[i + 1][:2] != (_PUNCT, "=") or tokens[i + 2][0] == _PUNCT:
                raise InvalidConfigError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise InvalidConfigError("JAAS config entry not terminated by semi-colon")
        i += 1
        entries.append(JaasEntry(module, flag.lower(), options))
    return entries


def plain_users(text: str) -> dict[str, str]:
    """User → password from a listener's PLAIN JAAS text (its `user_<name>` options); InvalidConfigError."""
    entries = parse_jaas(text)
    if len(entries) != 1:
        raise InvalidConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    entry = entries[0]
    if entry.login_module != PLAIN_LOGIN_MODULE:
        raise InvalidConfigError(f"the PLAIN mechanism's JAAS config names {entry.login_module}; "
                                 f"expected {PLAIN_LOGIN_MODULE}")
    return {name[len(USER_PREFIX):]: value for name, value in entry.options.items()
            if name.startswith(USER_PREFIX) and len(name) > len(USER_PREFIX)}


# -- the exchange -------------------------------------------------------------------------------

class ScramLookup(Protocol):
    """The lookup PLAIN falls back on: `get(user, mechanism)` (a ScramCredentialStore is one)."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for a SCRAM mechanism, or None."""


class PlainServer:
    """The server side of one PLAIN exchange: one token, an empty answer. One connection's, not thread-safe."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str], scram: ScramLookup | None = None):
        self._users = users
        self._scram = scram
        self._done = False
        self._user: str | None = None

    @property
    def blocking(self) -> bool:
        """Whether evaluate may run PBKDF2 (a user may log in with a SCRAM credential)."""
        return self._scram is not None

    @property
    def complete(self) -> bool:
        """Whether the exchange succeeded."""
        return self._user is not None

    @property
    def principal(self) -> KafkaPrincipal:
        """User:<name> once complete."""
        if self._user is None:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return KafkaPrincipal("User", self._user)

    def evaluate(self, token: bytes) -> bytes:
        """Check the client's one token; b"" if it logs in, else SaslAuthenticationError."""
        if self._done:
            raise IllegalSaslStateError("Unexpected SASL/PLAIN token after the exchange ended")
        self._done = True
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise self._generic("the PLAIN token is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise self._generic(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise self._generic("Authentication failed: username not specified")
        if not password:
            raise self._generic("Authentication failed: password not specified")
        if not self._verify(user, password):
            raise SaslAuthenticationError(_BAD_PASSWORD, f"PLAIN login of {user!r} refused: unknown user or "
                                                         "wrong password")
        if authzid and authzid != user:
            raise SaslAuthenticationError(_OTHER_AUTHZID, f"user {user!r} asked for authorization id {authzid!r}")
        self._user = user
        return b""

    def _generic(self, reason: str) -> SaslAuthenticationError:
        return SaslAuthenticationError(invalid_credentials(self.mechanism), reason)

    def _verify(self, user: str, password: str) -> bool:
        given = password.encode("utf-8")
        expected = self._users.get(user)
        if expected is not None:
            return hmac.compare_digest(given, expected.encode("utf-8"))
        if self._scram is None:
            return False
        for name in _FALLBACK:
            credential = self._scram.get(user, name)
            if credential is not None:
                mechanism = SCRAM_MECHANISMS[name]
                salted = salted_password(mechanism, password, credential.salt, credential.iterations)
                client_key = mechanism.hmac(salted, b"Client Key")
                return hmac.compare_digest(mechanism.hash(client_key), credential.stored_key)
        salted_password(SCRAM_MECHANISMS[_FALLBACK[0]], password, _DUMMY.salt, _DUMMY.iterations)
        return False
