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


def test_concat_of_rotated_halves_then_reshape_in_a_loop_llvm_vectorizes():
    """A rotary-embedding subgraph fused into one injective group, scheduled without our vectors (so LLVM's own
    loop vectorizer takes the loop): on AVX-512 targets its 16-lane masked gathers gave values off by up to 1e21,
    which `+prefer-no-gather` avoids (docs/decisions/avx512-width.md)."""
    from onnx import TensorProto, helper, numpy_helper

    from xcomp.pipeline import compile_model

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
    (group,) = compile_model(model, progress=False).groups
    module = compile_model(model, progress=False, group_knobs={group.key: {"vector": 0, "parallel": True}})
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
