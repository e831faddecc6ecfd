"""The kafka format module is a `LogFormat`, member by member, and `get_format` hands out one."""
from __future__ import annotations

import inspect
import typing

import pytest

from logstore.formats import DEFAULT_FORMAT, FORMATS, LogFormat, get_format
from logstore.formats import kafka as K

# Protocol members: the methods the class body defines, and its annotated attributes.
METHODS = sorted(name for name, value in vars(LogFormat).items()
                 if inspect.isfunction(value) and not name.startswith("_"))
ATTRIBUTES = sorted(name for name in LogFormat.__annotations__)


def test_every_registered_format_is_a_log_format():
    assert DEFAULT_FORMAT is K and get_format("kafka") is K
    for name, fmt in FORMATS.items():
        assert isinstance(fmt, LogFormat), name
        assert fmt.NAME == name


def test_get_format_and_the_default_are_annotated_with_the_protocol():
    import logstore.formats as formats
    hints = typing.get_type_hints(get_format)
    assert hints["return"] is LogFormat
    assert typing.get_type_hints(formats)["DEFAULT_FORMAT"] is LogFormat


def test_the_protocol_lists_what_the_storage_layer_and_broker_call():
    # grep of `fmt.` / `.format.` over logstore/ and broker/ when the protocol was written.
    called = {"validate_append", "require_keys", "assign_offsets", "peek_entry", "iter_entries", "scan_entries",
              "entry_bounds", "peek_producer_batch", "read_marker", "decode_entry", "column_builder",
              "add_columns", "encode_batch", "build_control_batch", "BatchBuilder", "increment_sequence",
              "peek_produced_batch"}
    assert called <= set(METHODS) | set(ATTRIBUTES)


@pytest.mark.parametrize("name", ATTRIBUTES)
def test_the_kafka_format_has_each_attribute(name):
    assert hasattr(K, name), name
    if name == "NAME":
        assert isinstance(K.NAME, str)
    else:
        assert callable(getattr(K, name)), name


@pytest.mark.parametrize("name", METHODS)
def test_the_kafka_format_has_each_method_with_a_compatible_signature(name):
    wanted = list(inspect.signature(getattr(LogFormat, name)).parameters.values())[1:]  # past self
    have = inspect.signature(getattr(K, name)).parameters
    positional = [p for p in have.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, param in enumerate(wanted):
        assert param.name in have, f"{name} lacks parameter {param.name!r}"
        got = have[param.name]
        if param.kind == param.POSITIONAL_OR_KEYWORD:
            assert got.kind == param.POSITIONAL_OR_KEYWORD and positional.index(got) == i, \
                f"{name}: {param.name!r} is not positional at {i}"
        else:
            assert got.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD), \
                f"{name}: {param.name!r} cannot be passed by keyword"
        if param.default is not param.empty:
            assert got.default is not got.empty, f"{name}: {param.name!r} needs a default"
            if param.default is not Ellipsis:
                assert got.default == param.default, f"{name}: {param.name!r} defaults to {got.default!r}"
    extra = [p for p in have.values() if p.name not in {w.name for w in wanted}
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert all(p.default is not p.empty for p in extra), f"{name} requires parameters the protocol does not pass"
