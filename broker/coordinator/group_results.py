"""What the classic group calls answer: JoinGroup, SyncGroup, DescribeGroups and ListGroups."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer; `members` (id, instance id, metadata) only for the leader."""

    member_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment."""

    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True)
class MemberDescription:
    """One member as DescribeGroups shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """A group as DescribeGroups shows it (metadata and assignments only when Stable, as Kafka)."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class ListedGroup:
    """A group as ListGroups shows it; `group_type` is "classic" or "consumer" (v5)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str
