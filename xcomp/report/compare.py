"""`xcomp bench --compare A.json B.json`: what changed from report A (before) to report B (after).

Latency changes beyond the threshold (default 5%) are regressions (slower) or improvements (faster). Only
measured-vs-measured changes are judged; a change involving a predicted number is shown, labelled predicted,
and never called a regression.
"""

from __future__ import annotations

import html

from . import fmt
from .tables import Table


def _change(old, new):
    return (new - old) / old if old else None


def _verdict(change, threshold, comparable=True):
    if change is None or not comparable:
        return ""
    if change > threshold:
        return "regression"
    if change < -threshold:
        return "improvement"
    return ""


def _runners(report) -> dict:
    out = {}
    for t in report["targets"]:
        value, predicted = fmt.target_latency(t)
        out[f"xcomp {t['target']}"] = (value, predicted)
    for b in report["baselines"]:
        if b.get("status") == "measured":
            out[fmt.baseline_label(b)] = (b["latency"]["median_ms"], False)
    return out


def compare_reports(a: dict, b: dict, threshold: float = 0.05, a_name="A", b_name="B") -> dict:
    """{threshold, a, b, runners: [...], groups: [...], regressions: n, improvements: n}."""
    ra, rb = _runners(a), _runners(b)
    runners = []
    for name in list(ra) + [n for n in rb if n not in ra]:
        old, new = ra.get(name), rb.get(name)
        row = {"runner": name, "old_ms": old[0] if old else None, "new_ms": new[0] if new else None,
               "old_predicted": bool(old and old[1]), "new_predicted": bool(new and new[1])}
        row["change"] = _change(row["old_ms"], row["new_ms"]) if old and new else None
        row["verdict"] = _verdict(row["change"], threshold, not (row["old_predicted"] or row["new_predicted"]))
        runners.append(row)
    groups = []
    tb = {t["target"]: t for t in b["targets"]}
    for ta in a["targets"]:
        tnew = tb.get(ta["target"])
        if not tnew or ta["status"] != "measured" or tnew["status"] != "measured":
            continue
        old_rows = {g["key"]: g for g in ta.get("groups", [])}
        new_rows = {g["key"]: g for g in tnew.get("groups", [])}
        for key in list(old_rows) + [k for k in new_rows if k not in old_rows]:
            go, gn = old_rows.get(key), new_rows.get(key)
            row = {"target": ta["target"], "key": key, "group": (gn or go)["group"], "kind": (gn or go)["kind"],
                   "count": (gn or go)["count"], "old_ms": go["median_ms"] if go else None,
                   "new_ms": gn["median_ms"] if gn else None}
            row["change"] = _change(row["old_ms"], row["new_ms"]) if go and gn else None
            row["verdict"] = _verdict(row["change"], threshold)
            groups.append(row)
    groups.sort(key=lambda r: -(r["change"] if r["change"] is not None else -1e9))
    return {
        "kind": "xcomp-bench-comparison",
        "threshold": threshold,
        "a": {"name": a_name, "created": a["created"], "hostname": a["machine"]["hostname"],
              "command": a["command"]["text"], "model_sha256": a["model"]["sha256"]},
        "b": {"name": b_name, "created": b["created"], "hostname": b["machine"]["hostname"],
              "command": b["command"]["text"], "model_sha256": b["model"]["sha256"]},
        "same_model": a["model"]["sha256"] == b["model"]["sha256"],
        "runners": runners,
        "groups": groups,
        "regressions": sum(r["verdict"] == "regression" for r in runners + groups),
        "improvements": sum(r["verdict"] == "improvement" for r in runners + groups),
    }


def _pct(change):
    return "-" if change is None else f"{100 * change:+.1f}%"


def _ms(value, predicted):
    return fmt.ms(value) + (" (predicted)" if predicted and value is not None else "")


def compare_tables(c) -> list:
    thr = f"{100 * c['threshold']:.0f}%"
    runners = Table("runners", "End-to-end latency", ["runner", c["a"]["name"], c["b"]["name"], "change", "verdict"],
                    note=f"Median latency; slower by more than {thr} is a regression. Changes involving a "
                         "predicted number are not judged.")
    for r in c["runners"]:
        tags = [r["verdict"]] if r["verdict"] else []
        if r["old_predicted"] or r["new_predicted"]:
            tags.append("predicted")
        runners.add([r["runner"], _ms(r["old_ms"], r["old_predicted"]), _ms(r["new_ms"], r["new_predicted"]),
                     _pct(r["change"]), r["verdict"].upper() if r["verdict"] == "regression" else r["verdict"]],
                    *tags)
    groups = Table("groups", "Operator groups (measured time per call)",
                   ["target", "group", "kind", "count", c["a"]["name"], c["b"]["name"], "change", "verdict"])
    for r in c["groups"]:
        groups.add([r["target"], r["group"], r["kind"], r["count"], fmt.ms(r["old_ms"]), fmt.ms(r["new_ms"]),
                    _pct(r["change"]) if r["change"] is not None else ("new" if r["old_ms"] is None else "gone"),
                    r["verdict"].upper() if r["verdict"] == "regression" else r["verdict"]],
                   *([r["verdict"]] if r["verdict"] else []))
    return [runners, groups]


def _header(c) -> list:
    lines = [f"{c['a']['name']}: {c['a']['created']} on {c['a']['hostname']}",
             f"{c['b']['name']}: {c['b']['created']} on {c['b']['hostname']}",
             f"{c['regressions']} regression(s), {c['improvements']} improvement(s) beyond "
             f"{100 * c['threshold']:.0f}%"]
    if not c["same_model"]:
        lines.append("warning: the two reports are for different models (sha256 differs)")
    return lines


def render_compare_text(c) -> str:
    out = _header(c)
    for table in compare_tables(c):
        if not table.rows:
            continue
        widths = [max(len(h), *(len(r[i]) for r in table.rows)) for i, h in enumerate(table.headers)]
        out += ["", table.title + ":", "   " + "  ".join(h.ljust(w) for h, w in zip(table.headers, widths))]
        for row, tags in zip(table.rows, table.tags):
            line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths))
            out.append(("!! " if "regression" in tags else "   ") + line)
    return "\n".join(out) + "\n"


def render_compare_md(c) -> str:
    from .render_md import table_md

    return "\n".join(["# xcomp benchmark comparison", ""] + [f"- {line}" for line in _header(c)] + [""]
                     + [table_md(t) for t in compare_tables(c)])


def render_compare_html(c) -> str:
    from .render_html import CSS, table_html

    head = "".join(f"<li>{html.escape(line)}</li>" for line in _header(c))
    body = "\n".join(table_html(t) for t in compare_tables(c))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>xcomp benchmark comparison"
            f"</title><style>{CSS}</style></head><body><main><h1>xcomp benchmark comparison</h1><ul>{head}</ul>"
            f"{body}</main></body></html>\n")
