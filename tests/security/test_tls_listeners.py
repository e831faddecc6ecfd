"""SSL listeners: real clients over TLS and mutual TLS beside a PLAINTEXT listener, and every way a TLS
listener refuses: no key material (never plaintext), a plaintext client, a client without a certificate
when one is required, a protocol version not enabled."""
from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from broker_process import free_port
from secure_clients import EXPECTED, ROUND_TRIPS, Security
from tls_certs import KEY_PASSWORD

API_VERSIONS_V0 = struct.pack(">ihhi", 10, 18, 0, 1) + b"\x00\x00"   # size, key, version, correlation, client id ""


def tls_settings(certs, *extra: str) -> tuple[str, ...]:
    return ("ssl.keystore.type=PEM", f"ssl.keystore.location={certs.broker_keystore}", *extra)


def run_broker(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    """`logstore broker` expected to refuse its settings: its exit status and output."""
    args = [sys.executable, "-m", "logstore", "broker", "--override", f"log.dirs={tmp_path / 'data'}"]
    for item in overrides:
        args += ["--override", item]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("keys", [(), ("ssl.keystore.type=PEM",)], ids=["nothing", "type-only"])
def test_a_tls_listener_without_key_material_refuses_to_start(tmp_path, keys):
    port = free_port()
    done = run_broker(tmp_path, f"listeners=SSL://127.0.0.1:{port}", *keys)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "ssl.keystore.location" in lines[0] and "listener SSL needs TLS key material" in lines[0], lines[0]
    assert done.stdout == ""   # no ready line: nothing was served


@pytest.mark.parametrize("setting, said", [
    ("ssl.keystore.type=JKS", "JKS is not read here"),
    ("ssl.enabled.protocols=TLSv1.1", "enables no protocol this broker serves"),
    ("ssl.client.auth=sometimes", "is not one of none, requested, required"),
    ("ssl.key.password=wrong", "the key cannot be decrypted"),
    ("ssl.principal.mapping.rules=RULE:broken", "invalid rule"),
    ("ssl.cipher.suites=TLS_NOT_A_SUITE", "unknown cipher suite"),
    ("ssl.keystore.key=not a key", "ssl.keystore.location or ssl.keystore.key"),
])
def test_bad_tls_settings_are_refused_in_one_line(tmp_path, certs, setting, said):
    keystore = certs.broker_keystore if "password" not in setting else certs.broker_encrypted_keystore
    done = run_broker(tmp_path, f"listeners=SSL://127.0.0.1:{free_port()}", "ssl.keystore.type=PEM",
                      f"ssl.keystore.location={keystore}", setting)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.fixture(scope="module")
def tls_broker(start_module_secure, certs):
    """A broker with a PLAINTEXT and an SSL listener, shared by the tests that need nothing else."""
    return start_module_secure({"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}, *tls_settings(certs))


@pytest.fixture(scope="module")
def mtls_broker(start_module_secure, certs):
    """A broker whose one SSL listener requires a client certificate from the test CA."""
    return start_module_secure({"SSL": "SSL"}, *tls_settings(certs, "ssl.client.auth=required",
                                                             f"ssl.truststore.location={certs.ca}",
                                                             "ssl.truststore.type=PEM"))


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_clients_over_tls_beside_plaintext(tls_broker, certs, client):
    broker, ports = tls_broker
    topic = f"tls-{client}"
    values = ROUND_TRIPS[client](f"127.0.0.1:{ports['SSL']}", Security("SSL", ca=certs.ca), topic)
    assert values == EXPECTED(20)
    # The PLAINTEXT listener serves the same topic, and each listener advertises itself.
    assert ROUND_TRIPS["confluent-kafka"](broker.bootstrap, Security(), topic) == EXPECTED(20)
    for name, security in (("SSL", Security("SSL", ca=certs.ca)), ("PLAINTEXT", Security())):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[name]}", **security.librdkafka()})
        brokers = admin.list_topics(timeout=30).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", ports[name])]


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_clients_over_mutual_tls(mtls_broker, certs, client):
    broker, ports = mtls_broker
    security = Security("SSL", ca=certs.ca, cert=certs.client_cert("alice"), key=certs.client_key("alice"))
    assert ROUND_TRIPS[client](broker.bootstrap, security, f"mtls-{client}") == EXPECTED(20)


def test_a_client_without_a_certificate_is_refused_when_one_is_required(mtls_broker, certs):
    broker, _ = mtls_broker
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection((broker.host, broker.port), timeout=30) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                # TLS 1.3 reports the missing certificate at the first read.
                tls.sendall(API_VERSIONS_V0)
                assert tls.recv(4) == b""
                raise ConnectionError("closed")
    security = Security("SSL", ca=certs.ca, cert=certs.client_cert("bob"), key=certs.client_key("bob"))
    assert ROUND_TRIPS["confluent-kafka"](broker.bootstrap, security, "after-refusal") == EXPECTED(20)
    assert "TLS handshake failed on SSL" in broker.log_text()


def test_wrong_protocol_clients_are_closed_and_others_served(tls_broker, certs):
    broker, ports = tls_broker
    # A plaintext request on the TLS port: no answer, the connection closes.
    with socket.create_connection(("127.0.0.1", ports["SSL"]), timeout=30) as sock:
        sock.sendall(API_VERSIONS_V0)
        assert sock.recv(1024) == b""
    # A TLS handshake on the plaintext port: closed, and the log says what it looked like.
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", ports["PLAINTEXT"]), timeout=30) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            context.wrap_socket(raw, server_hostname="127.0.0.1")
    assert ROUND_TRIPS["confluent-kafka"](f"127.0.0.1:{ports['SSL']}", Security("SSL", ca=certs.ca),
                                          "still-served") == EXPECTED(20)
    log = broker.log_text()
    assert "a plaintext client on a TLS listener?" in log
    assert "a TLS client on the PLAINTEXT listener PLAINTEXT" in log


def test_only_the_enabled_protocol_versions_are_served(start_secure, certs):
    broker, _ = start_secure({"SSL": "SSL"}, *tls_settings(certs, "ssl.enabled.protocols=TLSv1.3"))
    for version, served in ((ssl.TLSVersion.TLSv1_2, False), (ssl.TLSVersion.TLSv1_3, True)):
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.maximum_version = version
        with socket.create_connection((broker.host, broker.port), timeout=30) as raw:
            if not served:
                with pytest.raises(ssl.SSLError):
                    context.wrap_socket(raw, server_hostname="127.0.0.1")
                continue
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() == "TLSv1.3"
                tls.sendall(API_VERSIONS_V0)
                (size,) = struct.unpack(">i", tls.recv(4))
                assert size > 0


def test_an_encrypted_key_with_its_password(start_secure, certs):
    broker, _ = start_secure({"SSL": "SSL"}, "ssl.keystore.type=PEM",
                             f"ssl.keystore.key={certs.broker_encrypted_key.read_text()}",
                             f"ssl.keystore.certificate.chain={certs.broker_chain.read_text()}",
                             f"ssl.key.password={KEY_PASSWORD}")
    security = Security("SSL", ca=certs.ca)
    assert ROUND_TRIPS["confluent-kafka"](broker.bootstrap, security, "encrypted") == EXPECTED(20)


def test_a_fetch_larger_than_a_copy_chunk_arrives_whole_over_tls(tls_broker, certs):
    """Over TLS a file range goes out in 256 KiB pieces (no sendfile): 12 MiB of records read back intact."""
    broker, ports = tls_broker
    values = [bytes([i]) * 100_000 + i.to_bytes(4, "big") for i in range(120)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 4 << 20})
    for value in values:
        producer.produce("large", value)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "group.id": "large",
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 16 << 20,
                         "max.partition.fetch.bytes": 16 << 20, **Security("SSL", ca=certs.ca).librdkafka()})
    consumer.subscribe(["large"])
    read: list[bytes] = []
    try:
        while len(read) < len(values):
            message = consumer.poll(60)
            assert message is not None and message.error() is None, message and message.error()
            read.append(message.value())
    finally:
        consumer.close()
    assert read == values


def test_inline_key_material_that_is_not_pem_is_refused_in_one_line(tmp_path):
    done = run_broker(tmp_path, f"listeners=SSL://127.0.0.1:{free_port()}", "ssl.keystore.type=PEM",
                      "ssl.keystore.key=not a key", "ssl.keystore.certificate.chain=not a chain")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "ssl.keystore.key: no PEM block" in done.stderr and len(done.stderr.strip().splitlines()) == 1
