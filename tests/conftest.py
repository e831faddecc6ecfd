"""Shared test fixtures: the byte-exact vectors of the format spec.

The vectors are in `tests/vectors/` (`spec_vectors.VECTORS_DIR`: NAME.hex +
NAME.json, described in that folder's README and §13 of
docs/spec/on-disk-format.md). Tests reach them through the `vector` fixture, or take a
`vector_name` argument and select the vectors they run over with
`@pytest.mark.vectors(select=predicate)`, `predicate(name, doc) -> bool`.
"""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from spec_vectors import VECTORS_DIR


@cache
def load_vector(name: str) -> tuple[bytes, dict]:
    """The bytes of NAME.hex and the parsed NAME.json (bytes are empty if there is no .hex)."""
    doc = json.loads((VECTORS_DIR / f"{name}.json").read_text())
    hex_path = VECTORS_DIR / f"{name}.hex"
    data = b""
    if hex_path.exists():
        data = bytes.fromhex("".join(hex_path.read_text().split()))
    return data, doc


def vector_names() -> list[str]:
    """Names of the byte-stream vectors: a .hex with a .json describing its entries."""
    return sorted(p.stem for p in VECTORS_DIR.glob("*.hex")
                  if (VECTORS_DIR / f"{p.stem}.json").exists())


@pytest.fixture(scope="session")
def vector():
    """`vector(name) -> (bytes, dict)`: one test vector, loaded once per session."""
    if not VECTORS_DIR.is_dir():
        pytest.fail(f"test vectors not found at {VECTORS_DIR}")
    return load_vector


def pytest_configure(config):
    """Register the `vectors` marker."""
    config.addinivalue_line(
        "markers", "vectors(select): run a test taking `vector_name` over the vectors "
        "for which select(name, doc) is true")


def pytest_generate_tests(metafunc):
    """Parametrize `vector_name` over the vectors the test's `vectors` marker selects."""
    if "vector_name" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("vectors")
    select = marker.kwargs["select"] if marker else (lambda name, doc: True)
    names = [name for name in vector_names() if select(name, load_vector(name)[1])]
    # An empty selection must fail loudly, not collect zero tests.
    assert names, f"no vectors selected for {metafunc.definition.nodeid} in {VECTORS_DIR}"
    metafunc.parametrize("vector_name", names)


# The files that take a worker longest (CI's --durations), in that order. `make test` hands whole files to
# three workers in collection order; one of these started near the end would run alone while the other
# workers idle, so they go first and the many short files fill in behind them.
LONGEST_FILES = (
    "broker/test_fast_codec.py",
    "packaging/test_dist_install.py", "readme/test_readme_session.py", "packaging/test_standalone_clone.py",
    "spark/test_spark_write_kills.py", "spark/test_spark_write_broker.py", "spark/test_spark_write_size.py",
    "spark/test_spark_write.py", "spark/test_spark_streaming.py",
    "cli/test_configs_cli.py",
    "embedded/test_embedded_eos.py",
    "spark/test_spark_first_use.py", "cli/test_get_offsets_cli.py", "clients/test_many_partitions.py",
    "clients/test_transaction_recovery.py", "format/test_columnar_headers.py", "cli/test_share_groups_cli.py",
    "broker/test_transaction_state_machine.py",
)


def pytest_collection_modifyitems(config, items):
    """Soak tests run only when `-m` names them (`make soak`), so a plain pytest run stays fast; the longest
    files come first."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    order = {id(item): i for i, item in enumerate(items)}
    tests_dir = Path(__file__).resolve().parent

    def key(item: pytest.Item) -> tuple[int, int]:
        try:
            name = item.path.resolve().relative_to(tests_dir).as_posix()
        except ValueError:
            name = ""
        return rank.get(name, len(LONGEST_FILES)), order[id(item)]

    items.sort(key=key)
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak") is not None]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]
