"""report.html: one self-contained page (inline CSS, charts as base64 PNG, no script, no external asset)."""

from __future__ import annotations

import base64
import html

from . import fmt
from .render_md import CHART_TITLES
from .tables import all_tables

CSS = """
body{font:14px/1.45 -apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;margin:0;background:#f4f6f9}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d9dee7;padding-bottom:4px}
.sub{color:#5b6475;margin-bottom:14px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0}
.card{background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:10px 14px;min-width:170px}
.card .v{font-size:20px;font-weight:600} .card .l{color:#5b6475;font-size:12px}
.card.predicted{border-style:dashed;background:#fbfbf4}
table{border-collapse:collapse;background:#fff;font-size:12.5px;width:100%;margin:6px 0 4px}
th,td{border:1px solid #e1e5ec;padding:4px 8px;text-align:left;white-space:nowrap}
th{background:#eef1f6;font-weight:600;white-space:normal;vertical-align:bottom}
tr.predicted td{background:#fbfbf0;color:#6b6440;font-style:italic}
tr.imported td:first-child{border-left:3px solid #6b8fd6}
tr.regression td{background:#fde8e8;color:#9b1c1c;font-weight:600}
tr.improvement td{background:#e8f6ec}
.badge{display:inline-block;font-size:11px;font-weight:600;padding:1px 6px;border-radius:9px;margin-left:6px}
.badge.predicted{background:#f3e9b5;color:#6b5a00} .badge.measured{background:#d7ecdb;color:#1d5c2a}
.badge.imported{background:#dbe5f7;color:#23427e}
.note{color:#5b6475;font-size:12.5px;margin:2px 0 8px}
.scroll{overflow-x:auto} #reproduce + .scroll td{white-space:normal;word-break:break-all}
figure{margin:10px 0 18px;background:#fff;border:1px solid #dde2ea;border-radius:8px;padding:8px}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{color:#5b6475;font-size:12px;text-align:center}
.callout{background:#fff8dc;border-left:4px solid #e0b400;padding:8px 12px;margin:10px 0}
"""


def _e(text) -> str:
    return html.escape(str(text))


def table_html(table) -> str:
    out = [f'<h2 id="{_e(table.key)}">{_e(table.title)}</h2>']
    if table.note:
        out.append(f'<p class="note">{_e(table.note)}</p>')
    out.append('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in table.headers)
               + "</tr></thead><tbody>")
    for row, tags in zip(table.rows, table.tags):
        cls = f' class="{" ".join(sorted(tags))}"' if tags else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _figure(name, path) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    title = CHART_TITLES.get(name, name)
    return (f'<figure id="chart-{_e(name)}"><img alt="{_e(title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(title)}</figcaption></figure>")


def _cards(report) -> str:
    cards = []
    for t in report["targets"]:
        value, predicted = fmt.target_latency(t)
        status = "predicted" if predicted else ("imported" if t.get("origin", {}).get("kind") == "results file"
                                                else "measured")
        cards.append(f'<div class="card {status}"><div class="l">xcomp {_e(t["target"])}'
                     f'<span class="badge {status}">{status}</span></div><div class="v">{_e(fmt.ms(value))}</div>'
                     f'<div class="l">{_e(t["hardware"]["name"])}</div></div>')
    for b in report["baselines"]:
        if b.get("status") == "measured":
            cards.append(f'<div class="card"><div class="l">{_e(fmt.baseline_label(b))}'
                         f'<span class="badge measured">baseline</span></div>'
                         f'<div class="v">{_e(fmt.ms(b["latency"]["median_ms"]))}</div>'
                         f'<div class="l">version {_e(b.get("version", "?"))}</div></div>')
    return '<div class="cards">' + "".join(cards) + "</div>"


def render_html(report, charts: dict) -> str:
    model = report["model"]["source"]
    body = [f"<h1>xcomp benchmark: {_e(model)}</h1>",
            f'<div class="sub">{_e(report["created"])} on {_e(report["machine"]["hostname"])} '
            f'({_e(report["machine"]["cpu_model"])}) &middot; xcomp {_e(report["versions"]["xcomp"])} &middot; '
            f'TVM {_e(report["versions"]["tvm"])}</div>', _cards(report)]
    if any(t["status"] != "measured" for t in report["targets"]):
        body.append('<div class="callout"><b>Predicted</b> numbers come from the target\'s HardwareSpec '
                    "roofline, calibrated with runs measured on that kind of device where there are some (no such "
                    "device on this machine and no results file measured it). They are not measurements.</div>")
    for table in all_tables(report):
        body.append(table_html(table))
        if table.key == "latency" and "latency" in charts:
            body.append(_figure("latency", charts["latency"]))
    for name in ("groups", "roofline", "blas", "tuning"):
        if name in charts:
            body.append(f"<h2>{_e(CHART_TITLES[name])}</h2>" + _figure(name, charts[name]))
    if report.get("notes"):
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in report["notes"]) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>xcomp benchmark: {_e(model)}</title><style>{CSS}</style></head>"
            f"<body><main>\n" + "\n".join(body) + "\n</main></body></html>\n")
