"""SaslHandshake (17), v0-1: the client names a SASL mechanism; the answer lists the listener's mechanisms.

On a SASL listener the handshake opens authentication (`sasl_session.py`);
a mechanism the listener does not enable answers UNSUPPORTED_SASL_MECHANISM
and the connection closes, as Kafka closes it. On a listener without SASL,
or on a SASL one once the client is authenticated and not re-authenticating
(KIP-368 needs v1), Kafka's request handler answers ILLEGAL_SASL_STATE. No
authorization: the client is not yet anyone.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.protocol import ErrorCode

KEY = 17


@api(KEY, 0, 1)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Start (or restart, KIP-368) the exchange with the mechanism asked."""
    session = request.session
    if session is None:
        return build(response_type(KEY, request.version), error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    mechanisms = tuple(session.authenticators.enabled)
    error = ErrorCode.none if session.handshake(body.mechanism, request.version) \
        else ErrorCode.unsupported_sasl_mechanism
    return build(response_type(KEY, request.version), error_code=error, mechanisms=mechanisms)
