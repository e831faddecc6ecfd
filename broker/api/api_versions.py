"""ApiVersions (18): the keys and version ranges registered here, nothing else (v0-4).

A version above 4 is answered by the server itself with a v0 body and
UNSUPPORTED_VERSION listing this key's range (KIP-511), since its body
cannot be decoded. Responses are constant per version, so they are built once.
"""
from __future__ import annotations

from functools import cache

from logstore.broker.api import REGISTRY, api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 18
MAX_VERSION = 4


@cache
def response_for(version: int, error: ErrorCode = ErrorCode.none):
    """The ApiVersions response at `version` (v0 for the unsupported-version answer)."""
    entry = response_type(KEY, version, "ApiVersion")
    keys = tuple(build(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                 for a in sorted(REGISTRY.values(), key=lambda a: a.key))
    return build(response_type(KEY, version), error_code=error, api_keys=keys, throttle_time=ZERO_MS)


@api(KEY, 0, MAX_VERSION)
async def handle(request, body):
    """Answer at the version asked."""
    return response_for(request.version)
