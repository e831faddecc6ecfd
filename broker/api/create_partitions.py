"""CreatePartitions (37), v0-3: grow a topic to a new partition count, as Kafka's controller answers.

Each topic is checked as ReplicationControlManager.createPartitions checks it
(its messages too): an unknown topic is UNKNOWN_TOPIC_OR_PARTITION; a count
equal to the current one or below it is INVALID_PARTITIONS; `assignments`,
when given, must have one entry per new partition, each naming exactly this
broker once (the topic's replication factor is 1), else
INVALID_REPLICA_ASSIGNMENT. `validate_only` checks without growing.

As Kafka's ControllerApis: a name given more than once answers INVALID_REQUEST
"Duplicate topic name." and is not grown. The partitions one request may add
are bounded like CreateTopics' (`topic_creation`): more than 10,000 in all
and every topic answers POLICY_VIOLATION, nothing grown.

The coordinators' internal topics are refused with INVALID_REQUEST: here a
group or transactional id is found by hashing over the live partition count
of its topic, so growing one would move every group and transaction to
another partition and lose its state (Kafka keeps the count its coordinators
started with, and its documentation warns against growing them).

A topic grows in the coordinator pool (it makes and fsyncs directories),
one after another; a growth that fails part-way removes what it made
(`logstore.partition_growth`). Metadata shows the new partitions at once: its
cached rows are keyed by the partition count. KIP-848 groups see the new count
at their members' next heartbeat and assign the new partitions; classic
groups' leaders see it in Metadata and rebalance.

Authorization (Kafka's ControllerApis): ALTER on each TOPIC, else that topic
answers TOPIC_AUTHORIZATION_FAILED whether it exists or not.
"""
from __future__ import annotations

from collections import Counter

from logstore.broker import collector
from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, Outcome, ResourceType, authorized, coordinate, refuse
from logstore.broker.api.topic_creation import MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS
from logstore.broker.coordinator.internal_topics import INTERNAL_TOPICS
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 37
DUPLICATE = "Duplicate topic name."


def assignment_error(assigned: list[int], node_id: int, partition: int) -> str | None:
    """Why a manual assignment of one new partition is refused (Kafka's message), None if it is this broker.

    As Kafka's validateManualPartitionAssignment, the broker ids are walked sorted: an id that is not
    registered comes first, then a repeat, then a count other than the topic's one replica.
    """
    if not assigned:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(assigned):
        if broker_id != node_id:
            return (f"The manual partition assignment includes broker {broker_id}, but no such broker is "
                    "registered.")
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {previous} more than once."
        previous = broker_id
    if len(assigned) != 1:
        return (f"The manual partition assignment includes a partition with {len(assigned)} replica(s), but this "
                "is not consistent with previous partitions, which have 1 replica(s).")
    return None


def _check(request: Request, topic: KioMessage, current: int | None) -> Outcome[None]:
    """Kafka's refusal of growing `topic` (its count now `current`, None: unknown), or ok."""
    name, count = topic.name, topic.count
    if current is None:
        return refuse(ErrorCode.unknown_topic_or_partition)
    if count == current:
        return refuse(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if count < current:
        return refuse(ErrorCode.invalid_partitions,
                      f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
    additional = count - current
    if topic.assignments is not None:
        if len(topic.assignments) != additional:
            return refuse(ErrorCode.invalid_replica_assignment,
                          f"Attempted to add {additional} additional partition(s), but only "
                          f"{len(topic.assignments)} assignment(s) were specified.")
        for offset, assignment in enumerate(topic.assignments):
            why = assignment_error(list(assignment.broker_ids), request.broker.node_id, current + offset)
            if why is not None:
                return refuse(ErrorCode.invalid_replica_assignment, why)
    if name in INTERNAL_TOPICS:
        return refuse(ErrorCode.invalid_request,
                      f"{name} is an internal topic: its partition count decides where each of its keys lives, "
                      "so it cannot grow")
    return Outcome(None)


@api(KEY, 0, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Grow each topic asked to its new count unless a check refuses it (or only check, with validate_only)."""
    store = request.broker.store
    version = request.version
    given = Counter(topic.name for topic in body.topics)
    single = {topic.name: topic for topic in body.topics if given[topic.name] == 1}
    allowed = authorized(request, AclOperation.ALTER, ResourceType.TOPIC, list(single))
    existing = store.topics()
    adding = sum(max(topic.count - existing[name], 0) for name, topic in single.items()
                 if name in allowed and name in existing)
    answers: dict[str, tuple[ErrorCode, str | None]] = {}
    if adding > MAX_PARTITIONS_PER_REQUEST:
        # Refused whole before anything grows, as CreateTopics is.
        answers = dict.fromkeys(given, (ErrorCode.policy_violation, TOO_MANY_PARTITIONS))
    for name in given:
        if name in answers:
            continue
        if given[name] > 1:
            answers[name] = (ErrorCode.invalid_request, DUPLICATE)
            continue
        if name not in allowed:
            answers[name] = (ErrorCode.topic_authorization_failed, None)
            continue
        topic = single[name]
        # Asked again here: a request before this one may have grown it meanwhile.
        checked = _check(request, topic, store.topics().get(name))
        if checked.ok and not body.validate_only:
            grown = await coordinate(request, store.create_partitions, name, topic.count)
            answers[name] = (grown.error, grown.message)
            if grown.ok:
                collector.created(len(grown.result))
        else:
            answers[name] = (checked.error, checked.message)
    result_cls = response_type(KEY, version, "CreatePartitionsTopicResult")
    return build(response_type(KEY, version), throttle_time=ZERO_MS, results=tuple(
        build(result_cls, name=name, error_code=error, error_message=message)
        for name, (error, message) in answers.items()))
