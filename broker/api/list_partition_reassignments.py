"""ListPartitionReassignments (46), v0: the reassignments in progress, of which a one-node cluster has none.

As Kafka's controller (ReplicationControlManager.listPartitionReassignments):
`topics` null lists every reassigning topic, and a list of topics lists
those of them that are reassigning; here either way the answer has no topics
and no error (a topic or partition that does not exist is left out, as
Kafka leaves it out).

Authorization (Kafka's ControllerApis): DESCRIBE on the CLUSTER, else the
answer is CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.protocol import ZERO_MS

KEY = 46


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """No reassignment is ever in progress on one node."""
    refused = denied(request, AclOperation.DESCRIBE, ResourceType.CLUSTER)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, error_code=refused, error_message=None,
                 topics=())
