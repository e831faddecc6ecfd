"""The README's Spark examples run as written, on a directory the library wrote."""
from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pyarrow.parquet as pq

import logstore

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def spark_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Spark\n"):text.index("## Looking at files")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_batch_and_streaming_examples(spark, tmp_path):
    with logstore.open(str(tmp_path / "data"), {"segment.bytes": 16384}) as store:
        store.create_topic("orders", partitions=2)
        for partition in (0, 1):
            log = store.log("orders", partition)
            for n in range(0, 1200, 100):
                log.append_records([b"order-%d" % i for i in range(n, n + 100)])
    # Relative paths resolve in Spark's JVM and workers, started in pytest's directory, not tmp_path.
    batch, streaming = (block.replace('"./', f'"{tmp_path}/') for block in spark_blocks())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(batch, {})
    lines = [line.split("|")[1:-1] for line in printed.getvalue().splitlines() if line.startswith("|")]
    counts, latest = lines[:3], lines[3:]
    assert [[c.strip() for c in row] for row in counts] == [["partition", "count"], ["0", "1200"], ["1", "1200"]]
    assert [c.strip() for c in latest[0]] == ["partition", "offset", "value"]
    # show() prints 20 rows; every one is at or past offset 1000.
    assert len(latest) == 21 and all(int(row[1]) >= 1000 for row in latest[1:])

    exec(streaming, {"spark": spark})
    table = pq.read_table(tmp_path / "orders-parquet")
    assert sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist())) == \
        [(p, o) for p in (0, 1) for o in range(1200)]
