"""DescribeClientQuotas (48), v0-1: the client quota configs whose entities match a filter (KIP-546).

Behavior, as Kafka's ClientQuotasImage.describe:
- Each filter component names an entity type (`user`, `client-id`, `ip`)
  and a match type: EXACT (0, `match` is the name), DEFAULT (1, the type's
  default entity, `match` null) or SPECIFIED (2, any name or the default,
  `match` null). An entity matches when, for every component, it has that
  type with a matching name; with `strict` it must also have no other type.
  No components and not strict: every entity.
- The request is refused as a whole (error code and message, entries null):
  an empty entity type, a type named twice ("Entity type t cannot appear
  more than once in the filter."), EXACT without a match, DEFAULT or
  SPECIFIED with one, ip combined with user or client-id: INVALID_REQUEST;
  an unknown entity type or match type: UNSUPPORTED_VERSION.
- Each entry lists the entity (a null name for a default) and its configs;
  values are doubles, as on the wire.

Authorization (Kafka's KafkaApis): DESCRIBE_CONFIGS on the CLUSTER, else
CLUSTER_AUTHORIZATION_FAILED with entries null.

Version notes: v1 is v0 made flexible.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import AclOperation, ResourceType, denied
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.broker.quota_store import CLIENT_ID, IP, USER, Entity

KEY = 48
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


class _Refused(Exception):
    """The filter is refused as a whole: Kafka's code and message."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.error = code


def _parse_filter(components: tuple[KioMessage, ...]) -> tuple[dict[str, str | None], set[str]]:
    """(type → exact name or None for the default, the types that must merely be present)."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise _Refused(ErrorCode.invalid_request, "Invalid empty entity type.")
        if kind in exact or kind in present:
            raise _Refused(ErrorCode.invalid_request, f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (USER, CLIENT_ID, IP):
            raise _Refused(ErrorCode.unsupported_version, f"Unsupported entity type {kind}")
        if component.match_type == EXACT:
            if component.match is None:
                raise _Refused(ErrorCode.invalid_request,
                               "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = component.match
        elif component.match_type == DEFAULT:
            if component.match is not None:
                raise _Refused(ErrorCode.invalid_request,
                               "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif component.match_type == SPECIFIED:
            if component.match is not None:
                raise _Refused(ErrorCode.invalid_request,
                               "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            present.add(kind)
        else:
            raise _Refused(ErrorCode.unsupported_version, f"Unknown match type {component.match_type}")
    named = set(exact) | present
    if IP in named and named & {USER, CLIENT_ID}:
        raise _Refused(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component "
                                                  "should not be used with user or clientId filter component.")
    return exact, present


def matches(entity: Entity, exact: dict[str, str | None], present: set[str], strict: bool) -> bool:
    """Whether `entity` passes the filter (Kafka's ClientQuotasImage.matches)."""
    names = dict(entity)
    if strict and len(names) != len(exact) + len(present):
        return False
    return (all(kind in names and names[kind] == name for kind, name in exact.items())
            and all(kind in names for kind in present))


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """The entries matching the filter, or the filter's refusal."""
    response = response_type(KEY, request.version)
    error = denied(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
    if error != ErrorCode.none:
        return build(response, throttle_time=ZERO_MS, error_code=error, error_message="Cluster authorization failed.",
                     entries=None)
    try:
        exact, present = _parse_filter(body.components)
    except _Refused as refused:
        return build(response, throttle_time=ZERO_MS, error_code=refused.error, error_message=str(refused),
                     entries=None)
    entity_cls = response_type(KEY, request.version, "EntityData")
    value_cls = response_type(KEY, request.version, "ValueData")
    entry_cls = response_type(KEY, request.version, "EntryData")
    entries = tuple(
        build(entry_cls, entity=tuple(build(entity_cls, entity_type=kind, entity_name=name) for kind, name in entity),
              values=tuple(build(value_cls, key=key, value=value) for key, value in sorted(values.items())))
        for entity, values in sorted(request.broker.quotas.configs().items(), key=lambda item: _order(item[0]))
        if matches(entity, exact, present, body.strict))
    return build(response, throttle_time=ZERO_MS, error_code=ErrorCode.none, error_message=None, entries=entries)


def _order(entity: Entity) -> list[tuple[str, int, str]]:
    """A stable order of entities: by type, defaults first, then names."""
    return [(kind, 0 if name is None else 1, name or "") for kind, name in entity]
