"""A share-group member in its own process, to be SIGKILLed while it holds records.

Usage: share_member.py BOOTSTRAP GROUP TOPIC. It polls in explicit mode until
it gets records, prints their offsets as one JSON line, and then waits on
stdin without acknowledging them: the records stay locked to it.
"""
from __future__ import annotations

import json
import sys

from confluent_kafka import ShareConsumer


def main() -> None:
    """Acquire one batch, report it, hold it."""
    bootstrap, group, topic = sys.argv[1:4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    while True:
        got = [m for m in consumer.poll(0.5) if m.error() is None]
        if got:
            print(json.dumps([m.offset() for m in got]), flush=True)
            sys.stdin.read()
            return


if __name__ == "__main__":
    main()
