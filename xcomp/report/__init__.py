"""Cross-vendor benchmark reports: `xcomp bench ... --report DIR` and `xcomp bench --compare A.json B.json`.

collect.py gathers one report (measuring what runs here, importing results measured elsewhere, predicting the
rest from the roofline); render_md.py, render_html.py and plots.py turn the report's JSON into report.md,
report.html and PNG charts; compare.py sets two reports side by side. Renderers read only the JSON, so a report
can be re-rendered anywhere. The JSON schema is documented in docs/report-schema.md.
"""

from __future__ import annotations

from .results import KIND, SCHEMA_VERSION  # noqa: E402
from .collect import collect_report  # noqa: E402
from .compare import compare_reports  # noqa: E402
from .output import load_report, write_compare, write_report  # noqa: E402

__all__ = ["SCHEMA_VERSION", "KIND", "collect_report", "compare_reports", "load_report", "write_report",
           "write_compare"]
