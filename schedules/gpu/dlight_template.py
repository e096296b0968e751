"""A template over TVM's dlight GPU rules: the first rule that accepts the function schedules it.

Knobs exist only where dlight really lets us vary something: the SIMT matmul rule's tile config (`Matmul.Config`):
threads per block, per-thread tile, k step, vector width, unroll; limits come from the spec (warp/wavefront size,
max threads, shared memory per block). Tensor cores are the matrix-core template's job (matrix_core.py), so dlight
is told never to tensorize (its own rule would use WMMA on CUDA only, with fixed tiles).
GEMV, reduction and fallback rules have no knobs: they size themselves from the target, which is built from the
spec. The rules return a new Schedule; `apply` replays its trace onto the schedule it is given.
"""

from __future__ import annotations

from ..template import Declined, Knob, Knobs, Template

# dlight's own CUDA/ROCm matmul config, the default
_DEFAULT_TILES = {"block_x": 8, "block_y": 16, "micro_x": 4, "micro_y": 4, "micro_k": 16, "vector": 2,
                  "unroll": 256}
_TILE_SPACE = {"block_x": [8, 16, 32], "block_y": [4, 8, 16, 32], "micro_x": [2, 4, 8], "micro_y": [2, 4, 8],
               "micro_k": [8, 16], "vector": [1, 2, 4], "unroll": [0, 64, 256]}
_NO_TENSORIZE = "dlight.do_not_tensorize"


def _rules(tiles: Knobs):
    """dlight's default GPU rules in ApplyDefaultSchedule order, the matmul rule using `tiles`."""
    from tvm.s_tir import dlight as dl

    class TiledMatmul(dl.gpu.Matmul):
        def get_configs(self, target):  # noqa: ARG002 - the tiles replace dlight's per-target table
            return dl.gpu.Matmul.Config(
                block_size_x=tiles["block_x"], block_size_y=tiles["block_y"], micro_size_x=tiles["micro_x"],
                micro_size_y=tiles["micro_y"], micro_size_k=tiles["micro_k"], vector_size=tiles["vector"],
                unroll=tiles["unroll"], use_shared=True, storage_align=True, inner_x=False,
            )

    return [("matmul", TiledMatmul()), ("gemv", dl.gpu.GEMV()), ("reduction", _reduction_rule()),
            ("reduction", dl.gpu.GeneralReduction()), ("injective", dl.gpu.Fallback())]


def _reduction_rule():
    """dlight's Reduction rule with its element-wise epilogue fixed where the reduced values cross threads.

    With the spatial loops innermost and several of them per thread (`unroll_spatial_factor`), the rule writes
    the reduced values in its own loop order (a grouped 1x1 conv: a pixel per thread, its 34 channels in turn)
    and splits the epilogue's loops in their natural order (channels outermost), so an epilogue thread reads
    values another thread wrote; dlight keeps them thread-local all the same, and the epilogue reads garbage
    (shufflenet's 14x14 grouped 1x1 conv + bias on an H200: wrong logits). Shared memory makes them visible to
    the whole block; TVM inserts the barrier before the epilogue reads them.
    """
    from tvm.s_tir import dlight as dl
    from tvm.s_tir.dlight.analysis import is_broadcast_epilogue

    class Reduction(dl.gpu.Reduction):
        # the rule's own step for this layout (a private method of the pinned TVM 0.27), then the fix
        def _sch_inner_spatial(self, sch, target, block, s_factor, unroll_spatial_factor, epilogue_info,
                               loop_order, s_split_index):
            super()._sch_inner_spatial(sch, target, block, s_factor, unroll_spatial_factor, epilogue_info,
                                       loop_order, s_split_index)
            if (unroll_spatial_factor and epilogue_info is not None
                    and not is_broadcast_epilogue(sch, block, epilogue_info.block_rv)):
                sch.set_scope(block, 0, "shared")

    return Reduction()


class DlightTemplate(Template):
    knobs = (Knob("block_x", int, 0, "threads of a block along the output columns"),
             Knob("block_y", int, 1, "threads of a block along the output rows"),
             Knob("micro_x", int, 8, "output columns per thread"),
             Knob("micro_y", int, 9, "output rows per thread"),
             Knob("micro_k", int, 7, "K steps per shared-memory tile"),
             Knob("vector", int, 22, "elements per vector load"),
             Knob("unroll", int, 19, "auto-unroll limit (0: none)"))

    def __init__(self, func, ctx):
        super().__init__(func, ctx)
        self.target = ctx.target
        self.kind, _ = self._run(_DEFAULT_TILES)

    def _run(self, tiles):
        """(kind of the rule that fired, its Schedule)."""
        func = self.func.with_attr(_NO_TENSORIZE, True)
        with self.target:
            for kind, rule in _rules(tiles):
                scheduled = rule.apply(func, self.target, False)
                if scheduled is not None:
                    return kind, scheduled
        raise Declined("no dlight rule accepts this function")

    def knob_space(self) -> dict[str, list]:
        return dict(_TILE_SPACE) if self.kind == "matmul" else {}

    def default_knobs(self) -> Knobs:
        return dict(_DEFAULT_TILES) if self.kind == "matmul" else {}

    def valid(self, knobs: Knobs) -> bool:
        if self.kind != "matmul":
            return True
        tiles = {k: knobs[k] for k in _DEFAULT_TILES}
        threads = tiles["block_x"] * tiles["block_y"]
        elem = self._widest_element_bytes()
        shared = (tiles["block_x"] * tiles["micro_x"] + tiles["block_y"] * tiles["micro_y"]) * tiles["micro_k"] * elem
        return (
            threads <= self.spec.max_threads_per_block
            and threads % self.spec.simd_width == 0
            and shared <= self.spec.shared_mem_per_block
            and tiles["micro_y"] % tiles["vector"] == 0
        )

    def _widest_element_bytes(self) -> int:
        import tvm

        return max((tvm.DataType(str(p.dtype)).bits + 7) // 8 for p in self.func.params if hasattr(p, "shape"))

    def apply(self, sch, knobs: Knobs) -> None:
        tiles = {k: knobs.get(k, v) for k, v in _DEFAULT_TILES.items()}
        _, scheduled = self._run(tiles)
        scheduled.trace.apply_to_schedule(sch, remove_postproc=False)
