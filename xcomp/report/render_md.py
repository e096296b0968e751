"""report.md: the tables and the charts (PNG files beside it)."""

from __future__ import annotations

import os

from . import fmt
from .tables import all_tables

CHART_TITLES = {"latency": "Latency per target and baseline", "groups": "Where the time goes (per group)",
                "roofline": "Roofline", "tuning": "Tuning curves", "blas": "GEMM groups vs BLAS"}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_md(table) -> str:
    lines = [f"### {table.title}", ""]
    if table.note:
        lines += [f"_{table.note}_", ""]
    lines.append("| " + " | ".join(_cell(h) or " " for h in table.headers) + " |")
    lines.append("|" + "|".join("---" for _ in table.headers) + "|")
    for row, tags in zip(table.rows, table.tags):
        cells = [_cell(c) for c in row]
        if "regression" in tags:
            cells = [f"**{c}**" for c in cells]
            cells[0] = "⚠ " + cells[0]
        if "predicted" in tags:
            cells[0] = f"_{cells[0]}_"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_md(report, charts: dict) -> str:
    targets = ", ".join(fmt.target_label(t) for t in report["targets"])
    out = [f"# xcomp benchmark: {report['model']['source']}", "",
           f"{report['created']} on {report['machine']['hostname']} ({report['machine']['cpu_model']}). "
           f"Targets: {targets}.", ""]
    if any(t["status"] != "measured" for t in report["targets"]):
        out += ["> **Predicted** numbers come from the target's HardwareSpec roofline, calibrated with runs "
                "measured on that kind of device where there are some (no such device here, no results file for "
                "it); they are not measurements.", ""]
    for table in all_tables(report):
        out.append(table_md(table))
        if table.key == "latency" and "latency" in charts:
            out += [f"![{CHART_TITLES['latency']}]({os.path.basename(charts['latency'])})", ""]
    for name in ("groups", "roofline", "blas", "tuning"):
        if name in charts:
            out += [f"### {CHART_TITLES[name]}", "", f"![{CHART_TITLES[name]}]({os.path.basename(charts[name])})", ""]
    if report.get("notes"):
        out += ["### Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    return "\n".join(out)
