"""A broker with SASL listeners and users, as the SASL, ACL and tool tests start it."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_carol="carol-secret" user_dave="dave-secret";')


def sasl_broker(start_secure, certs, *extra: str):
    """A broker with PLAINTEXT (admin), SASL_SSL and SASL_PLAINTEXT listeners, and SCRAM users alice and bob
    added at run time through AlterUserScramCredentials."""
    broker, ports = start_secure(
        {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.broker_keystore}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}", *extra)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # One request per mechanism: Kafka 4's controller refuses two changes of one user in one request.
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), password.encode())
                   for user, password in PASSWORDS.items()]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
    return broker, ports
