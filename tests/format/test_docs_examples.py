"""The worked examples in docs/format/ decode to the fields the docs list."""
import re
from pathlib import Path

import pytest

from logstore.formats import kafka as K

DOCS = Path(__file__).resolve().parents[2] / "docs" / "format"
BLOCK = re.compile(r"```hex\n(.*?)```\s*```fields\n(.*?)```", re.S)


def _examples():
    for doc in sorted(DOCS.glob("*.md")):
        for i, match in enumerate(BLOCK.finditer(doc.read_text())):
            raw = bytes.fromhex("".join(match.group(1).split()))
            fields = dict(line.split(" = ") for line in match.group(2).strip().splitlines())
            yield pytest.param(raw, fields, id=f"{doc.stem}-{i}")


EXAMPLES = list(_examples())


def test_docs_have_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("raw, fields", EXAMPLES)
def test_worked_example_decodes_to_listed_fields(raw, fields):
    header = K.validate_batch(raw, deep=True)
    assert header.size_in_bytes == len(raw)
    for name, value in fields.items():
        assert getattr(header, name) == int(value), name
    assert len(K.decode_records(raw)) == header.record_count
