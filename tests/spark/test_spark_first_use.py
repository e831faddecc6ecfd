"""A new user's first five minutes with Spark: a fresh process, a fresh session, nothing but the README.

Each test runs `first_use_driver.py` as a new Python process with a clean
environment (no PYSPARK_PYTHON, no PYTHONPATH, nothing registered, Python
filter pushdown at Spark's default), the way the README has a user run it:
from a shell where the virtualenv is activated (its `python3` first on PATH),
or with PYSPARK_PYTHON set to the interpreter before the session starts.
The log dir is written with `logstore.open`; the oracle is the library's own
read of it.
"""
from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import logstore
from logstore.read_committed import READ_COMMITTED
from spark_logs import library_rows

DRIVER = Path(__file__).with_name("first_use_driver.py")
TIMEOUT = 900.0  # s: a driver process (a JVM and a dozen Python planning workers on a shared machine)
# This interpreter's bin directory, not resolved: a venv's python is a link to the base interpreter.
BIN = Path(sys.executable).parent
KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
                "timestampType:int>")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> tuple[Path, list[list]]:
    """`orders` (2 partitions × 1,200 records over several segments), `short` (10 records) and `empty` (none),
    and the rows of `orders` as the driver prints them."""
    path = tmp_path_factory.mktemp("first-use") / "data"
    expected = []
    with logstore.open(str(path), {"segment.bytes": 16384}) as store:
        store.create_topic("orders", partitions=2)
        store.create_topic("short", partitions=1)
        store.create_topic("empty", partitions=1)
        for partition in (0, 1):
            log = store.log("orders", partition)
            for n in range(0, 1200, 100):
                log.append_records([b"order-%d" % i for i in range(n, n + 100)],
                                   keys=[None if i % 3 == 0 else b"customer-%d" % (i % 7) for i in range(n, n + 100)])
            expected += [[r.topic, r.partition, r.offset, _hex(r.key), _hex(r.value), r.timestamp, r.timestamp_type]
                         for r in library_rows(log, "orders", partition, READ_COMMITTED)]
        store.log("short", 0).append_records([b"short-%d" % i for i in range(10)])
    return path, expected


def _hex(value: bytes | None) -> str | None:
    return None if value is None else value.hex().upper()


def clean_env(*, activated: bool) -> dict[str, str]:
    """A new shell's environment: HOME, Java and PATH only. `activated` puts this interpreter's bin directory
    first on PATH, as `source .venv/bin/activate` does; otherwise PATH leaves it out."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != BIN]
    env = {name: os.environ[name] for name in ("HOME", "JAVA_HOME", "TMPDIR", "LANG") if name in os.environ}
    env["PATH"] = os.pathsep.join(([str(BIN)] if activated else []) + path)
    if activated and sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    return env


def run_driver(log_dir: Path, work: Path, env: dict[str, str], *, full: bool, set_pyspark_python: bool) -> dict:
    """The driver's result; its output in the failure message if it did not finish."""
    spec = {"path": str(log_dir), "work": str(work), "full": full, "set_pyspark_python": set_pyspark_python}
    done = subprocess.run([sys.executable, str(DRIVER), json.dumps(spec)], env=env, cwd=work,
                          capture_output=True, text=True, timeout=TIMEOUT)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and results, f"driver failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-6000:]}"
    return json.loads(results[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def activated(log_dir, tmp_path_factory) -> dict:
    """What the driver saw from a shell with the virtualenv activated: its `python3` is this interpreter."""
    python3 = BIN / "python3"
    if not python3.exists() or not python3.samefile(sys.executable):
        pytest.fail(f"{BIN} has no python3 that is {sys.executable}: run the tests with the venv make builds")
    return run_driver(log_dir[0], tmp_path_factory.mktemp("activated"), clean_env(activated=True),
                      full=True, set_pyspark_python=False)


def test_spark_can_find_the_source_module():
    # Spark's lookup lists top-level `pyspark_*` modules with pkgutil.iter_modules and takes their DefaultSource.
    assert "pyspark_logstore" in {m.name for m in pkgutil.iter_modules()}, \
        "pyspark_logstore is not installed: pip install --no-build-isolation -e spark/discovery"
    import pyspark_logstore

    from logstore.spark.source import LogstoreDataSource
    assert pyspark_logstore.DefaultSource is LogstoreDataSource and LogstoreDataSource.name() == "logstore"


def test_new_session_reads_without_register_or_settings(activated, log_dir):
    assert activated["pushdown_setting"] in (None, "false")  # Spark's default: the driver set nothing
    assert activated["rows"] == log_dir[1]
    assert len(activated["rows"]) == 2400


def test_filter_gives_the_same_rows_with_pushdown_off_and_on(activated, log_dir):
    off, on = activated["pushdown_off"]["filtered"], activated["pushdown_on"]["filtered"]
    expected = [r for r in log_dir[1] if r[2] >= 1000]
    assert off["rows"] == on["rows"] == expected
    # Off, every segment is a task and Spark drops the rows; on, only the segments from offset 1000 are read.
    assert on["tasks"] < off["tasks"]


@pytest.mark.parametrize("pushdown", ["pushdown_off", "pushdown_on"])
@pytest.mark.parametrize("case", ["unknown-topic", "empty-topic", "filter-past-the-end", "starting-at-the-end",
                                  "starting-past-the-end"])
def test_empty_batch_plan_reads_no_rows_in_kafka_schema(activated, pushdown, case):
    assert activated[pushdown]["empty"][case] == {"rows": 0, "schema": KAFKA_SCHEMA}


def test_starting_past_the_end_fails_unless_fail_on_data_loss_is_false(activated):
    # Kafka's batch source fails too ("Beginning offset 5000 is after the ending offset 1200").
    error = activated["past_the_end_error"]
    assert error is not None and "starting offset 5000 is after the ending offset 1200" in error


@pytest.mark.parametrize("case", ["unknown-topic", "empty-topic", "starting-past-the-end"])
def test_empty_stream_delivers_no_rows_in_kafka_schema(activated, case):
    assert activated["stream"][case] == {"rows": 0, "schema": KAFKA_SCHEMA}


def test_stream_in_a_new_session_delivers_every_row(activated):
    assert activated["stream"]["orders"] == {"rows": 2400, "schema": KAFKA_SCHEMA}


def test_pyspark_python_set_before_the_session_when_python3_is_another_python(log_dir, tmp_path):
    # PATH without the virtualenv: Spark would start `python3` from PATH for its workers.
    result = run_driver(log_dir[0], tmp_path, clean_env(activated=False), full=False, set_pyspark_python=True)
    assert result["rows"] == log_dir[1]
