"""The README's storage examples run as written."""
from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _run_example(containing: str, directory: pathlib.Path, monkeypatch, capsys) -> list[str]:
    """Run the README's first Python block that contains `containing` in `directory`; its output lines."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if containing in b)
    monkeypatch.chdir(directory)
    exec(compile(example, str(README), "exec"), {})
    return capsys.readouterr().out.splitlines()


def test_readme_storage_example_runs(tmp_path, monkeypatch, capsys):
    output = _run_example("logstore.open", tmp_path, monkeypatch, capsys)
    assert output == ["0 b'k1' b'v1'", "1 b'k2' b'v2'", "(0, 1700000000000)"]
    assert (tmp_path / "tour" / "storage" / "orders-0" / "00000000000000000000.log").stat().st_size > 0


def test_readme_exactly_once_example_runs(tmp_path, monkeypatch, capsys):
    output = _run_example("write_txn_marker", tmp_path, monkeypatch, capsys)
    assert output == ["True True", "1", "[b'p1', b't1', b't2']"]


def test_readme_compaction_example_runs(tmp_path, monkeypatch, capsys):
    output = _run_example("cleanup.policy", tmp_path, monkeypatch, capsys)
    assert output == ["[(298, b'XYZ', b'298'), (299, b'ABC', b'299')]"]
