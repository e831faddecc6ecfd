"""logstore: a Kafka-compatible, exactly-once log storage engine."""
__version__ = "0.1.0"
