"""Requests decoded through kio: unknown tagged fields are skipped, as Kafka skips them.

A newer client may send tags this broker's schemas do not know, in the
request header or anywhere in the body; Kafka ignores them. The decoded
request must equal the one without them, and the known tags must survive.
"""
from __future__ import annotations

import io

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.request_header.v2 import RequestHeader
from kio.serial import entity_writer

from logstore.broker.protocol import decode_request

METADATA = 3


def _write(cls, value) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, value)
    return out.getvalue()


def metadata_frame() -> tuple[bytes, bytes]:
    """(header bytes, body bytes) of a Metadata v12 request for two topics."""
    header = _write(RequestHeader, RequestHeader(request_api_key=METADATA, request_api_version=12,
                                                 correlation_id=5, client_id="newer-client"))
    body = _write(MetadataRequest, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="a"), MetadataRequestTopic(topic_id=None, name="b")),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    return header, body


def test_unknown_tags_in_header_and_body_are_skipped():
    header, body = metadata_frame()
    expected = decode_request(header + body)
    assert header[-1] == 0 and body[-1] == 0  # empty tag sections at the ends
    unknown = b"\x02" + b"\x40\x02hi" + b"\x7f\x00"  # tag 64 (2 bytes), tag 127 (empty)
    got = decode_request(header[:-1] + unknown + body[:-1] + unknown)
    assert got == expected
    assert got[1].topics[1].name == "b"


def test_unknown_tags_inside_array_elements_are_skipped():
    header, body = metadata_frame()
    expected = decode_request(header + body)
    # Each topic element is: uuid (16 bytes), compact string, tag section. Give both a stranger.
    first = body.index(b"\x02a\x00") + 2
    second = body.index(b"\x02b\x00") + 2
    stranger = b"\x01\x05\x03xyz"
    changed = body[:first] + stranger + body[first + 1:second] + stranger + body[second + 1:]
    assert decode_request(header + changed) == expected
