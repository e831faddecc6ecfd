"""SCRAM (RFC 5802, RFC 7677) as Kafka serves it: the credential math and the server side of the exchange.

A credential is what Kafka keeps per user and mechanism (ScramCredential):
the salt, the iteration count, StoredKey = H(HMAC(SaltedPassword, "Client
Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"), where
SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations). The password is
never kept, nor the salted password.

The exchange (Kafka's ScramSaslServer and ScramMessages), two client tokens:

    client-first  gs2-header n=<saslname>,r=<client nonce>[,<ext>=<value>...]
                  gs2-header: "n,," or "y,," (no channel binding); "a=<saslname>" between
                  the commas asks for an authorization id, which must be the user
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2-header>,r=<nonce>[,<ext>...],p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

What is refused, as Kafka refuses it (the client is told only Kafka's generic
"invalid credentials" line): a malformed message, channel binding (`p=`), the
reserved `m=` attribute, an unknown user (at client-first, as Kafka: no fake
salt is answered), a credential below the mechanism's 4096 iterations, a
delegation-token login (`tokenauth=true`: no delegation tokens here), a nonce
that is not the server-first's, a proof that does not verify. An authorization
id other than the user gets Kafka's own message. Other extensions are ignored,
as Kafka ignores them. Beyond Kafka, `c=` must be the gs2 header the client
sent (RFC 5802 §5.1; Kafka does not look at it), and a user name may be any
UTF-8 (Kafka's parser takes ASCII only).

A `ScramServer` is one exchange: not thread-safe, used by one connection.
It computes only HMACs (microseconds), never PBKDF2, so it is not `blocking`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from logstore.broker.authorizer import KafkaPrincipal
from logstore.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError

__all__ = ["MAX_ITERATIONS", "MIN_ITERATIONS", "SCRAM_MECHANISMS", "ScramCredential", "ScramMechanism", "ScramServer",
           "credential_from_salted_password", "invalid_credentials", "new_credential", "salted_password",
           "sasl_name", "scram_mechanism", "username"]

# Kafka's ScramMechanism.minIterations (both mechanisms) and ScramControlManager.MAX_ITERATIONS.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
SALT_BYTES = 32
_PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")          # RFC 5802 "printable": no comma
_SASLNAME = re.compile(r"(?:[^\x00,=]|=2C|=3D)+")
_EXTENSION = re.compile(r"([A-Za-z]+)=([^,]*)")
TOKEN_AUTH = "tokenauth"


@dataclass(frozen=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, hash, Kafka's wire type (ScramMechanism.type) and minimum iterations."""

    name: str
    hash_name: str
    type: int
    min_iterations: int = MIN_ITERATIONS

    @property
    def digest_size(self) -> int:
        """Bytes of the hash (32 for SHA-256, 64 for SHA-512)."""
        return hashlib.new(self.hash_name).digest_size

    def hmac(self, key: bytes, message: bytes) -> bytes:
        """HMAC-H(key, message)."""
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        """H(data)."""
        return hashlib.new(self.hash_name, data).digest()


SCRAM_MECHANISMS: dict[str, ScramMechanism] = {
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 1),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 2),
}
_BY_TYPE = {m.type: m for m in SCRAM_MECHANISMS.values()}


def scram_mechanism(name_or_type: str | int) -> ScramMechanism:
    """The mechanism of a SASL name ("SCRAM-SHA-256") or Kafka's wire type (1, 2); UnsupportedSaslMechanismError."""
    found = (_BY_TYPE.get(name_or_type) if isinstance(name_or_type, int)
             else SCRAM_MECHANISMS.get(name_or_type))
    if found is None:
        raise UnsupportedSaslMechanismError(f"Unknown SCRAM mechanism {name_or_type!r} (known: "
                                            f"{', '.join(SCRAM_MECHANISMS)})")
    return found


@dataclass(frozen=True)
class ScramCredential:
    """What Kafka keeps of a user's password for one mechanism (salt, keys: bytes; iterations: a count)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        # Kafka's ScramCredentialValue hides the keys from logs too.
        return f"ScramCredential(iterations={self.iterations}, salt=[hidden], stored_key=[hidden], server_key=[hidden])"


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2-HMAC-H over the password's UTF-8 (Kafka applies no SASLprep)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential of a salted password (what AlterUserScramCredentials sends, as Kafka's controller does)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt, mechanism.hash(client_key), mechanism.hmac(salted, b"Server Key"), iterations)


def new_credential(mechanism: ScramMechanism, password: str, iterations: int,
                   salt: bytes | None = None) -> ScramCredential:
    """A credential for `password` with a fresh random salt (or `salt`); runs PBKDF2, so it blocks for ms."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                           iterations)


def sasl_name(user: str) -> str:
    """A user name as SCRAM writes it: `=` as `=3D`, `,` as `=2C`."""
    return user.replace("=", "=3D").replace(",", "=2C")


def username(name: str) -> str:
    """The user name of a SCRAM saslname; ValueError for a `=` not starting `=2C` or `=3D`."""
    if not _SASLNAME.fullmatch(name):
        raise ValueError(f"invalid saslname {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def invalid_credentials(mechanism: str) -> str:
    """What Kafka tells a client whose mechanism failed for any reason it does not name."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def _server_nonce() -> str:
    # Kafka: 130 random bits in base 36. Any printable text without commas will do.
    return secrets.token_urlsafe(24)


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


class _State(Enum):
    CLIENT_FIRST = "RECEIVE_CLIENT_FIRST_MESSAGE"
    CLIENT_FINAL = "RECEIVE_CLIENT_FINAL_MESSAGE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class _Refused(Exception):
    """A reason to refuse that the client is told only as Kafka's generic line."""


class ScramServer:
    """The server side of one SCRAM exchange (see the module docstring); `lookup(user)` gives the user's
    credential for this mechanism or None. One connection's, not thread-safe."""

    blocking = False

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None],
                 nonce: Callable[[], str] = _server_nonce):
        self.mechanism = mechanism.name
        self._mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self._state = _State.CLIENT_FIRST
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""

    @property
    def complete(self) -> bool:
        """Whether the exchange succeeded."""
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> KafkaPrincipal:
        """User:<name> once complete (the authorization id is the user name)."""
        if self._state is not _State.COMPLETE or self._user is None:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return KafkaPrincipal("User", self._user)

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token: server-first, then server-final."""
        state = self._state
        if state in (_State.COMPLETE, _State.FAILED):
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl server state {state.value}")
        try:
            if state is _State.CLIENT_FIRST:
                answer = self._client_first(token)
                self._state = _State.CLIENT_FINAL
            else:
                answer = self._client_final(token)
                self._state = _State.COMPLETE
            return answer
        except _Refused as exc:
            self._fail()
            raise SaslAuthenticationError(invalid_credentials(self.mechanism), str(exc)) from None
        except SaslAuthenticationError:
            self._fail()
            raise

    def _fail(self) -> None:
        self._state = _State.FAILED
        self._credential = None

    def _client_first(self, token: bytes) -> bytes:
        text = _utf8(token, "client-first")
        parts = text.split(",")
        if len(parts) < 4:
            raise _Refused(f"invalid SCRAM client-first message {text!r}")
        flag, authzid = parts[0], parts[1]
        if flag.startswith("p="):
            raise _Refused("channel binding requested; this server offers none")
        if flag not in ("n", "y"):
            raise _Refused(f"invalid gs2 channel-binding flag {flag!r}")
        if authzid and not authzid.startswith("a="):
            raise _Refused(f"invalid gs2 authorization id {authzid!r}")
        rest = parts[2:]
        if rest[0].startswith("m="):
            raise _Refused("the reserved m= attribute is not supported")
        if not rest[0].startswith("n=") or not rest[1].startswith("r="):
            raise _Refused(f"invalid SCRAM client-first message {text!r}")
        try:
            user = username(rest[0][2:])
            requested = username(authzid[2:]) if authzid else ""
        except ValueError as exc:
            raise _Refused(str(exc)) from None
        client_nonce = rest[1][2:]
        if not _PRINTABLE.fullmatch(client_nonce):
            raise _Refused("invalid client nonce")
        extensions = {}
        for item in rest[2:]:
            match = _EXTENSION.fullmatch(item)
            if match is None:
                raise _Refused(f"invalid SCRAM extension {item!r}")
            extensions[match[1]] = match[2]
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            raise _Refused("delegation token authentication is not supported")
        credential = self._lookup(user)
        if credential is None:
            raise _Refused(f"unknown user {user!r}")
        if requested and requested != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username",
                f"user {user!r} asked for authorization id {requested!r}")
        if credential.iterations < self._mechanism.min_iterations:
            raise _Refused(f"iterations {credential.iterations} is less than the minimum "
                           f"{self._mechanism.min_iterations} for {self.mechanism}")
        self._user, self._credential = user, credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = ",".join(rest)
        self._full_nonce = nonce = client_nonce + self._nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _client_final(self, token: bytes) -> bytes:
        text = _utf8(token, "client-final")
        without_proof, sep, proof_text = text.rpartition(",p=")
        parts = without_proof.split(",")
        if not sep or len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise _Refused(f"invalid SCRAM client-final message {text!r}")
        if any(_EXTENSION.fullmatch(item) is None for item in parts[2:]):
            raise _Refused("invalid SCRAM extension in the client-final message")
        try:
            binding = _b64decode(parts[0][2:])
            proof = _b64decode(proof_text)
        except (binascii.Error, ValueError):
            raise _Refused("invalid base64 in the client-final message") from None
        if binding != self._gs2_header.encode("utf-8"):
            raise _Refused("channel binding c= does not match the gs2 header")
        # Kafka checks that the nonce ends with the one it sent, not that it equals it: librdkafka 2.0
        # (Debian's, kcat's) repeats its own nonce in front. The proof still covers the message as sent,
        # and the fresh server nonce at its end is what prevents replay.
        if not parts[1][2:].endswith(self._full_nonce):
            raise _Refused("Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None  # set with the client-first
        if len(proof) != self._mechanism.digest_size:
            raise _Refused("Invalid client credentials")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = self._mechanism.hmac(credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self._mechanism.hash(client_key), credential.stored_key):
            raise _Refused("Invalid client credentials")
        server_signature = self._mechanism.hmac(credential.server_key, auth_message)
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)


def _utf8(token: bytes, what: str) -> str:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"the SCRAM {what} message is not UTF-8") from None
