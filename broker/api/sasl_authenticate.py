"""SaslAuthenticate (36), v0-2: one SASL token from the client, the server's token back.

The exchange is the connection's (`sasl_session.py`). A failed one answers
SASL_AUTHENTICATION_FAILED with the mechanism's message after
`connection.failed.authentication.delay.ms`, and the connection closes. Once
complete, v1+ tells the client how long its session lasts
(`connections.max.reauth.ms`, KIP-368). Outside a SASL exchange Kafka's
request handler answers ILLEGAL_SASL_STATE. No authorization: the client is
not yet anyone.
"""
from __future__ import annotations

from datetime import timedelta

from kio.static.primitive import i64Timedelta

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.protocol import ErrorCode
from logstore.errors import SaslAuthenticationError

KEY = 36
NO_SESSION_LIMIT = i64Timedelta.parse(timedelta(0))


@api(KEY, 0, 2)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Evaluate the client's token."""
    session = request.session
    cls = response_type(KEY, request.version)
    if session is None or session.raw_tokens:
        return build(cls, error_code=ErrorCode.illegal_sasl_state, auth_bytes=b"",
                     error_message="SaslAuthenticate outside a SASL authentication",
                     session_lifetime=NO_SESSION_LIMIT)
    # The exchange is the client's only business on this connection: it waits, it is not queued work.
    request.waiting()
    try:
        answer = await session.authenticate(body.auth_bytes, request.broker.coordinate)
    except SaslAuthenticationError as exc:
        return build(cls, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc), auth_bytes=b"",
                     session_lifetime=NO_SESSION_LIMIT)
    return build(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=answer,
                 session_lifetime=i64Timedelta.parse(timedelta(milliseconds=session.session_lifetime_ms)))
