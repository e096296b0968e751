"""The GPU benchmark suite rehearsed without a GPU: benchmarks/gpu_suite.py --dry-run compiles for cuda:sm_90 and
writes its JSON in the shape of benchmarks/results/gpu/ (docs/gpu-results.md), so a lent GPU's minutes are not
spent finding a broken script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)


def test_dry_run_writes_the_results_shape(tmp_path):
    from xcomp.backends import get_backend

    if get_backend("cuda:sm_90").toolchain_problem():
        pytest.skip(get_backend("cuda:sm_90").toolchain_problem())
    env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/local/cuda/bin")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_suite.py"), "--dry-run",
                           "--out", str(tmp_path), "--commit", "test", "--only", "gemm 1024x1024x1024 float16",
                           "float32 tf32", "attention 12x128x64"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "gpu_suite.json") as f:
        result = json.load(f)
    assert {"device", "date", "commit", "gemm", "models"} <= set(result) and result["commit"] == "test"
    # the float32 GEMM with --tf32 (beside cuBLAS TF32 on a GPU) comes first in GEMMS
    tf32, fp16 = sorted(result["gemm"], key=lambda row: row["dtype"] != "float32")
    for row, shape, folder, mma in ((fp16, (1024, 1024, 1024, "float16"), "gemm_1024x1024x1024_float16",
                                     "mma.sync.aligned.m16n8k16"),
                                    (tf32, (4096, 4096, 4096, "float32"), "gemm_4096x4096x4096_float32_tf32",
                                     "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")):
        assert "error" not in row, row.get("error")
        assert (row["m"], row["n"], row["k"], row["dtype"]) == shape
        assert row["xcomp_tflops"] is None and row["cublas_tflops"] is None  # nothing ran: no number pretends so
        with open(tmp_path / folder / "cuda_kernels.ptx") as f:
            assert mma in f.read()
        if shutil.which("ptxas", path=env["PATH"]):
            assert any("0 bytes spill stores" in line for line in row["ptxas"]), row["ptxas"]
    assert tf32["math"] == "tf32" and "math" not in fp16
    attention, = result["attention"]  # against torch's SDPA on a GPU
    assert "error" not in attention, attention.get("error")
    assert (attention["seq"], attention["causal"], attention["xcomp_ms"], attention["sdpa_ms"]) == (128, False, None,
                                                                                                   None)
    assert any(group["kind"] == "matmul" for group in attention["groups"])


def _benchmark(name):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def test_the_calibration_fit_recovers_a_known_cost_per_call_and_fraction():
    calibrate = _benchmark("calibrate_gpu")
    truth = {"call_ms": 0.05, "fraction": 0.1}
    rows = [{"kernel_calls": calls, "roofline_ms": roofline} for calls, roofline in ((57, 0.128), (57, 0.032),
                                                                                     (120, 0.4))]
    for row in rows:
        row["xcomp_ms"] = calibrate.predicted(row, truth)
    fitted = calibrate.fit(rows)
    assert fitted["call_ms"] == pytest.approx(0.05) and fitted["fraction"] == pytest.approx(0.1)
    assert calibrate.fit(rows[:2]) == pytest.approx(fitted)  # two rows already determine both


def test_the_suite_s_prediction_fields_for_a_module_compiled_without_a_gpu():
    """What run_model records beside each measured model: the calibrated prediction and its error."""
    import xcomp
    from conftest import tiny_mlp
    from xcomp.report.predict import calibration

    module = xcomp.compile(tiny_mlp(8), target="cuda:sm_90", progress=False)
    fields = _benchmark("gpu_suite").prediction(module, measured_ms=1.0)
    calibrated = calibration("cuda:sm_90")
    assert fields["kernel_calls"] >= 1 and fields["roofline_ms"] > 0
    assert fields["predicted_ms"] == pytest.approx(fields["kernel_calls"] * calibrated["call_ms"]
                                                   + fields["roofline_ms"] / calibrated["fraction"])
    assert fields["prediction_error"] == pytest.approx(fields["predicted_ms"] - 1.0)
