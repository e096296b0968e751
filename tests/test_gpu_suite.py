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
                           "--out", str(tmp_path), "--commit", "test", "--only", "gemm 1024x1024x1024 float16"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "gpu_suite.json") as f:
        result = json.load(f)
    assert {"device", "date", "commit", "gemm", "models"} <= set(result) and result["commit"] == "test"
    (row,) = result["gemm"]
    assert "error" not in row, row.get("error")
    assert (row["m"], row["n"], row["k"], row["dtype"]) == (1024, 1024, 1024, "float16")
    assert row["xcomp_tflops"] is None and row["cublas_tflops"] is None  # nothing ran: no number pretends it did
    generated = tmp_path / "gemm_1024x1024x1024_float16"
    with open(generated / "cuda_kernels.ptx") as f:
        assert "mma.sync.aligned.m16n8k16" in f.read()
    if shutil.which("ptxas", path=env["PATH"]):
        assert any("0 bytes spill stores" in line for line in row["ptxas"]), row["ptxas"]
