"""Share sessions (KIP-932): which partitions a member fetches from this broker, and the epoch that orders
its requests.

A ShareFetch with epoch 0 opens a session (replacing the member's old one)
with the partitions it names; each later request carries the next epoch and
names only partitions to add (and, in ForgottenTopicsData, to drop); epoch
-1 closes the session after the request's acknowledgements. A wrong epoch is
INVALID_SHARE_SESSION_EPOCH, a session this broker does not have
SHARE_SESSION_NOT_FOUND, and a new one past `group.share.max.share.sessions`
SHARE_SESSION_LIMIT_REACHED, as Kafka's ShareSessionCache answers.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from logstore.errors import (
    InvalidShareSessionEpochError,
    ShareSessionLimitReachedError,
    ShareSessionNotFoundError,
)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# (topic id, partition index)
SessionPartition = tuple[bytes, int]


@dataclass
class ShareSession:
    """One member's session: the epoch its next request must carry and the partitions it fetches."""

    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[SessionPartition, None] = field(default_factory=dict)


class ShareSessions:
    """The broker's share sessions, keyed (group id, member id). Task-safe (one lock)."""

    def __init__(self, max_sessions: int) -> None:
        self._max = max_sessions
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def fetch(self, group_id: str, member_id: str, epoch: int, added: Iterable[SessionPartition],
              forgotten: Iterable[SessionPartition]) -> tuple[ShareSession, bool]:
        """The session a ShareFetch runs in, updated by it, and whether the request closes it."""
        key = (group_id, member_id)
        with self._lock:
            if epoch == INITIAL_EPOCH:
                if key not in self._sessions and len(self._sessions) >= self._max:
                    raise ShareSessionLimitReachedError(
                        f"The share session cache already holds {self._max} sessions")
                session = ShareSession(group_id, member_id)
                self._sessions[key] = session
            else:
                session = self._current(key, epoch)
            for partition in forgotten:
                session.partitions.pop(partition, None)
            for partition in added:
                session.partitions[partition] = None
            return session, epoch == FINAL_EPOCH

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> tuple[ShareSession, bool]:
        """The session a ShareAcknowledge runs in (epoch 0 cannot open one), and whether it closes it."""
        with self._lock:
            if epoch == INITIAL_EPOCH:
                raise InvalidShareSessionEpochError("A ShareAcknowledge cannot open a share session")
            return self._current((group_id, member_id), epoch), epoch == FINAL_EPOCH

    def _current(self, key: tuple[str, str], epoch: int) -> ShareSession:
        """The member's session, moved to its next epoch (under the lock); a final epoch removes it."""
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionNotFoundError(f"No share session for member {key[1]} of group {key[0]}")
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            return session
        if epoch != session.next_epoch:
            raise InvalidShareSessionEpochError(
                f"Share session epoch {epoch} is not the expected {session.next_epoch}")
        session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session

    def remove_member(self, group_id: str, member_id: str) -> ShareSession | None:
        """Drop a member's session (it left its group); the session, if there was one."""
        with self._lock:
            return self._sessions.pop((group_id, member_id), None)

    def remove_group(self, group_id: str) -> None:
        """Drop every session of a group."""
        with self._lock:
            for key in [key for key in self._sessions if key[0] == group_id]:
                del self._sessions[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
