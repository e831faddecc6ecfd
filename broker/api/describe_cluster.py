"""DescribeCluster (60), v0-2: this broker as the cluster's only broker and its controller, as Kafka's
KafkaApis.handleDescribeCluster answers (AuthHelper.computeDescribeClusterResponse).

- The broker is described as the listener the request came in on
  advertises it (as Metadata does), never fenced; the controller is this
  broker (a KRaft broker names a live broker there).
- `endpoint_type` (v1+) must be 1, a broker: 2 (a controller) answers
  MISMATCHED_ENDPOINT_TYPE, any other value UNSUPPORTED_ENDPOINT_TYPE
  (INVALID_REQUEST to v0, which cannot ask).
- `include_fenced_brokers` (v2) changes nothing: the one broker is never fenced.

Authorization: none to describe the cluster (as Kafka). With
`include_cluster_authorized_operations`, the answer carries the bit field of
the CLUSTER operations the principal may perform if it may DESCRIBE the
CLUSTER, else 0; without it, Kafka's "not asked" value.
"""
from __future__ import annotations

from logstore.broker.acls import SUPPORTED_OPERATIONS
from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import CLUSTER_NAME, AclOperation, ResourceType, authorized, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 60
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
NOT_ASKED = -2147483648   # the schema's default of cluster_authorized_operations


def authorized_operations(request: Request, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """Kafka's bit field of the operations the principal may perform on a resource (bit n: the operation of
    code n), over those an ACL of its type may name (AuthHelper.authorizedOperations)."""
    return sum(1 << op for op in sorted(SUPPORTED_OPERATIONS[resource_type])
               if name in authorized(request, op, resource_type, (name,)))


def cluster_operations(request: Request) -> int:
    """The CLUSTER's authorized operations, 0 to a principal that may not DESCRIBE it."""
    if denied(request, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return 0
    return authorized_operations(request, ResourceType.CLUSTER)


def _endpoint_error(version: int, endpoint_type: int) -> tuple[ErrorCode, str] | None:
    if endpoint_type == BROKER_ENDPOINT:
        return None
    if endpoint_type == CONTROLLER_ENDPOINT:
        code = ErrorCode.mismatched_endpoint_type
        message = "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
    else:
        code, message = ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {endpoint_type}"
    return (ErrorCode.invalid_request if version == 0 else code), message


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe this broker, the cluster id and the controller."""
    broker = request.broker
    version = request.version
    refused = _endpoint_error(version, getattr(body, "endpoint_type", BROKER_ENDPOINT))
    if refused is not None:
        return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=refused[0],
                     error_message=refused[1], endpoint_type=BROKER_ENDPOINT, cluster_id="", controller_id=-1,
                     brokers=(), cluster_authorized_operations=NOT_ASKED)
    advertised = broker.config.advertised_for(request.listener)
    node = build(response_type(KEY, version, "DescribeClusterBroker"), broker_id=broker.node_id,
                 host=advertised.host, port=advertised.port, rack=None, is_fenced=False)
    operations = cluster_operations(request) if body.include_cluster_authorized_operations else NOT_ASKED
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=ErrorCode.none, error_message=None,
                 endpoint_type=BROKER_ENDPOINT, cluster_id=broker.cluster_id, controller_id=broker.node_id,
                 brokers=(node,), cluster_authorized_operations=operations)
