"""The worked examples of docs/format/ are what logstore's own readers make of real files.

Each page carries three kinds of example, each run here:

  ```hex KIND PATH      bytes, then a ```fields block: `name = JSON value` lines. The bytes
                        must be PATH's (the whole file, or for a record kind a part of it),
                        and logstore's reader of KIND must decode them to exactly the fields
                        listed: `logstore dump --json` for file kinds (its "entries",
                        flattened: `entries[0].offset`), the coordinators' record decoders
                        (`record_json`, what `logstore dump --offsets-decoder` prints) for
                        record kinds, whose bytes are a `key` part and a `value` part.
  ```console            `$ logstore dump ...` lines, each followed by the exact stdout.
  ```listing DIR        `SIZE PATH` per file under DIR (`-` where the size varies).
  ```file PATH          the text of PATH, exactly (a file without a final newline is
                        shown as if it had one: the page says so).

PATHs are relative to a folder holding the log dirs tests/docs/format_examples.py
writes (example/, live/, crash/, recovered/, read-only/, groups/) and `tests/`, so
tests/fixtures/real-kafka/ (files Kafka wrote) is reachable too.
"""
from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from crc32c import crc32c

from format_examples import build
from logstore import dump
from logstore.broker.coordinator.record_json import offsets_record, transaction_record

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "format"
PAGES = ("segment-files.md", "snapshots.md", "coordinator-records.md", "recovery.md")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
FILE_KINDS = {"offset-index", "time-index", "txn-index", "producer-snapshot"}
RECORD_KINDS = {"offsets-record": offsets_record, "transaction-record": transaction_record}
_SNAPSHOT_HEAD = struct.Struct(">hIi")


@dataclass(frozen=True)
class Example:
    """One fenced example of a page: its kind, argument and body (and, for hex, its fields)."""

    page: str
    line: int
    kind: str
    arg: str
    body: str
    fields: str = ""

    @property
    def id(self) -> str:
        """`page:line`, the test id."""
        return f"{self.page.removesuffix('.md')}:{self.line}"


def _examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = (DOCS / page).read_text()
        blocks = [(text.count("\n", 0, m.start()) + 1, m.group(1).split(), m.group(2)) for m in FENCE.finditer(text)]
        for i, (line, info, body) in enumerate(blocks):
            if not info or info[0] not in ("hex", "console", "listing", "file"):
                continue
            if info[0] == "hex":
                assert i + 1 < len(blocks) and blocks[i + 1][1] == ["fields"], \
                    f"{page}:{line}: a hex block must be followed by a fields block"
                found.append(Example(page, line, info[1], info[2], body, blocks[i + 1][2]))
            elif info[0] in ("listing", "file"):
                found.append(Example(page, line, info[0], info[1], body))
            else:
                found.append(Example(page, line, "console", "", body))
    return found


EXAMPLES = _examples()
HEX = [pytest.param(e, id=e.id) for e in EXAMPLES if e.kind in FILE_KINDS | RECORD_KINDS.keys()]
CONSOLE = [pytest.param(e, id=e.id) for e in EXAMPLES if e.kind == "console"]
LISTING = [pytest.param(e, id=e.id) for e in EXAMPLES if e.kind == "listing"]
TEXT = [pytest.param(e, id=e.id) for e in EXAMPLES if e.kind == "file"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The example log dirs, written once, beside a link to tests/ (for the real-Kafka fixtures)."""
    root = tmp_path_factory.mktemp("format-examples")
    build(root)
    (root / "tests").symlink_to(REPO / "tests")
    return root


def flatten(value, name: str = "") -> dict:
    """`{"a": [{"b": 1}]}` → `{"a[0].b": 1}`; empty lists and dicts stay values."""
    if isinstance(value, dict) and value:
        items = ((f"{name}.{k}" if name else k, v) for k, v in value.items())
    elif isinstance(value, list) and value:
        items = ((f"{name}[{i}]", v) for i, v in enumerate(value))
    else:
        return {name: value}
    flat = {}
    for key, item in items:
        flat.update(flatten(item, key))
    return flat


def listed_fields(text: str) -> dict:
    """The `name = JSON value` lines of a fields block."""
    fields = {}
    for line in text.strip().splitlines():
        name, _, value = line.partition(" = ")
        assert name not in fields, f"{name} listed twice"
        fields[name] = json.loads(value)
    return fields


def hex_parts(body: str) -> dict[str, bytes]:
    """The bytes of a hex block; lines starting with a label (`key`, `value`) start a part."""
    parts: dict[str, str] = {}
    label = ""
    for line in body.splitlines():
        words = line.split()
        if words and not all(c in "0123456789abcdefABCDEF" for c in words[0]):
            label, words = words[0], words[1:]
        parts[label] = parts.get(label, "") + "".join(words)
    return {k: bytes.fromhex(v) for k, v in parts.items()}


def decode_file(kind: str, data: bytes, source: Path, scratch: Path) -> dict:
    """What `logstore dump --json` reads in `data` stored under `source`'s name (beside its .log)."""
    scratch.mkdir()
    path = scratch / source.name
    path.write_bytes(data)
    segment_log = source.with_name(source.name.split(".")[0] + ".log")
    if kind in ("offset-index", "time-index") and segment_log.exists():
        shutil.copy(segment_log, scratch / segment_log.name)
    out, err = io.StringIO(), io.StringIO()
    status = dump.run([str(path)], as_json=True, out=out, err=err)
    assert status == dump.OK, err.getvalue()
    doc = json.loads(out.getvalue())
    assert not doc["problems"] and not doc.get("partialTail"), doc
    decoded = {"entries": doc["entries"]}
    if kind == "producer-snapshot":
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
        assert crc == crc32c(data[6:])
        decoded.update(version=version, crc=crc, count=count)
    return flatten(decoded)


@pytest.mark.parametrize("example", HEX)
def test_hex_example_is_the_file_and_decodes_to_its_fields(example, workspace, tmp_path):
    parts = hex_parts(example.body)
    source = workspace / example.arg
    data = source.read_bytes()
    if example.kind in FILE_KINDS:
        assert parts.keys() == {""}
        assert parts[""] == data, f"the hex is not {example.arg}"
        decoded = decode_file(example.kind, parts[""], source, tmp_path / "scratch")
    else:
        assert parts.keys() == {"key", "value"}
        key, value = parts["key"], parts["value"] or None
        assert key in data and (value is None or value in data), f"the record is not in {example.arg}"
        record_key, payload = RECORD_KINDS[example.kind](key, value)
        decoded = flatten({"key": record_key, "value": payload})
    assert decoded == listed_fields(example.fields)


def _commands(body: str) -> list[tuple[str, str]]:
    """(command, expected stdout) of each `$ ` line of a console block."""
    runs: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            runs.append((line[2:], []))
        else:
            assert runs, f"output before any command: {line!r}"
            runs[-1][1].append(line)
    return [(command, "\n".join(lines) + "\n") for command, lines in runs]


@pytest.mark.parametrize("example", CONSOLE)
def test_console_example_prints_what_the_page_shows(example, workspace):
    for command, expected in _commands(example.body):
        argv = shlex.split(command)
        assert argv[:2] == ["logstore", "dump"], command
        result = subprocess.run([sys.executable, "-m", "logstore", *argv[1:]], cwd=workspace,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout == expected, command


@pytest.mark.parametrize("example", LISTING)
def test_listing_example_is_the_directory(example, workspace):
    top = workspace / example.arg
    found = {str(p.relative_to(top)): p.stat().st_size for p in top.rglob("*") if p.is_file()}
    listed = {}
    for line in example.body.strip().splitlines():
        size, name = line.split()
        listed[name] = size
    assert sorted(found) == sorted(listed)
    for name, size in listed.items():
        if size != "-":
            assert found[name] == int(size), name


@pytest.mark.parametrize("example", TEXT)
def test_text_example_is_the_file(example, workspace):
    text = (workspace / example.arg).read_text()
    assert example.body == (text if text.endswith("\n") else text + "\n")


def test_a_read_only_open_leaves_every_byte_as_the_crash_left_it(workspace):
    crash, viewed = workspace / "crash", workspace / "read-only"
    names = sorted(str(p.relative_to(crash)) for p in crash.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(viewed)) for p in viewed.rglob("*") if p.is_file())
    for name in names:
        assert (crash / name).read_bytes() == (viewed / name).read_bytes(), name


def test_every_page_has_examples_and_is_linked_from_the_index():
    index = (REPO / "docs" / "spec" / "README.md").read_text()
    for page in PAGES:
        assert any(e.page == page for e in EXAMPLES), f"{page} has no executed example"
        assert f"../format/{page}" in index, f"{page} is not in docs/spec/README.md"
    assert os.path.exists(DOCS / "record-batch.md")
