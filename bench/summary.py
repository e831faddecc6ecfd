"""Each bench report's judged rows as JSON, beside the Markdown it prints, for bench/html_report.py.

A report prints its tables for a reader and hands every figure it judges (and the ones it shows for
information) to a `Summary`, which writes `<directory of the input JSON>/summary/<suite>.json`
(`.benchmarks/summary/` for the scripts that take no JSON):

    {"suite": "codec", "title": "...", "source": ".benchmarks/codec.json", "machine": "...",
     "commit": "...", "datetime": "...", "rows": [Row, ...], "curves": [Curve, ...]}

A row keeps the report's own verdict (met, noisy) rather than judging again, so the picture says what
the table says. A curve is points per broker, keyed by an id html_report knows (its CURVES) or any other.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / ".benchmarks" / "summary"
OPS = (">=", ">", "<=", "<")


@dataclass(frozen=True)
class Row:
    """One figure of a report: `value` (in `unit`; "x" is a ratio) against `target` by `op` (None: information).

    `ours` and `peer` are the table's own cells (text). `met` is None for an information row; `noisy` says
    the report's other estimates (fastest rounds, paired rounds) disagree with the median's verdict.
    """

    name: str
    value: float | None
    unit: str = "x"
    ours: str = ""
    peer: str = ""
    target: float | None = None
    op: str = ">="
    met: bool | None = None
    noisy: bool = False
    note: str = ""


@dataclass(frozen=True)
class Curve:
    """A measured curve: y against x per series (a broker, a percentile). Issue 30's take the ids
    html_report.CURVES names ("partitions-throughput", "partitions-rss", "connections-throughput",
    "connections-rss", "latency"), so the page draws them in their place instead of "not measured"."""

    id: str
    title: str
    x_label: str
    y_label: str
    series: dict[str, list[tuple[float, float]]]
    log_x: bool = False
    log_y: bool = False


def verdict_of(verdict: str | bool | None) -> tuple[bool | None, bool]:
    """(met, noisy) from benchjson.met()'s text ("yes", "**no** (noisy)", ...), a bool, or None/"—"."""
    if verdict is None or isinstance(verdict, bool):
        return verdict, False
    text = verdict.strip()
    noisy = text.endswith("(noisy)")
    if text.startswith("yes") or text == "met":
        return True, noisy
    if text.startswith("**no**") or text.lower() in ("no", "missed"):
        return False, noisy
    return None, False


def summary_dir(json_path: str | os.PathLike[str]) -> Path:
    """Where the summary of a report on `json_path` goes: `summary/` beside that JSON."""
    return Path(json_path).resolve().parent / "summary"


def provenance(data: dict | None) -> dict[str, str]:
    """The machine, commit and date of a pytest-benchmark JSON, or of this checkout now for a script without one."""
    if data is not None:
        machine = data.get("machine_info") or {}
        cpu = machine.get("cpu") or {}
        commit = data.get("commit_info") or {}
        brand = cpu.get("brand_raw") or machine.get("processor") or "?"
        count = cpu.get("count")
        return {"machine": f"{brand}{f', {count} CPUs' if count else ''}; Python {machine.get('python_version', '?')}",
                "commit": (commit.get("id") or "?")[:12] + (" (dirty)" if commit.get("dirty") else ""),
                "datetime": data.get("datetime") or "?"}
    head = _git("rev-parse", "HEAD")
    return {"machine": f"{_cpu_model()}, {os.cpu_count()} CPUs; Python {platform.python_version()}",
            "commit": head[:12] + (" (dirty)" if _git("status", "--porcelain", "--untracked-files=no") else ""),
            "datetime": datetime.datetime.now(datetime.UTC).isoformat()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.machine())
    except OSError:
        return platform.machine()


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


@dataclass
class Summary:
    """The rows and curves of one suite's report, written by write(); not thread-safe (one report, one thread)."""

    suite: str
    title: str
    data: dict | None = None          # the pytest-benchmark JSON: machine, commit and date are taken from it
    source: str | None = None         # the file the report read
    rows: list[Row] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)

    def row(self, name: str, value: float | None, *, verdict: str | bool | None = None, target: float | None = None,
            op: str = ">=", unit: str = "x", ours: str = "", peer: str = "", note: str = "") -> None:
        """Add a row; `verdict` is the report's met() text for it (or a bool), ignored without a target."""
        if op not in OPS:
            raise ValueError(f"{name}: op {op!r} is not one of {OPS}")
        met, noisy = verdict_of(verdict) if target is not None else (None, False)
        if target is not None and met is None:
            raise ValueError(f"{name}: a target of {target} needs a verdict, got {verdict!r}")
        self.rows.append(Row(name, None if value is None else float(value), unit, ours, peer,
                             None if target is None else float(target), op, met, noisy, note))

    def curve(self, curve: Curve) -> None:
        """Add a measured curve."""
        self.curves.append(curve)

    def document(self) -> dict:
        """The JSON document write() stores."""
        return {"suite": self.suite, "title": self.title, "source": self.source, **provenance(self.data),
                "rows": [asdict(r) for r in self.rows], "curves": [asdict(c) for c in self.curves]}

    def write(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Write `<directory>/<suite>.json` (default: beside the source JSON, else DEFAULT_DIR); its path."""
        where = Path(directory) if directory is not None else (
            summary_dir(self.source) if self.source else DEFAULT_DIR)
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{self.suite}.json"
        temp = path.with_suffix(".json.tmp")
        temp.write_text(json.dumps(self.document(), indent=1) + "\n")
        temp.replace(path)
        return path
