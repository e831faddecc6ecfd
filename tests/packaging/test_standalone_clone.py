"""A clone of the repository stands alone: it needs no sibling `shared/` folder.

The committed HEAD is cloned into an empty temporary folder (uncommitted work is
not in a clone: this tests what lands). The clone installs itself in editable
mode into a throwaway venv (its extensions compiled at -O0: this is about
files, not speed); only then does that venv see this venv's packages, through a
path line in a .pth file, so the dependencies are shared but this venv's
editable `logstore` (which maps `logstore.native`, `.broker` and `.spark` to
this checkout) is not in that interpreter at all. There pytest collects the
whole suite without an error and runs the tests that read the spec's vectors
from three folders.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from venvs import REPO, clean_env, new_venv, pip_into, run, site_packages

# Tests that read tests/vectors through the conftest fixture, spec_vectors and vector_dirs.
VECTOR_TESTS = ["tests/format/test_vectors.py", "tests/storage/test_vector_dir.py",
                "tests/storage/test_compatibility.py", "tests/broker/test_txn_log.py"]
# How a path out of the repository to the spec used to be spelt.
OUTSIDE = r'\.\./shared|shared/(spec|DESIGN)|"shared"'


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """(the clone, the python of its venv)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("needs git and a git checkout")
    folder = tmp_path_factory.mktemp("standalone")
    repo = folder / "clone"
    run(["git", "clone", "--quiet", REPO, repo])
    assert sorted(p.name for p in folder.iterdir()) == ["clone"]
    python = new_venv(folder / "venv")
    pip_into(python, "install", "--quiet", "--no-deps", "--editable", repo, env=clean_env(CFLAGS="-O0"))
    (site_packages(python) / "parent_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield repo, python
    shutil.rmtree(folder, ignore_errors=True)


def test_nothing_in_the_clone_names_a_path_outside_it(clone):
    repo, _ = clone
    found = subprocess.run(["git", "grep", "-n", "-I", "-E", OUTSIDE, "--", ".",
                            ":(exclude)tests/packaging/test_standalone_clone.py"],
                           cwd=repo, stdout=subprocess.PIPE, text=True)
    assert found.returncode == 1 and found.stdout == "", found.stdout


def test_the_clone_imports_its_own_logstore(clone):
    repo, python = clone
    out = run([python, "-c", "import logstore, logstore.native.record_batch as n, logstore.broker.server as b, "
                             "logstore.spark as s; print(logstore.__file__, n.__file__, b.__file__, s.__file__)"],
              cwd=repo, env=clean_env(python))
    for path in out.split():
        assert repo in Path(path).resolve().parents, out


def test_the_whole_suite_collects_in_the_clone(clone):
    repo, python = clone
    out = run([python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=repo,
              env=clean_env(python))
    tail = out.strip().splitlines()[-1]
    assert re.match(r"\d+(/\d+)? tests? collected", tail) and "error" not in tail, out[-4000:]


def test_the_vector_tests_pass_in_the_clone(clone):
    repo, python = clone
    out = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *VECTOR_TESTS], cwd=repo,
              env=clean_env(python))
    assert re.search(r"^\d+ passed in ", out, re.M) and "skipped" not in out, out[-4000:]
