"""The handler kit's contracts: discovery of the API modules, ApiVersions built from the
registrations, the broker context, one place turning Kafka errors into codes and its version
rules, and how `authorizer.class.name` names an authorizer."""
from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

from logstore.broker import api as api_package
from logstore.broker.api import REGISTRY, Request, load_all
from logstore.broker.api.api_versions import response_for
from logstore.broker.api.kit import OLDER_VERSIONS, error_code
from logstore.broker.authorizer import ANONYMOUS, AclOperation, AllowAll, ResourceType, load_authorizer
from logstore.broker.config import BrokerConfig
from logstore.broker.context import BrokerContext
from logstore.broker.protocol import ErrorCode
from logstore.broker.server import Broker
from logstore.errors import ConcurrentTransactionsError, ProducerFencedError

API_DIR = Path(api_package.__file__).parent


def _registers(path: Path) -> bool:
    """Whether a module's source decorates a function with `@api(...)`."""
    tree = ast.parse(path.read_text())
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "api"
               for node in ast.walk(tree) if isinstance(node, ast.AsyncFunctionDef) for d in node.decorator_list)


def test_every_module_that_registers_is_served_and_no_other():
    load_all()
    served = {a.name for a in REGISTRY.values()}
    modules = {m.name for m in pkgutil.iter_modules([str(API_DIR)])}
    registering = {name for name in modules if _registers(API_DIR / f"{name}.py")}
    assert served == registering
    assert {"kit", "group_calls"} <= modules - served
    assert len(REGISTRY) == len(served)  # one key per module


def test_api_versions_lists_exactly_the_registrations():
    load_all()
    listed = {(k.api_key, k.min_version, k.max_version) for k in response_for(3).api_keys}
    assert listed == {(a.key, a.min_version, a.max_version) for a in REGISTRY.values()}


def test_exceptions_become_codes_in_the_kit_only():
    readers = []
    for path in sorted(API_DIR.glob("*.py")):
        if path.name == "kit.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "code":
                readers.append(f"{path.name}:{node.lineno}")
    assert readers == []


def _context_members() -> set[str]:
    return {name for name in (*BrokerContext.__annotations__, *vars(BrokerContext)) if not name.startswith("_")}


def test_handlers_reach_the_broker_only_through_its_context():
    used = set()
    for path in sorted(API_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
                if owner == "broker":
                    used.add(node.attr)
    assert {"store", "groups", "transactions", "coordinate", "authorizer"} - used == set()  # the scan sees them
    assert used <= _context_members(), used - _context_members()


def test_the_server_broker_is_a_broker_context(tmp_path):
    broker = Broker(BrokerConfig.load(None, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0"]))
    try:
        assert not [name for name in _context_members() if not hasattr(broker, name)]
    finally:
        broker.node.close()


def _request(api_key: int, version: int) -> Request:
    return Request(broker=None, api_key=api_key, version=version, correlation_id=1, client_id="test")


@pytest.mark.parametrize(("api_key", "first"), [(22, 4), (24, 2), (25, 2), (26, 2), (28, 3)])
def test_producer_fenced_is_invalid_producer_epoch_before_it_existed(api_key, first):
    fenced = ProducerFencedError("fenced")
    assert error_code(_request(api_key, first - 1), fenced) == ErrorCode.invalid_producer_epoch
    assert error_code(_request(api_key, first), fenced) == ErrorCode.producer_fenced
    assert OLDER_VERSIONS[(ErrorCode.producer_fenced, api_key)] == (first, ErrorCode.invalid_producer_epoch)


def test_other_errors_and_apis_keep_their_code():
    assert error_code(_request(26, 0), ConcurrentTransactionsError("busy")) == ErrorCode.concurrent_transactions
    assert error_code(_request(0, 3), ProducerFencedError("fenced")) == ErrorCode.producer_fenced
    assert error_code(_request(26, 0), None) == ErrorCode.none



def _config(tmp_path: Path | None = None) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(tmp_path or Path("/nonexistent-logstore-dir"))})


def test_no_authorizer_class_allows_everything():
    authorizer = load_authorizer("", _config())
    assert isinstance(authorizer, AllowAll)
    assert authorizer.authorize(ANONYMOUS, AclOperation.WRITE, ResourceType.TOPIC, ["a", "b"]) == {"a", "b"}
    assert str(ANONYMOUS) == "User:ANONYMOUS"


@pytest.mark.parametrize("name", ["logstore.broker.authorizer.AllowAll", "logstore.broker.authorizer:AllowAll"])
def test_an_authorizer_class_is_named_like_kafkas(name):
    assert isinstance(load_authorizer(name, _config()), AllowAll)


@pytest.mark.parametrize("name", ["nosuchmodule.Authorizer", "logstore.broker.authorizer.NoSuchClass", "AllowAll",
                                  "logstore.broker.authorizer.KafkaPrincipal",
                                  "logstore.broker.authorizer.ResourceType"])
def test_a_name_that_is_no_authorizer_is_refused(name):
    with pytest.raises(ValueError, match="authorizer.class.name"):
        load_authorizer(name, _config())
