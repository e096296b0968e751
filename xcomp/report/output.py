"""Writing a report folder (report.json, report.md, report.html, PNGs) and a comparison."""

from __future__ import annotations

import json
import os

from xcomp.errors import UserError


def _folder(out_dir) -> str:
    out_dir = os.fspath(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create report folder {out_dir}: {err.strerror or err}") from None
    return out_dir


def _write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_report(report, out_dir) -> dict:
    """Write everything; returns {"json": path, "md": path, "html": path, "charts": {name: png path}}."""
    from .plots import make_plots
    from .render_html import render_html
    from .render_md import render_md

    out_dir = _folder(out_dir)
    paths = {"json": os.path.join(out_dir, "report.json")}
    _write(paths["json"], json.dumps(report, indent=1, default=str) + "\n")
    charts = make_plots(report, out_dir)
    paths["md"] = os.path.join(out_dir, "report.md")
    _write(paths["md"], render_md(report, charts))
    paths["html"] = os.path.join(out_dir, "report.html")
    _write(paths["html"], render_html(report, charts))
    paths["charts"] = charts
    return paths


def load_report(path) -> dict:
    from .results import read_report

    return read_report(path)


def write_compare(comparison, out_dir) -> dict:
    from .compare import render_compare_html, render_compare_md

    out_dir = _folder(out_dir)
    paths = {"json": os.path.join(out_dir, "compare.json"), "md": os.path.join(out_dir, "compare.md"),
             "html": os.path.join(out_dir, "compare.html")}
    _write(paths["json"], json.dumps(comparison, indent=1) + "\n")
    _write(paths["md"], render_compare_md(comparison))
    _write(paths["html"], render_compare_html(comparison))
    return paths
