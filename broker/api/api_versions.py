"""ApiVersions (18): the keys and version ranges registered here, and the features this broker finalizes (v0-4).

Features (v3+, tagged fields): `transaction.version`, supported 0-2 and
finalized at 2 as on a Kafka 4 cluster, so a client that reads it may use
transaction version 2 (KIP-890 part 2: Produce v12 and TxnOffsetCommit v5 add
their partitions to the transaction, EndTxn v5 bumps the epoch). Clients that
do not read it stay on version 0 and are served the same: the coordinator
keys each transaction on the versions its client sends, as Kafka does. As in
Kafka, v3 leaves out of SupportedFeatures a feature whose lowest version is 0
(older clients took 0 for "not supported"); the finalized epoch is constant,
since the features never change on this node.

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
FEATURES_FROM = 3
# Kafka's feature name → (lowest supported, highest supported, finalized level).
FEATURES = {"transaction.version": (0, 2, 2)}
FINALIZED_EPOCH = 1


@cache
def response_for(version: int, error: ErrorCode = ErrorCode.none) -> ResponsePayload:
    """The ApiVersions response at `version` (v0 for the unsupported-version answer)."""
    entry = response_type(KEY, version, "ApiVersion")
    keys = tuple(build(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                 for a in sorted(REGISTRY.values(), key=lambda a: a.key))
    features = {}
    if version >= FEATURES_FROM:
        supported, finalized = response_type(KEY, version, "SupportedFeatureKey"), \
            response_type(KEY, version, "FinalizedFeatureKey")
        features = dict(
            supported_features=tuple(build(supported, name=name, min_version=low, max_version=high)
                                     for name, (low, high, _) in FEATURES.items() if low > 0 or version >= 4),
            finalized_features_epoch=FINALIZED_EPOCH,
            finalized_features=tuple(build(finalized, name=name, min_version_level=level, max_version_level=level)
                                     for name, (_, _, level) in FEATURES.items()))
    return build(response_type(KEY, version), error_code=error, api_keys=keys, throttle_time=ZERO_MS, **features)


def _too_new(frame: bytes, correlation_id: int) -> PreEncoded:
    """KIP-511: the v0 answer with UNSUPPORTED_VERSION to a version whose body cannot be read."""
    read_header_only(frame, KEY, MAX_VERSION + 1)  # the header must still be readable
    return encode_kio(correlation_id, 0, response_for(0, ErrorCode.unsupported_version))


@api(KEY, 0, MAX_VERSION, newer=_too_new)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Answer at the version asked."""
    return response_for(request.version)
