"""Kafka's clients in-process: a producer and a consumer over a data directory, with no broker and no sockets.

    from logstore.broker import embedded

    with embedded.open("data") as node:
        node.store.create_topic("orders", 3)
        producer = embedded.Producer(node, {"transactional.id": "copier"})
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("orders", b"hello", key=b"k1")
        producer.commit_transaction()
        consumer = embedded.Consumer(node, {"group.id": "billing", "isolation.level": "read_committed",
                                            "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        for tp, records in consumer.poll(1.0).items():
            ...

A `ShareConsumer` (share_consumer.py) is a KIP-932 share-group member, for
in-process queues. All drive the node's transaction, group and share
coordinators, the very objects a broker serves, so fencing, exactly-once
offsets, group rebalances and record locks behave as they do over the wire.
One process holds a data directory at a time (its `.lock`); a second `open`
fails with LogDirLockedError.

Authorization is the broker's: `authorizer.class.name` among the settings
(Kafka's StandardAuthorizer reads the directory's ACLs, with `super.users`)
decides what each client may do, as the principal its `principal` setting
names (access.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logstore.broker.config import BrokerConfig
from logstore.broker.embedded.access import authorizer_of
from logstore.broker.embedded.consumer import Consumer, NoOffsetForPartitionError
from logstore.broker.embedded.membership import GroupMetadata
from logstore.broker.embedded.producer import (
    IllegalStateError,
    Producer,
    RecordFuture,
    RecordMetadata,
    TransactionAbortedError,
)
from logstore.broker.embedded.share_consumer import AcknowledgementError, AckType, ShareConsumer, ShareRecord
from logstore.broker.node import Node

__all__ = ["AckType", "AcknowledgementError", "Consumer", "GroupMetadata", "IllegalStateError",
           "NoOffsetForPartitionError", "Node", "Producer", "RecordFuture", "RecordMetadata", "ShareConsumer",
           "ShareRecord", "TransactionAbortedError", "open"]


def open(path: str, settings: Mapping[str, Any] | None = None) -> Node:  # noqa: A001 - reads like logstore.open
    """Open a data directory as a running node; `settings` are broker settings under Kafka's names."""
    config = BrokerConfig.from_properties({**(settings or {}), "log.dirs": path})
    node = Node(config)
    try:
        _forget_members_of_earlier_processes(node)
        # Made now, so a bad authorizer.class.name fails the open; the store holds the lock the ACL files are
        # read under.
        authorizer_of(node)
    except BaseException:
        node.close()
        raise
    return node.start()


def _forget_members_of_earlier_processes(node: Node) -> None:
    """Remove every group member loaded from disk: embedded members live in the process that holds the
    directory's lock, and this one just took it, so they are all gone. A broker keeps its members (they are
    remote and may be alive); here, waiting out their sessions would only stall the next rebalance."""
    groups = node.groups
    for group_id, _, _ in groups.list_groups():
        members = [(m.member_id, m.group_instance_id) for m in groups.describe(group_id).members]
        if members:
            groups.leave_group(group_id, members)
