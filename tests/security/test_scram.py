"""The SCRAM server exchange: RFC vectors, properties over users and passwords, Kafka's refusals,
and kafka-python's SCRAM client driving it in-process."""
from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from logstore.broker.authorizer import KafkaPrincipal
from logstore.broker.scram import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    invalid_credentials,
    new_credential,
    salted_password,
    sasl_name,
    scram_mechanism,
    username,
)
from logstore.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError
from scram_client import RfcScramClient

SHA256, SHA512 = SCRAM_MECHANISMS["SCRAM-SHA-256"], SCRAM_MECHANISMS["SCRAM-SHA-512"]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def server_for(mechanism: ScramMechanism, users: dict[str, ScramCredential], nonce: str | None = None) -> ScramServer:
    if nonce is None:
        return ScramServer(mechanism, users.get)
    return ScramServer(mechanism, users.get, nonce=lambda: nonce)


def exchange(server: ScramServer, client: RfcScramClient) -> bytes:
    server_first = server.evaluate(client.first())
    return server.evaluate(client.final(server_first))


# -- the RFCs' examples --------------------------------------------------------------------------

def test_rfc7677_sha256_example_gives_the_exact_server_messages():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    users = {"user": new_credential(SHA256, "pencil", 4096, salt=salt)}
    server = server_for(SHA256, users, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    server_final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                   b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.principal == KafkaPrincipal("User", "user")


def test_rfc5802_sha1_example_adapted_gives_the_exact_server_messages():
    sha1 = ScramMechanism("SCRAM-SHA-1", "sha1", 0)
    users = {"user": new_credential(sha1, "pencil", 4096, salt=base64.b64decode("QSXCR+Q6sek8bf92"))}
    server = server_for(sha1, users, nonce="3rfcNHYJY1ZVvWVs7j")
    assert server.evaluate(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL") == (
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert server.evaluate(b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
                           b"p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=") == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="


def test_a_credential_from_the_salted_password_equals_one_from_the_password():
    salt = b"0123456789abcdef"
    for mechanism in (SHA256, SHA512):
        salted = salted_password(mechanism, "pässword", salt, 4096)
        assert credential_from_salted_password(mechanism, salt, salted, 4096) == new_credential(
            mechanism, "pässword", 4096, salt=salt)


def test_mechanisms_are_known_by_name_and_by_kafkas_wire_type():
    assert scram_mechanism(1) is SHA256 and scram_mechanism(2) is SHA512
    assert scram_mechanism("SCRAM-SHA-512") is SHA512
    for unknown in (0, 3, "SCRAM-SHA-1", "scram-sha-256"):
        with pytest.raises(UnsupportedSaslMechanismError):
            scram_mechanism(unknown)


def test_saslname_escaping_round_trips_and_refuses_a_bare_equals_sign():
    assert sasl_name("a,b=c") == "a=2Cb=3Dc"
    assert username("a=2Cb=3Dc") == "a,b=c"
    for bad in ("a=b", "a=2", "", "=3d"):
        with pytest.raises(ValueError):
            username(bad)


# -- properties ------------------------------------------------------------------------------------

users_st = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20)
passwords_st = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@FAST
@given(user=users_st, password=passwords_st, sha512=st.booleans())
def test_any_user_and_password_complete_with_an_rfc_client(user, password, sha512):
    mechanism = SHA512 if sha512 else SHA256
    server = server_for(mechanism, {user: new_credential(mechanism, password, 4096)})
    client = RfcScramClient(mechanism.hash_name, user, password, "clientnonce")
    assert client.check(exchange(server, client))
    assert server.complete and server.principal == KafkaPrincipal("User", user)


@FAST
@given(data=st.data())
def test_any_single_flipped_byte_of_the_proof_fails(data):
    credential = new_credential(SHA256, "secret", 4096, salt=b"fixed-salt")
    server = server_for(SHA256, {"alice": credential})
    client = RfcScramClient("sha256", "alice", "secret", "n0nce")
    client.final(server.evaluate(client.first()))
    proof = bytearray(client.proof)
    index = data.draw(st.integers(0, len(proof) - 1))
    proof[index] ^= data.draw(st.integers(1, 255))
    token = f"{client.without_proof},p={base64.b64encode(bytes(proof)).decode()}".encode()
    with pytest.raises(SaslAuthenticationError) as failed:
        server.evaluate(token)
    assert str(failed.value) == invalid_credentials("SCRAM-SHA-256")
    assert not server.complete


@FAST
@given(password=passwords_st)
def test_a_wrong_password_fails_with_kafkas_generic_line(password):
    server = server_for(SHA512, {"alice": new_credential(SHA512, "right", 4096, salt=b"s")})
    client = RfcScramClient("sha512", "alice", "right" + password, "abc")
    with pytest.raises(SaslAuthenticationError) as failed:
        exchange(server, client)
    assert str(failed.value) == ("Authentication failed during authentication due to invalid credentials with SASL "
                                 "mechanism SCRAM-SHA-512")


# -- nonces and the state machine ------------------------------------------------------------------

USERS = {"alice": new_credential(SHA256, "secret", 4096)}


def test_a_client_final_replayed_into_another_exchange_fails():
    first = server_for(SHA256, USERS)
    client = RfcScramClient("sha256", "alice", "secret", "samenonce")
    recorded = client.final(first.evaluate(client.first()))
    assert client.check(first.evaluate(recorded))
    second = server_for(SHA256, USERS)
    second.evaluate(client.first())     # a new server nonce
    with pytest.raises(SaslAuthenticationError):
        second.evaluate(recorded)


def test_a_client_final_with_another_nonce_fails():
    server = server_for(SHA256, USERS, nonce="SERVER")
    client = RfcScramClient("sha256", "alice", "secret", "client")
    server_first = server.evaluate(client.first())
    forged = server_first.replace(b"r=clientSERVER", b"r=clientSERVEX")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(client.final(forged))


def test_a_client_final_naming_another_nonce_fails_even_when_its_proof_covers_it():
    server = server_for(SHA256, USERS, nonce="SERVER")
    client = RfcScramClient("sha256", "alice", "secret", "client")
    with pytest.raises(SaslAuthenticationError) as failed:
        server.evaluate(client.final(server.evaluate(client.first()), nonce="clientOTHER"))
    assert failed.value.reason == "Invalid client nonce in the final client message."


def test_out_of_order_messages_are_refused():
    server = server_for(SHA256, USERS)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"c=biws,r=abc,p=AAAA")    # a client-final first
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"n,,n=alice,r=abc")        # anything after a failure
    done = server_for(SHA256, USERS)
    client = RfcScramClient("sha256", "alice", "secret", "abc")
    exchange(done, client)
    with pytest.raises(IllegalSaslStateError):
        done.evaluate(client.first())               # anything after success
    fresh = server_for(SHA256, USERS)
    with pytest.raises(IllegalSaslStateError):
        fresh.principal                             # noqa: B018 (the property raises)
    fresh.evaluate(client.first())
    with pytest.raises(SaslAuthenticationError):
        fresh.evaluate(client.first())              # a second client-first


# -- Kafka's refusals ----------------------------------------------------------------------------

GENERIC = invalid_credentials("SCRAM-SHA-256")


@pytest.mark.parametrize("token", [
    b"n,,n=nobody,r=abc",                      # unknown user: refused at once, as Kafka does
    b"p=tls-unique,,n=alice,r=abc",            # channel binding
    b"x,,n=alice,r=abc",                       # not a gs2 flag
    b"n,,m=ext,n=alice,r=abc",                 # the reserved m= attribute
    b"n,,n=alice,r=abc,tokenauth=true",        # a delegation-token login
    b"n,,n=alice,r=a,b",                       # a broken extension
    b"n,,n=al=ice,r=abc",                      # a bare = in the saslname
    b"n,,n=alice,r=",                          # no nonce
    b"n,,n=,r=abc",                            # no user
    b"n,,r=abc,n=alice",                       # fields out of order
    b"n,,n=alice",                             # too short
    b"\xff\xfe",                               # not UTF-8
])
def test_a_bad_client_first_gets_the_generic_line(token):
    server = server_for(SHA256, USERS)
    with pytest.raises(SaslAuthenticationError) as failed:
        server.evaluate(token)
    assert str(failed.value) == GENERIC
    assert failed.value.code == 58


def test_an_unknown_user_and_a_wrong_password_are_told_the_same():
    unknown = server_for(SHA256, USERS)
    with pytest.raises(SaslAuthenticationError) as first:
        exchange(unknown, RfcScramClient("sha256", "nobody", "secret", "abc"))
    wrong = server_for(SHA256, USERS)
    with pytest.raises(SaslAuthenticationError) as second:
        exchange(wrong, RfcScramClient("sha256", "alice", "wrong", "abc"))
    assert str(first.value) == str(second.value) == GENERIC
    assert first.value.reason != second.value.reason   # the broker's log tells them apart


def test_an_authorization_id_must_be_the_user():
    client = RfcScramClient("sha256", "alice", "secret", "abc", authzid="alice")
    assert client.check(exchange(server_for(SHA256, USERS), client))
    with pytest.raises(SaslAuthenticationError) as failed:
        exchange(server_for(SHA256, USERS), RfcScramClient("sha256", "alice", "secret", "abc", authzid="admin"))
    assert str(failed.value) == ("Authentication failed: Client requested an authorization id that is different "
                                 "from username")


def test_the_y_flag_is_accepted_and_c_must_echo_the_gs2_header():
    client = RfcScramClient("sha256", "alice", "secret", "abc", flag="y")
    assert client.check(exchange(server_for(SHA256, USERS), client))
    server = server_for(SHA256, USERS)
    client = RfcScramClient("sha256", "alice", "secret", "abc", flag="y")
    final = client.final(server.evaluate(client.first())).replace(b"c=eSws", b"c=biws")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(final)


def test_c_naming_another_gs2_header_fails_even_when_the_proof_covers_it():
    server = server_for(SHA256, USERS)
    client = RfcScramClient("sha256", "alice", "secret", "abc", flag="y")
    server_first = server.evaluate(client.first())
    client.gs2 = "n,,"       # signs c=biws, though it sent "y,,"
    with pytest.raises(SaslAuthenticationError) as failed:
        server.evaluate(client.final(server_first))
    assert failed.value.reason == "channel binding c= does not match the gs2 header"


def test_unknown_extensions_are_ignored_as_kafka_ignores_them():
    client = RfcScramClient("sha256", "alice", "secret", "abc", extensions=",foo=bar,tokenauth=false")
    assert client.check(exchange(server_for(SHA256, USERS), client))


def test_a_credential_below_4096_iterations_is_refused():
    weak = {"alice": new_credential(SHA256, "secret", 4095)}
    with pytest.raises(SaslAuthenticationError):
        server_for(SHA256, weak).evaluate(b"n,,n=alice,r=abc")


def test_a_short_or_non_base64_proof_fails():
    for proof in (b"AAAA", b"!!!!", b""):
        server = server_for(SHA256, USERS)
        client = RfcScramClient("sha256", "alice", "secret", "abc")
        client.final(server.evaluate(client.first()))
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(client.without_proof.encode() + b",p=" + proof)


def test_a_credential_does_not_show_its_keys():
    assert "hidden" in repr(USERS["alice"]) and USERS["alice"].salt.hex() not in repr(USERS["alice"])


# -- kafka-python's SCRAM client ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_scram_client_logs_in(name):
    mechanism = SCRAM_MECHANISMS[name]
    server = server_for(mechanism, {"alice": new_credential(mechanism, "alice-secret", 8192)})
    client = ScramClient("alice", "alice-secret", name)
    client.process_server_first_message(server.evaluate(client.first_message()))
    client.process_server_final_message(server.evaluate(client.final_message()))  # raises on a wrong signature
    assert server.complete and server.principal == KafkaPrincipal("User", "alice")


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_scram_client_with_a_wrong_password_is_refused(name):
    mechanism = SCRAM_MECHANISMS[name]
    server = server_for(mechanism, {"alice": new_credential(mechanism, "alice-secret", 4096)})
    client = ScramClient("alice", "not-it", name)
    client.process_server_first_message(server.evaluate(client.first_message()))
    with pytest.raises(SaslAuthenticationError) as failed:
        server.evaluate(client.final_message())
    assert str(failed.value) == invalid_credentials(name)
