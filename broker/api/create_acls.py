"""CreateAcls (30), v1-3: add ACLs, each answered on its own.

Behavior (Kafka's AclApis and the controller's AclControlManager): ALTER on
the CLUSTER, else every creation answers CLUSTER_AUTHORIZATION_FAILED;
without an ACL authorizer SECURITY_DISABLED ("No Authorizer is
configured."). A creation Kafka refuses answers INVALID_REQUEST with Kafka's
message (a CLUSTER named other than `kafka-cluster`, an empty name, an
UNKNOWN or ANY resource type, operation or permission, a pattern type other
than LITERAL or PREFIXED, a principal without `type:`); the others are added
together, written to the `acls` file of every log dir and fsynced before the
answer, and apply to the next request. An ACL that exists already is a
success that adds nothing. If the write fails, every creation answers its
error and nothing changed.

Version notes: v1 added the pattern type; v2 is the first flexible version;
v3 (USER resources) changed nothing on the wire.
"""
from __future__ import annotations

from logstore.broker.acls import AclBinding, AclError, enum_of
from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.authorizer import AclAuthorizer, AclPermissionType, PatternType
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 30
NO_AUTHORIZER = "No Authorizer is configured."


def binding_of(creation: KioMessage) -> AclBinding:
    """The binding a creation asks for (a code Kafka does not know is UNKNOWN, refused by validation)."""
    return AclBinding(enum_of(ResourceType, creation.resource_type), creation.resource_name,
                      enum_of(PatternType, creation.resource_pattern_type), creation.principal, creation.host,
                      enum_of(AclOperation, creation.operation), enum_of(AclPermissionType, creation.permission_type))


@api(KEY, 1, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """One result per creation, in the request's order."""
    result_cls = response_type(KEY, request.version, "AclCreationResult")
    authorizer = request.broker.authorizer
    results: list[AclError | None]
    error = denied(request, AclOperation.ALTER, ResourceType.CLUSTER)
    if error:
        results = [AclError(error, "")] * len(body.creations)
    elif not isinstance(authorizer, AclAuthorizer):
        results = [AclError(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(body.creations)
    else:
        outcome = await coordinate(request, authorizer.create_acls, [binding_of(c) for c in body.creations])
        results = outcome.result if outcome.ok else [AclError(outcome.error, outcome.message or "")] * len(
            body.creations)
    rows = tuple(build(result_cls, error_code=ErrorCode.none if r is None else r.error,
                       error_message=None if r is None else (r.message or None)) for r in results)
    return build(response_type(KEY, request.version), throttle_time=ZERO_MS, results=rows)
