"""Only `logstore/formats/` and `native/` know where a v2 batch's header fields sit.

Every .py under logstore/, broker/ and spark/ (but logstore/formats/) is read
with `ast` for reads of batch bytes at the header's own places:

- a struct format (struct.Struct, struct.unpack*, struct.pack*) whose fields,
  laid out with their padding and shifted by the constant part of the offset
  it is used at, land on two or more header fields, or a one-field struct
  used at a header field's offset (`_I32.unpack_from(buf, pos + 23)`);
- `int.from_bytes(x[a + 8:a + 12])`-style slices spanning exactly one header
  field (or a slice of a struct read);
- a subscript at the magic byte's place (`records[pos + 16]`, `records[MAGIC]`).

baseOffset (bytes 0-7) is left out: an int64 at 0 is every other record's
first field too. Names bound to constants at module level are resolved. The
scenarios below pin the rule: today's offenders in small, and the non-batch
structs of the tree (index entries, coordinator records, frames) that must
pass.
"""
from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("logstore", "broker", "spark")
OWNERS = ("logstore/formats/",)

# (offset, size) of every v2 header field but baseOffset (on-disk-format.md §2, native/batch_header.pxd).
HEADER_FIELDS = {
    (8, 4): "batchLength", (12, 4): "partitionLeaderEpoch", (16, 1): "magic", (17, 4): "crc",
    (21, 2): "attributes", (23, 4): "lastOffsetDelta", (27, 8): "baseTimestamp", (35, 8): "maxTimestamp",
    (43, 8): "producerId", (51, 2): "producerEpoch", (53, 4): "baseSequence", (57, 4): "recordCount",
}
MAGIC = 16

# Reads that look like batch-header reads and are not, each with why. Key: (path, line text stripped).
ALLOWED: dict[tuple[str, str], str] = {
    ("broker/coordinator/txn_log.py", '_HEAD = struct.Struct(">hqhib")'):
        "TransactionLogValue's head (version, producer id, epoch, timeout, state): its int32 and int8 fall at "
        "the batch header's partitionLeaderEpoch and magic offsets by chance",
}

_STRUCT_CALLS = {"Struct", "unpack", "unpack_from", "pack", "pack_into", "calcsize", "iter_unpack"}
_AT_OFFSET = {"unpack_from": 2, "pack_into": 2}  # struct.X(fmt, buf, offset): the offset's index


def _fields(fmt: str) -> list[tuple[int, int]] | None:
    """(offset, size) of each non-pad field of a struct format, or None if it is not one."""
    try:
        struct.calcsize(fmt)
    except (struct.error, TypeError):
        return None
    body = fmt.lstrip("@=<>!")
    if fmt[:1] in ("@", ""):
        return None  # native alignment: never a wire layout
    out, pos, count = [], 0, ""
    for ch in body:
        if ch.isdigit():
            count += ch
            continue
        n = int(count) if count else 1
        count = ""
        if ch.isspace():
            continue
        size = struct.calcsize(">" + ch)
        if ch == "x":
            pos += n
        elif ch in "sp":
            out.append((pos, n))
            pos += n
        else:
            for _ in range(n):
                out.append((pos, size))
                pos += size
    return out


class _Scan(ast.NodeVisitor):
    """Collects (line, message) for every batch-layout read in one module."""

    def __init__(self, tree: ast.Module):
        self.constants: dict[str, object] = {}
        self.structs: dict[str, str] = {}
        self.found: list[tuple[int, str]] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
                if isinstance(value, ast.Constant) and isinstance(value.value, (int, str)):
                    self.constants[name] = value.value
                elif isinstance(value, ast.Call) and self._call_name(value) == "Struct" and value.args:
                    fmt = self._const(value.args[0])
                    if isinstance(fmt, str):
                        self.structs[name] = fmt

    def _const(self, node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        return None

    def _offset(self, node) -> int | None:
        """The constant part of an offset expression (`pos + 23` -> 23), None when it has none."""
        if node is None:
            return 0
        value = self._const(node)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left, right = self._offset(node.left), self._offset(node.right)
            if isinstance(node.op, ast.Sub):
                right = None if right is None else -right
            if left is None and right is None:
                return None
            return (left or 0) + (right or 0)
        return None

    @staticmethod
    def _call_name(node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
        return None

    def _check_fields(self, node, fmt: str, at: int, one_field_counts: bool) -> None:
        fields = _fields(fmt)
        if not fields:
            return
        hits = [HEADER_FIELDS[(at + o, s)] for o, s in fields if (at + o, s) in HEADER_FIELDS]
        if len(hits) >= 2 or (hits and one_field_counts and len(fields) == 1):
            self.found.append((node.lineno, f"struct {fmt!r} at +{at} reads the batch header's {', '.join(hits)}"))

    def visit_Call(self, node: ast.Call) -> None:
        name = self._call_name(node)
        func = node.func
        is_struct_module = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == "struct"
        if name in _STRUCT_CALLS and (is_struct_module or (name == "Struct" and isinstance(func, ast.Name))):
            fmt = self._const(node.args[0]) if node.args else None
            if isinstance(fmt, str):
                index = _AT_OFFSET.get(name)
                at = self._offset(node.args[index]) if index is not None and len(node.args) > index else 0
                self._check_fields(node, fmt, at or 0, one_field_counts=at is not None and index is not None)
        elif name in ("unpack_from", "pack_into") and isinstance(func, ast.Attribute) \
                and isinstance(func.value, ast.Name) and func.value.id in self.structs:
            at = self._offset(node.args[1]) if len(node.args) > 1 else 0
            if at is not None and len(node.args) > 1:
                self._check_fields(node, self.structs[func.value.id], at, one_field_counts=True)
        elif name == "from_bytes" and node.args and isinstance(node.args[0], ast.Subscript):
            self._check_slice(node.args[0])
        self.generic_visit(node)

    def _check_slice(self, node: ast.Subscript) -> None:
        sl = node.slice
        if not isinstance(sl, ast.Slice):
            return
        lower, upper = self._offset(sl.lower), self._offset(sl.upper)
        if lower is None or upper is None:
            return
        field = HEADER_FIELDS.get((lower, upper - lower))
        if field:
            self.found.append((node.lineno, f"bytes [+{lower}:+{upper}] are the batch header's {field}"))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.slice, ast.Slice) and self._offset(node.slice) == MAGIC \
                and not isinstance(node.value, (ast.Dict, ast.List, ast.Tuple)):
            self.found.append((node.lineno, "byte +16 is the batch header's magic"))
        self.generic_visit(node)


def findings(source: str) -> list[tuple[int, str]]:
    """(line, what) of every batch-layout read in a module's source."""
    tree = ast.parse(source)
    scan = _Scan(tree)
    scan.visit(tree)
    return sorted(set(scan.found))


def _modules():
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if "__pycache__" not in rel and not rel.startswith(OWNERS):
                yield rel, path


def test_no_module_outside_the_formats_reads_batch_header_fields():
    problems = []
    for rel, path in _modules():
        source = path.read_text()
        lines = source.splitlines()
        for line, what in findings(source):
            if (rel, lines[line - 1].strip()) not in ALLOWED:
                problems.append(f"{rel}:{line}: {what}: ask logstore.formats (e.g. peek_entry, "
                                f"peek_producer_batch, peek_produced_batch, read_header) instead")
    assert not problems, "batch layout read outside logstore/formats/ and native/:\n" + "\n".join(problems)


def test_the_formats_read_header_fields_through_the_native_codec():
    # logstore/formats/ may hold the layout but does not: native/batch_header.pxd is its one owner.
    problems = [f"{path.relative_to(REPO)}:{line}: {what}"
                for path in sorted((REPO / "logstore" / "formats").glob("*.py"))
                for line, what in findings(path.read_text())]
    assert not problems, "\n".join(problems)


def test_the_allow_list_names_lines_that_exist():
    for (rel, text), why in ALLOWED.items():
        assert why and text in (REPO / rel).read_text(), (rel, text)


# The offenders this test was written against, in small: each must be caught.
OFFENDERS = {
    "a Produce handler's partial header struct": '''
import struct
BATCH_HEADER = struct.Struct(">8xi9xh20xqh")
''',
    "the whole header in one struct": '''
import struct
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
''',
    "one-field structs used at header offsets": '''
import struct
_BE_I32 = struct.Struct(">i")
def f(view, pos):
    return _BE_I32.unpack_from(view, pos + 23)[0]
''',
    "a patch of the leader epoch": '''
import struct
_BE_I32 = struct.Struct(">i")
def f(view, pos, epoch):
    _BE_I32.pack_into(view, pos + 12, epoch)
''',
    "a struct.pack_into of the CRC": '''
import struct
def f(view, pos, crc):
    struct.pack_into(">I", view, pos + 17, crc)
''',
    "a dump's int.from_bytes of the size field": '''
def f(view, pos):
    return int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
''',
    "a max timestamp sliced from a whole batch": '''
def f(result):
    return int.from_bytes(result[35:43], "big", signed=True)
''',
    "the magic byte through a module constant": '''
MAGIC_OFFSET = 16
def f(records):
    return records[MAGIC_OFFSET] < 2
''',
    "the magic byte at a position": '''
def f(view, pos):
    return view[pos + 16] not in (0, 1, 2)
''',
}

# Structs of the tree that are not batch headers: none may be caught.
LEGITIMATE = {
    "offset and time index entries": '''
import struct
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
def f(buf, slot):
    return _TIME_ENTRY.unpack_from(buf, slot * 12), _OFFSET_ENTRY.unpack_from(buf, slot * 8)
''',
    "a .txnindex entry": '''
import struct
_ABORTED = struct.Struct(">hqqqq")
''',
    "coordinator record heads and UUIDs": '''
import struct
_VALUE_V3_HEAD = struct.Struct(">hqih")
_UUID = struct.Struct(">qq")
_KEY_HEAD = struct.Struct(">hh")
def f(data, n):
    return _VALUE_V3_HEAD.unpack_from(data, 0), _KEY_HEAD.unpack_from(data, 0)
''',
    "request frames": '''
import struct
_API = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
def f(frame, head):
    _SIZE.pack_into(head, 0, 10)
    return _API.unpack_from(frame, 0)
''',
    "a control record's key and a marker's value": '''
def f(key, value):
    return int.from_bytes(key[0:2], "big"), int.from_bytes(value[2:6], "big")
''',
    "an int64 at the start of anything": '''
import struct
_I64 = struct.Struct(">q")
def f(data):
    return _I64.unpack_from(data, 0), int.from_bytes(data[0:8], "big")
''',
    "little-endian hashing words": '''
import struct
_WORDS = struct.Struct("<I")
''',
}


@pytest.mark.parametrize("case", sorted(OFFENDERS))
def test_the_rule_catches(case):
    assert findings(OFFENDERS[case]), case


@pytest.mark.parametrize("case", sorted(LEGITIMATE))
def test_the_rule_passes(case):
    assert findings(LEGITIMATE[case]) == [], case
