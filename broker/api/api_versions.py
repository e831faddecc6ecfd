"""ApiVersions (18): the keys and version ranges registered here, nothing else (v0-4).

A version above 4 is answered with a v0 body and UNSUPPORTED_VERSION
listing this key's range (KIP-511), since its body cannot be decoded: the
registration's `newer`, which the server calls instead of closing the
connection. Responses are constant per version, so they are built once. No
authorization, as in Kafka: a client asks before it could be anyone.
"""
from __future__ import annotations

from functools import cache

from logstore.broker.api import REGISTRY, KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode, PreEncoded, encode_kio, read_header_only

KEY = 18
MAX_VERSION = 4


@cache
def response_for(version: int, error: ErrorCode = ErrorCode.none) -> ResponsePayload:
    """The ApiVersions response at `version` (v0 for the unsupported-version answer)."""
    entry = response_type(KEY, version, "ApiVersion")
    keys = tuple(build(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                 for a in sorted(REGISTRY.values(), key=lambda a: a.key))
    return build(response_type(KEY, version), error_code=error, api_keys=keys, throttle_time=ZERO_MS)


def _too_new(frame: bytes, correlation_id: int) -> PreEncoded:
    """KIP-511: the v0 answer with UNSUPPORTED_VERSION to a version whose body cannot be read."""
    read_header_only(frame, KEY, MAX_VERSION + 1)  # the header must still be readable
    return encode_kio(correlation_id, 0, response_for(0, ErrorCode.unsupported_version))


@api(KEY, 0, MAX_VERSION, newer=_too_new)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Answer at the version asked."""
    return response_for(request.version)
