"""SASL PLAIN: Kafka's JAAS text, the exchange with its answers, the SCRAM fallback, kafka-python's
PLAIN client; and the mechanism registry a listener builds (`logstore.broker.sasl`)."""
from __future__ import annotations

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain

from logstore.broker.authorizer import KafkaPrincipal
from logstore.broker.sasl import MECHANISMS, SaslAuthenticators, check_mechanisms
from logstore.broker.sasl_plain import JaasEntry, PlainServer, parse_jaas, plain_users
from logstore.broker.scram import SCRAM_MECHANISMS, ScramServer, invalid_credentials, new_credential
from logstore.broker.scram_store import ScramCredentialStore
from logstore.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
)

KAFKA_EXAMPLE = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                 'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
BAD_PASSWORD = "Authentication failed: Invalid username or password"


# -- JAAS ----------------------------------------------------------------------------------------

def test_kafkas_documented_example_parses():
    assert parse_jaas(KAFKA_EXAMPLE) == [JaasEntry(
        "org.apache.kafka.common.security.plain.PlainLoginModule", "required",
        {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
         "user_alice": "alice-secret"})]
    assert plain_users(KAFKA_EXAMPLE) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_quotes_escapes_bare_words_and_comments_as_javas_tokenizer_reads_them():
    text = ("org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED // the module\n"
            "  user_a='it\\'s' /* a block\n comment */ user_b=\"q\\\"uote\\\\d\" user_c=bare-word_1\n"
            "  user_d=\"tab\\there\" user_e=\"\\101\\60\" user_f=\"semi;colon = sign\";")
    assert plain_users(text) == {"a": "it's", "b": 'q"uote\\d', "c": "bare-word_1", "d": "tab\there", "e": "A0",
                                 "f": "semi;colon = sign"}
    assert parse_jaas(text)[0].flag == "required"


@pytest.mark.parametrize("text, says", [
    ("", "Login module not specified"),
    ("org.apache.kafka.common.security.plain.PlainLoginModule", "control flag not specified"),
    ("org.apache.kafka.common.security.plain.PlainLoginModule mandatory;", "Invalid login module control flag"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x"', "not terminated by semi-colon"),
    ("org.apache.kafka.common.security.plain.PlainLoginModule required user_a;", "Value not specified for key"),
    ("org.apache.kafka.common.security.plain.PlainLoginModule required user_a=;", "Value not specified for key"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required user_a="open;', "unterminated quoted value"),
    ("org.apache.kafka.common.security.plain.PlainLoginModule required /* open", "unterminated /* comment"),
    ("org.apache.kafka.common.security.plain.PlainLoginModule required; "
     "org.apache.kafka.common.security.plain.PlainLoginModule required;", "should be 1 module"),
    ("org.apache.kafka.common.security.scram.ScramLoginModule required;", "expected org.apache"),
])
def test_a_malformed_jaas_text_is_one_readable_line(text, says):
    with pytest.raises(InvalidConfigError) as refused:
        plain_users(text)
    assert says in str(refused.value) and "\n" not in str(refused.value)


# -- the exchange ----------------------------------------------------------------------------------

USERS = plain_users(KAFKA_EXAMPLE)


def login(token: bytes, users=USERS, scram=None) -> PlainServer:
    server = PlainServer(users, scram)
    assert server.evaluate(token) == b""
    return server


def test_a_jaas_user_logs_in():
    server = login(b"\0alice\0alice-secret")
    assert server.complete and server.principal == KafkaPrincipal("User", "alice")
    assert login(b"alice\0alice\0alice-secret").principal.name == "alice"
    assert not PlainServer(USERS).blocking


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"\0nobody\0alice-secret", b"\0alice\0alice-secre"])
def test_a_wrong_password_and_an_unknown_user_are_told_the_same(token):
    server = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationError) as refused:
        server.evaluate(token)
    assert str(refused.value) == BAD_PASSWORD and not server.complete


def test_an_authorization_id_other_than_the_user_is_refused_with_kafkas_line():
    with pytest.raises(SaslAuthenticationError) as refused:
        PlainServer(USERS).evaluate(b"admin\0alice\0alice-secret")
    assert str(refused.value) == ("Authentication failed: Client requested an authorization id that is different "
                                  "from username")


@pytest.mark.parametrize("token", [b"alice\0alice-secret", b"\0\0alice-secret", b"\0alice\0", b"\0a\0b\0c",
                                   b"\0alice\0\xff"])
def test_a_malformed_token_gets_the_generic_line(token):
    with pytest.raises(SaslAuthenticationError) as refused:
        PlainServer(USERS).evaluate(token)
    assert str(refused.value) == invalid_credentials("PLAIN")


def test_a_second_token_is_out_of_turn():
    server = login(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslStateError):
        server.evaluate(b"\0alice\0alice-secret")
    with pytest.raises(IllegalSaslStateError):
        PlainServer(USERS).principal  # noqa: B018 (the property raises)


def test_a_user_without_a_jaas_entry_logs_in_with_its_scram_credential(tmp_path):
    store = ScramCredentialStore([str(tmp_path)])
    store.set_password("carol", "SCRAM-SHA-256", "carol-256", 4096)
    store.set_password("dave", "SCRAM-SHA-512", "dave-512", 4096)
    store.set_password("dave", "SCRAM-SHA-256", "dave-256", 4096)
    assert PlainServer({}, store).blocking
    assert login(b"\0carol\0carol-256", {}, store).principal.name == "carol"
    assert login(b"\0dave\0dave-512", {}, store).principal.name == "dave"    # SCRAM-SHA-512 is asked first
    for token in (b"\0dave\0dave-256", b"\0carol\0wrong", b"\0erin\0anything"):
        with pytest.raises(SaslAuthenticationError) as refused:
            PlainServer({}, store).evaluate(token)
        assert str(refused.value) == BAD_PASSWORD
    # A JAAS entry wins over a SCRAM credential of the same user.
    assert login(b"\0carol\0from-jaas", {"carol": "from-jaas"}, store).principal.name == "carol"


def test_kafka_pythons_plain_client_logs_in_and_is_refused():
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    server = PlainServer(USERS)
    client.receive(server.evaluate(client.auth_bytes()))
    assert client.is_authenticated() and server.principal.name == "alice"
    wrong = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="nope")
    with pytest.raises(SaslAuthenticationError):
        PlainServer(USERS).evaluate(wrong.auth_bytes())


# -- the registry ---------------------------------------------------------------------------------

def test_check_mechanisms_takes_kafkas_list_and_refuses_what_is_not_served():
    assert check_mechanisms(" SCRAM-SHA-512 ,PLAIN,PLAIN") == ("SCRAM-SHA-512", "PLAIN")
    for text, says in (("GSSAPI", "GSSAPI is not supported"), ("PLAIN,OAUTHBEARER", "OAUTHBEARER is not supported"),
                       ("plain", "unknown mechanism 'plain'"), (" , ", "is empty")):
        with pytest.raises(InvalidConfigError) as refused:
            check_mechanisms(text)
        message = str(refused.value)
        assert says in message and "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in message and "\n" not in message


def test_authenticators_serve_only_what_the_listener_enables(tmp_path):
    store = ScramCredentialStore([str(tmp_path)])
    store.set_password("alice", "SCRAM-SHA-512", "pw", 4096)
    only_scram = SaslAuthenticators(["SCRAM-SHA-512"], None, store)
    assert only_scram.enabled == ("SCRAM-SHA-512",)
    server = only_scram.server("SCRAM-SHA-512")
    assert isinstance(server, ScramServer) and server.mechanism == "SCRAM-SHA-512" and not server.blocking
    assert server.evaluate(b"n,,n=alice,r=abc").startswith(b"r=abc")
    for name in ("PLAIN", "SCRAM-SHA-256", "GSSAPI"):
        with pytest.raises(UnsupportedSaslMechanismError):
            only_scram.server(name)
    everything = SaslAuthenticators(MECHANISMS, KAFKA_EXAMPLE, store)
    plain = everything.server("PLAIN")
    assert plain.evaluate(b"\0admin\0admin-secret") == b"" and plain.principal.name == "admin"
    store.set_password("zed", "SCRAM-SHA-512", "zed-pw", 4096)
    assert everything.server("PLAIN").evaluate(b"\0zed\0zed-pw") == b""     # through zed's SCRAM credential
    with pytest.raises(InvalidConfigError) as refused:
        SaslAuthenticators(["PLAIN"], "org.apache.kafka.common.security.plain.PlainLoginModule required", store)
    assert str(refused.value).startswith("plain.sasl.jaas.config: ")
    with pytest.raises(InvalidConfigError):
        SaslAuthenticators(["GSSAPI"], None, store)


def test_a_scram_server_sees_credentials_added_after_the_listener_was_built(tmp_path):
    store = ScramCredentialStore([str(tmp_path)])
    authenticators = SaslAuthenticators(["SCRAM-SHA-256"], None, store)
    with pytest.raises(SaslAuthenticationError):
        authenticators.server("SCRAM-SHA-256").evaluate(b"n,,n=late,r=abc")
    store.alter({("late", "SCRAM-SHA-256"): new_credential(SCRAM_MECHANISMS["SCRAM-SHA-256"], "pw", 4096)})
    assert authenticators.server("SCRAM-SHA-256").evaluate(b"n,,n=late,r=abc").startswith(b"r=abc")
