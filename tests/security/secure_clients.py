"""Real clients over secured listeners: each client's settings for TLS and SASL, and one round trip per
client (a committed transaction of messages, then a consumer group reading them back read_committed)."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

TIMEOUT = 60.0   # s: a bound on any one client operation


@dataclass(frozen=True)
class Security:
    """How a client connects: Kafka's security protocol, TLS files, SASL mechanism and credentials."""

    protocol: str = "PLAINTEXT"
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka's (and kcat's -X) settings."""
        config = {"security.protocol": self.protocol}
        if self.ca:
            config["ssl.ca.location"] = str(self.ca)
        if self.cert:
            config["ssl.certificate.location"] = str(self.cert)
            config["ssl.key.location"] = str(self.key)
        if self.mechanism:
            config.update({"sasl.mechanism": self.mechanism, "sasl.username": self.user or "",
                           "sasl.password": self.password or ""})
        return config

    def kafka_python(self) -> dict[str, object]:
        """kafka-python's settings."""
        config: dict[str, object] = {"security_protocol": self.protocol}
        if self.ca:
            config.update(ssl_cafile=str(self.ca), ssl_check_hostname=True)
        if self.cert:
            config.update(ssl_certfile=str(self.cert), ssl_keyfile=str(self.key))
        if self.mechanism:
            config.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.user,
                          sasl_plain_password=self.password)
        return config

    def aiokafka(self) -> dict[str, object]:
        """aiokafka's settings."""
        config: dict[str, object] = {"security_protocol": self.protocol}
        if self.ca:
            config["ssl_context"] = create_ssl_context(
                cafile=str(self.ca), certfile=str(self.cert) if self.cert else None,
                keyfile=str(self.key) if self.key else None)
        if self.mechanism:
            config.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.user,
                          sasl_plain_password=self.password)
        return config


def _messages(count: int) -> list[bytes]:
    return [f"message {i}".encode() for i in range(count)]


def confluent_round_trip(bootstrap: str, security: Security, topic: str, count: int = 20) -> list[bytes]:
    """Produce `count` messages in a committed transaction, read them back in a group; the values read."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{uuid.uuid4()}",
                         **security.librdkafka()})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for value in _messages(count):
        producer.produce(topic, value)
    producer.commit_transaction(TIMEOUT)
    return confluent_read(bootstrap, {"isolation.level": "read_committed", **security.librdkafka()}, topic,
                          f"group-{uuid.uuid4()}", count)


def confluent_read(bootstrap: str, settings: dict[str, str], topic: str, group: str, count: int, *,
                   timeout: float = TIMEOUT) -> list[bytes]:
    """The first `count` values of `topic` from its start, read with confluent-kafka in consumer group `group`
    (which commits them), each poll waiting at most `timeout` s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         **settings})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < count:
            message = consumer.poll(timeout)
            assert message is not None, f"confluent-kafka read {len(values)} of {count}"
            assert message.error() is None, message.error()
            values.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def kafka_python_round_trip(bootstrap: str, security: Security, topic: str, count: int = 20) -> list[bytes]:
    """As `confluent_round_trip`, with kafka-python."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"txn-{uuid.uuid4()}",
                             **security.kafka_python())
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for value in _messages(count):
            producer.send(topic, value)
        producer.commit_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"group-{uuid.uuid4()}",
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             consumer_timeout_ms=int(TIMEOUT * 1000), **security.kafka_python())
    try:
        values = [record.value for _, record in zip(range(count), consumer)]
        consumer.commit()
    finally:
        consumer.close()
    return values


def aiokafka_round_trip(bootstrap: str, security: Security, topic: str, count: int = 20) -> list[bytes]:
    """As `confluent_round_trip`, with aiokafka."""
    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"txn-{uuid.uuid4()}",
                                    **security.aiokafka())
        await producer.start()
        try:
            async with producer.transaction():
                for value in _messages(count):
                    await producer.send(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"group-{uuid.uuid4()}",
                                    auto_offset_reset="earliest", isolation_level="read_committed",
                                    **security.aiokafka())
        await consumer.start()
        values: list[bytes] = []
        try:
            while len(values) < count:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), TIMEOUT)
                values += [record.value for records in batch.values() for record in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return values
    return asyncio.run(run())


def kcat_round_trip(bootstrap: str, security: Security, topic: str, count: int = 20) -> list[bytes]:
    """Produce `count` messages with kcat -P and read them back with kcat -C in a group (-G)."""
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is installed by `make kcat`"
    options = [item for name, value in security.librdkafka().items() for item in ("-X", f"{name}={value}")]
    produced = subprocess.run([kcat, "-b", bootstrap, *options, "-P", "-t", topic],
                              input=b"".join(value + b"\n" for value in _messages(count)),
                              capture_output=True, timeout=TIMEOUT)
    assert produced.returncode == 0, produced.stderr
    read = subprocess.run([kcat, "-b", bootstrap, *options, "-C", "-t", topic, "-o", "beginning", "-e",
                           "-c", str(count)], capture_output=True, timeout=TIMEOUT)
    assert read.returncode == 0, read.stderr
    return read.stdout.splitlines()


ROUND_TRIPS = {"confluent-kafka": confluent_round_trip, "kafka-python": kafka_python_round_trip,
               "aiokafka": aiokafka_round_trip, "kcat": kcat_round_trip}
EXPECTED = _messages
