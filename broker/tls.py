"""TLS for the SSL and SASL_SSL listeners, from Kafka's PEM settings, with the standard `ssl` module.

Key material as Kafka takes it in PEM (`ssl.keystore.type=PEM`): a file at
`ssl.keystore.location` holding the private key and the certificate chain,
or the two inline as `ssl.keystore.key` and `ssl.keystore.certificate.chain`;
an encrypted key is opened with `ssl.key.password`. Trusted client CAs come
from `ssl.truststore.location` (a PEM file) or `ssl.truststore.certificates`
(inline), else the system's, as the JVM's default truststore would serve.
Kafka's JKS and PKCS12 stores are refused with a line saying how to convert.
A listener that needs TLS and has no key material refuses to start: a user
who asked for TLS never gets plaintext.

`ssl.client.auth` none/requested/required is mutual TLS off/optional/required;
`ssl.enabled.protocols` bounds the versions; `ssl.cipher.suites` takes
Kafka's (IANA) names or OpenSSL's for TLS 1.2. Every setting may be given
per listener (`listener.name.<l>.ssl.*`).
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable

from logstore.broker.config import BrokerConfig
from logstore.errors import InvalidConfigError

__all__ = ["TlsConfigError", "served_certificate", "server_context"]

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_OLD_VERSIONS = ("TLSv1", "TLSv1.1", "SSLv3", "SSLv2")
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# IANA names of TLS 1.2 suites → OpenSSL's: the key exchange and authentication, then the cipher and MAC.
_IANA = re.compile(r"TLS_(?:(ECDHE|DHE)_)?(RSA|ECDSA|PSK)_WITH_(AES_(?:128|256)_(?:GCM|CBC|CCM)|CHACHA20_POLY1305)"
                   r"(?:_(SHA256|SHA384|SHA))?")
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


class TlsConfigError(InvalidConfigError):
    """A TLS setting that cannot give a listener TLS; `setting` names the one to fix (with its prefix)."""

    def __init__(self, setting: str, message: str):
        super().__init__(f"{setting}: {message}")
        self.setting = setting


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of listener `listener` (its name), from its ssl.* settings; refused if it cannot serve TLS."""
    def get(name: str) -> str:
        return str(config.for_listener(listener, name) or "").strip()

    def name(setting: str) -> str:
        prefixed = f"listener.name.{listener.lower()}.{setting}"
        return prefixed if prefixed in config.settings else setting

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.options |= ssl.OP_NO_COMPRESSION
    _set_versions(context, get("ssl.enabled.protocols"), name("ssl.enabled.protocols"))
    _load_key(context, listener, get, name)
    auth = get("ssl.client.auth").lower()
    if auth not in _CLIENT_AUTH:
        raise TlsConfigError(name("ssl.client.auth"), f"{auth!r} is not one of none, requested, required")
    context.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none":
        _load_trust(context, get, name)
    suites = get("ssl.cipher.suites")
    if suites:
        _set_ciphers(context, suites, name("ssl.cipher.suites"))
    return context


def served_certificate(config: BrokerConfig, listener: str) -> bytes:
    """The DER of the first certificate in listener `listener`'s keystore (the one its TLS handshakes show);
    TlsConfigError if there is none to read."""
    location = str(config.for_listener(listener, "ssl.keystore.location") or "").strip()
    try:
        if location:
            with open(location) as file:
                text = file.read()
        else:
            text = _pem_text(str(config.for_listener(listener, "ssl.keystore.certificate.chain") or ""))
        begin = text.index(_CERTIFICATE_BEGIN)
        end = text.index(_CERTIFICATE_END, begin) + len(_CERTIFICATE_END)
        return ssl.PEM_cert_to_DER_cert(text[begin:end])
    except (OSError, ValueError) as exc:
        raise TlsConfigError(f"listener.name.{listener.lower()}.ssl.keystore.location",
                             f"no certificate to read ({exc})") from None


def _set_versions(context: ssl.SSLContext, text: str, setting: str) -> None:
    asked = [item.strip() for item in text.split(",") if item.strip()]
    old = [item for item in asked if item in _OLD_VERSIONS]
    unknown = [item for item in asked if item not in _VERSIONS and item not in _OLD_VERSIONS]
    if unknown:
        raise TlsConfigError(setting, f"unknown protocol {unknown[0]!r}: TLSv1.2 and TLSv1.3 are served")
    served = sorted(_VERSIONS[item] for item in asked if item in _VERSIONS)
    if not served:
        raise TlsConfigError(setting, f"{text!r} enables no protocol this broker serves "
                                      f"(TLSv1.2, TLSv1.3{'; ' + ', '.join(old) + ' are insecure' if old else ''})")
    context.minimum_version, context.maximum_version = served[0], served[-1]


def _load_key(context: ssl.SSLContext, listener: str, get: Callable[[str], str], name: Callable[[str], str]) -> None:
    location, inline_key, chain = get("ssl.keystore.location"), get("ssl.keystore.key"), \
        get("ssl.keystore.certificate.chain")
    if not (location or inline_key or chain):
        raise TlsConfigError(name("ssl.keystore.location"),
                             f"listener {listener} needs TLS key material: ssl.keystore.location (a PEM file with "
                             "the private key and certificate chain), or ssl.keystore.key and "
                             "ssl.keystore.certificate.chain; with ssl.keystore.type=PEM")
    _require_pem(get("ssl.keystore.type"), name("ssl.keystore.type"), "keystore")
    password = get("ssl.key.password") or None
    if location:
        if inline_key or chain:
            raise TlsConfigError(name("ssl.keystore.location"),
                                 "give either ssl.keystore.location or ssl.keystore.key with "
                                 "ssl.keystore.certificate.chain, not both")
        _load_chain(context, location, None, password, name("ssl.keystore.location"))
        return
    if not (inline_key and chain):
        missing = "ssl.keystore.certificate.chain" if inline_key else "ssl.keystore.key"
        raise TlsConfigError(name(missing), "ssl.keystore.key and ssl.keystore.certificate.chain go together")
    # `load_cert_chain` reads files only: the inline PEM goes through a private file, removed at once.
    with tempfile.TemporaryDirectory(prefix="logstore-tls-") as private:
        os.chmod(private, 0o700)
        key_path, chain_path = os.path.join(private, "key.pem"), os.path.join(private, "chain.pem")
        for path, text, setting in ((key_path, inline_key, "ssl.keystore.key"),
                                    (chain_path, chain, "ssl.keystore.certificate.chain")):
            try:
                pem = _pem_text(text)
            except ValueError:
                raise TlsConfigError(name(setting), "no PEM block (-----BEGIN ...-----) in it") from None
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
                file.write(pem)
        _load_chain(context, chain_path, key_path, password, name("ssl.keystore.key"))


def _load_chain(context: ssl.SSLContext, certfile: str, keyfile: str | None, password: str | None,
                setting: str) -> None:
    try:
        context.load_cert_chain(certfile, keyfile, password)
    except FileNotFoundError:
        raise TlsConfigError(setting, f"{certfile} does not exist") from None
    except PermissionError:
        raise TlsConfigError(setting, f"{certfile} cannot be read (permission denied)") from None
    except ssl.SSLError as exc:
        why = ("the private key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(exc) else
               "the key cannot be decrypted: check ssl.key.password" if "BAD_DECRYPT" in str(exc) or password
               else "no PEM private key and certificate chain in it (an encrypted key needs ssl.key.password)")
        raise TlsConfigError(setting, f"{why} ({exc.reason or exc})") from None


def _load_trust(context: ssl.SSLContext, get: Callable[[str], str], name: Callable[[str], str]) -> None:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if not (location or inline):
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return
    _require_pem(get("ssl.truststore.type"), name("ssl.truststore.type"), "truststore")
    setting = name("ssl.truststore.location" if location else "ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        else:
            context.load_verify_locations(cadata=_pem_text(inline))
    except FileNotFoundError:
        raise TlsConfigError(setting, f"{location} does not exist") from None
    except (ssl.SSLError, ValueError) as exc:
        raise TlsConfigError(setting, f"no PEM certificates in it ({exc})") from None


def _require_pem(kind: str, setting: str, store: str) -> None:
    if kind.upper() != "PEM":
        raise TlsConfigError(setting, f"{kind or 'JKS'} is not read here: give the {store} as PEM and set "
                                      f"{setting}=PEM (keytool -importkeystore to PKCS12, then openssl pkcs12 "
                                      "-nodes converts a JKS store)")


_CERTIFICATE_BEGIN, _CERTIFICATE_END = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"


def _pem_text(text: str) -> str:
    """PEM blocks as OpenSSL reads them: Kafka's inline values are often continued lines of a properties file,
    which arrive joined by spaces; each block's base64 is re-wrapped at 64 columns."""
    blocks = [f"-----BEGIN {label}-----\n{_wrapped(''.join(body.split()))}-----END {label}-----\n"
              for label, body in _PEM_BLOCK.findall(text)]
    if not blocks:
        raise ValueError("no -----BEGIN ...----- block")
    return "".join(blocks)


def _wrapped(base64: str) -> str:
    return "".join(base64[i:i + 64] + "\n" for i in range(0, len(base64), 64))


def _set_ciphers(context: ssl.SSLContext, text: str, setting: str) -> None:
    every = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    every.set_ciphers("ALL")
    known = {cipher["name"]: cipher["protocol"] for cipher in every.get_ciphers()}
    tls12 = []
    tls13 = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item.startswith("TLS_") and known.get(item) == "TLSv1.3":
            tls13.add(item)
            continue
        openssl = _openssl_name(item) if item.startswith("TLS_") else item
        if openssl not in known:
            raise TlsConfigError(setting, f"unknown cipher suite {item!r} (IANA names as Kafka's, or OpenSSL's)")
        tls12.append(openssl)
    all13 = {name for name, protocol in known.items() if protocol == "TLSv1.3"}
    if tls13 and tls13 != all13 and context.maximum_version >= ssl.TLSVersion.TLSv1_3:
        # Python's ssl has no way to narrow TLS 1.3 suites (OpenSSL's SSL_CTX_set_ciphersuites).
        raise TlsConfigError(setting, f"TLS 1.3 suites can be listed all or none ({', '.join(sorted(all13))}); "
                                      "to refuse some, leave TLSv1.3 out of ssl.enabled.protocols")
    if tls12:
        context.set_ciphers(":".join(tls12))
    elif context.minimum_version <= ssl.TLSVersion.TLSv1_2:
        context.minimum_version = ssl.TLSVersion.TLSv1_3


def _openssl_name(iana: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name (Kafka's), or the name unchanged."""
    match = _IANA.fullmatch(iana)
    if match is None:
        return iana
    exchange, auth, cipher, mac = match.groups()
    cipher = (cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_GCM", "-GCM")
              .replace("_CCM", "-CCM").replace("_CBC", "").replace("CHACHA20_POLY1305", "CHACHA20-POLY1305"))
    prefix = f"{exchange}-{auth}-" if exchange else "" if auth == "RSA" else f"{auth}-"
    suffix = "" if mac is None or "CHACHA" in cipher or "CCM" in cipher else f"-{mac}"
    return prefix + cipher + suffix
