"""Vendor BLAS as a baseline for GEMM groups on the same problem size: numpy.matmul (OpenBLAS here) for a CPU
target, torch.matmul on the GPU for a GPU target (cuBLAS in a CUDA build of torch, rocBLAS / hipBLASLt in a ROCm
build: both address the GPU as "cuda").

A matmul group's shape is read from its reduction block: spatial iterators (batch..., M, N) and reduction
iterators (K). The weight layout xcomp chose (packed or not) does not matter: BLAS gets plain row-major
A[batch, M, K] @ B[batch, K, N] with the same FLOPs (batch folded into M when it is 1).
"""

from __future__ import annotations

import numpy as np

from xcomp.timing import calls_filling, time_calls


def gemm_shape(func) -> dict | None:
    """{batch, m, n, k, dtype} of a matmul-kind group's PrimFunc; None when it has no static reduction block."""
    from tvm import s_tir, tirx

    from xcomp.graph.partition import _has_root, func_buffers

    sch = s_tir.Schedule(func)
    if not _has_root(sch):
        return None
    best = None
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(rv)
        try:
            spatial = [int(iv.dom.extent) for iv in block.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
            reduce = [int(iv.dom.extent) for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
        except TypeError:  # a symbolic extent
            continue
        if not reduce or not spatial:
            continue
        volume = int(np.prod(spatial + reduce, dtype=np.int64))
        if best is None or volume > best[0]:
            best = (volume, spatial, reduce)
    if best is None:
        return None
    _, spatial, reduce = best
    n = spatial[-1]
    m = spatial[-2] if len(spatial) > 1 else 1
    batch = int(np.prod(spatial[:-2], dtype=np.int64)) if len(spatial) > 2 else 1
    buffers = func_buffers(func)
    dtype = str(buffers[0].dtype) if buffers else "float32"
    return {"batch": batch, "m": m, "n": n, "k": int(np.prod(reduce, dtype=np.int64)), "dtype": dtype}


def _operands(shape: dict, seed: int):
    rng = np.random.default_rng(seed)
    dtype = shape["dtype"] if shape["dtype"] in ("float32", "float64", "float16") else "float32"
    b, m, n, k = shape["batch"], shape["m"], shape["n"], shape["k"]
    a_shape, b_shape = ((m, k), (k, n)) if b == 1 else ((b, m, k), (b, k, n))
    return rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype), dtype


def _time(fn, repeat: int, min_ms: float, sync=None) -> tuple:
    """(median ms, calls per sample): `repeat` samples of `fn` called back to back until `min_ms` has passed --
    the same way the per-group profile times xcomp's groups. `sync` waits for a GPU's queued work."""
    number = calls_filling(fn, min_ms, sync)
    return float(np.median(time_calls(fn, repeat, number=number, sync=sync))), number


def problem_text(shape: dict) -> str:
    b = f"{shape['batch']}x" if shape["batch"] > 1 else ""
    return f"{b}{shape['m']}x{shape['k']} @ {b}{shape['k']}x{shape['n']}"


def time_gemm(shape: dict, repeat: int = 20, min_ms: float = 20.0, seed: int = 0) -> dict:
    """numpy.matmul (the BLAS numpy links) on random operands of `shape`."""
    a, w, dtype = _operands(shape, seed)
    out = np.empty(a.shape[:-1] + (w.shape[-1],), dtype)
    median, number = _time(lambda: np.matmul(a, w, out=out), repeat, min_ms)
    flops = 2.0 * shape["batch"] * shape["m"] * shape["n"] * shape["k"]
    return {"median_ms": median, "runs": repeat, "number": number, "dtype": dtype,
            "gflops": flops / median / 1e6 if median > 0 else 0.0, "problem": problem_text(shape)}


def time_torch_gemm(shape: dict, repeat: int = 20, min_ms: float = 20.0, seed: int = 0, device: str = "cpu"):
    """torch.matmul on `device`: "cpu" (torch's own BLAS / oneDNN) or "cuda" (the GPU's vendor BLAS); None when
    torch is not installed or cannot reach that device here."""
    try:
        import torch
    except ImportError:
        return None
    if device != "cpu" and not torch.cuda.is_available():
        return None
    a, w, _dtype = _operands(shape, seed)
    ta, tw = torch.from_numpy(a).to(device), torch.from_numpy(w).to(device)
    out = torch.empty(ta.shape[:-1] + (tw.shape[-1],), dtype=ta.dtype, device=device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    with torch.inference_mode():
        median, _number = _time(lambda: torch.matmul(ta, tw, out=out), repeat, min_ms, sync)
    flops = 2.0 * shape["batch"] * shape["m"] * shape["n"] * shape["k"]
    return {"median_ms": median, "runs": repeat, "gflops": flops / median / 1e6 if median > 0 else 0.0,
            "version": torch.__version__, "threads": torch.get_num_threads(), "problem": problem_text(shape)}


def vendor_gemm(shape: dict, kind: str, repeat: int = 20):
    """(vendor BLAS name, its timing, torch.matmul on the CPU or None) for a backend kind (Backend.name: "cpu",
    "cuda", "rocm"); a GPU target whose GPU torch cannot reach here gets (name, None, None)."""
    if kind in ("cuda", "rocm"):
        name = f"torch.matmul on the GPU ({'rocBLAS' if kind == 'rocm' else 'cuBLAS'})"
        return name, time_torch_gemm(shape, repeat=repeat, device="cuda"), None
    return "numpy.matmul", time_gemm(shape, repeat=repeat), time_torch_gemm(shape, repeat=repeat)


def blas_rows(module, profile_rows, repeat: int = 20) -> list | None:
    """One row per matmul group of a measured module: xcomp's per-group median against the vendor BLAS's
    (`vendor_gemm`), both timed alone (the profile row's in-model time would set a cold kernel against a warm
    BLAS). None when the target is a GPU that torch cannot reach here."""
    from xcomp.graph.partition import unique_groups

    reps = {key: rep for key, (rep, _count) in unique_groups(module.groups).items()}
    rows = []
    for row in profile_rows:
        if row.kind != "matmul" or row.key not in reps:
            continue
        shape = gemm_shape(reps[row.key].func)
        if shape is None:
            continue
        blas_name, timing, torch_timing = vendor_gemm(shape, module.backend.name, repeat=repeat)
        if timing is None:
            return None
        rows.append({
            "group": row.group, "key": row.key, "count": row.count, "shape": shape, "blas_name": blas_name,
            "problem": timing["problem"], "xcomp_ms": row.median_ms, "blas_ms": timing["median_ms"],
            "blas_runs": timing["runs"], "blas_gflops": timing["gflops"],
            "xcomp_gflops": row.flops / row.median_ms / 1e6 if row.median_ms > 0 else 0.0,
            "xcomp_over_blas": row.median_ms / timing["median_ms"] if timing["median_ms"] > 0 else None,
            "torch_ms": torch_timing["median_ms"] if torch_timing else None,
            "torch_gflops": torch_timing["gflops"] if torch_timing else None,
        })
    return rows
