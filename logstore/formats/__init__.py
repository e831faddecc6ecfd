"""Pluggable on-disk batch formats.

A format is a module exposing the same functions as `logstore.formats.kafka`
(`iter_entries`, `decode_entry`, `validate_batch`, `encode_batch`, ...).
Segment, index and recovery code asks the format, never the bytes, which is
what lets the format change. Kafka's v2 (reading v0/v1 too) is the default.
"""
from logstore.formats import kafka

FORMATS = {"kafka": kafka}
DEFAULT_FORMAT = kafka


def get_format(name: str = "kafka"):
    """The format module registered under `name`."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown log format {name!r}; known: {sorted(FORMATS)}") from None
