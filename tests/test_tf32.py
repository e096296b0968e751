"""float32 GEMMs on TF32 matrix cores when the user opts in (xcomp.compile(tf32=True), --tf32), fp32 otherwise.

Checked without a GPU: the fragment layouts against the PTX ISA's m16n8k8 .tf32 tables, the rounding on the CPU,
the generated PTX (tf32 mma, rounding and cp.async in the main loop, no spills), which math each target's build
reports. test_tf32_gemm_on_visible_gpu checks the results against numpy on the next lent GPU.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from test_cross_compile import (_cuda_backend, _main_loop, _matmul_relu, assert_no_spills, emit_module, fused,
                                matmul_prim_func)
from test_gpu_suite import _benchmark
from xcomp.backends import get_backend

TF32_MMA = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"


def _gemm_onnx(m, n, k):
    """x[m, k] @ w[k, n] in float32, both inputs: benchmarks/gpu_suite.py's GEMM model."""
    return _benchmark("gpu_suite").gemm_model(m, n, k, "float32")


def _conv_onnx():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
                               helper.make_node("Relu", ["c"], ["y"])], "conv_f32",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 28, 28])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _round_to_tf32_reference(x):
    """Nearest value with 10 mantissa bits, ties away from zero (cvt.rna.tf32.f32), by frexp arithmetic; below
    float32's smallest normal (2**-126) the step stays that of its binade, as in float32's own subnormals."""
    _, exponent = np.frexp(x.astype(np.float64))  # x = mantissa * 2**exponent, |mantissa| in [0.5, 1)
    step = np.ldexp(1.0, np.maximum(exponent, -125) - 11)  # 11 significant bits: 1 implicit + 10 stored
    rounded = np.sign(x) * np.floor(np.abs(x.astype(np.float64)) / step + 0.5) * step
    with np.errstate(over="ignore"):
        return rounded.astype(np.float32)


# -- the intrinsics ---------------------------------------------------------------------------------------------------


def test_tf32_fragment_layouts_are_the_ptx_m16n8k8_ones():
    """PTX ISA, mma.m16n8k8 .tf32: lane = 4 * group + t; A a0..a3 at (g, t), (g+8, t), (g, t+4), (g+8, t+4);
    B b0, b1 at (k=t, n=g), (k=t+4, n=g), the second n8 half in registers 2, 3; C c0..c3 at (g, 2t), (g, 2t+1),
    (g+8, 2t), (g+8, 2t+1) and the second half in 4..7. Each load reads back the element its layout places."""
    from xcomp.backends.cuda import tensor_core

    f = get_backend("cuda:sm_90").fragment_intrinsics("tfloat32", "float32")
    assert (f.k, f.lanes) == (8, 32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for reg, (i, j) in enumerate([(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]):
            assert f.layout_a(i, j) == (lane, reg)
            assert tensor_core._tf32_a_element(lane, reg) == (i, j)
        for reg, (k, n) in enumerate([(t, g), (t + 4, g), (t, g + 8), (t + 4, g + 8)]):
            assert f.layout_b(k, n) == (lane, reg)
            assert tensor_core._tf32_b_element(lane, reg) == (k, n)
        for reg, (i, j) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]):
            assert tuple(int(v) for v in f.layout_c(i, j)) == (lane, reg)
            assert tuple(int(v) for v in f.layout_c(i, j + 8)) == (lane, reg + 4)


def test_tf32_rounding_is_round_to_nearest_ties_away():
    """The rounding the fragment loads apply, built for the CPU and run on edge cases and random values."""
    import tvm
    from tvm.script import tirx as T

    from xcomp.backends.cuda.tensor_core import _round_to_tf32

    n = 4096

    @T.prim_func
    def rounding(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        for i in range(n):
            b[i] = _round_to_tf32(a[i])

    bits = np.array([0x3F800000, 0x3F801000, 0x3F800FFF, 0x3F801FFF, 0x3F803000, 0xBF801000, 0x7F7FFFFF,
                     0x00000001, 0x00001000, 0x7F800000, 0xFF800000, 0], np.uint32)
    edge = bits.view(np.float32)
    values = np.concatenate([edge, np.random.default_rng(0).standard_normal(n - len(edge)).astype(np.float32)
                             * np.float32(1e3)])
    lib = tvm.compile(rounding, target="llvm")
    got = tvm.runtime.tensor(np.zeros(n, np.float32))
    lib(tvm.runtime.tensor(values), got)
    got = got.numpy()
    assert np.all(got.view(np.uint32) & 0x1FFF == 0)  # 10 mantissa bits left
    finite = np.isfinite(_round_to_tf32_reference(values))
    np.testing.assert_array_equal(got[finite], _round_to_tf32_reference(values)[finite])
    assert got[0] == 1.0 and got[1] == np.float32(1 + 2**-10) and got[5] == -got[1]  # a tie goes away from zero
    assert np.isinf(got[6]) and np.isinf(got[9]) and got[10] == -np.inf  # past the largest tf32: infinity


# -- the generated code -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("knobs", [{}, {"stages": 2, "frags_n": 1}], ids=["default", "stages2"])
def test_tf32_gemm_ptx_runs_tf32_mma_in_its_main_loop_without_spills(knobs, tmp_path):
    """With tf32 a float32 GEMM takes the matrix-core template: its main loop loads each fragment element from
    shared memory rounded to tf32 (the bits' mask 0xFFFFE000 is -8192 in PTX) and issues mma.sync m16n8k8 tf32, the next
    tiles arriving by cp.async with pipeline stages; ptxas -v reports no spills."""
    from xcomp.schedules import gpu

    backend = _cuda_backend("sm_90")
    backend.tf32 = True
    mod = fused(_matmul_relu("float32"))
    gv, func = matmul_prim_func(mod)
    template = gpu.get_template(func, backend.schedule_context())
    assert isinstance(template, gpu.MatrixCoreTemplate)
    knobs = {**template.default_knobs(), **knobs}
    assert template.valid(knobs) and knobs["vector"] * 4 == backend.spec.vector_bytes
    mod[gv] = template.schedule(knobs)
    ptx = emit_module(backend, mod, tmp_path)["ptx"]
    loop = _main_loop(ptx)
    # frags_m x frags_n x k_frags fragments a warp, two m16n8k8 each
    assert loop.count(TF32_MMA) == knobs["frags_m"] * knobs["frags_n"] * knobs["k_frags"] * 2
    stages = knobs["stages"]
    assert "-8192;" in loop and re.search(r"ld\.shared\.[ub]32", loop) and "ldmatrix" not in ptx
    assert "m16n8k16" not in ptx
    if stages > 1:
        assert "cp.async.cg.shared.global" in loop and f"cp.async.wait_group {stages - 1};" in loop
    else:
        assert "cp.async" not in ptx
    assert_no_spills(ptx, tmp_path)


def test_float32_gemm_without_tf32_keeps_plain_fp32(tmp_path):
    from xcomp.schedules import gpu

    backend = _cuda_backend("sm_90")
    mod = fused(_matmul_relu("float32"))
    gv, func = matmul_prim_func(mod)
    assert isinstance(gpu.get_template(func, backend.schedule_context()), gpu.DlightTemplate)
    mod[gv] = gpu.get_template(func, backend.schedule_context()).schedule(None)
    ptx = emit_module(backend, mod, tmp_path)["ptx"]
    assert "tf32" not in ptx and "mma" not in ptx and "fma.rn" in ptx


def _tf32_template(model):
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition
    from xcomp.schedules import gpu

    backend = get_backend("cuda:sm_90")
    backend.tf32 = True
    _, groups = partition(load_onnx(model).mod, backend.spec, [])
    (template,) = [gpu.get_template(g.func, backend.schedule_context()) for g in groups]
    assert isinstance(template, gpu.MatrixCoreTemplate)
    return backend, template


def test_tf32_operand_rows_are_padded_against_bank_conflicts():
    """Element-wise fragment loads: A's rows pad from 32 floats to 36 (16 to 20) and B's from 64 to 72, where a
    warp's loads of one register fall on 32 different banks (found from the layout); the accumulator keeps the
    float16 path's 72. The default k_frags 4 makes A's rows 128 bytes, one 16-byte copy phase each."""
    from xcomp.schedules.gpu.matrix_core import _conflict_free_pitch

    _, template = _tf32_template(_gemm_onnx(1024, 1024, 1024))
    f = template.intrinsics
    assert [_conflict_free_pitch(f.layout_a, 16, 8, row, 4) for row in (16, 32)] == [20, 36]
    assert _conflict_free_pitch(f.layout_b, 8, 16, 64, 4) == 72
    knobs = template.default_knobs()
    assert knobs["k_frags"] == 4 and knobs["stages"] == 2 and template.valid(knobs)
    # two stages of a 64 x 32 A tile and a 32 x 64 B tile, a 64 x 64 accumulator, in float32, rows as padded
    assert template.shared_bytes(knobs) == (2 * (64 * 36 + 32 * 72) + 64 * 72) * 4


@pytest.mark.parametrize("knobs", [{}, {"stages": 2, "frags_n": 1}], ids=["default", "stages2"])
def test_tf32_shared_memory_has_no_bank_conflicts(knobs):
    """tests/gpu_banks.py on the lowered kernel of a 1024^3 tf32 GEMM: the operand copies and the element-wise
    fragment loads take one wavefront per phase (the accumulator's stores their floor of two, as with float16);
    with dense rows the same loads take eight (A) and four (B)."""
    from gpu_banks import simulate

    backend, template = _tf32_template(_gemm_onnx(1024, 1024, 1024))
    knobs = {**template.default_knobs(), **knobs}
    assert template.valid(knobs)
    simulation = simulate(backend.lower_device_kernels(template.schedule(knobs))[0])
    report = "\n".join(str(site) for site in simulation.sites)

    def sites(found, kind, lane_bytes):
        return [s for s in found.sites if s.kind == kind and s.lane_bytes == lane_bytes]

    copies = sites(simulation, "store" if knobs["stages"] == 1 else "cp.async", 16)
    loads, accumulator = sites(simulation, "load", 4), sites(simulation, "store", 4)
    assert len(copies) == len(loads) == 2 and len(accumulator) == 1, report
    assert all(s.instructions and not s.conflicts for s in copies + loads), report
    assert accumulator[0].wavefronts == 2 * accumulator[0].ideal, report
    template.shared_layout = "dense"
    try:
        dense = simulate(backend.lower_device_kernels(template.schedule(knobs))[0])
    finally:
        template.shared_layout = "banks"
    # A's 32-float rows put a load's 8 row groups on the same 4 banks, B's 64-float rows its 4 k rows on 8
    assert [s.wavefronts / s.ideal for s in sites(dense, "load", 4)] == [8, 4]


# -- which math a build uses -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model,groups", [(lambda: _gemm_onnx(256, 128, 192), 1), (_conv_onnx, 1)],
                         ids=["gemm", "conv3x3"])
def test_tf32_is_opt_in_and_the_build_says_which_math(model, groups, tmp_path):
    import xcomp

    _cuda_backend("sm_90")
    plain = xcomp.compile(model(), target="cuda:sm_90")
    assert plain.info["float32_math"] == "fp32"
    assert any(n.startswith("float32 math: fp32") and "--tf32" in n for n in plain.info["notes"])
    fast = xcomp.compile(model(), target="cuda:sm_90", tf32=True)
    assert fast.info["float32_math"] == "tf32"
    assert any(n.startswith(f"float32 math: tf32 ({groups} of {groups} ") for n in fast.info["notes"])
    ptx = next(p for p in fast.emit_sources(tmp_path) if p.endswith(".ptx"))
    with open(ptx) as f:
        assert TF32_MMA in f.read()


@pytest.mark.parametrize("target", ["rocm:gfx942", "rocm:gfx90a"])
def test_tf32_on_rocm_keeps_fp32(target, tmp_path):
    """gfx942's MFMA has xf32, but TVM registers no xf32 intrinsics (nor does xcomp): ROCm builds stay fp32 and
    say so; gfx90a has no xf32 at all."""
    import xcomp

    backend = get_backend(target)
    if backend.toolchain_problem():
        pytest.skip(backend.toolchain_problem())
    module = xcomp.compile(_gemm_onnx(128, 128, 128), target=target, tf32=True)
    assert module.info["float32_math"] == "fp32"
    assert any(n.startswith(f"--tf32: {target} has no TF32 matrix cores") for n in module.info["notes"])
    asm = next(p for p in module.emit_sources(tmp_path) if os.path.basename(p) == "rocm_kernels.s")
    with open(asm) as f:
        code = f.read()
    assert "v_fma" in code or "v_fmac" in code or "v_pk_fma" in code
    assert "v_mfma" not in code and "xf32" not in code


def test_tf32_on_a_cpu_is_a_noop_with_a_note():
    import xcomp

    # (no cost model: where its picks are trusted, on some hosts, a note says so too)
    module = xcomp.compile(_gemm_onnx(64, 64, 64), target="cpu", tf32=True, costmodel=False)
    assert module.info["float32_math"] == "fp32"
    assert module.info["notes"] == ["--tf32: cpu has no TF32 matrix cores xcomp can program, so float32 math stays "
                                    "fp32 (docs/targets.md)"]
    x, w = (np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in ((64, 64), (64, 64)))
    np.testing.assert_allclose(module(x, w), x @ w, rtol=1e-4, atol=1e-4)


def test_cli_and_bench_report_say_which_math(tmp_path, capsys):
    import json

    import onnx

    from xcomp.cli import main
    from xcomp.report import collect_report

    path = str(tmp_path / "gemm.onnx")
    onnx.save(_gemm_onnx(64, 64, 64), path)
    assert main(["compile", path, "-t", "cuda:sm_90", "--tf32", "-q", "--json", "-o", str(tmp_path / "g.xc")]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("float32 math: tf32 (1 of 1 ") for n in notes)
    report = collect_report(path, targets=["cpu", "cuda:sm_90"], baselines=[], tf32=True, repeat=2, warmup=1,
                            block=2, profile_groups=False, blas=False, progress=False)
    assert report["settings"]["tf32"] is True
    cpu, gpu = report["targets"]
    assert cpu["float32_math"] == "fp32" and gpu["status"] == "predicted"
    assert any(n.startswith("--tf32 applies to the targets measured here") for n in report["notes"])


# -- on a GPU ---------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_tf32_gemm_on_visible_gpu():
    """A float32 GEMM with tf32 against numpy: it must match float64 products of the tf32-rounded operands to
    float32 summation error, and the exact product to tf32's (operands keep 10 of 23 mantissa bits, so each
    product is off by up to ~2**-10 of itself; over K=384 random terms about 1e-3 of the output's range)."""
    import tvm

    import xcomp

    if not tvm.cuda(0).exist:
        pytest.skip("no cuda GPU visible")
    m, n, k = 200, 264, 384  # no whole number of block tiles: the padding is exercised too
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    module = xcomp.compile(_gemm_onnx(m, n, k), target="cuda", tf32=True)
    assert module.info["float32_math"] == "tf32"
    got = np.asarray(module(x, w), np.float64)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    rounded = _round_to_tf32_reference(x).astype(np.float64) @ _round_to_tf32_reference(w).astype(np.float64)
    scale = np.max(np.abs(exact))
    assert np.max(np.abs(got - rounded)) <= 1e-5 * scale
    assert np.max(np.abs(got - exact)) <= 3e-3 * scale
    assert np.max(np.abs(got - exact)) > 1e-5 * scale  # tf32 did run: fp32 math would be this close
    plain = xcomp.compile(_gemm_onnx(m, n, k), target="cuda")
    assert np.max(np.abs(np.asarray(plain(x, w), np.float64) - exact)) <= 1e-5 * scale
