"""What a handler may reach of the broker: exactly the attributes the APIs use, typed.

The server's `Broker` is one; a test or an embedding can hand handlers any
other object with these members. Handlers run on the event loop: anything
that blocks on an fsync goes through `coordinate` (a thread pool).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from logstore.broker.authorizer import Authorizer
    from logstore.broker.config import BrokerConfig
    from logstore.broker.coordinator.group import GroupCoordinator
    from logstore.broker.coordinator.transaction import TransactionCoordinator
    from logstore.broker.durable_waits import Durable
    from logstore.broker.group_configs import GroupConfigStore
    from logstore.broker.metrics import RequestMetrics
    from logstore.broker.producer_ids import ProducerIdAllocator
    from logstore.broker.quotas import ClientQuotas
    from logstore.broker.scram_store import ScramCredentialStore
    from logstore.broker.share.coordinator import ShareCoordinator
    from logstore.manager import LogManager

__all__ = ["BrokerContext"]

_T = TypeVar("_T")


class BrokerContext(Protocol):
    """The broker as handlers see it: settings, the store, the coordinators, the authorizer, and where
    long-polling Fetches park until their partitions get appends. Owned by the server; used from the
    event loop."""

    config: BrokerConfig
    node_id: int
    cluster_id: str
    store: LogManager
    producer_ids: ProducerIdAllocator
    transactions: TransactionCoordinator
    groups: GroupCoordinator
    # Each group's configs (config resource GROUP): DescribeConfigs and (Incremental)AlterConfigs.
    group_configs: GroupConfigStore
    quotas: ClientQuotas
    scram: ScramCredentialStore
    authorizer: Authorizer
    # Share groups' sessions and share-partitions (ShareFetch, ShareAcknowledge).
    share: ShareCoordinator
    closing: bool
    # Encoded answers that only change with the topics, per API key (Metadata).
    response_cache: dict[int, dict[Hashable, bytes]]
    # The per-request counters `metrics.port` serves (None while it is off).
    metrics: RequestMetrics | None

    def group_setting(self, group_id: str, name: str) -> Any:
        """A group config's value for a group (its own, else the broker's default)."""

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str | None] | None = None) -> int:
        """Create a topic (Kafka's name rules); returns its partition count."""

    def delete_topic(self, name: str) -> None:
        """Delete a topic, its directories and every group's offsets of it (blocks on fsyncs)."""

    def notify_appended(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Wake the Fetches parked on these partitions (None: every parked Fetch)."""

    async def wait_for_appends(self, partitions: Collection[tuple[str, int]], timeout: float,
                               gone: asyncio.Future[None] | None = None) -> None:
        """Return at the next append to one of `partitions`, after `timeout` s, when `gone` resolves, or at
        shutdown."""

    async def coordinate(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking call (a coordinator's, an fsync) in the broker's thread pool."""

    async def until_durable(self, waits: Sequence[tuple[Durable, int]], timeout: float) -> list[BaseException | None]:
        """Wait until each (log, offset) is durable below offset, at most `timeout` s: per wait None, the
        storage error that failed it, or NotDurableInTime."""
