"""Shared-memory bank conflicts of the matrix-core template, counted on the CPU (gpu_banks.py) for cuda:sm_90.

The template's default configs, on the shapes the GPU tests and benchmarks/gpu_suite.py build, must issue every
operand copy and every ldmatrix without a bank conflict; the accumulator's 4-byte fragment stores take the two
wavefronts that are their floor (docs/decisions/shared-memory-banks.md). Where the layout is permuted, each thread
must receive through ldmatrix exactly the elements the dense row-major layout gives it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from gpu_banks import UNWRITTEN, bank_wavefronts, shared_allocation, simulate
from xcomp.backends import get_backend

TARGET = "cuda:sm_90"


# -- the bank rule on hand-made addresses ---------------------------------------------------------------------------


def test_the_bank_rule_counts_known_conflicts():
    lanes = np.arange(32)
    # ldmatrix.x4: 32 rows of 16 bytes; rows of 64 halves (128 bytes) without padding put a phase's 8 rows on the
    # same 4 banks (8 wavefronts per phase), 72 halves (144 bytes) spread them over all 32
    assert bank_wavefronts(lanes * 128, 16) == (32, 4)
    assert bank_wavefronts(lanes * 144, 16) == (4, 4)
    assert bank_wavefronts(lanes % 8 * 64 + lanes // 8 * 16, 16) == (16, 4)  # rows of 64 bytes: 2 rows a line
    # 16-byte stores of consecutive chunks, and 8 lanes at a 16-byte stride XOR-permuted within a 128-byte line
    assert bank_wavefronts(lanes * 16, 16) == (4, 4)
    assert bank_wavefronts((lanes // 8) * 128 + ((lanes % 8) ^ (lanes // 8)) * 16, 16) == (4, 4)
    # 4-byte accesses: one 32-lane phase; lanes on one word share it, a 128-byte stride is a 32-way conflict
    assert bank_wavefronts(lanes * 4, 4) == (1, 1)
    assert bank_wavefronts(np.zeros(32, np.int64), 4) == (1, 1)
    assert bank_wavefronts(lanes * 128, 4) == (32, 1)
    # 2-byte accesses: two lanes per word; 8-byte ones in 16-lane phases
    assert bank_wavefronts(lanes * 2, 2) == (1, 1)
    assert bank_wavefronts(lanes * 8, 8) == (2, 2)
    # lanes that take no part are not counted
    assert bank_wavefronts(lanes * 128, 16, lanes < 8) == (8, 1)


# -- the template's kernels ------------------------------------------------------------------------------------------


def _gemm_onnx(m, n, k):
    """x[m, k] @ w[k, n] in float16, both inputs: benchmarks/gpu_suite.py's GEMM model."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT16, [k, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [m, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv1x1_stride2_onnx():
    from test_cross_compile import _fp16_conv_onnx

    return _fp16_conv_onnx(kernel=1, stride=2)


MODELS = {"gemm_1024": lambda: _gemm_onnx(1024, 1024, 1024), "gemm_4096": lambda: _gemm_onnx(4096, 4096, 4096),
          "conv1x1_stride2": _conv1x1_stride2_onnx}


@functools.lru_cache(maxsize=None)
def _template(model: str):
    """The matrix-core template of the model's one GEMM group, as the compile pipeline partitions it (the Relax
    models of test_cross_compile.py: as those tests fuse them)."""
    import test_cross_compile

    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition
    from xcomp.schedules import gpu

    backend = get_backend(TARGET)
    ctx = backend.schedule_context()
    if model in test_cross_compile.MODELS:
        return gpu.get_template(test_cross_compile.matmul_prim_func(
            test_cross_compile.fused(test_cross_compile.MODELS[model]()))[1], ctx)
    _, groups = partition(load_onnx(MODELS[model]()).mod, backend.spec, [])
    (template,) = [t for t in (gpu.get_template(g.func, ctx) for g in groups) if isinstance(t, gpu.MatrixCoreTemplate)]
    return template


def _simulate(model: str, knobs: dict | None = None, layout: str = "banks", edit=None):
    template = _template(model)
    knobs = {**template.default_knobs(), **(knobs or {})}
    template.shared_layout = layout
    try:
        func = template.schedule(knobs)
    finally:
        template.shared_layout = "banks"
    if edit is not None:
        func = edit(func)
    (kernel,) = get_backend(TARGET).lower_device_kernels(func)
    return simulate(kernel)


def _report(simulation) -> str:
    return "\n".join(str(site) for site in simulation.sites)


# the default configs of the GPU tests' and the suite's shapes, and the suite's other configs that fit shared
# memory: stage counts and its larger blocks (bfloat16 GEMMs emit the same kernels on another element type)
LARGE_BLOCK = {"warps_m": 2, "frags_m": 4, "frags_n": 4, "stages": 3}
DEFAULTS = [("gemm_1024", {}), ("gemm_4096", {}), ("gemm_4096", {"stages": 1}), ("gemm_4096", {"stages": 3}),
            ("gemm_4096", {**LARGE_BLOCK, "warps_n": 2}), ("gemm_4096", {**LARGE_BLOCK, "warps_n": 4}),
            ("conv1x1_stride2", {})]
IDS = [model + "".join(f"_{k}{v}" for k, v in knobs.items()) for model, knobs in DEFAULTS]


@pytest.mark.parametrize("model,knobs", DEFAULTS, ids=IDS)
def test_default_configs_have_no_bank_conflicts(model, knobs):
    config = {**_template(model).default_knobs(), **knobs}
    assert _template(model).valid(config)
    simulation = _simulate(model, knobs)
    operands = [s for s in simulation.sites if s.dtype == "float16"]
    accumulator = [s for s in simulation.sites if s.dtype == "float32"]
    assert len(operands) + len(accumulator) == len(simulation.sites)
    assert {s.kind for s in operands} >= {"ldmatrix", "cp.async" if config["stages"] > 1 else "store"}
    assert all(s.instructions for s in simulation.sites)
    assert [s for s in operands if s.conflicts] == [], _report(simulation)
    # the accumulator: fragment stores at their floor of 2 wavefronts (4-byte lanes on 16 banks), epilogue loads clean
    for site in accumulator:
        assert site.wavefronts == (2 if site.kind == "store" else 1) * site.ideal, _report(simulation)


def test_the_simulator_finds_the_conflicts_of_dense_rows():
    """Unpadded, unpermuted rows: ldmatrix reads 8 rows of A's 64-byte rows from 4 banks' worth of lines (4-way)
    and 8 rows of B's 128-byte rows from the same 4 banks (8-way); the copies, a line per phase, stay clean."""
    simulation = _simulate("gemm_1024", {"stages": 1}, layout="dense")  # copies as plain stores
    a, b = simulation.site("ldmatrix", "x_"), simulation.site("ldmatrix", "w_")
    assert a.wavefronts == 4 * a.ideal and b.wavefronts == 8 * b.ideal, _report(simulation)
    assert simulation.site("store", "x_").conflicts == simulation.site("store", "w_").conflicts == 0
    accumulator = simulation.site("store", "", "float32")
    assert accumulator.wavefronts == 8 * accumulator.ideal


def test_padded_rows_of_16_elements_keep_a_store_conflict():
    """k_frags=1 (A's rows 16 elements) is outside TVM's permuted layout: padded rows serve ldmatrix cleanly but a
    16-byte store phase spans 4 rows, whose chunks no row pitch can keep apart (not a default; documented)."""
    simulation = _simulate("gemm_1024", {"k_frags": 1, "stages": 1})
    assert simulation.site("ldmatrix", "x_").conflicts == 0 and simulation.site("store", "w_").conflicts == 0
    store = simulation.site("store", "x_")
    assert store.wavefronts == 2 * store.ideal, _report(simulation)


@pytest.mark.parametrize("model,knobs", [("gemm_1024", {}), ("gemm_1024", {"stages": 1}),
                                         ("gemm_1024", {"warps_n": 4, "frags_n": 2}),
                                         ("gemm_1024", {"k_frags": 4, "vector": 4}), ("conv1x1_stride2", {}),
                                         ("linear_f16", {"stages": 2}), ("attention_f16", {}),
                                         ("gemm_1024", {**LARGE_BLOCK, "warps_n": 4})],
                         ids=["default", "stages1", "rows128", "rows64_vector4", "conv1x1_stride2", "linear_padded",
                              "attention_batched", "block128x256"])
def test_permuted_layouts_hand_each_thread_the_dense_layout_s_elements(model, knobs):
    """Writers and readers agree on the permutation: every ldmatrix hands every thread the same global elements,
    in the same order, as the dense row-major layout of the same loops."""
    permuted, dense = _simulate(model, knobs), _simulate(model, knobs, layout="dense")
    assert len(permuted.fragments) == len(dense.fragments) > 0
    assert not any((f == UNWRITTEN).any() for f in permuted.fragments)
    assert all(np.array_equal(p, d) for p, d in zip(permuted.fragments, dense.fragments))


def test_the_fragment_check_sees_a_reader_that_ignores_the_permutation():
    """The copies permuted, A's ldmatrix not: threads would get other elements, and the comparison says so."""
    from tvm import s_tir

    def unpermute_a_reads(func):
        sch = s_tir.Schedule(func)
        block = sch.get_sblock("x_reindex_shared.dyn_warp_o") if hasattr(sch, "get_sblock") else \
            sch.get_block("x_reindex_shared.dyn_warp_o")
        sch.unannotate(block, "permuted_layout")
        return sch.mod["main"]

    broken, dense = _simulate("gemm_1024", edit=unpermute_a_reads), _simulate("gemm_1024", layout="dense")
    assert not all(np.array_equal(p, d) for p, d in zip(broken.fragments, dense.fragments))


def test_the_first_a_fragment_is_mma_s_layout():
    """What the default config's first ldmatrix of A hands the 32 lanes of warp 0 in block 0 is the m16n8k16 A
    operand of x[0:16, 0:16]: lane l holds rows l/4 and l/4 + 8, columns 2(l%4) + {0, 1} and the same + 8."""
    simulation = _simulate("gemm_1024")
    first = simulation.fragments[0][:32]
    lane = np.arange(32)[:, None]
    row = lane // 4 + np.array([0, 0, 8, 8, 0, 0, 8, 8])
    col = 2 * (lane % 4) + np.array([0, 1, 0, 1, 8, 9, 8, 9])
    buffer = first >> 40  # the tag's global buffer number
    assert (buffer == buffer[0, 0]).all() and np.array_equal(first - (buffer << 40), row * 1024 + col)


# -- shared memory against the spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [TARGET, "rocm:gfx942"])
def test_the_largest_configs_fit_shared_memory(target):
    """The template's estimate bounds what the lowered kernel allocates, and the configs it takes fit the spec."""
    from test_cross_compile import _matmul_relu, fused, matmul_prim_func

    from xcomp.schedules import gpu

    backend = get_backend(target)
    template = gpu.get_template(matmul_prim_func(fused(_matmul_relu("float16", 512, 512, 512)))[1],
                                backend.schedule_context())
    configs = sorted(template.enumerate(), key=template.shared_bytes)
    assert template.default_knobs() in configs
    for knobs in configs[-4:] + [template.default_knobs()]:
        (kernel,) = backend.lower_device_kernels(template.schedule(knobs))
        allocated = shared_allocation(kernel)
        assert 0 < allocated <= template.shared_bytes(knobs) <= template.shared_limit(), knobs

