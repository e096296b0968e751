"""Charts for a report (matplotlib, Agg): latency per target and baseline, per-group breakdown, roofline,
tuning curves, xcomp vs BLAS. Each returns the PNG path it wrote, or None when there is nothing to draw.
Predicted values are drawn hatched and pale, and their labels say "predicted"."""

from __future__ import annotations

import os

from . import fmt

KIND_COLORS = {"conv": "#4C72B0", "matmul": "#DD8452", "reduction": "#55A868", "pool": "#C44E52",
               "injective": "#8172B3", "opaque": "#937860"}
TARGET_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
BASELINE_COLOR = "#7f7f7f"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.titleweight": "bold", "axes.titlesize": 10})
    return plt


def _save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def latency_chart(report, out_dir):
    rows = []  # (label, value ms, low, high, color, predicted)
    for i, t in enumerate(report["targets"]):
        value, predicted = fmt.target_latency(t)
        lo = hi = None
        if not predicted:
            lo, hi = t["latency"]["p10_ms"], t["latency"]["p90_ms"]
        rows.append((fmt.target_label(t), value, lo, hi, TARGET_COLORS[i % len(TARGET_COLORS)], predicted))
    for b in report["baselines"]:
        if b.get("status") == "measured":
            rows.append((fmt.baseline_label(b), b["latency"]["median_ms"], b["latency"]["p10_ms"],
                         b["latency"]["p90_ms"], BASELINE_COLOR, False))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.4))
    ys = list(range(len(rows)))[::-1]
    for y, (label, value, lo, hi, color, predicted) in zip(ys, rows):
        ax.barh(y, value, color=color, alpha=0.35 if predicted else 0.9, hatch="//" if predicted else None,
                edgecolor=color, linewidth=1)
        if lo is not None:
            ax.errorbar(value, y, xerr=[[max(0.0, value - lo)], [max(0.0, hi - value)]], color="black", capsize=3, lw=1)
        ax.annotate(f" {fmt.ms(value)}" + (" (predicted)" if predicted else ""), (hi or value, y),
                    va="center", fontsize=8, xytext=(4, 0), textcoords="offset points")
    ax.set_yticks(ys)
    ax.set_yticklabels([r[0] for r in rows])
    values = [r[1] for r in rows if r[1] > 0]
    if values and max(values) / min(values) > 30:
        ax.set_xscale("log")
    ax.set_xlim(right=ax.get_xlim()[1] * (4 if ax.get_xscale() == "log" else 1.35))
    ax.set_xlabel("latency per inference, ms (median; whiskers p10-p90; hatched = predicted, a roofline bound)")
    ax.set_title(f"End-to-end latency: {report['model']['source']}")
    return _save(fig, out_dir, "latency.png")


def groups_chart(report, out_dir, top=10):
    targets = [t for t in report["targets"] if t.get("groups")][:4]
    if not targets:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(targets), 2, figsize=(11, 2.9 * len(targets)), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 2]})
    for (ax_kind, ax_top), t in zip(axes, targets):
        predicted = t["status"] != "measured"
        total_key = "predicted_total_ms" if predicted else "total_ms"
        style = {"alpha": 0.4, "hatch": "//"} if predicted else {"alpha": 0.9}
        by_kind = {}
        for g in t["groups"]:
            by_kind[g["kind"]] = by_kind.get(g["kind"], 0.0) + g[total_key]
        total = sum(by_kind.values()) or 1.0
        kinds = sorted(by_kind, key=by_kind.get)
        ax_kind.barh(kinds, [100 * by_kind[k] / total for k in kinds],
                     color=[KIND_COLORS.get(k, "#999") for k in kinds], **style)
        for y, k in enumerate(kinds):
            ax_kind.annotate(f" {100 * by_kind[k] / total:.1f}%", (100 * by_kind[k] / total, y), va="center",
                             fontsize=8)
        ax_kind.set_xlim(0, 118)
        ax_kind.set_xlabel("% of group time" + (" (predicted)" if predicted else ""))
        ax_kind.set_title(f"{fmt.target_label(t)}: time by group kind")
        rows = sorted(t["groups"], key=lambda g: -g[total_key])[:top][::-1]
        labels = [f"{g['group'][:38]} x{g['count']}" for g in rows]
        scale, unit = (1e3, "µs") if max(g[total_key] for g in rows) < 0.1 else (1.0, "ms")
        ax_top.barh(range(len(rows)), [g[total_key] * scale for g in rows],
                    color=[KIND_COLORS.get(g["kind"], "#999") for g in rows], **style)
        ax_top.set_yticks(range(len(rows)))
        ax_top.set_yticklabels(labels, fontsize=7.5)
        for y, g in enumerate(rows):
            ax_top.annotate(f" {fmt.ms(g[total_key])}", (g[total_key] * scale, y), va="center", fontsize=7.5)
        ax_top.set_xlim(right=ax_top.get_xlim()[1] * 1.25)
        ax_top.set_xlabel(f"{unit} per inference (time x count)" + (" (predicted)" if predicted else ""))
        ax_top.set_title(f"top {len(rows)} groups" + (" (predicted)" if predicted else " (measured)"))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for k, c in KIND_COLORS.items()]
    fig.legend(handles, list(KIND_COLORS), loc="upper center", ncol=len(KIND_COLORS), frameon=False,
               bbox_to_anchor=(0.5, 1.0), title="group kind (hatched = predicted)", fontsize=8, title_fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    path = os.path.join(out_dir, "groups.png")
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def roofline_chart(report, out_dir):
    import numpy as np

    entries = report["targets"]
    points = [(i, t) for i, t in enumerate(entries) if t["status"] == "measured" and t.get("groups")]
    if not entries:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    intensities = [g["flops"] / g["bytes"] for _, t in points for g in t["groups"] if g["flops"] and g["bytes"]]
    lo = min(intensities + [0.05]) / 2
    hi = max(intensities + [200]) * 2
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    for i, t in enumerate(entries):
        roofs = fmt.roofs(t)
        peak, bw = roofs["peak"] or 0, roofs["bandwidth"]
        color = TARGET_COLORS[i % len(TARGET_COLORS)]
        if peak:
            roof = np.minimum(peak, xs * bw) if bw else np.full_like(xs, peak)
            ax.plot(xs, roof / 1e9, color=color, ls="-" if t["status"] == "measured" else "--", lw=1.5,
                    label=f"{fmt.target_label(t)} {roofs['source']} roof: {fmt.si(peak, 'FLOP/s')} fp32"
                          + (f", {fmt.si(bw, 'B/s')}" if bw else ""))
    for i, t in points:
        color = TARGET_COLORS[i % len(TARGET_COLORS)]
        gs = [g for g in t["groups"] if g["flops"] and g["bytes"] and g["gflops"] > 0]
        if not gs:
            continue
        ax.scatter([g["flops"] / g["bytes"] for g in gs], [g["gflops"] for g in gs],
                   s=[30 + 400 * g["share"] for g in gs], color=[KIND_COLORS.get(g["kind"], "#999") for g in gs],
                   edgecolor=color, linewidth=1.2, alpha=0.85, zorder=3)
        for g in sorted(gs, key=lambda g: -g["share"])[:5]:
            ax.annotate(g["group"][:24], (g["flops"] / g["bytes"], g["gflops"]), fontsize=7, xytext=(5, 3),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, FLOP / byte")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("Roofline: achieved GFLOP/s per group inside the model (dot size = time share) under each "
                 "spec's roof")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, out_dir, "roofline.png")


def tuning_chart(report, out_dir, limit=12):
    tuning = report.get("tuning") or {}
    curves = [c for c in tuning.get("curves", []) if c["points"]]
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    curves = sorted(curves, key=lambda c: -(c["best_ms"] or 0))[:limit]
    several_timings = len({c.get("timing") for c in curves}) > 1
    for c in curves:
        xs, ys = zip(*c["points"])
        timed = f", {c.get('timing', 'unrecorded')}" if several_timings else ""
        ax.step(xs, ys, where="post", color=KIND_COLORS.get(c["kind"]), lw=1.4,
                label=f"{c['target']} {c['group'][:28]} ({c['trials']} trials{timed})")
    ax.set_yscale("log")
    ax.set_xlabel("trials (measured candidates, in the order they were recorded)")
    ax.set_ylabel("best latency so far, ms")
    ax.set_title(f"Tuning curves from {os.path.basename(tuning['db'])}")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return _save(fig, out_dir, "tuning.png")


def blas_chart(report, out_dir):
    rows = report.get("blas") or []
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.5))
    ys = range(len(rows))
    has_torch = any(r.get("torch_gflops") for r in rows)
    h = 0.27 if has_torch else 0.4
    ax.barh([y + h / 2 if not has_torch else y + h for y in ys], [r["xcomp_gflops"] for r in rows], height=h,
            color=KIND_COLORS["matmul"], label="xcomp (group incl. fused epilogue)")
    ax.barh([y - h / 2 if not has_torch else y for y in ys], [r["blas_gflops"] for r in rows], height=h,
            color=BASELINE_COLOR, label=" / ".join(sorted({r.get("blas_name", "numpy.matmul") for r in rows})))
    if has_torch:
        ax.barh([y - h for y in ys], [r.get("torch_gflops") or 0 for r in rows], height=h, color="#bcbd22",
                label="torch.matmul (CPU)")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f"{r['target']} {r['group'][:24]}\n{r['problem']}" for r in rows], fontsize=7.5)
    ax.set_xlabel("GFLOP/s (measured)")
    ax.set_title("GEMM groups: xcomp vs vendor BLAS")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "blas.png")


def make_plots(report, out_dir) -> dict:
    """{chart name: PNG path} for every chart that has data."""
    charts = {}
    for name, fn in (("latency", latency_chart), ("groups", groups_chart), ("roofline", roofline_chart),
                     ("tuning", tuning_chart), ("blas", blas_chart)):
        path = fn(report, out_dir)
        if path:
            charts[name] = path
    return charts
