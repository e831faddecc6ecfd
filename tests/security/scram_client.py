"""A SCRAM client written from RFC 5802 §3 and §5, independent of the server under test."""
from __future__ import annotations

import base64
import hashlib
import hmac


def escape(user: str) -> str:
    """RFC 5802 saslname: `=` → `=3D`, `,` → `=2C`."""
    return user.replace("=", "=3D").replace(",", "=2C")


class RfcScramClient:
    """One exchange, client side: `first()`, `final(server_first)`, `check(server_final)`."""

    def __init__(self, hash_name: str, user: str, password: str, nonce: str, *, authzid: str | None = None,
                 flag: str = "n", extensions: str = ""):
        self.hash_name = hash_name
        self.password = password.encode("utf-8")
        self.nonce = nonce
        self.gs2 = f"{flag},{'a=' + escape(authzid) if authzid is not None else ''},"
        self.bare = f"n={escape(user)},r={nonce}{extensions}"
        self.server_signature = b""
        self.without_proof = ""
        self.proof = b""

    def first(self) -> bytes:
        """client-first-message."""
        return (self.gs2 + self.bare).encode("utf-8")

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def final(self, server_first: bytes, nonce: str | None = None) -> bytes:
        """client-final-message for the server's first message (naming `nonce` instead of the server's, if given:
        a client that signs the true transcript but lies about the nonce)."""
        text = server_first.decode("utf-8")
        fields = dict(item.split("=", 1) for item in text.split(","))
        assert fields["r"].startswith(self.nonce)
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = hashlib.pbkdf2_hmac(self.hash_name, self.password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        self.without_proof = f"c={base64.b64encode(self.gs2.encode()).decode()},r={nonce or fields['r']}"
        auth_message = f"{self.bare},{text},{self.without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        self.proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{self.without_proof},p={base64.b64encode(self.proof).decode()}".encode()

    def check(self, server_final: bytes) -> bool:
        """Whether the server proved it knows the credential."""
        return server_final == b"v=" + base64.b64encode(self.server_signature)
