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
