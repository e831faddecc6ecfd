"""DeleteAcls (31), v1-3: remove the ACLs each filter matches; each filter lists what it removed.

Behavior (Kafka's AclApis and the controller's AclControlManager): ALTER on
the CLUSTER, else every filter answers CLUSTER_AUTHORIZATION_FAILED; without
an ACL authorizer SECURITY_DISABLED ("No Authorizer is configured."). Filters
match as DescribeAcls' (ANY, null, MATCH); one with an UNKNOWN resource or
pattern type ("Unknown patternFilter.") or operation or permission ("Unknown
entryFilter.") answers INVALID_REQUEST. Every removal of the request is one
change, written to the `acls` file of every log dir and fsynced before the
answer; if the write fails, every filter answers its error and nothing
changed. An ACL two filters match is listed under both.

Version notes: v1 added the pattern type; v2 is the first flexible version;
v3 (USER resources) changed nothing on the wire.
"""
from __future__ import annotations

from logstore.broker.acls import AclBinding, AclError
from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.describe_acls import binding_filter
from logstore.broker.api.kit import AclOperation, ResourceType, coordinate, denied
from logstore.broker.authorizer import AclAuthorizer
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 31
NO_AUTHORIZER = "No Authorizer is configured."


@api(KEY, 1, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """One result per filter, in the request's order, with the ACLs it removed."""
    version = request.version
    result_cls = response_type(KEY, version, "DeleteAclsFilterResult")
    matching_cls = response_type(KEY, version, "DeleteAclsMatchingAcl")
    authorizer = request.broker.authorizer
    results: list[list[AclBinding] | AclError]
    error = denied(request, AclOperation.ALTER, ResourceType.CLUSTER)
    if error:
        results = [AclError(error, "")] * len(body.filters)
    elif not isinstance(authorizer, AclAuthorizer):
        results = [AclError(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(body.filters)
    else:
        filters = [binding_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                  f.principal_filter, f.host_filter, f.operation, f.permission_type)
                   for f in body.filters]
        outcome = await coordinate(request, authorizer.delete_acls, filters)
        results = outcome.result if outcome.ok else [AclError(outcome.error, outcome.message or "")] * len(filters)

    def row(result: list[AclBinding] | AclError) -> KioMessage:
        if isinstance(result, AclError):
            return build(result_cls, error_code=result.error, error_message=result.message or None, matching_acls=())
        return build(result_cls, error_code=ErrorCode.none, error_message=None, matching_acls=tuple(
            build(matching_cls, error_code=ErrorCode.none, error_message=None, resource_type=b.resource_type,
                  resource_name=b.name, pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                  operation=b.operation, permission_type=b.permission) for b in result))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, filter_results=tuple(map(row, results)))
