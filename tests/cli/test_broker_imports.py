"""A `logstore broker` process leaves Hypothesis alone: kio registers strategies for its types whenever
Hypothesis can be imported (it can wherever the test extra is installed, as here), which cost every broker
start 160 ms; other commands, and a process that imported Hypothesis first, keep it importable.
"""
from __future__ import annotations

import json
import subprocess
import sys

# Runs `logstore <argv>` in a fresh interpreter and reports which of kio and Hypothesis it loaded.
_PROBE = ("import json, sys\n"
          "if sys.argv[1] == 'first': import hypothesis\n"
          "from logstore.cli import main\n"
          "try:\n"
          "    status = main(sys.argv[2:])\n"
          "except SystemExit as exit:\n"
          "    status = exit.code\n"
          "loaded = lambda root: any(m.split('.')[0] == root and sys.modules[m] is not None for m in sys.modules)\n"
          "print(json.dumps([status, loaded('kio'), loaded('hypothesis')]))\n")


def _probe(tmp_path, first: str, *argv: str) -> list:
    done = subprocess.run([sys.executable, "-c", _PROBE, first, *argv], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_broker_does_not_import_hypothesis(tmp_path):
    config = ("broker", "--print-config", "--override", f"log.dirs={tmp_path / 'data'}")
    assert _probe(tmp_path, "-", *config) == [0, True, False]
    # Imported before the broker ran: left as it was.
    assert _probe(tmp_path, "first", *config) == [0, True, True]


def test_other_commands_leave_hypothesis_importable(tmp_path):
    # An admin command's parser imports kio, and so kio's Hypothesis strategies, as before.
    assert _probe(tmp_path, "-", "topics", "--help") == [0, True, True]
