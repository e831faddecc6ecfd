"""Real Kafka log dirs (tests/fixtures/real-kafka), each copied to a temporary folder before a test opens it:
opening a log dir writes to it (recovery, checkpoints, `.lock`)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kafka_dirs import fixture_dirs

# The broker-process harness of the client tests, shared rather than copied.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

FIXTURE_NAMES = [d.name for d in fixture_dirs()]


@pytest.fixture(params=FIXTURE_NAMES)
def kafka_dir(request, tmp_path) -> tuple[Path, Path]:
    """(the fixture as committed, a copy of it to open)."""
    source = next(d for d in fixture_dirs() if d.name == request.param)
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    return source, copy
