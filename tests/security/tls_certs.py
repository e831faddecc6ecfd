"""Real certificates for the TLS tests, made with the openssl command: a CA, the broker's, and clients'."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_PASSWORD = "broker-key-secret"


@dataclass(frozen=True)
class Certs:
    """Paths of the PEM files made in `directory`."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_keystore(self) -> Path:
        """The broker's private key and certificate chain in one PEM file (ssl.keystore.location)."""
        return self.directory / "broker-keystore.pem"

    @property
    def broker_key(self) -> Path:
        return self.directory / "broker.key"

    @property
    def broker_encrypted_key(self) -> Path:
        """The broker's key encrypted with KEY_PASSWORD (PKCS#8)."""
        return self.directory / "broker-encrypted.key"

    @property
    def broker_encrypted_keystore(self) -> Path:
        """The encrypted key and the certificate chain in one PEM file."""
        return self.directory / "broker-encrypted-keystore.pem"

    @property
    def broker_chain(self) -> Path:
        return self.directory / "broker-chain.pem"

    def client_cert(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def client_key(self, name: str) -> Path:
        return self.directory / f"{name}.key"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _key(name: str, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", f"{name}.key",
             cwd=cwd)


def _signed(name: str, subject: str, extensions: str, cwd: Path) -> None:
    _key(name, cwd)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=cwd)
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=cwd)


def make_certs(directory: Path, clients: dict[str, str]) -> Certs:
    """A CA, a broker certificate for localhost/127.0.0.1, and one client certificate per name → subject
    (openssl's `/C=US/O=Example/CN=alice` form)."""
    directory.mkdir(parents=True, exist_ok=True)
    _key("ca", directory)
    _openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=logstore test CA", "-days", "2",
             "-out", "ca.pem", cwd=directory)
    _signed("broker", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
            "extendedKeyUsage=serverAuth\n", directory)
    for name, subject in clients.items():
        _signed(name, subject, "extendedKeyUsage=clientAuth\n", directory)
    certs = Certs(directory)
    chain = (directory / "broker.pem").read_text() + certs.ca.read_text()
    certs.broker_chain.write_text(chain)
    certs.broker_keystore.write_text(certs.broker_key.read_text() + chain)
    _openssl("pkcs8", "-topk8", "-in", "broker.key", "-v2", "aes-256-cbc", "-passout", f"pass:{KEY_PASSWORD}",
             "-out", certs.broker_encrypted_key.name, cwd=directory)
    certs.broker_encrypted_keystore.write_text(certs.broker_encrypted_key.read_text() + chain)
    return certs
