"""DescribeUserScramCredentials (50), v0: which SCRAM mechanisms each user has, with their iteration counts.

Behavior (Kafka's ScramImage.describe, what a KRaft broker answers):
- `users` null or empty: every user with a credential, each with its
  mechanisms (SCRAM-SHA-256 = 1, SCRAM-SHA-512 = 2) and iterations; never a
  salt or a key.
- Named users: one result per distinct name, in the order first asked; a user
  without credentials is RESOURCE_NOT_FOUND ("Attempt to describe a user
  credential that does not exist: <user>"); a name asked twice is
  DUPLICATE_RESOURCE ("Cannot describe SCRAM credentials for the same user
  twice in a single request: <user>"), once.

Authorization (Kafka's KafkaApis): DESCRIBE on the CLUSTER, else the
request-level CLUSTER_AUTHORIZATION_FAILED, repeated on one result per
user asked (with an empty user name, as Kafka's getErrorResponse builds it).

Version notes: v0 is the only version, flexible.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.scram import SCRAM_MECHANISMS

KEY = 50
_NOT_FOUND = "Attempt to describe a user credential that does not exist: "
_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_CLUSTER_DENIED = "Cluster authorization failed."


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Describe the credentials of the users asked, or of every user."""
    response_cls = response_type(KEY, request.version)
    result_cls = response_type(KEY, request.version, "DescribeUserScramCredentialsResult")
    info_cls = response_type(KEY, request.version, "CredentialInfo")
    asked = [user.name for user in body.users or ()]
    refusal = denied(request, AclOperation.DESCRIBE, ResourceType.CLUSTER)
    if refusal != ErrorCode.none:
        return build(response_cls, throttle_time=ZERO_MS, error_code=refusal, error_message=_CLUSTER_DENIED,
                     results=tuple(build(result_cls, user="", error_code=refusal, error_message=_CLUSTER_DENIED,
                                         credential_infos=()) for _ in asked))
    users = request.broker.scram.users()
    repeated: dict[str, bool] = {}
    for name in asked or users:
        repeated[name] = name in repeated
    results = []
    for name, twice in repeated.items():
        if twice:
            results.append(build(result_cls, user=name, error_code=ErrorCode.duplicate_resource,
                                 error_message=_TWICE + name, credential_infos=()))
        elif name not in users:
            results.append(build(result_cls, user=name, error_code=ErrorCode.resource_not_found,
                                 error_message=_NOT_FOUND + name, credential_infos=()))
        else:
            infos = tuple(build(info_cls, mechanism=SCRAM_MECHANISMS[mechanism].type, iterations=iterations)
                          for mechanism, iterations in sorted(users[name].items()))
            results.append(build(result_cls, user=name, error_code=ErrorCode.none, error_message=None,
                                 credential_infos=infos))
    return build(response_cls, throttle_time=ZERO_MS, error_code=ErrorCode.none, error_message=None,
                 results=tuple(results))
