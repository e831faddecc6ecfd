"""A commit the broker refuses during a rebalance is made again by the member once the rebalance is over.

A broker answers the requests of one connection in order. A cooperative member that gave partitions
up rejoins at once and goes on consuming the partitions it keeps; its JoinGroup waits until the other
member rejoins (at its next heartbeat), and an OffsetCommit it sends meanwhile waits behind it, carrying
the generation it had: once the join completes the group is a generation further and Kafka refuses the
commit (ILLEGAL_GENERATION). librdkafka hands that to the application without retrying; an at-least-once
application commits its positions again, as the members of group_helpers do. Otherwise a member whose
last records came in that window would never commit them.
"""
from __future__ import annotations

from group_helpers import MemberConfig, Members, end_offsets, produce, wait_for, wait_for_split
from txn_helpers import create_topic

PARTITIONS = 6
BROKER = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500")


def config(bootstrap: str, group: str) -> MemberConfig:
    return MemberConfig("confluent", bootstrap, group, group, assignor="cooperative-sticky",
                        session_timeout_ms=3_000, heartbeat_interval_ms=200)


def test_records_consumed_while_a_cooperative_member_rejoins_are_committed(start_broker, tmp_path):
    broker = start_broker(*BROKER)
    group = "commit-retry"
    create_topic(broker.bootstrap, group, PARTITIONS)
    members = Members(tmp_path)
    try:
        first = members.start(config(broker.bootstrap, group))
        wait_for(lambda: first.assignment == frozenset(range(PARTITIONS)), "the first member to hold all", [first])
        second = members.start(config(broker.bootstrap, group))
        # The first member gives half up and rejoins; the join waits for the second one's heartbeat. The
        # records come now: the first member consumes and commits its half while its JoinGroup waits.
        wait_for(lambda: first.revokes == 1, "the first member to give partitions up", [first, second])
        ends = end_offsets(produce(broker.bootstrap, group, PARTITIONS, 60))
        wait_for_split([first, second], PARTITIONS)

        def all_committed():
            return all(max(m.committed.get(p, 0) for m in (first, second)) == end for p, end in ends.items())
        wait_for(all_committed, f"commits up to {ends}", [first, second])
        for m in (first, second):
            m.close()
    finally:
        members.stop_all()
