"""CPU schedule templates on small shapes: for every group of a model, the template's default config and a sample
of its knob space (random and enumerated) must compute what the unscheduled group computes, and the compiled
model (default configs) what onnxruntime computes.

Families: matmul (packed-weight GEMV and GEMM, runtime-operand batch matmul NN and NT, a scalar tile), conv
(plain, strided, padded, grouped, depthwise, batch-norm epilogue) and the generic template (pools, softmax,
reductions). Configs are applied with `Template.apply` and `finish`, not `schedule`, so a config that fails to
apply fails the test instead of falling back to the default.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xcomp
from conftest import assert_matches_ort, make_model

RTOL, ATOL = 1e-4, 1e-4


@pytest.fixture
def direct_convs(monkeypatch):
    """3x3 stride-1 convs stay direct convs (for tests of the direct template on shapes Winograd would take)."""
    from xcomp.schedules.cpu import winograd

    monkeypatch.setattr(winograd, "MIN_CHANNEL_VECTORS", 10**6)


@pytest.fixture(scope="module")
def backend():
    from xcomp.backends import get_backend

    return get_backend("cpu")


def _run(func, arrays, backend):
    """Every buffer of `func` after running it alone on copies of `arrays`."""
    import tvm

    target = backend.target()
    with target:
        executable = tvm.compile(func.with_attr("global_symbol", "main"), target=target)
    args = [tvm.runtime.tensor(a, backend.device()) for a in arrays]
    executable.mod["main"](*args)
    return [a.numpy() for a in args]


def _configs(template, samples: int, enumerated: int) -> list:
    """The default config, `samples` random ones and the first `enumerated` of the space, without repeats."""
    configs = [template.default_knobs()]
    configs += [template.sample(random.Random(seed)) for seed in range(samples)]
    configs += list(template.enumerate(enumerated))
    unique = []
    for knobs in configs:
        if knobs not in unique:
            unique.append(knobs)
    return unique


def check_configs(func, template, backend, samples=8, enumerated=4, extra=()):
    """Each config (and each of `extra`) applies, matches the unscheduled func on random data, and holds only
    knobs its template declares, with values of the declared types (the cost model's feature slots come from the
    declarations)."""
    from tvm import s_tir

    from xcomp.autotune.measure import func_params, random_args
    from xcomp.costmodel import knob_vector

    arrays = random_args(func_params(func), seed=0)
    reference = _run(func, arrays, backend)
    configs = _configs(template, samples, enumerated) + list(extra)
    declared = {knob.name: knob.type for knob in type(template).knobs}
    for knobs in configs:
        assert template.valid(knobs), knobs
        assert all(type(value) is declared[name] for name, value in knobs.items()), (knobs, declared)
        knob_vector(knobs)
        sch = s_tir.Schedule(func)
        template.apply(sch, knobs)
        for got, want in zip(_run(template.finish(sch.mod["main"]), arrays, backend), reference):
            if np.issubdtype(want.dtype, np.floating):
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=str(knobs))
    return configs


def _context(spec):
    """The schedule context a backend for this (possibly hand-varied) spec hands its templates."""
    from xcomp.backends import backend_for_spec

    return backend_for_spec(spec).schedule_context()


def _groups(module, kind):
    from xcomp.graph.partition import unique_groups

    return [rep for rep, _ in unique_groups(module.groups).values() if rep.kind == kind]


def _compile_and_check(model, inputs):
    """The model compiled with default configs matches onnxruntime; returns the module."""
    module = xcomp.compile(model, costmodel=False)
    assert_matches_ort(module, model, inputs, rtol=RTOL, atol=ATOL)
    return module


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _const(name, shape, seed):
    return numpy_helper.from_array(np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32), name)


def _inputs(**shapes):
    rng = np.random.default_rng(1)
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in shapes.items()}


# -- matmul --------------------------------------------------------------------------------------------------


def dense_model(x_shape, n, relu=True):
    """x @ W + b (relu): a constant weight, packed by our legalization when N allows a vector block."""
    k = x_shape[-1]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["hb"])]
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["hb"], ["y"]))
    return make_model(nodes, [_value("x", x_shape)], [_value("y", (*x_shape[:-1], n))],
                      [_const("W", (k, n), 2), _const("B", (n,), 3)])


@pytest.mark.parametrize(
    "x_shape,n,layout",
    [
        ((1, 64), 48, "packed"),  # GEMV
        ((1, 64), 40, "packed"),  # GEMV, N packed with a narrower vector block when the spec's does not divide it
        ((3, 32), 10, "nn"),  # N too narrow to pack: TVM's legalization, a scalar tile
        ((24, 32), 64, "packed"),  # GEMM
        ((2, 20, 32), 96, "packed"),  # GEMM with a batch dim, a partial last row tile
        ((1, 64), 67, "packed"),  # GEMV, no vector divides N: the weight padded to whole vectors, cropped
        ((2, 9, 32), 1001, "packed"),  # GEMM with an odd N, as a classifier's or a vocabulary's
    ],
    ids=["gemv", "gemv_narrow_pack", "scalar_tile", "gemm", "gemm_batched", "gemv_odd_n", "gemm_odd_n"],
)
def test_dense_matmul(x_shape, n, layout, backend):
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    model = dense_model(x_shape, n)
    module = _compile_and_check(model, _inputs(x=x_shape))
    (group,) = _groups(module, "matmul")
    template = MatmulTemplate(group.func, backend.schedule_context())
    assert template.layout == layout
    check_configs(group.func, template, backend)


@pytest.mark.parametrize("n", [1001, 64])
def test_symbolic_rows_with_any_n(n, backend):
    """A symbolic M (a sequence) with an N no vector divides: rows and columns padded, then cropped in one stage
    that the template folds into its write-back, as fast per FLOP as a whole number of vectors."""
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    model = dense_model(("S", 32), n)
    module = xcomp.compile(model)
    for rows in (1, 7):
        assert_matches_ort(module, model, _inputs(x=(rows, 32)), rtol=RTOL, atol=ATOL)
    (group,) = _groups(module, "matmul")
    assert MatmulTemplate(group.func, backend.schedule_context()).layout == "packed"
    assert module.info["schedules"][group.key]["source"] == "default"


def test_symbolic_columns_padded_to_whole_tiles_copy_in_vectors(backend):
    """Attention's scores over a KV cache (N = past + 1, symbolic): the operand copy padded to whole tiles has a
    symbolic length. Its rows stay a loop of their own inside the parallel ones, which LLVM vectorizes; fused
    with them, each element would compute its row by a division and run alone. (TVM's vectorizer runs a padding
    copy's lanes one at a time: its condition differs per lane.)"""
    from tvm import s_tir, tirx

    from xcomp.pipeline import schedule_group

    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"])]
    model = make_model(nodes, [_value("q", (2, 1, 64)), _value("kt", (2, 64, "n"))], [_value("s", (2, 1, "n"))])
    module = xcomp.compile(model)
    for n in (1, 37):
        assert_matches_ort(module, model, _inputs(q=(2, 1, 64), kt=(2, 64, n)), rtol=RTOL, atol=ATOL)
    (group,) = _groups(module, "matmul")
    func, choice = schedule_group(group, backend.schedule_context(), None)
    assert choice.source == "default"
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    copies = [b for b in blocks if sch.get(b).name_hint.endswith("_pad")
              and sch.get(b).name_hint.startswith(group.func.params[1].name)]
    assert copies  # a parallel and a serial one, chosen at run time by the length (schedules/cpu/guard.py)
    for copy in copies:
        *rows, columns = (sch.get(loop) for loop in sch.get_loops(copy))
        assert rows and columns.kind == tirx.ForKind.SERIAL
        assert "n" in {v.name for v in tirx.analysis.undefined_vars(columns.extent)}
        assert all(hasattr(row.extent, "value") for row in rows)  # the length is in no fused row loop


def _symbolic_scores_schedule(backend):
    """Q @ K^T over a symbolic batch and sequence, 4 heads of 8 (the encoder of tests/models), checked against
    onnxruntime where tiles are whole and where they are not: its scheduled PrimFunc."""
    from xcomp.pipeline import schedule_group

    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"])]
    shape = ("b", 4, "n", 8)
    model = make_model(nodes, [_value("q", shape), _value("k", shape)], [_value("s", ("b", 4, "n", "n"))])
    module = xcomp.compile(model)
    for b, n in ((1, 4), (2, 7), (3, 32), (1, 37)):  # tiles padded: none, partly, whole, several
        assert_matches_ort(module, model, _inputs(q=(b, 4, n, 8), k=(b, 4, n, 8)), rtol=RTOL, atol=ATOL)
    (group,) = _groups(module, "matmul")
    func, choice = schedule_group(group, backend.schedule_context(), None)
    assert choice.source == "default"
    return func


def test_scores_over_a_symbolic_sequence_copy_operands_head_by_head(backend):
    """Q @ K^T with heads and a symbolic sequence (the encoder of tests/models): the operands padded to whole
    tiles and K packed, head by head inside one parallel loop over batch and heads, before that head's tiles. As
    nests of their own, each copy was a parallel launch and each tile divided the fused index by the symbolic
    extents: GPT-2-sized scores (12 heads of 64) at a prompt of 128 took 304 -> 261 us a call."""
    from tvm import s_tir, tirx

    sch = s_tir.Schedule(_symbolic_scores_schedule(backend))
    packed = sch.get_sblock("else")  # the sequences of FEW_ROWS rows and more (the other runs K as it is)
    blocks = sch.get_child_blocks(packed)
    names = [sch.get(block).name_hint for block in blocks]
    assert any(name.endswith("_pad") for name in names) and len(names) >= 4, names
    outermost = [sch.get(sch.get_loops(block)[0]) for block in blocks]
    # copies, tiles and write-back all inside the one parallel loop
    assert all(loop.same_as(outermost[0]) for loop in outermost), names
    assert outermost[0].kind == tirx.ForKind.PARALLEL and str(outermost[0].extent) == "b * T.int64(4)"


def test_whole_tiles_write_back_unpredicated(backend):
    """A write-back cropped to a symbolic sequence tests every element's row and column, which left it scalar:
    tiles lying wholly inside the output take a copy of it without the test, in vectors (the encoder's scores,
    batch 8, sequence 32: 41 -> 16 us for both calls; specialized 15)."""
    script = _symbolic_scores_schedule(backend).script()
    lines = script.splitlines()
    write_backs = [n for n, line in enumerate(lines) if '"xcomp.whole_tiles"' in line]
    assert len(write_backs) == 2, "a whole-tile copy and the predicated one"
    predicated = []
    for n in write_backs:
        block = next(k for k in range(n, 0, -1) if "T.sblock(" in lines[k])
        predicated.append(any("T.where(" in line for line in lines[block:n]))
        loops = [line for line in lines[:block] if line.lstrip().startswith("for ")][-1:]
        assert "T.vectorized(" in loops[0]
    assert sorted(predicated) == [False, True]


def test_whole_row_tiles_accumulate_unpredicated(backend):
    """A static M that the tile's rows do not divide (ViT's 197 tokens) predicates the last row tile. Whole tiles
    take a copy of the tile whose accumulators' init and K loop have no predicate: with it in the K loop, LLVM
    left it there behind an erf write-back and ViT's 197-row GELU GEMM ran 35% slower than a 198-row one."""
    from xcomp.pipeline import schedule_group
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    rows, k, n = 13, 32, 64
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Erf", ["h"], ["y"])]
    model = make_model(nodes, [_value("x", (1, rows, k))], [_value("y", (1, rows, n))], [_const("W", (k, n), 2)])
    module = _compile_and_check(model, _inputs(x=(1, rows, k)))
    (group,) = _groups(module, "matmul")
    assert rows % MatmulTemplate(group.func, backend.schedule_context()).default_knobs()["mr"]
    func, choice = schedule_group(group, backend.schedule_context(), None)
    assert choice.source == "default"
    lines = func.script().splitlines()
    for block in ("matmul_init", "matmul_update"):
        starts = [n for n, line in enumerate(lines) if f'T.sblock("{block}")' in line]
        predicated = [any("T.where(" in line for line in lines[n:n + 6]) for n in starts]
        assert sorted(predicated) == [False, True], block


def test_batch_matmul_nn_and_nt(backend):
    """Attention's two products: scores = Q @ K^T (an einsum reading K as [b, j, d]: NT) and out = P @ V (NN)."""
    from xcomp.schedules import get_template

    nodes = [
        helper.make_node("Einsum", ["q", "k"], ["s"], equation="bid,bjd->bij"),
        helper.make_node("MatMul", ["s", "v"], ["y"]),
    ]
    shapes = {"q": (2, 12, 16), "k": (2, 20, 16), "v": (2, 20, 24)}
    model = make_model(nodes, [_value(n, s) for n, s in shapes.items()], [_value("y", (2, 12, 24))])
    module = _compile_and_check(model, _inputs(**shapes))
    layouts = []
    for group in _groups(module, "matmul"):
        template = get_template(group.func, backend.schedule_context())
        layouts.append(template.layout)
        configs = check_configs(group.func, template, backend)
        if template.layout == "nn":  # both sides of the pack knob were checked
            assert {c["pack_b"] for c in configs} == {True, False}
    assert sorted(layouts) == ["nn", "nt"]


@pytest.mark.parametrize("n", [197, 100])
def test_scores_over_a_length_no_vector_divides_use_full_vectors(n, backend):
    """Attention's scores over n tokens (ViT's 197, an odd 100): B's columns are padded to whole tiles of full
    vectors and the result cropped, as for a symbolic length; the widest vector dividing n (1 or 4 lanes) ran
    at a sixth to a half of the speed (197 tokens, one thread: 10 vs 69 GFLOP/s)."""
    from xcomp.schedules import get_template

    model = make_model([helper.make_node("MatMul", ["q", "k"], ["s"])], [_value("q", (2, n, 64)),
                                                                        _value("k", (2, 64, n))],
                       [_value("s", (2, n, n))])
    module = _compile_and_check(model, _inputs(q=(2, n, 64), k=(2, 64, n)))
    (group,) = _groups(module, "matmul")
    template = get_template(group.func, backend.schedule_context())
    assert template.columns_padded_here and template.lanes == backend.spec.simd_width
    check_configs(group.func, template, backend)


def _te_matmul(batch, m, n, k, transposed_b, lanes):
    """A fused func as FuseTIR writes it for permute_dims + matmul: a transpose block feeding the matmul (the
    template inlines it and reads B as [b, n, k]), and a packed-weight matmul + bias + relu with `lanes`."""
    from tvm import te

    from xcomp.schedules.cpu.legalize import packed_matmul

    a = te.placeholder((batch, m, k), name="A")
    if transposed_b:
        b = te.placeholder((batch, n, k), name="B")
        bt = te.compute((batch, k, n), lambda z, r, c: b[z, c, r], name="T_transpose")
        r = te.reduce_axis((0, k), "k")
        out = te.compute((batch, m, n), lambda z, i, j: te.sum(a[z, i, r] * bt[z, r, j], axis=r), name="matmul")
        return te.create_prim_func([a, b, out])
    packed = te.placeholder((n // lanes, k, lanes), name="P")
    bias = te.placeholder((n,), name="bias")
    mm = packed_matmul(a, packed)
    out = te.compute((batch, m, n), lambda z, i, j: te.max(mm[z, i, j] + bias[j], 0.0), name="T_add")
    return te.create_prim_func([a, packed, bias, out])


def _te_matmul_nn(m, n, k):
    """[m, k] x [k, n], B as it is: the layout of a weight too narrow to pack (N = 10)."""
    from tvm import te

    a, b = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), "k")
    return te.create_prim_func([a, b, te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r),
                                                 name="matmul")])


@pytest.mark.parametrize("halve_lanes", [False, True], ids=["spec_lanes", "half_lanes"])
def test_packed_matmul_any_vector_block(halve_lanes, backend):
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    lanes = backend.spec.simd_width // (2 if halve_lanes else 1)
    func = _te_matmul(2, 9, 4 * lanes, 24, transposed_b=False, lanes=lanes)
    template = MatmulTemplate(func, backend.schedule_context())
    assert (template.layout, template.lanes) == ("packed", lanes)
    check_configs(func, template, backend)


def _local_buffer_shapes(func) -> list:
    """Shapes of the local buffers a scheduled func's root block allocates (the register tiles)."""
    return [[int(d) for d in b.shape] for b in func.body.block.alloc_buffers if b.scope() == "local"]


def test_batch_rows_share_the_tiles_of_a_weight_they_share(backend):
    """A Linear over a batch of 2 x 9 rows with one packed weight tiles the 18 rows as one M. Tiles of 12 and 16
    rows span both entries and compute the same numbers, and the tile's accumulator is indexed by the flat row.
    A B of its own per entry (attention's) keeps the entries apart."""
    from tvm import s_tir

    from xcomp.schedules.cpu.matmul import MatmulTemplate

    lanes = backend.spec.simd_width
    func = _te_matmul(2, 9, 2 * lanes, 24, transposed_b=False, lanes=lanes)
    template = MatmulTemplate(func, backend.schedule_context())
    assert template.m == 18 and {12, 16} <= set(template.knob_space()["mr"])
    spanning = [{**template.default_knobs(), "mr": mr, "nr": 1} for mr in (12, 16)]
    check_configs(func, template, backend, extra=spanning)
    sch = s_tir.Schedule(func)
    template.apply(sch, spanning[0])
    assert _local_buffer_shapes(sch.mod["main"]) == [[18, 2 * lanes]]
    per_entry = MatmulTemplate(_te_matmul(2, 9, 2 * lanes, 24, transposed_b=True, lanes=0),
                               backend.schedule_context())
    assert per_entry.m == 9


def test_fused_transpose_reads_as_nt(backend):
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    func = _te_matmul(3, 10, 2 * backend.spec.simd_width, 12, transposed_b=True, lanes=0)
    template = MatmulTemplate(func, backend.schedule_context())
    assert template.layout == "nt"
    check_configs(func, template, backend)


@pytest.mark.slow
def test_matmul_whole_knob_space(backend):
    """Every valid config of a batched GEMM with a partial last row tile and a runtime NN operand."""
    from tvm import te

    from xcomp.schedules.cpu.matmul import MatmulTemplate

    lanes = backend.spec.simd_width
    a = te.placeholder((2, 13, 16), name="A")
    b = te.placeholder((2, 16, 6 * lanes), name="B")
    r = te.reduce_axis((0, 16), "k")
    out = te.compute((2, 13, 6 * lanes), lambda z, i, j: te.sum(a[z, i, r] * b[z, r, j], axis=r), name="matmul")
    func = te.create_prim_func([a, b, out])
    template = MatmulTemplate(func, backend.schedule_context())
    configs = check_configs(func, template, backend, samples=0, enumerated=None)
    assert len(configs) > 100


def test_matmul_default_tile_fits_the_registers(backend):
    """The default register tile: every accumulator, B vector and the A broadcast in the register file, and a
    GEMV spread over at least two panels per core; over scalar columns (a 10-class layer) the widest tile, 2
    tasks of 5 columns, ran 1.6x faster than 10 tasks of one (in-model, batch 1, Zen 4)."""
    import dataclasses

    from xcomp.schedules.cpu.matmul import MatmulTemplate

    spec = backend.spec
    lanes = spec.simd_width
    for registers in (16, 32):
        variant = dataclasses.replace(spec, vector_registers=registers)
        gemm = MatmulTemplate(_te_matmul(1, 256, 16 * lanes, 64, False, lanes), _context(variant)).default_knobs()
        assert gemm["mr"] * gemm["nr"] + gemm["nr"] + 1 <= registers
        assert gemm["mr"] * gemm["nr"] >= registers // 2, gemm  # not a needlessly small tile
        gemv = MatmulTemplate(_te_matmul(1, 1, 64 * lanes, 64, False, lanes), _context(variant)).default_knobs()
        assert gemv["mr"] == 1 and 64 // gemv["nr"] >= 2 * spec.cores, gemv
        scalar = MatmulTemplate(_te_matmul_nn(1, 10, 64), _context(variant)).default_knobs()
        assert (scalar["mr"], scalar["nr"]) == (1, 5), scalar


def test_matmul_default_unrolls_k_for_tiles_of_several_rows(backend):
    """A default tile of several rows unrolls its K loop by 4 where 4 divides K (LLVM left it rolled on an Intel
    host: vit_base ran 7% slower); a K 4 does not divide, and a GEMV's one-row tile, keep the loop as it is."""
    from xcomp.schedules.cpu.matmul import DEFAULT_UNROLL_K, MatmulTemplate

    lanes = backend.spec.simd_width

    def knobs(m, k):
        return MatmulTemplate(_te_matmul(1, m, 16 * lanes, k, False, lanes), backend.schedule_context()).default_knobs()

    assert knobs(128, 64)["unroll_k"] == DEFAULT_UNROLL_K == 4
    assert knobs(128, 66)["unroll_k"] == 1
    gemv = knobs(1, 64)
    assert (gemv["mr"], gemv["unroll_k"]) == (1, 1)


def test_matmul_default_tile_keeps_aliased_rows_of_a_within_the_l1_ways(backend):
    """A's rows 8192 floats apart (32 KiB, a multiple of a 32 KiB 8-way L1's 4 KiB set span) all map to one L1
    set: the default tile takes at most 8 of them (16 x 1 ran 2.1x slower than 8 x 1, Zen 4). 8000 floats apart
    they spread over the sets and 16 rows stay open; an L1 of unknown ways caps nothing."""
    import dataclasses

    from xcomp.schedules.cpu.matmul import MatmulTemplate

    lanes = 16
    spec = dataclasses.replace(backend.spec, simd_width=lanes, vector_registers=32,
                               cache_bytes=(32768, 1048576, 0), l1_ways=8)

    def tile(k, variant=spec):
        knobs = MatmulTemplate(_te_matmul(1, 128, 16 * lanes, k, False, lanes), _context(variant)).default_knobs()
        return knobs["mr"], knobs["nr"]

    assert tile(8192) == (8, 1)
    assert tile(8000) == (16, 1)  # the B panel keeps one vector in L2 (1 MiB): most rows then
    assert tile(8192, dataclasses.replace(spec, l1_ways=0)) == (16, 1)


# -- conv ----------------------------------------------------------------------------------------------------


def conv_model(c_in, c_out, size, kernel, stride=1, pad=0, group=1, batch_norm=False):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[kernel, kernel], strides=[stride] * 2,
                              pads=[pad] * 4, group=group)]
    inits = [_const("W", (c_out, c_in // group, kernel, kernel), 4), _const("B", (c_out,), 5)]
    if batch_norm:
        nodes.append(helper.make_node("BatchNormalization", ["c", "s", "o", "mu", "var"], ["n"]))
        inits += [_const("s", (c_out,), 6), _const("o", (c_out,), 7), _const("mu", (c_out,), 8),
                  numpy_helper.from_array(np.linspace(0.5, 2, c_out).astype(np.float32), "var")]
    nodes.append(helper.make_node("Relu", [nodes[-1].output[0]], ["y"]))
    out = (size + 2 * pad - kernel) // stride + 1
    return make_model(nodes, [_value("x", (1, c_in, size, size))], [_value("y", (1, c_out, out, out))], inits)


@pytest.mark.parametrize(
    "args",
    [
        dict(c_in=8, c_out=32, size=10, kernel=3),
        dict(c_in=8, c_out=32, size=11, kernel=3, stride=2, pad=1),
        dict(c_in=16, c_out=32, size=8, kernel=3, pad=1, group=2),
        dict(c_in=16, c_out=16, size=9, kernel=3, pad=1, group=16),
        dict(c_in=24, c_out=24, size=10, kernel=3, stride=2, pad=1, group=24),
        dict(c_in=16, c_out=16, size=32, kernel=3, pad=1, group=16),
        # channels no SIMD width divides: NCHW around the conv, the input copied into 4-channel vectors
        dict(c_in=20, c_out=20, size=32, kernel=3, pad=1, group=20),
        dict(c_in=4, c_out=32, size=7, kernel=1, batch_norm=True),
        # 6 channels per group cannot fill a vector: weights stay OIHW, pixels are vectorized instead
        dict(c_in=12, c_out=12, size=8, kernel=1, group=2),
        dict(c_in=12, c_out=18, size=9, kernel=3, pad=1, group=3),
        # 4 channels per group, 1x1: a 4-lane channel vector on a 7x7 map where SIMD is 4 or 8 lanes wide; on the
        # 8x8 map pixel vectors where it is 8 (64 pixels make 8 whole vectors) or 16 lanes wide
        dict(c_in=16, c_out=16, size=7, kernel=1, group=4),
        dict(c_in=16, c_out=16, size=8, kernel=1, group=4),
    ],
    ids=["plain", "strided_padded", "grouped", "depthwise", "depthwise_strided", "depthwise_wide",
         "depthwise_wide_nchw", "pointwise_batch_norm", "narrow_groups_pointwise", "narrow_groups",
         "quarter_vector_groups_small_map",
         "quarter_vector_groups"],
)
def test_conv(args, backend):
    from xcomp.schedules.cpu import get_template
    from xcomp.schedules.cpu.conv_depthwise import BlockedDepthwiseConvTemplate, DepthwiseConvTemplate
    from xcomp.schedules.cpu.conv_unpacked import UnpackedConvTemplate

    module = _compile_and_check(conv_model(**args), _inputs(x=(1, args["c_in"], args["size"], args["size"])))
    (group,) = _groups(module, "conv")
    template = get_template(group.func, backend.schedule_context())
    depthwise = args.get("group", 1) == args["c_in"] == args["c_out"]
    # channel vectors narrower than half the SIMD width (and than 4) are not worth packing a grouped conv for, nor
    # narrower than the SIMD width for a 1x1 conv on a map of lanes x lanes pixels or more
    groups, lanes = args.get("group", 1), backend.spec.simd_width
    pointwise_map = args["kernel"] == 1 and args["size"] ** 2 >= lanes * lanes
    minimum = (lanes if pointwise_map else max(4, lanes // 2)) if groups > 1 else 4
    narrow = not depthwise and math.gcd(args["c_out"] // groups, lanes) < minimum
    assert isinstance(template, UnpackedConvTemplate) == narrow, type(template)
    # whole vectors of channels: blocked (NCHW{V}c) in and out, as the convs around it (xcomp/graph/layout.py)
    blocked = depthwise and args["c_in"] % lanes == 0
    assert isinstance(template, BlockedDepthwiseConvTemplate) == blocked, type(template)
    assert isinstance(template, DepthwiseConvTemplate) == (depthwise and not blocked), type(template)
    if narrow:
        assert template.fused_pixels == (args["kernel"] == 1)
    extra = []
    if depthwise:  # the input is copied into channel vectors first
        from tvm import s_tir

        from xcomp.schedules.analysis import DEPTHWISE_INPUT, root_blocks, with_role

        assert template.pad_name == with_role(root_blocks(s_tir.Schedule(group.func)), DEPTHWISE_INPUT).name
    if blocked:  # already in channel vectors: the default tests the padding at each read instead of copying
        assert template.default_knobs()["pad"] == "inline"
        assert {"stage", "inline"} <= set(template.knob_space()["pad"])
    elif depthwise:
        # both tiles: channel vectors, and pixel vectors along rows of the copy made NCHW again (the default at
        # stride 1 when a row holds a whole SIMD vector)
        wide = args.get("stride", 1) == 1 and args["size"] >= backend.spec.simd_width
        assert template.default_knobs()["vectorize"] == ("columns" if wide else "channels")
        columns = [k for k in template.enumerate() if k["vectorize"] == "columns"]
        assert columns and all(k["ow_block"] == 1 for k in columns)
        extra = random.Random(0).sample(columns, 4)
    check_configs(group.func, template, backend, samples=6, enumerated=3, extra=extra)


@pytest.mark.parametrize("gate", [helper.make_node("HardSigmoid", ["e"], ["gate"], alpha=1 / 6, beta=0.5),
                                  helper.make_node("Sigmoid", ["e"], ["gate"])], ids=["hardsigmoid", "sigmoid"])
def test_conv_whose_epilogue_broadcasts_scales_the_map_in_a_loop_of_its_own(gate, backend):
    """mobilenet_v3's and efficientnet's squeeze-excite: a 1x1 conv on a pooled [1, C, 1, 1] vector whose
    epilogue (a gate, then scaling a feature map) writes the whole map. The map is scaled in a parallel loop nest
    of its own after the conv: at the conv's register tile the epilogue would be the whole map, unrolled as a
    tile's write-back is, more statements than LLVM compiles in reasonable time on a real model. A costly gate
    (sigmoid's exponential and division) is computed once per channel, at the tile, not once per element of the
    map. Every config of the space does so and computes the right values."""
    from tvm import s_tir, tirx

    from xcomp.schedules.cpu import get_template
    from xcomp.schedules.cpu.common import is_costly

    nodes = [helper.make_node("Conv", ["g", "W", "B"], ["e"], kernel_shape=[1, 1]), gate,
             helper.make_node("Mul", ["m", "gate"], ["y"])]
    model = make_model(nodes, [_value("g", (1, 16, 1, 1)), _value("m", (1, 32, 12, 12))],
                       [_value("y", (1, 32, 12, 12))], [_const("W", (32, 16, 1, 1), 1), _const("B", (32,), 2)])
    module = _compile_and_check(model, _inputs(g=(1, 16, 1, 1), m=(1, 32, 12, 12)))
    (group,) = _groups(module, "conv")
    template = get_template(group.func, backend.schedule_context())
    for knobs in check_configs(group.func, template, backend, samples=6, enumerated=3):
        sch = s_tir.Schedule(group.func)
        template.apply(sch, knobs)
        (scale,) = sch.get_output_blocks(sch.get_sblock("root"))
        loops = [sch.get(loop) for loop in sch.get_loops(scale)]
        conv_outer = sch.get(sch.get_loops(sch.get_sblock(template.conv_name + "_update"))[0])
        assert not loops[0].same_as(conv_outer), knobs  # not nested in the conv's loops
        assert tirx.ForKind.UNROLLED not in [loop.kind for loop in loops], knobs
        assert not is_costly(sch.get(scale).body.value), knobs


def test_conv_default_tile_sustains_the_highest_fma_rate(backend, direct_convs):
    """On 16 registers the blocked conv's default tile is the one the core sustains most FMAs per cycle with, not
    the one with most FMAs: 1 x 14 (a weight vector and 14 input broadcasts per 14 FMAs) is load-bound and ran a
    256-channel 14x14 conv 1.8x slower than 2 x 2 x 2."""
    import dataclasses

    from xcomp.schedules.cpu.common import tile_fma_rate
    from xcomp.schedules.cpu.conv import channel_tile_rate
    from xcomp.schedules.cpu.conv_blocked import BlockedConvTemplate

    spec = backend.spec  # 2 FMA pipes, 2 load ports, 4 cycles FMA latency, as on every x86 core here
    assert tile_fma_rate(spec, 14, 15) == pytest.approx(14 / 7.5)  # 15 loads on 2 ports
    assert tile_fma_rate(spec, 8, 6) == pytest.approx(2.0)  # FMA-bound: both pipes busy
    assert tile_fma_rate(spec, 4, 5) == pytest.approx(1.0)  # latency-bound: 4 accumulators, 4 cycles each
    lanes = backend.spec.simd_width
    module = xcomp.compile(conv_model(c_in=4 * lanes, c_out=4 * lanes, size=14, kernel=3, pad=1))
    (group,) = _groups(module, "conv")
    spec = dataclasses.replace(backend.spec, vector_registers=16)
    template = BlockedConvTemplate(group.func, _context(spec))
    assert template.blocked_input

    def rate(knobs):
        weight_bytes = knobs["co_block"] * template.reduce_volume * lanes * 4
        return channel_tile_rate(spec, knobs["co_block"], knobs["oh_block"] * knobs["ow_block"], weight_bytes)

    default = template.default_knobs()
    assert template.valid(default)
    assert rate(default) == pytest.approx(max(rate(k) for k in template.enumerate())), default
    assert default["co_block"] > 1, default


def _zen5_like(spec):
    """`spec` as a Zen 5 core: 64-byte vectors, 32 registers, two load ports and FMA pipes, 48 KiB L1, 1 MiB L2."""
    import dataclasses

    return dataclasses.replace(spec, vector_bytes=64, simd_width=16, vector_registers=32, load_ports=2, fma_pipes=2,
                               fma_latency=4, cache_bytes=(48 * 1024, 1024 * 1024, 32 << 20))


def test_conv_tile_waits_on_weights_from_the_l2_by_bytes(backend):
    """Weights beyond the L1 come from the L2 at about 32 bytes a cycle: one AVX2 vector, half an AVX-512 one. On
    Zen 5 (64-byte vectors) light_bvlc_alexnet's 256-channel 26x26 5x5 conv took 1.21 ms with 4 channel vectors x
    2 pixels (4 weight vectors per 8 FMAs) and 0.86 ms with 4 x 2 x 2; the model 8.64 -> 8.14 ms."""
    import dataclasses

    from xcomp.schedules.cpu.conv import channel_tile, channel_tile_rate

    avx512 = _zen5_like(backend.spec)
    avx2 = dataclasses.replace(avx512, vector_bytes=32, simd_width=8)
    in_l2 = 4 * 1200 * 16 * 4  # four channel vectors' weights over a 48-channel 5x5 reduction: past the L1
    assert channel_tile_rate(avx512, 4, 2, in_l2) == pytest.approx(1.0)  # 4 weight vectors, 2 cycles each
    assert channel_tile_rate(avx512, 4, 4, in_l2) == pytest.approx(2.0)
    assert channel_tile_rate(avx2, 4, 2, in_l2) == pytest.approx(2.0)  # a 32-byte vector a cycle keeps up
    assert channel_tile_rate(avx512, 4, 2, 32 * 1024) == pytest.approx(2.0)  # weights in the L1: the load ports
    rate, (co_block, oh_block, ow_block) = channel_tile(avx512, 16, 16, 26, 26, 1200, False, 25)
    assert rate == pytest.approx(2.0) and oh_block * ow_block >= 4, (co_block, oh_block, ow_block)


def test_one_by_one_conv_tiles_keep_half_the_registers(backend):
    """A 1x1 conv on blocked data keeps its tile's accumulators to half the vector registers, as convs on NCHW
    data do; a 3x3 one may fill them. On Zen 5 mobilenet_v2's 576 -> 96-channel 1x1 conv took 0.104 ms with
    2 x 14 (28 accumulators) and 0.048 with 2 x 7; the model ran 2.58 -> 2.31 ms, efficientnet_b0 3.49 -> 3.38."""
    from xcomp.schedules.cpu.conv import channel_tile

    spec = _zen5_like(backend.spec)

    def accumulators(taps):
        co_block, oh_block, ow_block = channel_tile(spec, 16, 6, 14, 14, 576 * taps, True, taps)[1]
        return co_block * oh_block * ow_block

    assert accumulators(1) <= 16
    assert accumulators(9) > 16


def test_conv_reads_a_large_input_once_where_all_weights_fit_half_the_l2(backend):
    """A channel tile re-reads the whole input (co_outer), a row of tiles every weight (oh_outer). A 1x1 conv
    whose input outgrows half the L2 and whose weights fit in half of it runs rows outermost: on Zen 5
    light_resnet50 ran 18.7 -> 17.0 ms. Where the input fits, or the weights do not, channel tiles stay outermost."""
    import dataclasses

    from xcomp.schedules.cpu.conv_blocked import BlockedConvTemplate

    lanes = backend.spec.simd_width
    c_in, c_out, size = 16 * lanes, 8 * lanes, 28
    module = xcomp.compile(conv_model(c_in=c_in, c_out=c_out, size=size, kernel=1))
    (group,) = _groups(module, "conv")
    data, weights = c_in * size * size * 4, c_in * c_out * 4

    def default_order(l2):
        spec = dataclasses.replace(backend.spec, cache_bytes=(48 * 1024, l2, 32 * 1024 * 1024))
        template = BlockedConvTemplate(group.func, _context(spec))
        knobs = template.default_knobs()
        assert template.blocked_input and c_out // lanes > knobs["co_block"], knobs
        return knobs["order"]

    assert default_order(data) == "oh_outer"  # weights <= data / 2 < data
    assert default_order(4 * data) == "co_outer"  # the input fits half the L2
    assert default_order(weights) == "co_outer"  # the weights do not


def test_conv_rows_are_padded_to_columns_the_tiles_divide(backend):
    """On 16 registers a 13-column row leaves only 1 x 13 (spills) or narrow tiles: the conv is computed over 14
    columns with a 4 x 2 tile and cropped; rows whose own tiles are as good (56 columns, or 7 where the weights
    allow one channel vector only) stay as they are."""
    import dataclasses

    from xcomp.schedules.cpu.conv import channel_tile, padded_width

    spec = dataclasses.replace(backend.spec, simd_width=8, vector_bytes=32, vector_registers=16,
                               cache_bytes=(32768, 524288, None))
    assert padded_width(spec, 8, co_blocks=16, rows=13, width=13, reduce_volume=128 * 9, blocked_input=True) == 14
    assert channel_tile(spec, 8, 16, 13, 14, 128 * 9, True)[1] == (4, 1, 2)
    assert padded_width(spec, 8, co_blocks=16, rows=27, width=27, reduce_volume=128 * 9, blocked_input=True) == 28
    assert padded_width(spec, 8, co_blocks=16, rows=56, width=56, reduce_volume=128 * 9, blocked_input=True) == 56
    # 512 channels x 3 x 3 of weights: one channel vector fits half the L2, and 1 x 8 would not fit the registers
    assert padded_width(spec, 8, co_blocks=64, rows=7, width=7, reduce_volume=512 * 9, blocked_input=True) == 7
    # a 1008-channel 1x1 classifier: 7 channel vectors x 1 pixel would stream 112 KB of weights from L2 per FMA
    assert padded_width(spec, 8, co_blocks=126, rows=13, width=13, reduce_volume=512, blocked_input=True) == 15
    assert channel_tile(spec, 8, 126, 13, 15, 512, True)[1] == (2, 1, 5)


def test_conv_weights_beyond_a_quarter_of_l2_run_in_input_channel_passes(backend):
    """vgg19's 512-channel 3x3 convs (147 KB of weights per channel vector, 8 lanes): passes of input channels
    whose weights fit half the L1, which also opens the 2 x 4 tile (27 -> 21-22.5 ms on 28x28); 256 channels
    (74 KB) stay one pass."""
    import dataclasses

    from xcomp.schedules.cpu.conv import channel_tile, ci_chunk

    spec = dataclasses.replace(backend.spec, simd_width=8, vector_bytes=32, vector_registers=16,
                               cache_bytes=(32768, 524288, None))
    assert ci_chunk(spec, 8, co_block=1, ci_blocks=64, taps=9) == 4  # 4 x 2304 B <= 16 KB < 8 x 2304 B
    assert ci_chunk(spec, 8, co_block=2, ci_blocks=64, taps=9) == 2
    assert ci_chunk(spec, 8, co_block=1, ci_blocks=32, taps=9) == 0
    assert channel_tile(spec, 8, 64, 28, 28, 512 * 9, True, taps=9)[1] == (2, 1, 4)
    assert channel_tile(spec, 8, 64, 28, 28, 512 * 9, True)[1] == (1, 1, 7)  # one pass: weights from beyond L1


def test_conv_in_input_channel_passes_matches_onnxruntime(backend, monkeypatch, direct_convs):
    """Partial sums carried across passes, then the epilogue: forced to passes of 2 input vectors, a blocked conv
    (with bias, relu and a residual add) matches, and so do sampled configs of any pass size."""
    from xcomp.schedules.cpu import conv, conv_blocked

    for owner in (conv, conv_blocked):  # the default tile's size and its ci_chunk knob
        monkeypatch.setattr(owner, "ci_chunk", lambda spec, lanes, co_block, ci_blocks, taps: 2)
    channels, size = 4 * backend.spec.simd_width, 10
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["a", "W2", "B"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Add", ["r", "a"], ["y"])]
    inits = [_const("W1", (channels, channels, 1, 1), 1), _const("W2", (channels, channels, 3, 3), 2),
             _const("B", (channels,), 3)]
    model = make_model(nodes, [_value("x", (1, channels, size, size))], [_value("y", (1, channels, size, size))],
                       inits)
    module = _compile_and_check(model, _inputs(x=(1, channels, size, size)))
    (group,) = [g for g in _groups(module, "conv") if "3x3" in g.signature]
    template = conv_blocked.BlockedConvTemplate(group.func, backend.schedule_context())
    assert template.blocked_input and template.default_knobs()["ci_chunk"] == 2
    assert template.knob_space()["ci_chunk"] == [0, 1, 2]
    check_configs(group.func, template, backend, samples=6, enumerated=2)


def test_blocked_conv_default_unrolls_the_input_vector_loop_by_4(backend, direct_convs):
    """The loop over an input vector's channels, innermost of a blocked conv's reduction, is unrolled by 4 in the
    default (LLVM left it rolled for rocketlake and znver4: resnet50 ran 4% slower on an Intel host); a config
    without the knob, as records from before it hold, keeps it rolled; every unroll matches; an NCHW stem has no
    such loop."""
    from tvm import s_tir, tirx

    from xcomp.schedules.cpu.conv_blocked import DEFAULT_UNROLL_CI, BlockedConvTemplate

    lanes = backend.spec.simd_width
    module = xcomp.compile(conv_model(c_in=2 * lanes, c_out=2 * lanes, size=8, kernel=3, pad=1))
    (group,) = _groups(module, "conv")
    template = BlockedConvTemplate(group.func, backend.schedule_context())
    default = template.default_knobs()
    assert template.blocked_input and default["unroll_ci"] == DEFAULT_UNROLL_CI == 4

    def reduction_loops(knobs):
        """(extent, unrolled) of the conv update's loops outside the tile's rows, columns, vectors and lanes."""
        sch = s_tir.Schedule(group.func)
        template.apply(sch, knobs)
        loops = [sch.get(rv) for rv in sch.get_loops(sch.get_sblock(template.conv_name + "_update"))]
        return [(int(loop.extent), loop.kind == tirx.ForKind.UNROLLED) for loop in loops[:-4]]

    assert reduction_loops(default)[-2:] == [(lanes // 4, False), (4, True)]
    rolled = {name: value for name, value in default.items() if name != "unroll_ci"}
    assert reduction_loops(rolled)[-1] == (lanes, False)
    check_configs(group.func, template, backend, samples=0, enumerated=0,
                  extra=[{**default, "unroll_ci": u} for u in template.knob_space()["unroll_ci"]] + [rolled])

    stem = xcomp.compile(conv_model(c_in=3, c_out=2 * lanes, size=8, kernel=3, pad=1))
    (stem_group,) = _groups(stem, "conv")
    stem_template = BlockedConvTemplate(stem_group.func, backend.schedule_context())
    assert not stem_template.blocked_input and "unroll_ci" not in stem_template.default_knobs()


def test_conv_prefetches_each_line_of_the_next_channel_tile_once(backend, direct_convs):
    """A 7x7 conv walking channel tiles prefetches, during each tile's later rows, every cache line of the weights
    of the tile after it, each once (the prefetches recorded instead of issued, on both cores), nothing of the
    first tile and nothing past the last; where memory feeds even few pixels' arithmetic fast enough (HBM
    bandwidth), or a config walks rows outermost, it does not prefetch."""
    import dataclasses

    from xcomp.schedules.cpu.conv_blocked import BlockedConvTemplate

    lanes = backend.spec.simd_width
    module = xcomp.compile(conv_model(c_in=2 * lanes, c_out=4 * lanes, size=7, kernel=3, pad=1))
    (group,) = _groups(module, "conv")
    spec = _streaming_spec(backend.spec)
    template = BlockedConvTemplate(group.func, _context(spec))
    knobs = {**template.default_knobs(), "co_block": 1, "oh_block": 1, "order": "co_outer"}
    assert _prefetches(template, template.default_knobs()) and _prefetches(template, knobs)
    assert not _prefetches(template, {**knobs, "order": "oh_outer"})
    assert not _prefetches(BlockedConvTemplate(group.func, _context(dataclasses.replace(spec, mem_bandwidth=2000e9))),
                           knobs)

    # 4 channel tiles of one vector (co_block 1)
    _assert_later_tiles_prefetched_once(_prefetches_per_line(group.func, template, knobs, backend), tiles=4)


def test_matmul_prefetches_each_line_of_the_next_weight_panel_once(backend):
    """A Linear of few rows walking column panels of its packed weight prefetches, during each panel's later row
    tiles, every cache line of the panel after it, each once, nothing of the first; it matches onnxruntime with
    and without. Rows outermost, a K of no whole prefetch step, or HBM bandwidth: no prefetch."""
    import dataclasses

    from xcomp.schedules.cpu.matmul import MatmulTemplate

    lanes = backend.spec.simd_width
    model = dense_model((32, 64), 8 * lanes)
    module = _compile_and_check(model, _inputs(x=(32, 64)))
    (group,) = _groups(module, "matmul")
    spec = _streaming_spec(backend.spec)
    template = MatmulTemplate(group.func, _context(spec))
    knobs = {**template.default_knobs(), "mr": 4, "nr": 2, "order": "n_outer"}
    assert _prefetches(template, template.default_knobs()) and _prefetches(template, knobs)
    assert not _prefetches(template, {**knobs, "order": "m_outer"})
    assert not _prefetches(MatmulTemplate(group.func, _context(dataclasses.replace(spec, mem_bandwidth=2000e9))),
                           knobs)
    check_configs(group.func, template, backend, samples=4, enumerated=2, extra=[knobs])

    # 8 vectors of columns in panels of 2
    _assert_later_tiles_prefetched_once(_prefetches_per_line(group.func, template, knobs, backend), tiles=4)

    (group,) = _groups(xcomp.compile(dense_model((32, 40), 8 * lanes)), "matmul")
    assert not _prefetches(MatmulTemplate(group.func, _context(spec)), knobs)


def test_matmul_over_symbolic_rows_prefetches_where_its_row_tiles_pay(backend):
    """A Linear over a symbolic sequence (a prompt) prefetches as a static one does: during each panel's later
    row tiles, every line of the next panel once. Where its rows are more than prefetch.pays allows, at run
    time, it prefetches nothing. It matches onnxruntime."""
    from xcomp.schedules.cpu import prefetch
    from xcomp.schedules.cpu.matmul import MatmulTemplate

    lanes = backend.spec.simd_width
    model = dense_model(("seq", 64), 8 * lanes)
    module = _compile_and_check(model, _inputs(x=(30, 64)))
    group = next(g for g in _groups(module, "matmul") if g.symbols)
    spec = _streaming_spec(backend.spec)
    template = MatmulTemplate(group.func, _context(spec))
    knobs = {**template.default_knobs(), "mr": 4, "nr": 2, "order": "n_outer"}
    assert template.m is None and _prefetches(template, knobs)
    rows_that_pay = prefetch.most_uses(spec)
    _assert_later_tiles_prefetched_once(_prefetches_per_line(group.func, template, knobs, backend, rows=32),
                                        tiles=4)
    assert _prefetches_per_line(group.func, template, knobs, backend, rows=rows_that_pay + 4).sum() == 0


def _streaming_spec(spec):
    """`spec` with a peak and a memory bandwidth under which streaming weights pays for a prefetch."""
    import dataclasses

    return dataclasses.replace(spec, peak_flops={"float32": 300e9}, mem_bandwidth=20e9)


def _assert_later_tiles_prefetched_once(counts, tiles: int) -> None:
    """Prefetches per cache line of a weight in `tiles` equal tiles: none of the first, each later line once."""
    tile_lines = len(counts) // tiles
    assert counts[:tile_lines].sum() == 0
    assert (counts[tile_lines:] == 1).all(), np.unique(counts[tile_lines:], return_counts=True)


def _prefetches(template, knobs) -> bool:
    """Does the finished schedule prefetch? (Its marks are gone either way.)"""
    script = template.schedule(knobs).script()
    assert "xcomp.prefetch" not in script
    return "T.prefetch" in script


def _annotations(stmt, key) -> list:
    """The values of loop annotation `key` in a statement tree."""
    from tvm.tirx import For, SeqStmt

    found = [stmt.annotations[key]] if isinstance(stmt, For) and key in stmt.annotations else []
    children = list(stmt.seq) if isinstance(stmt, SeqStmt) else []
    children += [getattr(stmt, name) for name in ("body", "block", "then_case", "else_case")
                 if getattr(stmt, name, None) is not None]
    return found + [value for child in children for value in _annotations(child, key)]


def _prefetches_per_line(func, template, knobs, backend, rows=None):
    """How often `func` scheduled with `knobs` prefetches each cache line of the weight its plan names in one
    run: the prefetches recorded instead of issued, on every core. `rows`: the value of a symbolic row count
    (a func's one symbolic dim), bound after scheduling."""
    from tvm import s_tir, tirx

    from xcomp.autotune.measure import func_params, random_args
    from xcomp.schedules.cpu import prefetch

    sch = s_tir.Schedule(func)
    template.apply(sch, knobs)
    marked = sch.mod["main"]
    (plan,) = _annotations(marked.body, prefetch.STEP)
    weight = next(p for p in marked.params if p.name == str(plan["weight"]))
    per_line = prefetch.LINE_BYTES // 4
    lines = math.prod(int(d) for d in weight.shape) // per_line
    log = tirx.decl_buffer((lines,), "int32", name="log")

    def record(flat, index):  # count the prefetches of each line instead of issuing them
        return tirx.BufferStore(log, log[index // per_line] + 1, [index // per_line])

    recorded = prefetch.insert(marked, emit=record)
    recording = tirx.PrimFunc(list(recorded.params) + [log], recorded.body, attrs=recorded.attrs)
    params = func_params(func) if rows is None else [  # the symbolic dim is bound by the arrays' shapes at the call
        (tuple(rows if isinstance(d, tirx.Var) else int(d) for d in p.shape), str(p.dtype)) for p in func.params]
    return _run(recording, random_args(params, 0) + [np.zeros(lines, np.int32)], backend)[-1]


@pytest.mark.parametrize("shape", [dict(size=13, kernel=3, pad=1), dict(size=25, kernel=3, stride=2, pad=1),
                                   dict(size=7, kernel=1)], ids=["3x3", "strided", "pointwise"])
def test_padded_conv_columns_match_onnxruntime(shape, backend, monkeypatch, direct_convs):
    """Whatever width the policy picks, extra columns (each repeating the last real one) are cropped: forced to
    three more, a conv with its epilogue and a bare conv whose output is the cropped block still match."""
    from xcomp.schedules.cpu import conv
    from xcomp.schedules.cpu.conv_blocked import BlockedConvTemplate

    monkeypatch.setattr(conv, "padded_width", lambda spec, lanes, co_blocks, rows, width, *rest: width + 3)
    channels = 2 * backend.spec.simd_width
    module = _compile_and_check(conv_model(channels, channels, **shape), _inputs(x=(1, channels, shape["size"],
                                                                                     shape["size"])))
    (group,) = _groups(module, "conv")
    template = BlockedConvTemplate(group.func, backend.schedule_context())
    out = (shape["size"] + 2 * shape.get("pad", 0) - shape["kernel"]) // shape.get("stride", 1) + 1
    assert template.out_w == out + 3
    check_configs(group.func, template, backend, samples=4, enumerated=2)

    # a bare conv feeding another: the first group's output is the crop itself
    size = shape["size"]
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["c", "W2", "B"], ["y"], kernel_shape=[1, 1])]
    inits = [_const("W1", (channels, channels, 1, 1), 1), _const("W2", (channels, channels, 1, 1), 2),
             _const("B", (channels,), 3)]
    model = make_model(nodes, [_value("x", (1, channels, size, size))], [_value("y", (1, channels, size, size))],
                       inits)
    _compile_and_check(model, _inputs(x=(1, channels, size, size)))


# -- Winograd ------------------------------------------------------------------------------------------------


def test_winograd_matrices_compute_a_correlation():
    """At [(G g) * (Bt d)] of F(4, 3) is the 3-tap correlation of a 6-sample input, in 1-D and (transform_weight's
    G g Gt on a blocked weight) in 2-D."""
    from xcomp.schedules.cpu.winograd import matrices, transform_weight

    rng = np.random.default_rng(0)
    a, b, g = matrices(4)
    d, k = rng.standard_normal(6), rng.standard_normal(3)
    np.testing.assert_allclose(a.T @ ((g @ k) * (b.T @ d)), np.correlate(d, k, "valid"), rtol=1e-12, atol=1e-12)
    lanes = 2
    weight = rng.standard_normal((1, 1, 3, 3, lanes, lanes)).astype(np.float32)  # [K/V, C/V, 3, 3, V(c), V(k)]
    u = transform_weight(weight, 4)  # [6, 6, K/V, C, V(k)]
    tile = rng.standard_normal((lanes, 6, 6))  # per input channel
    for c in range(lanes):
        for kk in range(lanes):
            want = np.array([[np.sum(tile[c, y:y + 3, x:x + 3] * weight[0, 0, :, :, c, kk]) for x in range(4)]
                             for y in range(4)])
            got = a.T @ (u[:, :, 0, c, kk] * (b.T @ tile[c] @ b)) @ a
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def residual_conv_model(channels, size, pads, batch=1):
    """relu(conv3x3(x) + bias) + x: the epilogue of a resnet block's second conv."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=pads),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    shape = (batch, channels, size, size)
    return make_model(nodes, [_value("x", shape)], [_value("y", shape)],
                      [_const("W", (channels, channels, 3, 3), 4), _const("B", (channels,), 5)])


@pytest.mark.parametrize("size,pads", [(8, [1] * 4), (10, [1] * 4), (13, [1] * 4), (12, [0, 1, 2, 1])],
                         ids=["whole_tiles", "tiles_padded", "odd", "asymmetric_pads"])
def test_winograd_conv(size, pads, backend):
    """3x3 stride-1 convs with enough channels run as Winograd F(4x4, 3x3): every sampled config matches the
    unscheduled group, the compiled model matches onnxruntime, and the group states the direct conv's FLOPs."""
    from xcomp.schedules.cpu import get_template
    from xcomp.schedules.cpu.winograd import WinogradTemplate

    channels = 4 * backend.spec.simd_width
    out = size + pads[0] + pads[2] - 2  # every case pads rows and columns alike, as the residual add needs
    model = residual_conv_model(channels, size, pads)
    module = _compile_and_check(model, _inputs(x=(1, channels, size, size)))
    (group,) = _groups(module, "conv")
    assert "winograd" in group.name
    assert group.flops == 2 * 9 * channels * channels * out * out + 3 * channels * out * out  # conv, bias/relu/add
    template = get_template(group.func, backend.schedule_context())
    assert isinstance(template, WinogradTemplate)
    configs = check_configs(group.func, template, backend, samples=6, enumerated=4)
    assert len(configs) > 2


def test_winograd_gemm_prefetches_each_line_of_the_next_channel_tile_once(backend):
    """The Winograd GEMM walking (eps, nu, channel tile) slabs prefetches, over all passes of each, every cache
    line of the slab after it, each once, nothing of the first and nothing past the last; where the hardware
    feeds an image's few tiles fast enough, it does not prefetch."""
    import dataclasses

    from xcomp.schedules.cpu.winograd import WinogradTemplate

    channels = 4 * backend.spec.simd_width
    module = xcomp.compile(residual_conv_model(channels, 12, [1] * 4))
    (group,) = _groups(module, "conv")
    spec = dataclasses.replace(backend.spec, peak_flops={"float32": 300e9}, mem_bandwidth=20e9)
    template = WinogradTemplate(group.func, _context(spec))
    knobs = {"tile_block": 4, "co_block": 2}  # 9 tiles of 4x4 padded to 12: 3 passes per slab
    assert template.valid(knobs) and _prefetches(template, knobs)
    fast_memory = dataclasses.replace(spec, mem_bandwidth=2000e9)
    assert not _prefetches(WinogradTemplate(group.func, _context(fast_memory)), knobs)

    counts = _prefetches_per_line(group.func, template, knobs, backend)
    slab_lines = 2 * channels * backend.spec.simd_width * 4 // 64  # co_block vectors x input channels
    assert counts[:slab_lines].sum() == 0
    assert (counts[slab_lines:] == 1).all(), np.unique(counts[slab_lines:], return_counts=True)
    check_configs(group.func, template, backend, samples=0, enumerated=0,
                  extra=[knobs, {"tile_block": 12, "co_block": 1}])


def test_winograd_conv_with_a_symbolic_batch(backend):
    """The batch stays a loop of its own: a module compiled for any batch serves 1 and 3."""
    channels = 4 * backend.spec.simd_width
    model = residual_conv_model(channels, 8, [1] * 4, batch="N")
    module = xcomp.compile(model)
    (group,) = _groups(module, "conv")
    assert "winograd" in group.name and group.symbols == ("N",)
    for batch in (1, 3):
        assert_matches_ort(module, model, _inputs(x=(batch, channels, 8, 8)), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", ["cpu:skylake-avx512", "cpu:aarch64-linux-gnu"])
def test_winograd_cross_compiles(target):
    """16 lanes and 32 registers (AVX-512), 4 lanes (NEON): the template's own default schedules the group (not
    a fallback) and the module builds; it cannot run here."""
    from xcomp.backends import get_backend

    lanes = get_backend(target).spec.simd_width
    module = xcomp.compile(residual_conv_model(4 * lanes, 12, [1] * 4), target=target, progress=False)
    (group,) = _groups(module, "conv")
    assert "winograd" in group.name
    assert module.info["schedules"][group.key]["source"] == "default"


@pytest.mark.parametrize("shape", [dict(c_in=16, c_out=16, size=10, kernel=3, pad=1),
                                   dict(c_in=32, c_out=32, size=7, kernel=3, pad=1),
                                   dict(c_in=32, c_out=32, size=12, kernel=3, stride=2, pad=1)],
                         ids=["few_channels", "small_image", "strided"])
def test_convs_winograd_does_not_pay_for_stay_direct(shape, backend):
    """Fewer than 4 channel vectors, an output under 8x8, a stride: the direct conv template."""
    from xcomp.schedules.cpu import get_template
    from xcomp.schedules.cpu.conv import DirectConvTemplate

    lanes = backend.spec.simd_width
    shape = {**shape, "c_in": shape["c_in"] * lanes // 8, "c_out": shape["c_out"] * lanes // 8}
    module = xcomp.compile(conv_model(**shape))
    (group,) = _groups(module, "conv")
    assert "winograd" not in group.name
    assert isinstance(get_template(group.func, backend.schedule_context()), DirectConvTemplate)


# -- the generic template ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "node,kind",
    [
        (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), "pool"),
        (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), "pool"),
        (helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1), "reduction"),
    ],
    ids=["maxpool", "avgpool", "reduce_mean"],
)
def test_generic_template(node, kind, backend):
    from xcomp.schedules import get_template
    from xcomp.schedules.cpu import GenericTemplate

    x_shape = (1, 8, 12, 16)
    out = {"MaxPool": (1, 8, 6, 8), "AveragePool": (1, 8, 6, 8), "ReduceMean": (1, 8, 1, 1)}.get(node.op_type,
                                                                                               x_shape)
    model = make_model([node], [_value("x", x_shape)], [_value("y", out)], opset=17)
    module = _compile_and_check(model, _inputs(x=x_shape))
    (group,) = _groups(module, kind)
    template = get_template(group.func, backend.schedule_context())
    assert isinstance(template, GenericTemplate)
    configs = check_configs(group.func, template, backend, samples=2, enumerated=6)
    assert len(configs) == template.space_size()  # the whole (small) space


@pytest.mark.parametrize("op", ["LayerNormalization", "ReduceMean"])
def test_a_reduction_along_the_contiguous_axis_sums_in_vector_lanes(op, backend):
    """A row reduced along its contiguous axis: partial sums in vector lanes (an rfactor), rows in parallel.
    Vectorized across rows instead, each lane gathers one element per row and the reduction runs on one core
    (layer norm over 128 x 768 took 4.0 ms that way, 0.04 ms so)."""
    from xcomp.pipeline import schedule_group

    x_shape = (64, 48)
    inits = []
    if op == "LayerNormalization":
        node = helper.make_node(op, ["x", "s", "b"], ["y"], axis=-1)
        inits = [_const("s", (48,), 2), _const("b", (48,), 3)]
        out = x_shape
    else:
        node, out = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=1), (64, 1)
    model = make_model([node], [_value("x", x_shape)], [_value("y", out)], inits, opset=17)
    module = _compile_and_check(model, _inputs(x=x_shape))
    assert module.info["notes"] == []
    (group,) = _groups(module, "reduction")
    scheduled = schedule_group(group, backend.schedule_context(), None)[0].script()
    assert "_rf" in scheduled and "T.vectorized" in scheduled and "T.parallel" in scheduled


@pytest.mark.parametrize("length", [197, "n"])
def test_softmax_rows_of_any_length_reduce_in_vector_lanes(length, backend):
    """A softmax row of no whole number of vectors (ViT's 197 tokens, a symbolic length): its maximum and sum
    are taken in 16 lane partials plus the row's tail, so the partials vectorize; one reduction over the row ran
    element by element (whisper's 1500-token softmax: 0.2 GFLOP/s)."""
    from tvm import s_tir, tirx

    from xcomp.pipeline import schedule_group
    from xcomp.schedules.analysis import ROLE, ROW_PARTIALS

    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_value("x", (6, length))],
                       [_value("y", (6, length))], opset=17)
    module = xcomp.compile(model)
    for n in ((197,) if length == 197 else (1, 16, 37)):
        assert_matches_ort(module, model, _inputs(x=(6, n)), rtol=RTOL, atol=ATOL)
    (group,) = _groups(module, "reduction")
    sch = s_tir.Schedule(schedule_group(group, backend.schedule_context(), None)[0])
    partials = [b for b in sch.get_child_blocks(sch.get_sblock("root"))
                if sch.get(b).annotations.get(ROLE) == ROW_PARTIALS]
    names = {sch.get(b).name_hint for b in partials}
    assert any("max" in n for n in names) and any("sum" in n for n in names)
    for block in partials:
        assert sch.get(sch.get_loops(block)[-1]).kind == tirx.ForKind.VECTORIZED


@pytest.mark.parametrize("op,columns", [("Softmax", 48), ("Softmax", 197), ("LogSoftmax", 200)])
def test_softmax_runs_each_row_start_to_end_in_one_parallel_loop(op, columns, backend):
    """Every stage of a softmax row (its maximum, exponentials, sum and quotients) inside one parallel loop over
    the rows, so the row stays in cache between them; run stage by stage, each stage was a pass over the whole
    tensor (whisper's 54 MB of attention scores: 17.3 -> 9.3 ms). The exponentials and quotients run whole
    vectors and then the row's tail."""
    from xcomp.pipeline import schedule_group
    from xcomp.schedules import get_template
    from xcomp.schedules.cpu.rows import RowTemplate

    model = make_model([helper.make_node(op, ["x"], ["y"], axis=-1)], [_value("x", (3, 40, columns))],
                       [_value("y", (3, 40, columns))], opset=17)
    module = _compile_and_check(model, _inputs(x=(3, 40, columns)))
    (group,) = _groups(module, "reduction")
    template = get_template(group.func, backend.schedule_context())
    assert isinstance(template, RowTemplate)
    script = schedule_group(group, backend.schedule_context(), None)[0].script()
    top_loops = [line for line in script.splitlines() if line.startswith("    for ")]  # the func body's loops
    assert len(top_loops) == 1 and top_loops[0].endswith(" in T.parallel(T.int64(120)):"), top_loops
    assert script.count("T.vectorized") >= 4  # max and sum partials, exponentials, quotients


def test_softmax_rows_of_symbolic_count_and_length_run_start_to_end_too(backend):
    """Rows a batch and a sequence count, of a length the sequence sets (attention over a symbolic sequence, a
    decode step's scores over its KV cache): every stage of a row in one row loop, the exponentials and quotients
    as whole vectors and then the row's tail, however long the row turns out. The batch and heads run in
    parallel and the sequence's rows inside them, so a row's index needs no division by the symbolic extents:
    with one per row, the encoder's softmax over 32-long rows took 43 us a call at batch 8 against 15 us
    specialized. Scheduled stage by stage, it took 190 us."""
    import re

    from xcomp.pipeline import schedule_group
    from xcomp.schedules import get_template
    from xcomp.schedules.cpu.rows import RowTemplate

    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_value("x", ("b", 4, "n", "n"))],
                       [_value("y", ("b", 4, "n", "n"))], opset=17)
    module = xcomp.compile(model)
    for shape in ((1, 4, 1, 1), (2, 4, 16, 16), (3, 4, 37, 37), (1, 4, 70, 70)):
        assert_matches_ort(module, model, _inputs(x=shape), rtol=RTOL, atol=ATOL)
    (group,) = _groups(module, "reduction")
    assert isinstance(get_template(group.func, backend.schedule_context()), RowTemplate)
    script = schedule_group(group, backend.schedule_context(), None)[0].script()
    top_loops = [line.strip() for line in script.splitlines() if re.match(r"( {4}| {8})for ", line)]
    assert top_loops == ["for i0_i1_fused in T.parallel(b * T.int64(4)):", "for i2 in range(n):"], top_loops
    assert not re.search(r"(//|%) \(?n\b", script), "a division by the symbolic extents"
    assert script.count("T.vectorized") >= 4  # max and sum partials, exponentials, quotients


@pytest.mark.parametrize("shape", [(3, 40, 197), ("b", 4, "n", "n")], ids=["static", "symbolic"])
def test_softmax_rows_prefetch_the_next_row_while_computing_exponentials(shape, backend):
    """Each vector step of a row's exponentials prefetches the line at its columns in the next row of the input
    and of the output, so the next row's first pass finds them in cache: without, it waited on memory line by
    line (whisper's 1x6x1500x1500 scores: 11.4 -> 6.9 ms). The last row prefetches nothing."""
    import re

    from xcomp.pipeline import schedule_group

    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_value("x", shape)],
                       [_value("y", shape)], opset=17)
    module = xcomp.compile(model)
    concrete = (3, 40, 197) if shape[-1] == 197 else (2, 4, 37, 37)
    assert_matches_ort(module, model, _inputs(x=concrete), rtol=RTOL, atol=ATOL)
    (group,) = _groups(module, "reduction")
    script = schedule_group(group, backend.schedule_context(), None)[0].script()
    fetch = re.compile(r"T\.prefetch\(T\.address_of\((\w+)_rows\[\((.+) \+ T\.int64\(1\)\) \* (\S+) \+ (\w+) \* "
                       r"T\.int64\((\d+)\)\]\)")
    lines = script.splitlines()
    found = [(n, fetch.search(line)) for n, line in enumerate(lines) if "T.prefetch" in line]
    assert found and all(match for _, match in found), found
    for n, match in found:
        buffer, row, length, step, lanes = match.groups()
        assert length == ("T.int64(197)" if shape[-1] == 197 else "n") and int(lanes) == backend.spec.simd_width
        loops, indent = [], _indent(lines[n])  # the loops around the prefetch, innermost first
        for line in reversed(lines[:n]):
            if _indent(line) < indent:
                indent = _indent(line)
                if line.lstrip().startswith("for "):
                    loops.append(line.split()[1])
        # one line per vector step; the row's index from the loops around it, the rows'
        assert loops[0] == step and set(loops[1:]) == set(re.findall(r"\b[a-z]\w*", row)) - {"n", "int64"}
        guard = next(line for line in reversed(lines[:n]) if line.lstrip().startswith("if "))
        assert f"{row} + T.int64(1) < " in guard  # not past the last row
        block = next(line for line in lines[n:] if "T.sblock(" in line)
        assert '"T_softmax_exp' in block  # the step's vector computes exponentials
    assert {match.group(1) for _, match in found} == {"x", "T_softmax_norm"}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def test_a_row_of_no_whole_number_of_vectors_stays_a_loop_inside_the_parallel_rows(backend):
    """An element-wise group over rows of 197: the rows run in parallel and each row is a plain loop that LLVM
    vectorizes; fused into one parallel loop, every element computed its row by a division."""
    from tvm import s_tir, tirx

    from xcomp.pipeline import schedule_group

    model = make_model([helper.make_node("Sigmoid", ["x"], ["y"])], [_value("x", (64, 197))],
                       [_value("y", (64, 197))], opset=17)
    module = _compile_and_check(model, _inputs(x=(64, 197)))
    (group,) = _groups(module, "injective")
    sch = s_tir.Schedule(schedule_group(group, backend.schedule_context(), None)[0])
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    rows, row = (sch.get(loop) for loop in sch.get_loops(block))
    assert rows.kind == tirx.ForKind.PARALLEL and int(rows.extent) == 64
    assert row.kind == tirx.ForKind.SERIAL and int(row.extent) == 197
