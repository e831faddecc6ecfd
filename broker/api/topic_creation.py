"""What CreateTopics and Metadata's auto-creation share: KRaft's limit on the partitions one request
may create, and the creation itself, off the event loop.

Kafka's controller refuses a request whose topics add up to more than
10,000 partitions (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH) with
POLICY_VIOLATION, before it creates anything; auto-creation on a Metadata
request goes to the controller as one such request, so it is bounded the
same way. A topic is created with fsyncs of its files and directories, so
creation runs in the coordinator pool, one topic after another: each holds
the store's lock only for itself, and a failed one leaves nothing behind.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from logstore.broker import collector
from logstore.broker.api import KioMessage, Request
from logstore.broker.api.kit import Outcome, attempt, coordinate, failure
from logstore.errors import StorageError

# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, and the message its PolicyViolationException carries.
MAX_PARTITIONS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


@dataclass(frozen=True)
class NewTopic:
    """A topic to create: its name, partition count and config overrides."""

    name: str
    partitions: int
    configs: Mapping[str, str | None] = field(default_factory=dict)


def requested_partitions(topic: KioMessage, default_partitions: int) -> int:
    """The partitions a CreateTopics entry asks for, counted as Kafka's controller counts them against the
    limit: its assignments, else `num.partitions` for -1, else the count itself (none if not positive)."""
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return default_partitions
    count: int = topic.num_partitions
    return max(count, 0)


def _create_each(request: Request, topics: Sequence[NewTopic]) -> list[Outcome[int]]:
    broker = request.broker
    outcomes: list[Outcome[int]] = []
    for topic in topics:
        try:
            outcomes.append(attempt(request, broker.create_topic, topic.name, topic.partitions, topic.configs))
        except OSError as exc:
            # Out of descriptors or space: this topic is not created (the store removes what it began), the
            # client hears KAFKA_STORAGE_ERROR, and the next topic is tried on its own.
            outcomes.append(failure(request, StorageError(f"topic {topic.name!r} could not be created: {exc}")))
    return outcomes


async def create_topics(request: Request, topics: Sequence[NewTopic]) -> list[Outcome[int]]:
    """Create each topic in turn in the coordinator pool; each one's outcome (its partition count)."""
    if not topics:
        return []
    done = await coordinate(request, _create_each, request, topics)
    # `_create_each` turns every Kafka error into its topic's outcome, so the call itself cannot fail.
    collector.created(sum(outcome.result for outcome in done.result if outcome.ok))
    return done.result
