"""One local Spark session for the whole test run, with the `logstore` source registered.

A session takes ~10 s to start and its first query ~10 s more (Python workers),
so every test under tests/spark shares the session-scoped `spark` fixture, and
each test keeps its data small. Tests here carry the `spark` marker:
`-m "not spark"` leaves them out.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CLIENTS = HERE.parent / "clients"

# The client tests' broker fixtures (`start_broker`), for tests that read what a real
# broker wrote; their helper modules import each other by bare name.
if str(CLIENTS) not in sys.path:
    sys.path.append(str(CLIENTS))
_spec = importlib.util.spec_from_file_location("clients_broker_fixtures", CLIENTS / "conftest.py")
_clients = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_clients)
start_broker = _clients.start_broker


def pytest_configure(config):
    """Register the `spark` marker."""
    config.addinivalue_line("markers", "spark: needs the shared local Spark session (tests/spark)")


def pytest_collection_modifyitems(config, items):
    """Mark every test collected under tests/spark with `spark`."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    """A `local[2]` SparkSession (UTC session time zone, Python filter pushdown on) with
    `spark.read.format("logstore")` registered; stopped at the end of the run."""
    with pytest.MonkeyPatch.context() as env:
        # Spark starts its Python workers with PYSPARK_PYTHON, else the system python, which
        # lacks pyarrow and this package.
        env.setenv("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        import logstore.spark

        session = (SparkSession.builder.master("local[2]")
                   .appName("logstore-tests")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.python.filterPushdown.enabled", "true")
                   .config("spark.sql.session.timeZone", "UTC")
                   # Test data is small: a handful of shuffle partitions keeps joins and sorts quick.
                   .config("spark.sql.shuffle.partitions", "2")
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        logstore.spark.register(session)
        try:
            yield session
        finally:
            session.stop()
