"""Predicted latency for a target that is not on this machine: the roofline of its `HardwareSpec`, calibrated
with runs measured on that kind of device where there are some.

Every unique operator group of the model, partitioned for that target, costs at least
max(flops / peak, bytes / bandwidth): a lower bound (perfect overlap, no launch overhead, every byte moved once).
Where `calibration.json` has the target (fitted from whole-model runs by benchmarks/calibrate_gpu.py), a call of
a group is predicted as call_ms + bound / fraction: a fixed cost per kernel call (launch, and the part of a small
kernel that does not scale) plus the bound at the fraction of the peak xcomp's kernels reached. Either way the
numbers are labelled predicted.
"""

from __future__ import annotations

import json
import os
import re

METHOD = ("roofline: sum over operator groups of max(flops / peak_flops[dtype], bytes / mem_bandwidth) x count, "
          "from the target's HardwareSpec; a lower bound, not a measurement")
CALIBRATED_METHOD = ("calibrated roofline: sum over operator groups of (call_ms + roofline bound / fraction) x count, "
                     "call_ms and fraction fitted to whole-model runs measured on this kind of device ({source})")
CALIBRATION_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calibration.json")


def calibration(target: str) -> dict | None:
    """The fitted {call_ms, fraction, fitted_on, ...} for a target string such as "cuda:sm_90", or None."""
    with open(CALIBRATION_PATH) as f:
        return json.load(f).get(target)


def calibrated_ms(bound_ms: float, calibrated: dict | None) -> float:
    """One call of a group whose roofline bound is `bound_ms`, as the calibration predicts it (the bound itself
    without one)."""
    if calibrated is None:
        return bound_ms
    return calibrated["call_ms"] + bound_ms / calibrated["fraction"]

_DTYPE = re.compile(r"x(f16|bf16|f32|f64|i8|i32|i64|u8|b1)$")
_LONG = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8", "i32": "int32",
         "i64": "int64", "u8": "uint8", "b1": "bool"}


def peak_dtype(group_kind: str, signature: str, spec) -> str:
    """The peak that bounds a group: matrix-core rates only for conv/matmul on their input dtype; float32 else."""
    first = signature.split(",")[0].split("->")[0].strip()
    m = _DTYPE.search(first)
    dtype = _LONG.get(m.group(1), "float32") if m else "float32"
    if group_kind in ("conv", "matmul") and spec.peak(dtype) > 0:
        return dtype
    return "float32"


def group_bound(flops: float, nbytes: float, spec, dtype: str = "float32") -> tuple:
    """(ms, 'compute' | 'memory') for one call of a group on `spec`."""
    peak = spec.peak(dtype) or spec.peak("float32")
    compute = flops / peak * 1e3 if peak else 0.0
    memory = nbytes / spec.mem_bandwidth * 1e3 if spec.mem_bandwidth else 0.0
    return (compute, "compute") if compute >= memory else (memory, "memory")


def predict_groups(groups, spec, calibrated: dict | None = None) -> list:
    """Per unique group: the roofline bound and the prediction (calibrated_ms), slowest total first."""
    from xcomp.graph.partition import unique_groups

    rows = []
    for key, (rep, count) in unique_groups(groups).items():
        dtype = peak_dtype(rep.kind, rep.signature, spec)
        ms, bound = group_bound(rep.flops, rep.bytes, spec, dtype)
        predicted = calibrated_ms(ms, calibrated)
        rows.append({"group": rep.name, "kind": rep.kind, "key": key, "count": count, "flops": rep.flops,
                     "bytes": rep.bytes, "signature": rep.signature, "peak_dtype": dtype, "bound": bound,
                     "roofline_predicted_ms": ms, "predicted_ms": predicted, "predicted_total_ms": predicted * count})
    total = sum(r["predicted_total_ms"] for r in rows) or 1.0
    for r in rows:
        r["predicted_share"] = r["predicted_total_ms"] / total
    rows.sort(key=lambda r: -r["predicted_total_ms"])
    return rows


def predict_target(model, target: str, input_shapes=None, reason: str = "", input_values=None) -> dict:
    """A report target entry with status 'predicted' (no latency field is ever filled from a prediction)."""
    from xcomp.backends import get_backend
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition

    backend = get_backend(target)
    spec = backend.spec
    imported = load_onnx(model, input_shapes, input_values)
    _mod, groups = partition(imported.mod, spec)
    calibrated = calibration(backend.target_string)
    rows = predict_groups(groups, spec, calibrated)
    notes = []
    if not spec.mem_bandwidth:
        notes.append("the spec has no memory bandwidth: the prediction counts compute only")
    if any(r["flops"] == 0 and r["bytes"] == 0 for r in rows):
        notes.append("some groups have symbolic shapes (no FLOPs/bytes counted); bind them with --input-shape")
    return {
        "target": backend.target_string,
        "status": "predicted",
        "origin": {"kind": "predicted", "reason": reason},
        "hardware": spec.to_dict(),
        "predicted": {"latency_ms": sum(r["predicted_total_ms"] for r in rows),
                      "roofline_ms": sum(r["roofline_predicted_ms"] * r["count"] for r in rows),
                      "method": CALIBRATED_METHOD.format(source=calibrated["source"]) if calibrated else METHOD,
                      "notes": notes},
        "groups": rows,
    }
