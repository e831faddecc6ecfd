"""`make bench` as a picture: every report's summary (bench/summary.py) as one HTML page with PNG charts.

    python bench/html_report.py [DIR]                       # DIR defaults to .benchmarks
    python bench/html_report.py .benchmarks --headline docs/bench/headline.png

Reads DIR/summary/*.json, written by each report script as it prints its tables, and writes
DIR/report.html with its charts in DIR/report/: the headline chart (every figure that has a target,
as a bar of how far it is from that target: value/target for a floor, target/value for a ceiling, so
1 is the target line whichever way the target points, on a log scale, coloured by the report's own
verdict), one such chart per suite beside its table (information rows in the table only), and the
scaling and latency curves (CURVES) drawn from whatever a summary holds, each other one marked "not
measured". A suite of `make bench` with no summary is listed as not run; each suite's commit and date
are shown, so a page mixing runs says so. Exit status: 2 if DIR holds no summary, else 0.
"""
from __future__ import annotations

import argparse
import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from PIL import Image

# The suites in `make bench`'s order: (summary name, what prints it).
SUITES = (("codec", "bench/report.py"), ("storage", "bench/storage_report.py"),
          ("producer", "bench/producer_report.py"), ("transactions", "bench/transactions_report.py"),
          ("broker", "bench/broker_report.py"), ("broker_transactions", "bench/txn_broker_report.py"),
          ("broker_groups", "bench/groups_broker_report.py"), ("spark", "bench/spark_report.py"),
          ("spark_write", "bench/spark_write.py"), ("embedded", "bench/embedded_report.py"),
          ("assignors", "bench/test_assignors.py"), ("cleaner", "bench/test_cleaner.py"),
          ("coordinator_load", "bench/test_coordinator_load.py"),
          ("cluster_metadata", "bench/test_cluster_metadata.py"), ("c_client", "bench/c_client.py"),
          ("c_client_curves", "bench/c_client_curves.py"),
          ("small_requests", "bench/small_requests.py"), ("parked_fetch", "bench/parked_fetch.py"),
          ("security", "bench/security.py"))
# Issue 30's curves, by the id a summary's curve carries: (what it shows, how it is measured).
CURVES = {
    "partitions-throughput": ("Throughput against partitions, 1 → 10,000", "bench/c_client_curves.py"),
    "partitions-rss": ("Broker RSS against partitions, 1 → 10,000", "bench/c_client_curves.py"),
    "connections-throughput": ("Throughput against producer connections, 1 → 1,000", "bench/c_client_curves.py"),
    "connections-rss": ("Broker RSS against producer connections, 1 → 1,000", "bench/c_client_curves.py"),
    "latency": ("End-to-end latency percentiles at fixed rates", "bench/c_client_curves.py"),
}
CLIP = 100.0        # scores beyond 1/CLIP..CLIP are drawn at the edge, their text says the value
DPI = 80            # with PALETTE, small enough that the headline chart stays well under 100 KB
PALETTE = 64        # colours a chart is reduced to: flat bars and text need few, and the file shrinks 3-4x
COLOURS = {(True, False): "#2e7d32", (True, True): "#81c784", (False, False): "#c62828", (False, True): "#e57373"}


@dataclass(frozen=True)
class Judged:
    """A row with a target, of one suite, as the charts draw it."""

    suite: str
    row: dict

    @property
    def score(self) -> float:
        """How far the value is past its target (>= 1: on the right side), clipped to 1/CLIP..CLIP."""
        value, target, floor = self.row["value"], self.row["target"], self.row["op"].startswith(">")
        if value is None:
            return 1 / CLIP
        if target <= 0 or value <= 0:
            # A count against a limit of 0 (errors): one more of each, so 0 of 0 sits on the line, 3 at 1/4.
            value, target = value - min(value, target) + 1, target - min(value, target) + 1
        score = value / target if floor else target / value
        return min(CLIP, max(1 / CLIP, score))


def fmt(value: float | None, unit: str) -> str:
    """`value` in `unit` as the tables would print it."""
    if value is None:
        return "—"
    if unit == "x":
        return f"{value:.2f}x" if abs(value) < 100 else f"{value:,.0f}x"
    if unit == "s":
        return f"{value * 1e3:,.1f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "B" and abs(value) >= 1 << 20:
        return f"{value / 2**20:,.1f} MiB"
    if unit == "B" and abs(value) >= 1 << 10:
        return f"{value / 2**10:,.1f} KiB"
    if abs(value) >= 1e6:
        return f"{value / 1e6:,.2f} M {unit}"
    if abs(value) >= 1e4:
        return f"{value / 1e3:,.1f} k {unit}"
    number = f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.3g}"
    return f"{number} {unit}"


def target_text(row: dict) -> str:
    """The row's target as '>= 2.00x', or 'information'."""
    return "information" if row["target"] is None else f"{row['op']} {fmt(row['target'], row['unit'])}"


def verdict_text(row: dict) -> str:
    """'met', 'missed', either with ' (noisy)', or '—' for an information row."""
    if row["met"] is None:
        return "—"
    return ("met" if row["met"] else "missed") + (" (noisy)" if row["noisy"] else "")


def load_summaries(directory: Path) -> list[dict]:
    """The summaries under directory/summary, in `make bench`'s order, others after by name."""
    found = {}
    for path in sorted((directory / "summary").glob("*.json")):
        doc = json.loads(path.read_text())
        found[doc["suite"]] = doc
    order = [name for name, _ in SUITES if name in found] + sorted(set(found) - {name for name, _ in SUITES})
    return [found[name] for name in order]


def judged_rows(summaries: list[dict]) -> list[Judged]:
    """Every row with a target, suite by suite."""
    return [Judged(doc["suite"], row) for doc in summaries for row in doc["rows"] if row["target"] is not None]


def score_chart(rows: list[Judged], title: str, path: Path, with_suite: bool) -> None:
    """A horizontal bar a row: its score on a log axis, the target line at 1, coloured by the verdict."""
    height = 1.5 + 0.24 * len(rows)
    fig = Figure(figsize=(11, height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    # A verdict always shows: a bar right on the line is drawn a little way to its side.
    scores = [max(r.score, 1.06) if r.row["met"] else min(r.score, 0.94) for r in rows]
    colours = [COLOURS[(bool(r.row["met"]), bool(r.row["noisy"]))] for r in rows]
    ax.barh(ys, [s - 1 for s in scores], left=1, color=colours, height=0.7)
    ax.set_xscale("log")
    ax.axvline(1, color="black", linewidth=1.2)
    ax.set_xlim(min([*scores, 0.5]) / 1.5, max([*scores, 2.0]) * 1.5)
    ax.set_yticks(ys, [f"{r.suite} · {r.row['name']}" if with_suite else r.row["name"] for r in rows], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    # The figures themselves as a second column of labels, right of the plot, where no bar can cover them.
    values = ax.twinx()
    values.set_ylim(ax.get_ylim())
    values.set_yticks(ys, [f"{fmt(r.row['value'], r.row['unit'])}  ({target_text(r.row)})" for r in rows],
                      fontsize=8)
    values.tick_params(axis="y", length=0)
    ax.set_xlabel("against the target: value / target for a floor, target / value for a ceiling (1 = the target)",
                  fontsize=8)
    met = sum(1 for r in rows if r.row["met"])
    ax.set_title(f"{title}: {met} of {len(rows)} targets met", fontsize=11, pad=22)
    ax.tick_params(axis="x", labelsize=8)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(axis="x", which="major", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    handles = [ax.bar(0, 0, color=c, label=label) for c, label in
               ((COLOURS[(True, False)], "met"), (COLOURS[(True, True)], "met (noisy)"),
                (COLOURS[(False, False)], "missed"), (COLOURS[(False, True)], "missed (noisy)"))]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=7.5, frameon=False)
    _save(fig, path)


def curve_chart(curve: dict, path: Path) -> None:
    """One line a series, points marked, axes as the curve asks."""
    fig = Figure(figsize=(7, 4), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, points in curve["series"].items():
        ordered = sorted(points)
        ax.plot([x for x, _ in ordered], [y for _, y in ordered], marker="o", label=label)
    if curve.get("log_x"):
        ax.set_xscale("log")
    if curve.get("log_y"):
        ax.set_yscale("log")
    ax.set_xlabel(curve["x_label"])
    ax.set_ylabel(curve["y_label"])
    ax.set_title(curve["title"], fontsize=11)
    ax.grid(color="#dddddd", linewidth=0.6)
    ax.legend(fontsize=8)
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    """The figure as a PNG of PALETTE colours."""
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    with Image.open(path) as image:
        reduced = image.convert("RGB").quantize(PALETTE, method=Image.Quantize.FASTOCTREE)
    reduced.save(path, optimize=True)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _provenance(doc: dict) -> str:
    source = f"from {doc['source']}; " if doc.get("source") else ""
    return html.escape(f"{source}{doc.get('machine') or '?'}; commit {doc.get('commit') or '?'}; "
                       f"{doc.get('datetime') or '?'}")


def _table(doc: dict) -> str:
    head = "<tr><th>case</th><th>ours</th><th>peer</th><th>value</th><th>target</th><th>met</th><th>note</th></tr>"
    lines = [f"<table>{head}"]
    for row in doc["rows"]:
        verdict = verdict_text(row)
        cls = "" if row["met"] is None else (' class="met"' if row["met"] else ' class="missed"')
        cells = (row["name"], row["ours"], row["peer"], fmt(row["value"], row["unit"]), target_text(row), verdict,
                 row.get("note", ""))
        lines.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    lines.append("</table>")
    return "\n".join(lines)


def _curves_section(summaries: list[dict], charts: Path) -> list[str]:
    measured = {}
    for doc in summaries:
        for curve in doc.get("curves") or []:
            measured.setdefault(curve["id"], (doc, curve))
    parts = ["<h2>Curves</h2>"]
    for curve_id in [*CURVES, *sorted(set(measured) - set(CURVES))]:
        if curve_id in measured:
            doc, curve = measured[curve_id]
            png = charts / f"curve-{_slug(curve_id)}.png"
            curve_chart(curve, png)
            parts.append(f'<h3>{html.escape(curve["title"])}</h3><p class="src">{_provenance(doc)}</p>'
                         f'<img src="{charts.name}/{png.name}" alt="{html.escape(curve["title"])}">')
        else:
            what, where = CURVES[curve_id]
            parts.append(f'<h3>{html.escape(what)}</h3><p class="nm">not measured (no summary holds curve '
                         f'"{html.escape(curve_id)}"; {html.escape(where)} would write it)</p>')
    return parts


STYLE = """body{font-family:sans-serif;max-width:70em;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:90%;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px}
th{background:#f0f0f0}tr.met td:nth-child(6){color:#2e7d32}tr.missed td:nth-child(6){color:#c62828;font-weight:bold}
td:nth-child(n+2):nth-child(-n+5){text-align:right}.src{color:#666;font-size:85%}.nm{color:#a60}img{max-width:100%}"""


def write_report(directory: Path, headline: Path | None = None) -> Path:
    """Write directory/report.html and its charts from directory/summary/*.json; the page's path."""
    summaries = load_summaries(directory)
    if not summaries:
        raise FileNotFoundError(f"no summaries in {directory / 'summary'}: run make bench (or a report script)")
    charts = directory / "report"
    charts.mkdir(parents=True, exist_ok=True)
    judged = judged_rows(summaries)
    met = sum(1 for j in judged if j.row["met"])
    not_run = [f"{name} ({script})" for name, script in SUITES if name not in {d["suite"] for d in summaries}]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>logstore benchmarks</title>"
             f"<style>{STYLE}</style></head><body><h1>logstore benchmarks</h1>",
             f"<p>{met} of {len(judged)} targets met in {len(summaries)} suites. Each suite's commit and date are "
             f"under its title. Not run: {html.escape(', '.join(not_run)) or 'none'}.</p>"]
    if judged:
        score_chart(judged, "make bench", charts / "headline.png", with_suite=True)
        if headline is not None:
            headline.parent.mkdir(parents=True, exist_ok=True)
            score_chart(judged, "make bench", headline, with_suite=True)
        parts.append(f'<img src="{charts.name}/headline.png" alt="every target of make bench">')
    parts += _curves_section(summaries, charts)
    for doc in summaries:
        rows = [j for j in judged if j.suite == doc["suite"]]
        parts.append(f'<h2 id="{_slug(doc["suite"])}">{html.escape(doc["suite"])}: {html.escape(doc["title"])}</h2>'
                     f'<p class="src">{_provenance(doc)}</p>')
        if rows:
            png = charts / f"suite-{_slug(doc['suite'])}.png"
            score_chart(rows, doc["suite"], png, with_suite=False)
            parts.append(f'<img src="{charts.name}/{png.name}" alt="{html.escape(doc["suite"])} targets">')
        parts.append(_table(doc))
    parts.append("</body></html>")
    page = directory / "report.html"
    page.write_text("\n".join(parts) + "\n")
    return page


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, write the page, print where it is."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", default=".benchmarks", help="holds summary/ (default .benchmarks)")
    parser.add_argument("--headline", type=Path, help="also write the headline chart here (the README's)")
    args = parser.parse_args(argv)
    try:
        page = write_report(Path(args.directory), args.headline)
    except FileNotFoundError as exc:
        print(f"html_report: {exc}", file=sys.stderr)
        return 2
    print(f"html_report: wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
