"""The layout the per-log-dir generation files share (`logstore.generation_files`): the newest copy wins,
a broken copy is named, every copy is replaced. Each store's own body is tested with the store."""
from __future__ import annotations

import pytest

from logstore.checkpoints import CorruptCheckpointError
from logstore.generation_files import GenerationFile

NOTES = GenerationFile("notes", "notes", body_is_list=True)


def test_the_copy_with_the_highest_generation_wins_and_a_missing_one_is_skipped(tmp_path):
    dirs = [str(tmp_path / d) for d in ("a", "b", "c", "never-made")]
    NOTES.write(dirs[:3], 4, ["old"], make_dirs=True)
    NOTES.write(dirs[1:2], 5, ["new"])
    (tmp_path / "c" / "notes").unlink()
    assert NOTES.read_newest(dirs, NOTES.read) == (5, ["new"])
    assert NOTES.read_newest(dirs[2:], NOTES.read) is None


def test_of_equal_generations_the_first_log_dirs_copy_is_taken(tmp_path):
    dirs = [str(tmp_path / d) for d in "ab"]
    NOTES.write(dirs[:1], 0, ["first"], make_dirs=True)
    NOTES.write(dirs[1:], 0, ["second"], make_dirs=True)
    assert NOTES.read_newest(dirs, NOTES.read) == (0, ["first"])


def test_a_log_dir_not_made_yet_is_made_only_when_asked(tmp_path):
    with pytest.raises(FileNotFoundError):
        NOTES.write([str(tmp_path / "missing")], 1, [])
    NOTES.write([str(tmp_path / "missing")], 1, [], make_dirs=True)
    assert NOTES.read(str(tmp_path / "missing" / "notes")) == (1, [])


def test_names_outside_ascii_are_written_as_utf_8(tmp_path):
    NOTES.write([str(tmp_path)], 1, ["Zoë"])
    assert "Zoë".encode() in (tmp_path / "notes").read_bytes()
    assert NOTES.read(str(tmp_path / "notes")) == (1, ["Zoë"])


@pytest.mark.parametrize("data, line, reason", [
    (b'{"version": 0,\n "generation": 1, "notes": [\xff]}', 2, "not UTF-8"),
    (b'{"version": 0, "generation": 1,\n "notes": [', 2, "Expecting value"),
    (b'[]', 1, "expected an object of version, generation and notes"),
    (b'{"version": 0, "generation": 1, "notes": [], "more": 1}', 1, "expected an object of version"),
    (b'{"version": 1, "generation": 1, "notes": []}', 1, "expected version 0, found 1"),
    (b'{"version": 0.0, "generation": 1, "notes": []}', 1, "expected version 0, found 0.0"),
    (b'{"version": false, "generation": 1, "notes": []}', 1, "expected version 0, found False"),
    (b'{"version": 0, "generation": -1, "notes": []}', 1, "bad generation -1"),
    (b'{"version": 0, "generation": true, "notes": []}', 1, "bad generation True"),
    (b'{"version": 0, "generation": 1, "notes": {}}', 1, "notes is not a list"),
])
def test_a_copy_that_breaks_the_layout_is_named_with_its_line(tmp_path, data, line, reason):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes").write_bytes(data)
    NOTES.write([str(tmp_path / "b")], 9, [], make_dirs=True)
    with pytest.raises(CorruptCheckpointError) as caught:
        NOTES.read_newest([str(tmp_path / "b"), str(tmp_path / "a")], NOTES.read)
    assert caught.value.path == str(tmp_path / "a" / "notes")
    assert caught.value.line == line and caught.value.reason.startswith(reason)


def test_an_object_body_is_required_where_the_file_says_so(tmp_path):
    doc = GenerationFile("doc", "entries")
    (tmp_path / "doc").write_bytes(b'{"version": 0, "generation": 1, "entries": []}')
    with pytest.raises(CorruptCheckpointError, match="entries is not an object"):
        doc.read(str(tmp_path / "doc"))
