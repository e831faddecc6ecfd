"""Kio requests written as little dicts, and the error codes of their answers, for the ACL matrix.

`make(cls, **fields)` builds a kio request of any API and version from the fields given (lists of dicts
for nested entities), every other field its zero value; `errors(response)` is every error code the
answer carries, top level first.
"""
from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from typing import Any

from kio.index import load_request_schema


def _zero(kind: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        return None
    if origin is tuple:
        return ()
    if dataclasses.is_dataclass(kind):
        return make(kind)
    for base, value in ((bool, False), (int, 0), (float, 0.0), (str, ""), (bytes, b""), (uuid.UUID, uuid.UUID(int=0)),
                        (datetime.timedelta, datetime.timedelta(0))):
        if isinstance(kind, type) and issubclass(kind, base):
            return value
    raise TypeError(f"no zero value for {kind!r}")


def _element(kind: Any) -> Any:
    for arg in typing.get_args(kind):
        if typing.get_origin(arg) is tuple:
            return typing.get_args(arg)[0]
        if dataclasses.is_dataclass(arg):
            return arg
    if typing.get_origin(kind) is tuple:
        return typing.get_args(kind)[0]
    return kind


def make(cls: Any, **given: Any) -> Any:
    """An instance of a kio class: the fields given (dicts and lists of dicts for nested entities), the
    others their default or zero value."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            value = given[f.name]
            if isinstance(value, list):
                inner = _element(f.type)
                value = tuple(make(inner, **v) if isinstance(v, dict) else v for v in value)
            elif isinstance(value, dict):
                value = make(_element(f.type), **value)
            elif isinstance(value, int) and f.metadata.get("kafka_type", "").startswith("timedelta"):
                value = datetime.timedelta(milliseconds=value)
            values[f.name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = _zero(f.type)
    return cls(**values)


def request(key: int, version: int, **fields: Any) -> Any:
    """A kio request of the API key and version."""
    return make(load_request_schema(key, version), **fields)


def errors(response: Any) -> list[int]:
    """Every error code in a response, breadth first (the top-level one first)."""
    found: list[int] = []
    queue = [response]
    while queue:
        item = queue.pop(0)
        if dataclasses.is_dataclass(item):
            for f in dataclasses.fields(item):
                value = getattr(item, f.name)
                if f.name.endswith("error_code") and value is not None:
                    found.append(int(value))
                elif isinstance(value, tuple) or dataclasses.is_dataclass(value):
                    queue.extend(value if isinstance(value, tuple) else [value])
    return found
