"""ElectLeaders (43), v0-2: leader elections on a one-node cluster, as Kafka's controller answers them
(ReplicationControlManager.electLeaders and electLeader).

- This broker is every partition's only replica, its preferred leader and
  its leader, so a partition that has its leader answers
  ELECTION_NOT_NEEDED, for a PREFERRED (0) and an UNCLEAN (1) election alike.
- A partition whose log dir is offline has no leader and no other replica
  can lead it: PREFERRED_LEADER_NOT_AVAILABLE (PREFERRED) or
  ELIGIBLE_LEADERS_NOT_AVAILABLE (UNCLEAN).
- An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION ("No such
  topic as t" / "No such partition as t-p").
- `topic_partitions` null asks for every partition: each topic is answered,
  listing only the partitions whose answer is not ELECTION_NOT_NEEDED.
- An election type other than 0 and 1 refuses the request: INVALID_REQUEST
  at the top (v1+) and on every partition asked.

Authorization (Kafka's ControllerApis): ALTER on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED at the top (v1+) and on every partition asked.

Version notes: v0 has no election type (preferred) and no top-level error; v2 is flexible.
"""
from __future__ import annotations

from collections.abc import Mapping

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.manager import LogManager

KEY = 43
PREFERRED, UNCLEAN = 0, 1


def _elect(counts: Mapping[str, int], offline: set[tuple[str, int]], topic: str, partition: int,
           election_type: int) -> tuple[ErrorCode, str | None]:
    """The answer of one partition's election (`counts`: the topics' partition counts; `offline`: the
    partitions whose log dir is offline)."""
    if topic not in counts:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    if not 0 <= partition < counts[topic]:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    if (topic, partition) not in offline:
        return ErrorCode.election_not_needed, None
    return (ErrorCode.preferred_leader_not_available if election_type == PREFERRED
            else ErrorCode.eligible_leaders_not_available), None


def _asked(store: LogManager, body: KioMessage) -> list[tuple[str, list[int]]]:
    if body.topic_partitions is None:
        counts = store.topics()
        return [(topic, list(range(counts[topic]))) for topic in sorted(counts)]
    return [(entry.topic, [int(p) for p in entry.partitions]) for entry in body.topic_partitions]


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Answer each partition's election: none is needed while its log dir is online."""
    version = request.version
    store = request.broker.store
    election_type = int(getattr(body, "election_type", PREFERRED))
    refused = denied(request, AclOperation.ALTER, ResourceType.CLUSTER)
    if refused == ErrorCode.none and election_type not in (PREFERRED, UNCLEAN):
        refused = ErrorCode.invalid_request
    every = body.topic_partitions is None
    counts = store.topics()
    offline = ({key for key, opened in store.logs().items() if not opened.dir_state.online} if store.offline_dirs
               else set())
    rows = []
    result_cls = response_type(KEY, version, "PartitionResult")
    for topic, partitions in ([] if every and refused != ErrorCode.none else _asked(store, body)):
        answers = []
        for partition in partitions:
            error, message = (refused, None) if refused != ErrorCode.none else \
                _elect(counts, offline, topic, partition, election_type)
            if every and error == ErrorCode.election_not_needed:
                continue
            answers.append(build(result_cls, partition_id=partition, error_code=error, error_message=message))
        rows.append(build(response_type(KEY, version, "ReplicaElectionResult"), topic=topic,
                          partition_result=tuple(answers)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=refused,
                 replica_election_results=tuple(rows))
