"""The broker: a single-node Kafka broker over a logstore store (`logstore broker`)."""
