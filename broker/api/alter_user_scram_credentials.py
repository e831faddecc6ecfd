"""AlterUserScramCredentials (51), v0: delete SCRAM credentials and add or replace them from salted passwords.

Behavior (Kafka's ScramControlManager.alterCredentials):
- An upsertion carries the salt, the iterations and the salted password the
  client computed (Hi(password, salt, i)); the broker keeps the salt,
  iterations, StoredKey and ServerKey derived from it, never the salted
  password.
- Per user, in the order deletions then upsertions: a user named a second
  time in the request (whatever the mechanism) is DUPLICATE_RESOURCE ("A user
  credential cannot be altered twice in the same request") and none of its
  changes apply; an empty name is UNACCEPTABLE_CREDENTIAL ("Username must not
  be empty"); a mechanism other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) is
  UNSUPPORTED_SASL_MECHANISM ("Unknown SCRAM mechanism"); iterations below
  4096 or above 16384 are UNACCEPTABLE_CREDENTIAL ("Too few iterations", "Too
  many iterations"); deleting a credential the user does not have is
  RESOURCE_NOT_FOUND ("Attempt to delete a user credential that does not
  exist").
- The accepted changes are written together (one generation of the
  `scram-credentials` file, fsynced before the answer, off the event loop),
  as Kafka's controller commits them atomically; if the write fails, each of
  them answers the write's error (KAFKA_STORAGE_ERROR). Results: the
  deletions, the upsertions, then the refused users.
- A connection already authenticated keeps its session; new logins see the change.

Authorization (Kafka's ControllerApis): ALTER on the CLUSTER, else every
distinct user asked answers CLUSTER_AUTHORIZATION_FAILED, sorted by name (Kafka's getErrorResponse).

Version notes: v0 is the only version, flexible.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, attempt, coordinate, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.scram import SCRAM_MECHANISMS, ScramCredential, credential_from_salted_password, scram_mechanism
from logstore.broker.scram_store import check_credential

KEY = 51
_TWICE = "A user credential cannot be altered twice in the same request"
_CLUSTER_DENIED = "Cluster authorization failed."
_NOT_FOUND = "Attempt to delete a user credential that does not exist"
# Kafka's ScramMechanism wire types → mechanism names.
MECHANISM_TYPES = {m.type: m.name for m in SCRAM_MECHANISMS.values()}


def _check(request: Request, name: str, mechanism_type: int, iterations: int | None) -> tuple[ErrorCode, str] | None:
    """Kafka's validation of one deletion (iterations None) or upsertion: the refusal, or None."""
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism_type not in MECHANISM_TYPES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if iterations is not None:
        checked = attempt(request, check_credential, name, MECHANISM_TYPES[mechanism_type], iterations)
        if not checked.ok:
            return checked.error, checked.message or ""
    return None


@api(KEY, 0, 0)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Apply the request's deletions and upsertions that pass Kafka's checks, all at once."""
    response_cls = response_type(KEY, request.version)
    result_cls = response_type(KEY, request.version, "AlterUserScramCredentialsResult")
    refusal = denied(request, AclOperation.ALTER, ResourceType.CLUSTER)
    if refusal != ErrorCode.none:
        names = sorted({item.name for item in (*body.deletions, *body.upsertions)})
        return build(response_cls, throttle_time=ZERO_MS, results=tuple(
            build(result_cls, user=name, error_code=refusal, error_message=_CLUSTER_DENIED) for name in names))
    store = request.broker.scram
    deletions: dict[str, KioMessage] = {}
    upsertions: dict[str, KioMessage] = {}
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for deletion in body.deletions:
        name = deletion.name
        if name in errors:
            continue
        if deletions.pop(name, None) is not None:
            errors[name] = (ErrorCode.duplicate_resource, _TWICE)
            continue
        problem = _check(request, name, deletion.mechanism, None)
        if problem is None and store.get(name, scram_mechanism(deletion.mechanism).name) is None:
            problem = (ErrorCode.resource_not_found, _NOT_FOUND)
        if problem is None:
            deletions[name] = deletion
        else:
            errors[name] = problem
    for upsertion in body.upsertions:
        name = upsertion.name
        if name in errors:
            continue
        if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
            errors[name] = (ErrorCode.duplicate_resource, _TWICE)
            continue
        problem = _check(request, name, upsertion.mechanism, upsertion.iterations)
        if problem is None:
            upsertions[name] = upsertion
        else:
            errors[name] = problem
    changes: dict[tuple[str, str], ScramCredential | None] = {}
    for name, deletion in deletions.items():
        changes[(name, scram_mechanism(deletion.mechanism).name)] = None
    for name, upsertion in upsertions.items():
        mechanism = scram_mechanism(upsertion.mechanism)
        changes[(name, mechanism.name)] = credential_from_salted_password(
            mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations)
    written: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
    if changes:
        outcome = await coordinate(request, store.alter, changes)
        written = (outcome.error, outcome.message)
    results = [build(result_cls, user=name, error_code=written[0], error_message=written[1])
               for name in (*deletions, *upsertions)]
    results += [build(result_cls, user=name, error_code=code, error_message=message)
                for name, (code, message) in errors.items()]
    return build(response_cls, throttle_time=ZERO_MS, results=tuple(results))
