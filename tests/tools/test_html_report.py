"""`make bench` as a picture: a tiny real benchmark run, through the report scripts, into bench/html_report.py.

Two real pytest-benchmark runs (a codec subset: ratio rows; assignors from scratch: absolute and information rows)
write their JSON; the report scripts print their tables and write summary/<suite>.json beside it; the
summary helper adds a curve drawn from the codec run's own rates; html_report.py writes the page and its
charts. Checked: every row of every summary is named on the page with the value the report printed, the
charts the page shows are well-formed PNGs (every chunk's CRC, the image data inflates to its size), the
curves not measured say so, and the README-sized headline chart stays under 100 KB.
"""
from __future__ import annotations

import html
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PYTHON = sys.executable
CODEC_CASES = "test_encode_bulk and (v100-none or v1k-none)"   # two groups: values of 100 B and 1 KiB
VALUE_BYTES = {"v100": 100, "v1k": 1024}
CURVE_IDS = ("partitions-throughput", "partitions-rss", "connections-throughput", "connections-rss", "latency")
RUN_TIMEOUT = 120.0   # s: one subprocess

# Last on the path: bench/ holds modules named as some test modules are.
sys.path.append(str(BENCH))
from html_report import fmt  # noqa: E402 - bench/ is no package
from summary import Curve, Summary  # noqa: E402


def _env() -> dict[str, str]:
    # The outer pytest's (and xdist's) variables would leak into the inner runs.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}


def _run(*args: str) -> str:
    done = subprocess.run([PYTHON, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _png_ok(path: Path) -> tuple[int, int]:
    """(width, height) of a well-formed PNG: signature, chunk CRCs, IHDR first, IEND last, IDAT inflating
    to the size IHDR implies; an AssertionError otherwise."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name}: no PNG signature"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack_from(">I", data, pos + 8 + length)
        assert zlib.crc32(kind + body) == crc, f"{path.name}: bad CRC in {kind!r}"
        chunks.append((kind, body))
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", f"{path.name}: chunks {[k for k, _ in chunks]}"
    width, height, depth, colour = struct.unpack_from(">IIBB", chunks[0][1])
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    assert width > 0 and height > 0
    assert len(zlib.decompress(idat)) == height * (1 + (width * channels * depth + 7) // 8), f"{path.name}: short"
    return width, height


def _printed_cells(stdout: str) -> dict[str, list[str]]:
    """The Markdown table rows a report printed: first cell → all cells."""
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("| ") and not line.startswith(("| case", "| group")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def _bench_run(where: Path) -> dict[str, str]:
    """Run both benchmark subsets into `where` and their reports; what each report printed."""
    common = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-only", "--benchmark-warmup=off"]
    runs = [subprocess.Popen([PYTHON, *common, "--benchmark-min-rounds=3", "--benchmark-max-time=0.02",
                              "bench/test_codec.py", "-k", CODEC_CASES, f"--benchmark-json={where / 'codec.json'}"],
                             cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
            subprocess.Popen([PYTHON, *common, "bench/test_assignors.py", "-k", "scratch",
                              f"--benchmark-json={where / 'assignors.json'}"],
                             cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    for run in runs:
        out, _ = run.communicate(timeout=RUN_TIMEOUT)
        assert run.returncode == 0, out[-3000:]
    return {"codec": _run("bench/report.py", str(where / "codec.json")),
            "assignors": _run("bench/test_assignors.py", str(where / "assignors.json"))}


def _check_summaries(where: Path, printed: dict[str, str]) -> None:
    """Every printed row is in the summary, with the cells and verdict the table shows."""
    codec = json.loads((where / "summary" / "codec.json").read_text())
    cells = _printed_cells(printed["codec"])
    assert sorted(r["name"] for r in codec["rows"]) == sorted(cells) == [
        "encode-bulk/v100/none", "encode-bulk/v1k/none"]
    for row in codec["rows"]:
        case = cells[row["name"]]
        # case | ours | peer | ours/peer | (min/min) | target | met
        assert (row["ours"], row["peer"], f"{row['value']:.2f}x") == (case[1], case[2], case[3])
        assert f">= {row['target']:g}x" == case[5]
        assert row["met"] == case[6].startswith("yes") and row["noisy"] == case[6].endswith("(noisy)")
    assignors = json.loads((where / "summary" / "assignors.json").read_text())
    assert {r["target"] for r in assignors["rows"]} == {0.1, None}   # 100 ms rows, and information rows
    assert all(r["unit"] == "s" and r["op"] == "<" for r in assignors["rows"] if r["target"] is not None)
    assert len(assignors["rows"]) == len(_printed_cells(printed["assignors"])) == 4


def _add_curve(where: Path) -> None:
    """A curve from the codec run's own rates: records/s against the value size, ours and the peer."""
    data = json.loads((where / "codec.json").read_text())
    series: dict[str, list[tuple[float, float]]] = {}
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        size = VALUE_BYTES[info["case"].split("/")[0]]
        series.setdefault(info["side"], []).append((size, info["records"] / bench["stats"]["median"]))
    extra = Summary("codec_curve", "encode-bulk against value size", data, str(where / "codec.json"))
    extra.curve(Curve("encode-bulk-by-size", "encode-bulk: records/s against value size", "value bytes",
                      "records/s", series, log_x=True))
    extra.write()


def test_a_bench_run_becomes_a_page_naming_every_ratio_with_valid_charts(tmp_path):
    printed = _bench_run(tmp_path)
    _check_summaries(tmp_path, printed)
    _add_curve(tmp_path)
    headline = tmp_path / "docs" / "headline.png"
    _run("bench/html_report.py", str(tmp_path), "--headline", str(headline))
    page = (tmp_path / "report.html").read_text()

    summaries = [json.loads(p.read_text()) for p in sorted((tmp_path / "summary").glob("*.json"))]
    assert {s["suite"] for s in summaries} == {"codec", "assignors", "codec_curve"}
    for doc in summaries:
        for row in doc["rows"]:
            cell = f"<td>{html.escape(row['name'])}</td><td>{html.escape(row['ours'])}</td>"
            assert cell in page, row["name"]
            assert f"<td>{html.escape(fmt(row['value'], row['unit']))}</td>" in page, row["name"]
    judged = sum(1 for doc in summaries for row in doc["rows"] if row["target"] is not None)
    met = sum(1 for doc in summaries for row in doc["rows"] if row["met"])
    assert f"{met} of {judged} targets met" in page

    images = re.findall(r'<img src="([^"]+)"', page)
    assert "report/headline.png" in images and "report/curve-encode-bulk-by-size.png" in images
    assert {"report/suite-codec.png", "report/suite-assignors.png"} <= set(images)
    for image in images:
        _png_ok(tmp_path / image)
    assert page.count("not measured") == len(CURVE_IDS)
    width, height = _png_ok(headline)
    assert headline.stat().st_size < 100_000 and width > 400 and height > 100
