"""A TLS listener's keystore replaced at run time, as Kafka's certificate rotation does it (issue 27).

IncrementalAlterConfigs on this broker's BROKER resource sets
`listener.name.ssl.ssl.keystore.location`: new connections get the new
certificate, connections already open keep working, the change survives a
SIGKILL; giving the same path again reads the file again (a certificate
renewed in place). Refused, with Kafka's messages and the served certificate
unchanged: the cluster-wide default, a certificate of another subject or
other subjectAltNames, a file that does not load, a listener without TLS.
"""
from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

from raw_wire import kio_round_trip
from tls_certs import Certs, _signed

NODE = "1"            # the broker's node.id, the BROKER resource's name
TIMEOUT = 15.0
SETTING = "listener.name.ssl.ssl.keystore.location"


def _keystore(certs: Certs, name: str, subject: str, alt_names: str) -> Path:
    """Another key and certificate from the tests' CA, as one PEM keystore file."""
    _signed(name, subject, f"subjectAltName={alt_names}\nextendedKeyUsage=serverAuth\n", certs.directory)
    keystore = certs.directory / f"{name}-keystore.pem"
    keystore.write_text((certs.directory / f"{name}.key").read_text() + (certs.directory / f"{name}.pem").read_text()
                        + certs.ca.read_text())
    return keystore


def _served(certs: Certs, port: int) -> bytes:
    """The certificate a new TLS connection to `port` is shown (verified against the CA)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(certs: Certs, name: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert((certs.directory / f"{name}.pem").read_text())


def _set(broker, resource: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    (future,) = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, resource,
                                                                incremental_configs=[entry])],
                                                request_timeout=TIMEOUT).values()
    future.result(TIMEOUT)


def _described(broker) -> dict:
    """This broker's configs as confluent-kafka's DescribeConfigs gives them (its client gone before the
    broker is killed, so it logs no reconnections)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (described,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, NODE)]).values()
    return described.result(TIMEOUT)


def _refused(broker, resource: str, name: str, value: str) -> str:
    with pytest.raises(KafkaException) as raised:
        _set(broker, resource, name, value)
    return raised.value.args[0].str()


def _refused_as_cluster_default(broker, name: str, value: str) -> tuple[int, str]:
    """(error code, message) of an IncrementalAlterConfigs SET on the BROKER resource "" (confluent-kafka's
    client takes no empty name: kio writes the request)."""
    body = incremental_v1.IncrementalAlterConfigsRequest(resources=(incremental_v1.AlterConfigsResource(
        resource_type=4, resource_name="", configs=(
            incremental_v1.AlterableConfig(name=name, config_operation=0, value=value),)),), validate_only=False)
    (answer,) = kio_round_trip(broker, 44, 1, body, 3).responses
    return answer.error_code, answer.error_message


def _api_versions(tls: ssl.SSLSocket, correlation: int) -> int:
    """ApiVersions v0 on an open connection; the correlation id answered."""
    header = struct.pack(">hhih", 18, 0, correlation, 4) + b"test"
    tls.sendall(struct.pack(">i", len(header)) + header)
    size = struct.unpack(">i", tls.recv(4))[0]
    body = b""
    while len(body) < size:
        body += tls.recv(size - len(body))
    return struct.unpack(">i", body[:4])[0]


def test_a_listener_keystore_is_replaced_at_run_time(certs, start_secure):
    renewed = _keystore(certs, "renewed", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
    broker, ports = start_secure({"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}, "listener.name.ssl.ssl.keystore.type=PEM",
                                 f"{SETTING}={certs.broker_keystore}")
    port = ports["SSL"]
    assert _served(certs, port) == _der(certs, "broker")
    context = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as before:
        _set(broker, NODE, SETTING, str(renewed))
        assert _served(certs, port) == _der(certs, "renewed")
        assert _api_versions(before, 7) == 7   # opened before: served on as it was
    entry = _described(broker)[SETTING]
    assert (entry.value, ConfigSource(entry.source), entry.is_read_only) == (
        str(renewed), ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    # Renewed in place: the same path given again is read again.
    in_place = _keystore(certs, "in-place", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
    renewed.write_text(in_place.read_text())
    _set(broker, NODE, SETTING, str(renewed))
    assert _served(certs, port) == _der(certs, "in-place")
    broker.kill()
    broker.start()
    assert _served(certs, port) == _der(certs, "in-place")


def test_replacements_kafka_refuses_leave_the_served_certificate(certs, start_secure):
    other_subject = _keystore(certs, "other-subject", "/CN=elsewhere", "DNS:localhost,IP:127.0.0.1")
    other_names = _keystore(certs, "other-names", "/CN=localhost", "DNS:localhost")
    broker, ports = start_secure({"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}, "listener.name.ssl.ssl.keystore.type=PEM",
                                 f"{SETTING}={certs.broker_keystore}")
    assert _refused_as_cluster_default(broker, SETTING, str(other_names)) == (
        42, f"Cannot update these configs at default cluster level, broker id must be specified: {SETTING}")
    assert "Keystore DistinguishedName does not match: existing={CN=localhost}, new={CN=elsewhere}" in \
        _refused(broker, NODE, SETTING, str(other_subject))
    assert "Keystore SubjectAltNames do not match" in _refused(broker, NODE, SETTING, str(other_names))
    assert "Validation of dynamic config update of SSLFactory failed" in \
        _refused(broker, NODE, SETTING, str(certs.directory / "missing.pem"))
    assert "listener PLAINTEXT does not use TLS" in \
        _refused(broker, NODE, "listener.name.plaintext.ssl.keystore.location", str(other_names))
    assert _served(certs, ports["SSL"]) == _der(certs, "broker")
    # Allowed when the listener says so (Kafka's ssl.allow.dn.changes).
    broker.stop()
    broker.overrides = (*broker.overrides, "listener.name.ssl.ssl.allow.dn.changes=true")
    broker.start()
    _set(broker, NODE, SETTING, str(other_subject))
    assert _served(certs, ports["SSL"]) == _der(certs, "other-subject")
