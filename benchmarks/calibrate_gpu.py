"""Fit the GPU latency prediction (xcomp/report/predict.py) to the whole-model runs in benchmarks/results/gpu/.

Usage: python benchmarks/calibrate_gpu.py [--write] [--json out.json]

For each measured model row (xcomp_ms, without CUDA graphs) of each results file, the prediction is
    kernel_calls x call_ms + roofline_ms / fraction
where kernel_calls is the model's operator-group calls per run and roofline_ms the sum of their roofline bounds on
the file's target (the GPU suite records both since the calibration exists; for older rows they are worked out
here by exporting the same model, torchvision's or transformers' with seeded random weights, which needs torch).
call_ms and fraction are fitted per target by least squares on the relative error. Each row's prediction is
printed beside its measurement, and, with 3 or more rows, also its error when the row is left out of the fit:
the error to expect on a model the calibration has not seen. --write stores the fit in
xcomp/report/calibration.json, which `xcomp bench -t cuda:sm_90` uses without a GPU.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def model_rows() -> dict:
    """{target: [row]}: the measured model rows of every results file, each with kernel_calls and roofline_ms."""
    by_target = {}
    for path in sorted(glob.glob(os.path.join(HERE, "results", "gpu", "*.json"))):
        with open(path) as f:
            result = json.load(f)
        target = f"cuda:{result['sm']}"
        for row in result["models"]:
            if row.get("xcomp_ms"):
                by_target.setdefault(target, []).append({**row, **_counts(row, target),
                                                         "file": os.path.basename(path)})
    return by_target


def _counts(row: dict, target: str) -> dict:
    if "kernel_calls" in row and "roofline_ms" in row:
        return {}
    import gpu_suite
    import zoo

    from xcomp.backends import get_backend
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition
    from xcomp.report.predict import predict_groups

    zoo._torchvision()  # transformers imports torchvision where it is installed: its workaround comes first
    spec = get_backend(target).spec
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        gpu_suite.export_model(row["model"], row["dtype"], path, device="cpu")
        _, groups = partition(load_onnx(path).mod, spec)
    rows = predict_groups(groups, spec)
    return {"kernel_calls": sum(r["count"] for r in rows),
            "roofline_ms": sum(r["roofline_predicted_ms"] * r["count"] for r in rows)}


def fit(rows: list) -> dict:
    """{call_ms, fraction}: least squares on measured / predicted - 1, call_ms >= 0 and fraction <= 1."""
    measured = np.array([r["xcomp_ms"] for r in rows])
    design = np.array([[r["kernel_calls"], r["roofline_ms"]] for r in rows]) / measured[:, None]
    (call_ms, inverse_fraction), *_ = np.linalg.lstsq(design, np.ones(len(rows)), rcond=None)
    return {"call_ms": max(float(call_ms), 0.0), "fraction": 1.0 / max(float(inverse_fraction), 1.0)}


def predicted(row: dict, calibrated: dict) -> float:
    return row["kernel_calls"] * calibrated["call_ms"] + row["roofline_ms"] / calibrated["fraction"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="store the fit in xcomp/report/calibration.json")
    parser.add_argument("--json", help="also write the fit and each row's errors here")
    args = parser.parse_args()
    from xcomp.report.predict import CALIBRATION_PATH

    calibration, report = {}, {}
    for target, rows in model_rows().items():
        if len(rows) < 2:
            print(f"{target}: {len(rows)} measured model, 2 needed to fit call_ms and fraction")
            continue
        calibrated = fit(rows)
        names = sorted({f"{r['model']} {r['dtype']}" for r in rows})
        calibrated["source"] = f"{len(rows)} runs of {', '.join(names)} in benchmarks/results/gpu"
        calibration[target] = calibrated
        print(f"{target}: call_ms {calibrated['call_ms']:.4f}, fraction of the roofline "
              f"{calibrated['fraction']:.4f} ({calibrated['source']})")
        report[target] = {**calibrated, "rows": []}
        for i, row in enumerate(rows):
            errors = {"fitted": predicted(row, calibrated) / row["xcomp_ms"] - 1}
            if len(rows) >= 3:
                errors["left_out"] = predicted(row, fit(rows[:i] + rows[i + 1:])) / row["xcomp_ms"] - 1
            report[target]["rows"].append({"model": row["model"], "dtype": row["dtype"], "file": row["file"],
                                           "measured_ms": row["xcomp_ms"], "kernel_calls": row["kernel_calls"],
                                           "roofline_ms": row["roofline_ms"], **errors})
            left_out = f", left out {errors['left_out']:+.0%}" if "left_out" in errors else ""
            print(f"  {row['model']:10} {row['dtype']:8} measured {row['xcomp_ms']:7.3f} ms, "
                  f"{row['kernel_calls']} calls, roofline {row['roofline_ms']:.3f} ms: error {errors['fitted']:+.0%}"
                  f"{left_out}")
    if args.write:
        with open(CALIBRATION_PATH, "w") as f:
            json.dump(calibration, f, indent=1)
            f.write("\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
