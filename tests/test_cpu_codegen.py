"""What the CPU backend's build does to a kernel beyond TVM's defaults."""

from __future__ import annotations

import numpy as np
import pytest

from xcomp.backends import get_backend
from xcomp.backends.cpu.stack_buffers import MAX_STACK_BUFFER


def _tiled_matmul(rows: int):
    """c = a @ b (64x64 @ 64x512), each parallel iteration accumulating `rows` rows in a local tile."""
    from tvm import s_tir, te

    a = te.placeholder((64, 64), name="a")
    b = te.placeholder((64, 512), name="b")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 512), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    block = sch.get_sblock("c")
    outer, _ = sch.split(sch.get_loops(block)[0], [None, rows])
    sch.parallel(outer)
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), outer)
    return sch.mod["main"].with_attr("global_symbol", "main")


@pytest.mark.parametrize("rows", [1, 16])
def test_tiles_of_a_parallel_loop_live_on_the_stack_and_large_buffers_in_the_pool(rows):
    import tvm

    tile_bytes = rows * 512 * 4  # 2 KiB: above TVM's 1 KiB stack limit; 32 KiB: above ours
    executable = get_backend("cpu").compile(_tiled_matmul(rows))
    uses_pool = "TVMBackendAllocWorkspace" in executable.mod.inspect_source("ll")
    assert uses_pool == (tile_bytes > MAX_STACK_BUFFER)
    rng = np.random.default_rng(rows)
    a, b = rng.standard_normal((64, 64), "float32"), rng.standard_normal((64, 512), "float32")
    dev = tvm.cpu()
    c = tvm.runtime.tensor(np.zeros((64, 512), "float32"), dev)
    executable.mod["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-4)  # each thread has a tile of its own


def _rotary_model():
    """A rotary-embedding subgraph that fuses into one injective group: rows of 8 split into halves of 4, each
    row rotated by its position's cos and sin, the halves concatenated back along the innermost axis.
    Returns (model, input, expected output)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x, cos, sin = (rng.random(shape, np.float32) for shape in ((2, 3, 32), (2, 3, 1, 4), (2, 3, 1, 4)))
    nodes = [helper.make_node("Reshape", ["x", "split_shape"], ["r"]),
             helper.make_node("Slice", ["r", "zero", "four", "last"], ["x1"]),
             helper.make_node("Slice", ["r", "four", "eight", "last"], ["x2"]),
             helper.make_node("Mul", ["cos", "x1"], ["a"]), helper.make_node("Mul", ["sin", "x2"], ["b"]),
             helper.make_node("Sub", ["a", "b"], ["real"]),
             helper.make_node("Mul", ["sin", "x1"], ["c"]), helper.make_node("Mul", ["cos", "x2"], ["d"]),
             helper.make_node("Add", ["c", "d"], ["imag"]),
             helper.make_node("Concat", ["real", "imag"], ["both"], axis=3),
             helper.make_node("Reshape", ["both", "shape"], ["y"])]
    constants = {"split_shape": np.array([2, 3, 4, 8]), "zero": np.array([0]), "four": np.array([4]),
                 "eight": np.array([8]), "last": np.array([3]), "shape": np.array([2, 3, 32])}
    graph = helper.make_graph(
        nodes, "rotary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 32])],
        [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin"),
         *(numpy_helper.from_array(v.astype(np.int64), name) for name, v in constants.items())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    halves = x.reshape(2, 3, 4, 8)
    x1, x2 = halves[..., :4], halves[..., 4:]
    want = np.concatenate([cos * x1 - sin * x2, sin * x1 + cos * x2], axis=3).reshape(2, 3, 32)
    return model, x, want


@pytest.mark.parametrize("knobs", [None, {"vector": 0, "parallel": True}, {"vector": 2, "parallel": True}],
                         ids=["default", "no-vectors", "two-vectors"])
def test_concat_of_rotated_halves_then_reshape_matches_numpy(knobs):
    """On AVX-512 hosts this group gave values off by up to 1e21: LLVM's own vectorizer miscompiled the loop of
    one vector's length that TVM's failed vectorization left, and its masked gathers (docs/decisions/
    avx512-width.md). The default now leaves the loop whole; `+prefer-no-gather` covers LLVM's gathers."""
    from xcomp.pipeline import compile_model

    model, x, want = _rotary_model()
    (group,) = compile_model(model, progress=False).groups
    module = compile_model(model, progress=False, group_knobs=knobs and {group.key: knobs})
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_generic_schedule_vectorizes_no_loop_whose_elements_take_different_branches():
    """A concat along the innermost axis picks its input per element: the generic schedule must not split that
    loop into vectors (TVM would run them one element at a time), while a concat along an outer axis, whose
    branch is the same for a whole row, is vectorized as before."""
    from onnx import TensorProto, helper

    from xcomp.backends import get_backend
    from xcomp.frontends import load_onnx
    from xcomp.graph.partition import partition
    from xcomp.pipeline import schedule_group

    def vectorized_loops(model):
        backend = get_backend("cpu")
        _, (group,) = partition(load_onnx(model, None, None).mod, backend.spec, [])
        func, _ = schedule_group(group, backend.schedule_context(), None)
        return func.script().count("T.vectorized(")

    def concat(axis):
        shape = [4, 64]
        out = [4 * (2 if axis == 0 else 1), 64 * (2 if axis == 1 else 1)]
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("a", "b")]
        graph = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["y"], axis=axis)], "concat", inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    assert vectorized_loops(_rotary_model()[0]) == 0
    assert vectorized_loops(concat(axis=1)) == 0
    assert vectorized_loops(concat(axis=0)) == 1


def _rows_rotated_by_halves(trip: int, period: int):
    """out[r, i] for rows r of `trip` elements made of segments of `period`: the first half of a segment reads
    one pair of per-row tables, the second half the other, looped as a split of 16-element loops: the loop
    TVM leaves when it cannot vectorize a concat (the shape LLVM 22 miscompiled with gathers)."""
    from tvm.script import tirx as T

    half, rows = period // 2, 6
    n = rows * trip

    @T.prim_func
    def main(x: T.Buffer((n,), "float32"), c: T.Buffer((rows * half,), "float32"),
             s: T.Buffer((rows * half,), "float32"), out: T.Buffer((n,), "float32")):
        T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
        for r, h, i in T.grid(rows, trip // 16, 16):
            out[r * trip + h * 16 + i] = T.if_then_else(
                half <= i % period,
                s[r * half + i % period - half] * x[r * trip + h * 16 + i - half]
                + c[r * half + i % period - half] * x[r * trip + h * 16 + i],
                c[r * half + i % period] * x[r * trip + h * 16 + i]
                - s[r * half + i % period] * x[(r * trip + h * 16 + i + half) % n])

    return main


@pytest.mark.parametrize("target", ["cpu", "cpu:skylake"])
@pytest.mark.parametrize("period", [4, 8])
def test_llvm_vectorizer_output_is_right_for_per_element_branches(target, period):
    """With gathers allowed, LLVM 22 gave wrong values for this loop on skylake (4-element segments) and on
    AVX-512 hosts with 512-bit vectors (4 and 8): every x86 target carries `+prefer-no-gather`."""
    import tvm

    rng = np.random.default_rng(period)
    trip, half = 32, period // 2
    x = rng.random(6 * trip, np.float32)
    c, s = rng.random(6 * half, np.float32), rng.random(6 * half, np.float32)
    segment = np.arange(trip) % period
    row = np.arange(6)[:, None] * half
    xs = x.reshape(6, trip)
    first = segment < half
    idx = row + np.where(first, segment, segment - half)
    partner = np.roll(x, -half).reshape(6, trip)
    want = np.where(first, c[idx] * xs - s[idx] * partner, s[idx] * np.roll(x, half).reshape(6, trip) + c[idx] * xs)
    executable = get_backend(target).compile(_rows_rotated_by_halves(trip, period))
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(6 * trip, np.float32), dev)
    executable.mod["main"](*(tvm.runtime.tensor(v, dev) for v in (x, c, s)), out)
    np.testing.assert_allclose(out.numpy().reshape(6, trip), want, rtol=1e-5, atol=1e-5)
