"""FindCoordinator (10), v0-4: there is no group or transaction coordinator yet, so every key
is answered COORDINATOR_NOT_AVAILABLE (retriable: clients ask again later).

Advertised anyway because librdkafka derives its LZ4 feature from FindCoordinator
being listed (rdkafka_feature.c: LZ4 arrived with GroupCoordinator in 0.8.2, so
that API stands in for it): without this key every librdkafka producer silently
sends lz4 batches uncompressed. The coordinators replace this answer.
"""
from __future__ import annotations

from logstore.broker.api import api, build, response_type
from logstore.broker.protocol import ZERO_MS, ErrorCode

KEY = 10
MESSAGE = "this broker runs no group or transaction coordinator yet"


@api(KEY, 0, 4)
async def handle(request, body):
    """COORDINATOR_NOT_AVAILABLE for every key asked (v4+: one row per key)."""
    version = request.version
    error = ErrorCode.coordinator_not_available
    none = dict(node_id=-1, host="", port=-1, error_code=error, error_message=MESSAGE)
    if version >= 4:
        rows = tuple(build(response_type(KEY, version, "Coordinator"), key=key, **none)
                     for key in body.coordinator_keys)
        return build(response_type(KEY, version), throttle_time=ZERO_MS, coordinators=rows)
    return build(response_type(KEY, version), throttle_time=ZERO_MS, **none)
