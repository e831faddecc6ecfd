"""SASL listeners: real clients authenticating with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN over SASL_SSL
and SASL_PLAINTEXT, and every refusal (wrong password, unknown user, unknown mechanism, a request before
authenticating, a session past connections.max.reauth.ms) closing only that connection."""
from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import Producer
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kio_wire import read_response, request_frame
from sasl_brokers import PASSWORDS, sasl_broker
from secure_clients import EXPECTED, ROUND_TRIPS, Security


@pytest.fixture(scope="module")
def shared(start_module_secure, certs):
    """One SASL broker for the tests that need no settings of their own (each uses its own topic)."""
    return sasl_broker(start_module_secure, certs)


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
@pytest.mark.parametrize("mechanism, user", [("SCRAM-SHA-512", "alice"), ("PLAIN", "carol")])
def test_clients_over_sasl_ssl(shared, certs, client, mechanism, user):
    broker, ports = shared
    password = PASSWORDS.get(user) or f"{user}-secret"
    security = Security("SASL_SSL", ca=certs.ca, mechanism=mechanism, user=user, password=password)
    values = ROUND_TRIPS[client](f"127.0.0.1:{ports['SASL_SSL']}", security, f"sasl-{client}-{mechanism}")
    assert values == EXPECTED(20)


@pytest.mark.parametrize("mechanism, user", [("SCRAM-SHA-256", "bob"), ("PLAIN", "alice")],
                         ids=["scram-sha-256", "plain-checked-against-scram"])
def test_sasl_plaintext(shared, mechanism, user):
    """PLAIN falls back to a user's SCRAM credentials when the JAAS config has no entry for it."""
    broker, ports = shared
    security = Security("SASL_PLAINTEXT", mechanism=mechanism, user=user, password=PASSWORDS[user])
    values = ROUND_TRIPS["confluent-kafka"](f"127.0.0.1:{ports['SASL_PLAINTEXT']}", security, "sasl-plaintext")
    assert values == EXPECTED(20)


def _login_error(bootstrap: str, security: Security) -> str:
    """The first error a client logging in with `security` reports (librdkafka's error callback)."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": lambda err: errors.append(str(err)),
                         **security.librdkafka()})
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "the client reported no error within 30 s"
    return errors[0]


SCRAM_REFUSED = "Authentication failed during authentication due to invalid credentials with SASL mechanism"
PLAIN_REFUSED = "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("mechanism, user, password, told, reason", [
    ("SCRAM-SHA-512", "alice", "wrong", SCRAM_REFUSED, "Invalid client credentials"),
    ("SCRAM-SHA-512", "nobody", "whatever", SCRAM_REFUSED, "unknown user 'nobody'"),
    ("PLAIN", "carol", "wrong", PLAIN_REFUSED, "PLAIN login of 'carol' refused"),
    ("PLAIN", "nobody", "whatever", PLAIN_REFUSED, "PLAIN login of 'nobody' refused"),
])
def test_bad_credentials_are_refused_and_others_served(shared, certs, mechanism, user, password, told, reason):
    broker, ports = shared
    bootstrap = f"127.0.0.1:{ports['SASL_SSL']}"
    refused = _login_error(bootstrap, Security("SASL_SSL", ca=certs.ca, mechanism=mechanism, user=user,
                                               password=password))
    # The client is told Kafka's line, which never says whether the user exists; the log says why.
    assert told in refused, refused
    good = Security("SASL_SSL", ca=certs.ca, mechanism="SCRAM-SHA-512", user="alice", password="alice-secret")
    assert ROUND_TRIPS["confluent-kafka"](bootstrap, good, f"after-bad-login-{mechanism}-{user}") == EXPECTED(20)
    assert "Failed authentication with ('127.0.0.1'" in broker.log_text()
    assert reason in broker.log_text()


def _sasl_socket(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def test_a_mechanism_the_listener_does_not_enable(shared):
    broker, ports = shared
    with _sasl_socket(ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall(request_frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1))
        _, answer = read_response(sock, 17, 1)
        assert answer.error_code == 33   # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"SCRAM-SHA-256", "PLAIN"}
        assert sock.recv(16) == b""      # and the connection closes
    assert "Unsupported SASL mechanism SCRAM-SHA-512" in broker.log_text()


def test_requests_before_authenticating_close_the_connection(shared):
    broker, ports = shared
    with _sasl_socket(ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall(request_frame(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False), 1))
        assert sock.recv(16) == b""
    assert "while waiting for SaslHandshake: ILLEGAL_SASL_STATE" in broker.log_text()


def test_a_frame_over_the_sasl_receive_size_closes_the_connection(shared):
    broker, ports = shared
    with _sasl_socket(ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall((600_000).to_bytes(4, "big"))
        assert sock.recv(16) == b""
    assert "sasl.server.max.receive.size" in broker.log_text()


def _plain_login(sock: socket.socket, user: str, password: str) -> int:
    """Authenticate `sock` with PLAIN over SaslHandshake v1 / SaslAuthenticate v2; the session lifetime (ms)."""
    sock.sendall(request_frame(SaslHandshakeRequest(mechanism="PLAIN"), 1))
    _, handshake = read_response(sock, 17, 1)
    assert handshake.error_code == 0
    sock.sendall(request_frame(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2))
    _, answer = read_response(sock, 36, 2)
    assert answer.error_code == 0, answer.error_message
    return int(answer.session_lifetime.total_seconds() * 1000)


def _metadata(sock: socket.socket, correlation: int) -> None:
    sock.sendall(request_frame(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False), correlation))
    assert read_response(sock, 3, 12)[0] == correlation


def test_sessions_expire_unless_the_client_reauthenticates(start_secure, certs):
    broker, ports = sasl_broker(start_secure, certs, "connections.max.reauth.ms=1500")
    with _sasl_socket(ports["SASL_PLAINTEXT"]) as idle, _sasl_socket(ports["SASL_PLAINTEXT"]) as renewing:
        assert _plain_login(idle, "carol", "carol-secret") == 1500
        assert _plain_login(renewing, "carol", "carol-secret") == 1500
        _metadata(idle, 3)
        deadline = time.monotonic() + 1.6
        # Both sessions run out; one client re-authenticates (KIP-368) and goes on.
        time.sleep(max(0.0, deadline - time.monotonic()))
        _plain_login(renewing, "carol", "carol-secret")
        _metadata(renewing, 4)
        idle.sendall(request_frame(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False), 5))
        assert idle.recv(16) == b""
        # Re-authenticating as someone else is refused.
        renewing.sendall(request_frame(SaslHandshakeRequest(mechanism="PLAIN"), 6))
        assert read_response(renewing, 17, 1)[1].error_code == 0
        renewing.sendall(request_frame(SaslAuthenticateRequest(auth_bytes=b"\0dave\0dave-secret"), 7))
        _, answer = read_response(renewing, 36, 2)
        assert answer.error_code == 58 and "Cannot change principals" in answer.error_message
    assert "expired (connections.max.reauth.ms)" in broker.log_text()


def test_clients_reauthenticate_in_a_long_session(start_secure, certs):
    """librdkafka re-authenticates its connections before connections.max.reauth.ms runs out and goes on
    producing on them: three session lifetimes of acknowledged messages, no connection closed for expiry."""
    broker, ports = sasl_broker(start_secure, certs, "connections.max.reauth.ms=2000")
    security = Security("SASL_SSL", ca=certs.ca, mechanism="SCRAM-SHA-512", user="alice", password="alice-secret")
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", **security.librdkafka()})
    started, sent = time.monotonic(), 0
    while time.monotonic() - started < 6:
        producer.produce("reauth", f"{sent}".encode())
        assert producer.flush(30) == 0
        sent += 1
    assert sent > 10
    assert "expired (connections.max.reauth.ms)" not in broker.log_text()


@pytest.mark.parametrize("password, accepted", [("carol-secret", True), ("wrong", False)])
def test_handshake_v0_then_bare_tokens(shared, password, accepted):
    """Older clients: SaslHandshake v0, then the SASL tokens as bare size-prefixed frames."""
    broker, ports = shared
    with _sasl_socket(ports["SASL_PLAINTEXT"]) as sock:
        sock.sendall(request_frame(SaslHandshakeRequestV0(mechanism="PLAIN"), 1))
        assert read_response(sock, 17, 0)[1].error_code == 0
        token = f"\0carol\0{password}".encode()
        sock.sendall(len(token).to_bytes(4, "big") + token)
        if not accepted:
            assert sock.recv(16) == b""
            return
        assert sock.recv(4) == b"\0\0\0\0"   # PLAIN's empty answer, as a bare frame
        _metadata(sock, 2)
