"""Brokers with secured listeners, and one with SASL listeners and users, as the SASL, ACL, tool and Spark sink
tests start them."""
from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from broker_process import BrokerProcess, free_port

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


def secure_factory(tmp_dir: Path, started: list[BrokerProcess]):
    """`start(listeners, *overrides) -> (BrokerProcess, {listener name: port})`, each broker added to `started`."""
    def start(listeners: dict[str, str], *overrides: str) -> tuple[BrokerProcess, dict[str, int]]:
        """A broker whose `listeners` are `{name: security protocol}` in order, each on a free port (the first
        is the one the ready line names), with `overrides`; returns it and {listener name: port}."""
        ports = {name: free_port() for name in listeners}
        data_dir = tmp_dir / f"broker{len(started)}"
        data_dir.mkdir()
        first = next(iter(ports.values()))
        settings = (",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
                    ",".join(f"{name}:{protocol}" for name, protocol in listeners.items()))
        broker = BrokerProcess("127.0.0.1", first, data_dir, (
            f"listeners={settings[0]}", f"listener.security.protocol.map={settings[1]}", *overrides))
        started.append(broker)
        return broker.start(), ports
    return start
