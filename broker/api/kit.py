"""What every handler shares: Kafka errors as response codes (the one place), authorization, and
the topics × partitions loop.

Partitions: a request that names a partition twice gets one answer for it,
as Kafka's maps of the request make it (`distinct_partitions`: in the order
first asked, with the entry asked last), so its cost is that of the
distinct partitions, however long the request.

Errors: a handler never reads an exception's `.code`; it calls through
`attempt`, `coordinate` or `held`, or loops with `each_partition`, and gets
an `Outcome` whose error is already the code the request's API version
knows (`OLDER_VERSIONS`: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to the
versions before it existed, as Kafka answers them).

Authorization: every handler asks for what it touches, with the operation
and resource Kafka's KafkaApis names (each module's docstring says which),
through `authorized`/`denied`/`each_partition` (and `authorized_any`, Kafka's
authorizeByResourceType); the broker's authorizer decides
(`logstore.broker.authorizer`), given the client's IP when it takes one. A
denial is the resource type's *_AUTHORIZATION_FAILED code.
"""
from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache
from typing import Generic, Never, TypeVar, TypeVarTuple, cast

from logstore.broker.acls import java_host
from logstore.broker.api import KioMessage, Request, build
from logstore.broker.authorizer import CLUSTER_NAME, AclAuthorizer, AclOperation, AllowAll, Authorizer, ResourceType
from logstore.broker.protocol import ErrorCode
from logstore.errors import LogStoreError

__all__ = ["AclOperation", "ResourceType", "CLUSTER_NAME", "OLDER_VERSIONS", "DENIED", "KioMessage", "Outcome",
           "PartitionResult", "Shape", "attempt", "authorized", "authorized_any", "client_ip", "coordinate", "denied",
           "distinct_partitions", "each_partition", "error_code", "failure", "held", "refuse", "topic_rows"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Ts = TypeVarTuple("Ts")

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28

# (an error, an API key) → (the API's first version that knows the error, what older versions answer).
OLDER_VERSIONS: dict[tuple[ErrorCode, int], tuple[int, ErrorCode]] = {
    (ErrorCode.producer_fenced, INIT_PRODUCER_ID): (4, ErrorCode.invalid_producer_epoch),
    (ErrorCode.producer_fenced, ADD_PARTITIONS_TO_TXN): (2, ErrorCode.invalid_producer_epoch),
    (ErrorCode.producer_fenced, ADD_OFFSETS_TO_TXN): (2, ErrorCode.invalid_producer_epoch),
    (ErrorCode.producer_fenced, END_TXN): (2, ErrorCode.invalid_producer_epoch),
    (ErrorCode.producer_fenced, TXN_OFFSET_COMMIT): (3, ErrorCode.invalid_producer_epoch),
}

# What a denied request answers, by the type of the resource denied.
DENIED: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}


def error_code(request: Request, exc: LogStoreError | None) -> ErrorCode:
    """NONE for no error, else the Kafka code of `exc` as the request's API version knows it."""
    if exc is None:
        return ErrorCode.none
    code = ErrorCode(exc.code)
    rule = OLDER_VERSIONS.get((code, request.api_key))
    if rule is not None and request.version < rule[0]:
        return rule[1]
    return code


@dataclass(frozen=True)
class Outcome(Generic[T_co]):
    """A call's value, or the Kafka error it raised as this request's code and message. A failed
    outcome holds no value: `refuse` and `failure` make an `Outcome[Never]`, which is an outcome of
    any call."""

    value: T_co | None = None
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    exc: LogStoreError | None = None

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.error == ErrorCode.none

    @property
    def result(self) -> T_co:
        """The call's value, of an outcome that is ok (asking a failed one is a bug: it raises)."""
        if not self.ok:
            raise RuntimeError(f"a failed call ({self.error.name}) has no value")
        # An ok outcome holds what the call returned, a T_co; None only where T_co admits it.
        return cast(T_co, self.value)


def failure(request: Request, exc: LogStoreError) -> Outcome[Never]:
    """The outcome of a call that raised `exc`."""
    return Outcome(None, error_code(request, exc), str(exc), exc)


def refuse(error: ErrorCode, message: str | None = None) -> Outcome[Never]:
    """The outcome of a check that refused, with the code Kafka answers (no exception carries it)."""
    return Outcome(None, error, message)


def attempt(request: Request, call: Callable[[*Ts], T | Outcome[T]], *args: *Ts) -> Outcome[T]:
    """Call `call` on the event loop; a Kafka error it raises is the outcome's code (an Outcome it
    returns is taken as it is: a refusal)."""
    try:
        value = call(*args)
    except LogStoreError as exc:
        return failure(request, exc)
    return value if isinstance(value, Outcome) else Outcome(value)


async def coordinate(request: Request, call: Callable[[*Ts], T], *args: *Ts) -> Outcome[T]:
    """Run a blocking call (a coordinator's, an fsynced change) in the broker's pool; its error as a code."""
    try:
        value: T = await request.broker.coordinate(call, *args)
        return Outcome(value)
    except LogStoreError as exc:
        return failure(request, exc)


async def coordinate_soon(request: Request, lock: threading.RLock, call: Callable[[*Ts], T], *args: *Ts
                          ) -> Outcome[T]:
    """`coordinate` for a short call that waits for nothing but `lock`: on the event loop when the lock is
    free at once (no hop to the pool and back), else in the pool."""
    if lock.acquire(blocking=False):
        try:
            return attempt(request, call, *args)
        finally:
            lock.release()
    return await coordinate(request, call, *args)


async def held(request: Request, call: Callable[[*Ts], Future[T]], *args: *Ts) -> Outcome[T]:
    """Run a coordinator call whose answer is a future (JoinGroup, SyncGroup) and wait for that answer,
    parked: the wait is for other members, not for work of the broker's (`Request.waiting`)."""
    try:
        future: Future[T] = await request.broker.coordinate(call, *args)
        if not future.done():
            request.waiting()
        value = await asyncio.wrap_future(future)
        return Outcome(value)
    except LogStoreError as exc:
        return failure(request, exc)


# -- authorization ---------------------------------------------------------------------------

def authorized(request: Request, operation: AclOperation, resource_type: ResourceType,
               names: Iterable[str]) -> set[str]:
    """The names among `names` the request's principal may perform `operation` on."""
    authorizer = request.broker.authorizer
    if type(authorizer) is AllowAll:
        # No authorizer configured (the default): asked a few times by every request, so answered here.
        return set(names)
    if _takes_host(type(authorizer)):
        # Its authorize takes `host` (checked once per class, on its signature), as an AclAuthorizer's does.
        host_aware = cast(AclAuthorizer, authorizer)
        return set(host_aware.authorize(request.principal, operation, resource_type, list(names),
                                        host=client_ip(request)))
    return set(authorizer.authorize(request.principal, operation, resource_type, list(names)))


def authorized_any(request: Request, operation: AclOperation, resource_type: ResourceType,
                   names: Callable[[], Iterable[str]]) -> bool:
    """Whether the principal may perform `operation` on some resource of the type, whatever its name
    (Kafka's authorizeByResourceType); an authorizer that cannot say is asked about `names()`."""
    authorizer = request.broker.authorizer
    if isinstance(authorizer, AclAuthorizer):
        return authorizer.authorize_any(request.principal, operation, resource_type, host=client_ip(request))
    return bool(authorized(request, operation, resource_type, names()))


def client_ip(request: Request) -> str:
    """The client's address as Kafka's ACLs compare hosts (InetAddress.getHostAddress): "1.2.3.4", and IPv6
    as Java prints it, "0:0:0:0:0:0:0:1" rather than "::1"."""
    return java_host(request.client_host.removeprefix("/"))


@cache
def _takes_host(cls: type[Authorizer]) -> bool:
    """Whether an authorizer class's `authorize` takes the client's `host` (Kafka's ACLs do; a user class
    written for the four-argument form need not)."""
    try:
        parameters = inspect.signature(cls.authorize).parameters
    except (TypeError, ValueError):
        return False
    return "host" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def denied(request: Request, operation: AclOperation, resource_type: ResourceType,
           name: str = CLUSTER_NAME) -> ErrorCode:
    """NONE if the principal may perform `operation` on the resource, else Kafka's answer to the denial."""
    if name in authorized(request, operation, resource_type, (name,)):
        return ErrorCode.none
    return DENIED[resource_type]


# -- topics × partitions ---------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """Where a request's topics keep their name and partitions, and a partition its index (None: the
    partitions are the indexes)."""

    topic: str = "name"
    partitions: str = "partitions"
    index: str | None = "partition_index"


@dataclass(frozen=True)
class PartitionResult(Generic[T_co]):
    """One partition asked: its index, the request's entry for it, and the outcome of answering it."""

    topic: str
    index: int
    asked: KioMessage
    outcome: Outcome[T_co]

    @property
    def error(self) -> ErrorCode:
        """The partition's error code (NONE when answered)."""
        return self.outcome.error

    @property
    def value(self) -> T_co | None:
        """What answering it returned (None on error)."""
        return self.outcome.value


PartitionResults = list[tuple[str, list[PartitionResult[T]]]]   # by topic, in the request's order
AskedPartitions = list[tuple[str, list[tuple[int, KioMessage]]]]  # by topic: (index, the entry asked)


def distinct_partitions(topics: Iterable[KioMessage], shape: Shape = Shape()) -> AskedPartitions:
    """Each (topic, partition) of a request once, as Kafka's maps of the request keep them: topics and
    partitions in the order first asked, each with the entry asked last."""
    by_topic: dict[str, dict[int, KioMessage]] = {}
    for topic in topics:
        rows = by_topic.setdefault(getattr(topic, shape.topic), {})
        for asked in getattr(topic, shape.partitions):
            # Assigning an existing key keeps its place: a repeat moves nothing, its entry wins.
            rows[asked if shape.index is None else getattr(asked, shape.index)] = asked
    return [(name, list(rows.items())) for name, rows in by_topic.items()]


def each_partition(request: Request, topics: Iterable[KioMessage],
                   answer: Callable[[str, int, KioMessage], T | Outcome[T]], *, operation: AclOperation | None,
                   shape: Shape = Shape(), error: ErrorCode = ErrorCode.none) -> PartitionResults[T]:
    """`answer(topic, index, asked)` for every distinct partition asked (`distinct_partitions`), in the
    request's order, grouped by topic.

    A topic the principal may not perform `operation` on (None: the caller authorized already) is
    TOPIC_AUTHORIZATION_FAILED on each of its partitions without an answer; a request-level `error`
    is repeated on every partition; a Kafka error `answer` raises is that partition's code.
    """
    asked_partitions = distinct_partitions(topics, shape)
    names = [name for name, _ in asked_partitions]
    allowed = set(names) if operation is None else authorized(request, operation, ResourceType.TOPIC, names)
    results: PartitionResults[T] = []
    for name, partitions in asked_partitions:
        rows: list[PartitionResult[T]] = []
        for index, asked in partitions:
            outcome: Outcome[T]
            if error != ErrorCode.none:
                outcome = refuse(error)
            elif name not in allowed:
                outcome = refuse(DENIED[ResourceType.TOPIC])
            else:
                outcome = attempt(request, answer, name, index, asked)
            rows.append(PartitionResult(name, index, asked, outcome))
        results.append((name, rows))
    return results


def topic_rows(results: PartitionResults[T], topic_cls: type[KioMessage], partition_cls: type[KioMessage],
               fields: Callable[[PartitionResult[T]], Mapping[str, object]], *, topic_field: str = "name",
               partitions_field: str = "partitions") -> tuple[KioMessage, ...]:
    """The response's topics: each partition is `fields(result)` plus its error code and message."""
    return tuple(build(topic_cls, **{topic_field: name, partitions_field: tuple(
        build(partition_cls, **{"error_code": r.error, "error_message": r.outcome.message, **fields(r)})
        for r in rows)}) for name, rows in results)
