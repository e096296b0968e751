"""Measuring on this machine: compile each runnable target, time every target and baseline in alternating blocks
on the same inputs (xcomp.report.bench.alternating_blocks), then profile each target's operator groups (and set GEMM
groups against BLAS)."""

from __future__ import annotations

import platform
import time

import numpy as np

from xcomp.report.bench import BLOCK

from . import torch_baseline
from .stats import latency_summary, throughput


def _uniform(outputs: list) -> bool:
    """Is every output one value repeated (the shipped light models' constant weights give a uniform softmax)?
    Matching such outputs says little: mixed-up channels or pixels would match too."""
    return all(np.size(a) > 1 and bool(np.all(np.asarray(a) == np.asarray(a).flat[0])) for a in outputs)


def _max_abs_diff(ours: list, theirs: list) -> float:
    return float(max(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))) if np.size(a) else 0.0
                     for a, b in zip(ours, theirs)))


def _default_vs_tuned(module, rows, repeat: int) -> None:
    """For groups built from tuning records, also time the template default: the tuning gain per group."""
    from xcomp.graph.partition import unique_groups
    from xcomp.pipeline import schedule_group
    from xcomp.report.profile import time_func

    reps = {key: rep for key, (rep, _count) in unique_groups(module.groups).items()}
    for row in rows:
        row.tuned = row.schedule.startswith("database")
        if not row.tuned:
            continue
        func, _choice = schedule_group(reps[row.key], module.backend.schedule_context(), None)
        row.default_ms = float(np.median(time_func(func, module.backend, repeat, 10)))


def measure(model, targets, baselines, input_shapes=None, db=None, warmup=3, repeat=30, seed=0,
            profile_groups=True, blas=True, progress=True, input_values=None, torch_model=None, block=BLOCK,
            costmodel=True, tf32=False):
    """Targets runnable here -> (target entries, baseline entries, blas rows). `model` is a path or bytes;
    `torch_model` a torch.export file for the torch baselines; `costmodel`, `tf32` as xcomp.compile's."""
    import xcomp
    from xcomp.report.bench import (ONNXRUNTIME_BASELINES, OnnxRuntimeBaseline, ProviderUnavailable, _serialized,
                                     alternating_blocks)

    from .blas import blas_rows

    modules, entries = {}, {}
    for target in targets:
        t0 = time.perf_counter()
        module = xcomp.compile(model, target=target, input_shapes=input_shapes, tune_db=db, progress=progress,
                               input_values=input_values, costmodel=costmodel, tf32=tf32)
        compile_s = time.perf_counter() - t0
        modules[target] = module
        entries[target] = {"compile_s": compile_s}
    first = modules[targets[0]]
    inputs = first.random_inputs(seed)
    batch = None
    if first.inputs and first.inputs[0].shape and isinstance(first.inputs[0].shape[0], int):
        batch = int(first.inputs[0].shape[0])

    runners, outputs = {}, {}
    for target, module in modules.items():
        t = time.perf_counter()
        out = module.run(inputs)  # the first call creates the VM: load + first inference
        entries[target]["first_ms"] = (time.perf_counter() - t) * 1e3
        outputs[("target", target)] = [out[s.name] for s in module.outputs]
        runners[("target", target)] = lambda m=module: m.run(inputs)

    torch_names = [name for name in baselines if name in torch_baseline.NAMES]
    torch_started = torch_baseline.start(torch_names, model, torch_model, inputs,
                                         [o.shape for o in outputs[("target", targets[0])]]) if torch_names else {}
    baseline_entries = {}
    for name in baselines:
        if name in ONNXRUNTIME_BASELINES:
            t = time.perf_counter()
            try:
                runner = OnnxRuntimeBaseline(_serialized(model), name)
            except ProviderUnavailable as why:
                baseline_entries[name] = {"name": name, "device": ONNXRUNTIME_BASELINES[name][1],
                                          "status": "unavailable", "reason": str(why)}
                continue
            outputs[("baseline", name)] = list(runner(inputs))
            entry = {"name": name, "device": runner.device, "status": "measured", "version": runner.version,
                     **runner.settings}
            first_run_s = time.perf_counter() - t
        elif name in torch_started:
            started = torch_started[name]
            if isinstance(started, torch_baseline.Unavailable):
                baseline_entries[name] = started.entry(name)
                continue
            runner, outputs[("baseline", name)], first_run_s = started
            entry = runner.entry()
        else:
            continue
        baseline_entries[name] = {**entry, "first_run_s": first_run_s}
        runners[("baseline", name)] = lambda r=runner: r(inputs)

    reference = next((k for k in (("baseline", "onnxruntime"), ("baseline", "torch")) if k in outputs), None)
    if reference:
        for key in outputs:
            if key != reference:
                entry = entries[key[1]] if key[0] == "target" else baseline_entries[key[1]]
                entry["check"] = {"reference": reference[1],
                                  "max_abs_diff": _max_abs_diff(outputs[key], outputs[reference]),
                                  "uniform_reference": _uniform(outputs[reference])}

    samples, after_switch = alternating_blocks(runners, repeat, warmup, block, progress)

    def timings(key) -> dict:
        values = samples[key]
        found = {"latency": latency_summary(values), "samples_ms": values,
                 "throughput": throughput(float(np.median(values)), batch)}
        if after_switch[key]:
            found.update(latency_after_switch=latency_summary(after_switch[key]),
                         after_switch_samples_ms=after_switch[key])
        return found

    for key in samples:
        if key[0] == "baseline":
            baseline_entries[key[1]].update(timings(key))

    target_entries, gemm_rows = [], []
    for target, module in modules.items():
        e = entries[target]
        entry = {
            "target": target,
            "status": "measured",
            "origin": {"kind": "this run", "hostname": platform.node()},
            "hardware": module.spec.to_dict(),
            **timings(("target", target)),
            "first_run": {"compile_s": e["compile_s"], "load_and_first_inference_ms": e["first_ms"],
                          "total_s": e["compile_s"] + e["first_ms"] / 1e3,
                          "compile_breakdown_s": module.info.get("compile_times", {})},
            "schedules": _schedule_sources(module),
            "float32_math": module.info.get("float32_math", "fp32"),
            "model_flops": model_flops(module),
        }
        if "check" in e:
            entry["check"] = e["check"]
        roofs = module.backend.measured_roofs()
        if roofs:
            roofs = _peak_at_least_every_rate(roofs, entry, baseline_entries.values())
            entry["roofs"] = roofs
        if profile_groups:
            from xcomp.report.profile import profile_module

            rows = profile_module(module, progress=progress, roofs=roofs)
            _default_vs_tuned(module, rows, repeat=5)
            entry["groups"] = [r.to_dict() for r in rows]
            entry["roofline_bound_predicted_ms"] = sum(r.roofline_ms * r.count for r in rows)
            if blas:
                found = blas_rows(module, rows)
                if found is None:
                    entry["blas_unavailable"] = "torch cannot reach this GPU here, so no vendor BLAS ran"
                for row in found or []:
                    gemm_rows.append({"target": target, **row})
        target_entries.append(entry)
    return target_entries, list(baseline_entries.values()), gemm_rows


def _peak_at_least_every_rate(roofs, entry, baselines):
    """`roofs` with its fp32 peak raised to the fastest model rate on this CPU where one beat it, which
    "peak_raised_by" then names: a rate above the peak means the peak was measured low (a busy host), and no rate
    is reported above 100% of it. The rates are those of the latency table: the model's FLOPs / each median."""
    flops = entry.get("model_flops")
    if not flops:
        return roofs
    runners = [(f"xcomp {entry['target']}", entry["latency"]["median_ms"])]
    runners += [(b["name"], b["latency"]["median_ms"]) for b in baselines
                if b.get("status") == "measured" and b.get("device", "cpu") == "cpu"]
    name, fastest = max(((n, flops / ms * 1e3) for n, ms in runners if ms > 0), key=lambda r: r[1],
                        default=(None, 0.0))
    peak = roofs["peak_flops"]["float32"]
    if fastest <= peak:
        return roofs
    return {**roofs, "peak_flops": {**roofs["peak_flops"], "float32": fastest},
            "peak_raised_by": {"runner": name, "measured_peak": peak}}


def model_flops(module):
    """Arithmetic operations in one inference (sum over groups of flops x count); None when a symbolic dim
    leaves the count open."""
    from xcomp.graph.partition import total_flops

    return None if any(g.symbols for g in module.groups) else total_flops(module.groups)


def _schedule_sources(module) -> dict:
    counts = {}
    for choice in module.info.get("schedules", {}).values():
        source = str(choice.get("source", "?")).split(" ")[0]
        counts[source] = counts.get(source, 0) + 1
    return counts
