"""DescribeAcls (29), v1-3: the ACLs a filter matches, grouped by resource pattern.

Behavior (Kafka's AclApis): DESCRIBE on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED; without an ACL authorizer (no
`authorizer.class.name`, or one that keeps no ACLs) SECURITY_DISABLED with
Kafka's message. The filter's fields are a value or ANY (a null name,
principal or host: any); pattern type MATCH selects every pattern that
applies to the name (its LITERAL, the `*` wildcard, its PREFIXED prefixes).
A filter with an UNKNOWN field answers INVALID_REQUEST.

Version notes: v1 added pattern types (PREFIXED, ANY, MATCH); v2 is the
first flexible version; v3 (USER resources) changed nothing on the wire.
"""
from __future__ import annotations

from logstore.broker.acls import AclBindingFilter, enum_of
from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.authorizer import AclAuthorizer, AclPermissionType, PatternType
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 29
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def binding_filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
                   operation: int, permission: int) -> AclBindingFilter:
    """A filter from the wire's codes (a code Kafka does not know is UNKNOWN)."""
    return AclBindingFilter(enum_of(ResourceType, resource_type), name, enum_of(PatternType, pattern_type), principal,
                            host, enum_of(AclOperation, operation), enum_of(AclPermissionType, permission))


@api(KEY, 1, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """The matching ACLs, or the request's error."""
    cls = response_type(KEY, request.version)
    authorizer = request.broker.authorizer

    def refused(error: ErrorCode, message: str | None = None) -> ResponsePayload:
        return build(cls, throttle_time=ZERO_MS, error_code=error, error_message=message, resources=())

    error = denied(request, AclOperation.DESCRIBE, ResourceType.CLUSTER)
    if error:
        return refused(error)
    if not isinstance(authorizer, AclAuthorizer):
        return refused(ErrorCode.security_disabled, NO_AUTHORIZER)
    wanted = binding_filter(body.resource_type_filter, body.resource_name_filter, body.pattern_type_filter,
                            body.principal_filter, body.host_filter, body.operation, body.permission_type)
    if 0 in (wanted.resource_type, wanted.pattern_type, wanted.operation, wanted.permission):
        # Each of Kafka's four enums has UNKNOWN as 0.
        return refused(ErrorCode.invalid_request, f"DescribeAclsRequest contains UNKNOWN elements: {wanted}")
    grouped: dict[tuple[ResourceType, str, PatternType], list[KioMessage]] = {}
    acl_cls = response_type(KEY, request.version, "AclDescription")
    for acl in authorizer.acls(wanted):
        grouped.setdefault(acl.pattern, []).append(build(acl_cls, principal=acl.principal, host=acl.host,
                                                         operation=acl.operation, permission_type=acl.permission))
    resource_cls = response_type(KEY, request.version, "DescribeAclsResource")
    resources = tuple(build(resource_cls, resource_type=resource_type, resource_name=name, pattern_type=pattern_type,
                            acls=tuple(acls)) for (resource_type, name, pattern_type), acls in grouped.items())
    return build(cls, throttle_time=ZERO_MS, error_code=ErrorCode.none, error_message=None, resources=resources)
