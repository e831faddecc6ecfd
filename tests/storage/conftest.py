"""Fixtures for the storage tests."""
from __future__ import annotations

import pytest

from vector_dirs import copy_vector_dir


@pytest.fixture
def segment_txn_dir(tmp_path):
    """The `segment_txn` vector as a writable `orders-0` directory."""
    return copy_vector_dir("segment_txn", tmp_path / "orders-0")
