"""What the APIs of KIP-848 consumer groups and KIP-932 share groups share: a heartbeat's
authorization and answer, and the shape of a described group. Their request and response
schemas name these fields alike; the keys (68/76, 69/77) differ."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Protocol, TypeVar

from kio.static.primitive import i32Timedelta

from logstore.broker.api import KioMessage, Request, ResponsePayload, build, response_type
from logstore.broker.api.kit import AclOperation, Outcome, ResourceType, authorized, denied, error_code
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

UNKNOWN_OPERATIONS = -2147483648
TopicRows = Iterable[tuple[bytes, str, tuple[int, ...]]]   # (topic id, name, partitions) per topic


class HeartbeatResult(Protocol):
    """What the coordinator answers a heartbeat (`assignment` by topic id; None: unchanged)."""

    @property
    def member_id(self) -> str: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def heartbeat_interval_ms(self) -> int: ...
    @property
    def assignment(self) -> tuple[tuple[bytes, tuple[int, ...]], ...] | None: ...


def heartbeat_refusal(request: Request, body: KioMessage) -> ErrorCode | None:
    """Kafka's checks before the coordinator: READ on the group (GROUP_AUTHORIZATION_FAILED), then
    DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED); None when both pass."""
    names = body.subscribed_topic_names or ()
    refused = denied(request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    if not refused and len(authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(set(names)):
        refused = ErrorCode.topic_authorization_failed
    return refused or None


def heartbeat_failed(key: int, version: int, error: ErrorCode, message: str | None = None) -> ResponsePayload:
    """A heartbeat's answer with an error: no member, epoch -1, no assignment."""
    return build(response_type(key, version), throttle_time=ZERO_MS, error_code=error, error_message=message,
                 member_id=None, member_epoch=-1, heartbeat_interval=ZERO_MS, assignment=None)


def heartbeat_answer(key: int, version: int, outcome: Outcome[HeartbeatResult]) -> ResponsePayload:
    """A heartbeat's answer: the coordinator's error, or the member's id, epoch and new assignment."""
    if not outcome.ok:
        return heartbeat_failed(key, version, outcome.error, outcome.message)
    result = outcome.result
    assignment = None
    if result.assignment is not None:
        partitions_cls = response_type(key, version, "TopicPartitions")
        assignment = build(response_type(key, version, "Assignment"), topic_partitions=tuple(
            build(partitions_cls, topic_id=uuid.UUID(bytes=topic_id), partitions=partitions)
            for topic_id, partitions in result.assignment))
    return build(response_type(key, version), throttle_time=ZERO_MS, error_code=ErrorCode.none, error_message=None,
                 member_id=result.member_id, member_epoch=result.member_epoch,
                 heartbeat_interval=i32Timedelta.parse(timedelta(milliseconds=result.heartbeat_interval_ms)),
                 assignment=assignment)


class GroupDescription(Protocol):
    """A described group, or the error it answers instead."""

    @property
    def group_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def group_epoch(self) -> int: ...
    @property
    def assignment_epoch(self) -> int: ...
    @property
    def assignor_name(self) -> str: ...
    @property
    def members(self) -> Sequence[object]: ...
    @property
    def error(self) -> LogStoreError | None: ...


D = TypeVar("D", bound=GroupDescription)


async def describe_groups(request: Request, key: int, group_ids: Sequence[str],
                          describe: Callable[[list[str]], Iterable[D]],
                          members: Callable[[D, Callable[[TopicRows], KioMessage]], tuple[KioMessage, ...]]
                          ) -> ResponsePayload:
    """The Describe answer for `group_ids`, in order: GROUP_AUTHORIZATION_FAILED for a group the
    principal may not DESCRIBE (Kafka's KafkaApis), else what the coordinator's `describe` gives, a
    group with the members `members` builds (from the group and a builder of an assignment from topic
    rows) or its error. Authorized operations are "not requested"."""
    version = request.version
    allowed = authorized(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_ids)
    described: dict[str, D] = {d.group_id: d for d in await request.broker.coordinate(
        describe, [g for g in group_ids if g in allowed])}
    group_cls = response_type(key, version, "DescribedGroup")
    assignment_cls = response_type(key, version, "Assignment")
    partitions_cls = response_type(key, version, "TopicPartitions")

    def assignment(rows: TopicRows) -> KioMessage:
        return build(assignment_cls, topic_partitions=tuple(
            build(partitions_cls, topic_id=uuid.UUID(bytes=topic_id), topic_name=name, partitions=partitions)
            for topic_id, name, partitions in rows))

    groups = []
    for group_id in group_ids:
        d = described.get(group_id)
        if d is None or d.error is not None:
            error = ErrorCode.group_authorization_failed if d is None else error_code(request, d.error)
            groups.append(build(group_cls, error_code=error, error_message=None if d is None else str(d.error),
                                group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                                assignor_name="", members=(), authorized_operations=UNKNOWN_OPERATIONS))
            continue
        groups.append(build(group_cls, error_code=ErrorCode.none, error_message=None, group_id=d.group_id,
                            group_state=d.state, group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch,
                            assignor_name=d.assignor_name, members=members(d, assignment),
                            authorized_operations=UNKNOWN_OPERATIONS))
    return build(response_type(key, version), throttle_time=ZERO_MS, groups=tuple(groups))
