"""The report's tables as plain data (title, headers, rows, per-row tags), rendered by render_md/render_html.

A row tagged "predicted" holds roofline numbers, and its cells say so too, so the label survives any renderer.
"""

from __future__ import annotations

import dataclasses

from . import fmt


@dataclasses.dataclass
class Table:
    key: str
    title: str
    headers: list
    rows: list = dataclasses.field(default_factory=list)
    tags: list = dataclasses.field(default_factory=list)  # per row: set of "predicted", "imported", "regression"
    note: str = ""

    def add(self, row, *tags):
        self.rows.append([str(c) for c in row])
        self.tags.append(set(tags))


def _ort_median(report):
    for b in report["baselines"]:
        if b["name"] == "onnxruntime" and b.get("status") == "measured" and b.get("origin", {}).get("kind") is None:
            return b["latency"]["median_ms"]
    return None


def _this_cpu(report):
    """(model FLOPs, fp32 peak FLOP/s) of the CPU measured in this run (the machine the baselines ran on)."""
    for e in report["targets"]:
        if (e.get("status") == "measured" and e.get("origin", {}).get("kind") == "this run"
                and e["hardware"].get("kind") == "cpu"):
            return e.get("model_flops"), fmt.roofs(e)["peak"]
    return None, None


def _rate(flops, peak, median_ms) -> str:
    """'265 GFLOP/s (80%)': the model's arithmetic rate, and its share of the fp32 peak (fmt.roofs)."""
    if not flops or not median_ms:
        return "-"
    rate = flops / median_ms * 1e3

    def short(x):  # 265, 3.1, 0.012: three figures at most, no exponent
        return f"{x:.0f}" if x >= 10 else f"{x:.2g}" if x >= 0.001 else "<0.001"

    if not peak:
        return f"{short(rate / 1e9)} GFLOP/s"
    # a rate is never above its peak: this run raises the peak it measured (roofs' peak_raised_by); a peak taken
    # from the spec or an older report is capped instead, and the cell says so
    share = f"{short(100 * rate / peak)}%" if rate <= peak else "100%: above the peak"
    return f"{short(rate / 1e9)} GFLOP/s ({share})"


def latency_table(report) -> Table:
    ort = _ort_median(report)
    cpu_flops, cpu_peak = _this_cpu(report)
    block = report.get("settings", {}).get("block")
    t = Table("latency", "End-to-end latency",
              ["runner", "status", "median", "p90", "spread p10-p90", "runs", "after switch", "throughput",
               "first run", "vs onnxruntime", "rate (% of peak)", "max |diff|"],
              note="Medians of steady runs on the same inputs: the runners take turns, each running a block of "
                   f"{block or 'several'} back-to-back calls after a short pause, and all but the first call of a "
                   "block are its steady runs (the latency a serving loop sees). after switch: the median of "
                   "those first calls, each right after another runner's block (caches holding the other's data). "
                   "first run = compile + load + first inference "
                   "(for a baseline: loading its session or program, torch.compile's compiling, first inference). "
                   "vs onnxruntime: onnxruntime's median / this median on this machine (> 1: faster than "
                   "onnxruntime). rate: the model's FLOPs (as xcomp counts them) / median, and its share of the "
                   "hardware's fp32 peak (for this machine's CPU the best measured here, raised to any rate in "
                   "this run that beat it; else the spec's), never above 100%; "
                   "CPU baselines are set against this machine's CPU. max |diff|: against the reference's outputs on "
                   "the same inputs; \"uniform reference\" marks outputs that are one repeated value, which "
                   "mixed-up channels or pixels would match too (a weak check). Predicted rows are "
                   "from the target's HardwareSpec roofline, calibrated with runs measured on that kind of device "
                   "where there are some; not measurements.")
    for e in report["targets"]:
        value, predicted = fmt.target_latency(e)
        if predicted:
            t.add([f"xcomp {fmt.target_label(e)}", "predicted", f"{fmt.ms(value)} (predicted)", "-", "-", "-",
                   "-", f"{1e3 / value:.1f}/s (predicted)" if value else "-", "-", "-", "-", "-"], "predicted")
            continue
        lat, imported = e["latency"], e.get("origin", {}).get("kind") == "results file"
        vs = "-" if imported or not ort else fmt.ratio(ort / lat["median_ms"])
        t.add([f"xcomp {fmt.target_label(e)}", "measured" + (" (imported)" if imported else ""),
               fmt.ms(lat["median_ms"]), fmt.ms(lat["p90_ms"]), fmt.pct(lat["spread_pct"]), lat["runs"],
               _after_switch(e), f"{e['throughput']['inferences_per_s']:.1f}/s",
               f"{e['first_run']['total_s']:.2f} s", vs,
               _rate(e.get("model_flops"), fmt.roofs(e)["peak"], lat["median_ms"]),
               fmt.check(e.get("check"))],
              *(["imported"] if imported else []))
    for b in report["baselines"]:
        if b.get("status") != "measured":
            continue
        lat, imported = b["latency"], b.get("origin", {}).get("kind") == "results file"
        t.add([fmt.baseline_label(b), "measured" + (" (imported)" if imported else ""), fmt.ms(lat["median_ms"]),
               fmt.ms(lat["p90_ms"]), fmt.pct(lat["spread_pct"]), lat["runs"], _after_switch(b),
               f"{b['throughput']['inferences_per_s']:.1f}/s",
               f"{b['first_run_s']:.2f} s" if b.get("first_run_s") is not None else "-",
               "-" if imported or not ort else fmt.ratio(ort / lat["median_ms"]),
               "-" if imported or b.get("device", "cpu") != "cpu" else _rate(cpu_flops, cpu_peak, lat["median_ms"]),
               fmt.check(b.get("check"))],
              *(["imported"] if imported else []))
    return t


def _after_switch(entry) -> str:
    found = entry.get("latency_after_switch")
    return fmt.ms(found["median_ms"]) if found else "-"


def unavailable_table(report) -> Table:
    t = Table("unavailable", "Baselines not run", ["baseline", "status", "why"])
    for b in report["baselines"]:
        if b.get("status") != "measured":
            t.add([b["name"], b["status"], b.get("reason", "")])
    return t


def group_table(entry, top=25) -> Table:
    label = fmt.target_label(entry)
    if entry["status"] != "measured":
        t = Table(f"groups-{entry['target']}", f"Operator groups on {label}",
                  ["group", "kind", "count", "FLOPs", "bytes", "predicted time", "predicted % of total", "bound"],
                  note="Predicted: " + entry["predicted"]["method"] + "; on " + fmt.spec_summary(entry["hardware"])
                       + ".")
        for g in entry["groups"][:top]:
            t.add([g["group"], g["kind"], g["count"], fmt.si(g["flops"]), fmt.si(g["bytes"], "B"),
                   f"{fmt.ms(g['predicted_ms'])} (predicted)", f"{100 * g['predicted_share']:.1f}% (predicted)",
                   f"{g['bound']} ({g['peak_dtype']})"], "predicted")
    else:
        alone = any(g.get("rates_from", "alone") == "alone" for g in entry["groups"])  # older reports: alone
        basis = "the time alone" if alone else "the time in the model"
        t = Table(f"groups-{entry['target']}", f"Operator groups on {label}",
                  ["group", "kind", "count", "FLOPs", "bytes", "alone", "in model", "% of model", "GFLOP/s",
                   "GB/s", "% of roofline", "schedule", "default -> tuned"],
                  note="alone: each unique group built alone with the config the model uses and timed on random "
                       "data, per call. in model: its median time per call inside whole runs of the model, where "
                       "inputs and weights are not already in cache (- for a group the VM runs as a builtin). "
                       f"% of model, GFLOP/s, GB/s and % of roofline are computed from {basis}. "
                       "% of roofline = roofline bound / time on " + fmt.roofs_summary(entry)
                       + " (above 100%: the data stayed in cache, faster than main memory's bandwidth).")
        for g in entry["groups"][:top]:
            tuned = (f"{fmt.ms(g['default_ms'])} -> {fmt.ms(g['median_ms'])} ({fmt.ratio(g['speedup_vs_default'])})"
                     if g.get("tuned") else "default")
            t.add([g["group"], g["kind"], g["count"], fmt.si(g["flops"]), fmt.si(g["bytes"], "B"),
                   fmt.ms(g["median_ms"]), fmt.ms(g["in_model_ms"]) if g.get("in_model_ms") is not None else "-",
                   f"{100 * g['share']:.1f}%", f"{g['gflops']:.2f}", f"{g['gbps']:.2f}",
                   fmt.pct(g["pct_of_roofline"]), g["schedule"].split(" (")[0], tuned])
    if any("winograd" in g["group"] for g in entry["groups"]):
        t.note += (" A winograd conv counts the direct conv's FLOPs (as other tools do), of which it runs about a "
                   "quarter: its GFLOP/s and % of roofline can pass the peak.")
    if len(entry["groups"]) > top:
        t.note += f" Showing the {top} slowest of {len(entry['groups'])} unique groups (all are in report.json)."
    return t


def blas_table(report) -> Table:
    t = Table("blas", "GEMM groups vs vendor BLAS",
              ["target", "group", "count", "problem", "xcomp", "vendor BLAS", "BLAS time", "torch.matmul (CPU)",
               "xcomp GFLOP/s", "BLAS GFLOP/s", "xcomp / BLAS time"],
              note=f"CPU targets: numpy.matmul ({report['versions'].get('blas')}) and torch.matmul (torch "
                   f"{report['versions'].get('torch') or 'not installed'}) on the CPU; GPU targets: torch.matmul "
                   "on the GPU (cuBLAS, or rocBLAS in a ROCm torch). xcomp's time includes the group's fused "
                   "epilogue (bias, activation); BLAS runs the bare product. < 1x: xcomp is faster.")
    for r in report.get("blas", []):
        torch_cpu = fmt.ms(r.get("torch_ms")) if r.get("torch_ms") else "-" if r.get("blas_name", "").startswith(
            "torch") else "not installed"
        t.add([r["target"], r["group"], r["count"], r["problem"], fmt.ms(r["xcomp_ms"]),
               r.get("blas_name", "numpy.matmul"), fmt.ms(r["blas_ms"]), torch_cpu,
               f"{r['xcomp_gflops']:.2f}", f"{r['blas_gflops']:.2f}", fmt.ratio(r["xcomp_over_blas"])],
              *(["imported"] if r.get("origin") else []))
    return t


def tuning_table(report) -> Table:
    tuning = report.get("tuning") or {"curves": []}
    t = Table("tuning", "Tuning records", ["target", "group", "kind", "trials", "failed", "best", "timed",
                                           "same hardware"],
              note=f"From {tuning.get('db')}; curves in the tuning chart. Only times taken the same way compare: "
                   "'warm' (back-to-back runs) reads lower than 'cold' or 'llc' (caches set as in a whole model).")
    for c in tuning["curves"]:
        t.add([c["target"], c["group"], c["kind"], c["trials"], c["failed"], fmt.ms(c["best_ms"]),
               c.get("timing", "unrecorded"), "yes" if c["same_hardware"] else f"no ({c['hw_fingerprint']})"])
    return t


def reproduce_table(report) -> Table:
    m, v, s = report["machine"], report["versions"], report["settings"]
    t = Table("reproduce", "Reproduce", ["", ""])
    for k, val in (("command", report["command"]["text"]), ("working directory", report["command"]["cwd"]),
                   ("model", f"{report['model']['source']} (sha256 {report['model']['sha256'][:16]}...)"),
                   ("inputs", ", ".join(f"{i['name']}: {i['dtype']}{i['shape']}" for i in report["model"]["inputs"])),
                   ("seed / warmup / repeat", f"{s['seed']} / {s['warmup']} / {s['repeat']}"),
                   ("machine", f"{m['hostname']}: {m['cpu_model']}, {m['usable_cores']} of {m['logical_cores']} "
                               f"cores usable, {fmt.si(m.get('memory_bytes'), 'B')} memory"),
                   ("platform", m["platform"]),
                   ("versions", ", ".join(f"{k2} {val2}" for k2, val2 in v.items() if k2 != "blas" and val2)
                    + (", torch not installed" if not v.get("torch") else "")),
                   ("BLAS", v.get("blas")),
                   ("started / finished", f"{report['created']} / {report['finished']}")):
        t.add([k, val])
    return t


def all_tables(report) -> list:
    tables = [latency_table(report)]
    unavailable = unavailable_table(report)
    if unavailable.rows:
        tables.append(unavailable)
    tables += [group_table(e) for e in report["targets"] if e.get("groups")]
    if report.get("blas"):
        tables.append(blas_table(report))
    if report.get("tuning"):
        tables.append(tuning_table(report))
    tables.append(reproduce_table(report))
    return tables
