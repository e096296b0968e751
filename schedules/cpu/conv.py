"""Direct NCHW conv2d with a register-blocked accumulator tile, its epilogue (bias / batch norm / residual /
relu) fused into the tile's write-back.

Packed weights ([O/V, I, KH, KW, V], see legalize.py): the tile is `ow_block` output columns x `co_block`
vectors of V output channels. Per (ci, kh, kw) it loads co_block weight vectors, broadcasts ow_block inputs and
does co_block * ow_block FMAs into accumulators that stay in registers.
Unpacked weights (depthwise, grouped convs whose groups are too narrow to pack): the tile is a vector of output
columns of one channel, weights broadcast.
"""

from __future__ import annotations

from ..analysis import main_reduction, root_blocks
from .common import (CpuTemplate, divisors, inline_injective, is_pure_copy, parallelize, schedule_spatial,
                     tile_epilogue)



def accumulator_budget(spec) -> tuple:
    """(default, most) accumulator vectors in a register tile. Default: half the vector registers (measured with 32
    registers: 14-vector tiles ran 1.5-2x faster than 28-vector ones, whose unrolled write-back spills); the tuner
    may try up to all registers but two (a weight vector and a broadcast input)."""
    registers = spec.vector_registers or 16
    return registers // 2, registers - 2


class ConvTemplate(CpuTemplate):
    kind = "conv"

    def __init__(self, func, spec):
        from tvm import s_tir

        super().__init__(func, spec)
        sch = s_tir.Schedule(func)
        infos = root_blocks(sch)
        main = main_reduction(infos)
        if len(main.extents) != 7:
            raise ValueError("conv template expects (n, co, oh, ow, ci, kh, kw) iteration")
        self.conv_name = main.name
        _, self.out_channels, self.out_h, self.out_w = main.extents[:4]
        self.reduce_volume = main.extents[4] * main.extents[5] * main.extents[6]  # ci * kh * kw
        weights = [r.source for r in main.block.reads if len(r.source.shape) == 5]
        self.lanes = int(weights[0].shape[-1]) if weights else 0  # 0: weights not packed
        producers = {sch.get(rv).name_hint for rv in sch.get_producers(main.rv)}
        # a real padding stage (a zero-width one is a copy and gets inlined)
        self.pad_name = next((b.name for b in infos if b.name in producers and not b.is_reduction
                              and not is_pure_copy(b)), None)

    # -- knobs ---------------------------------------------------------------------------------------------

    def knob_space(self):
        # oh_block stacks output rows in the tile: the way to a full register tile when rows are short (7, 13, 14)
        oh_blocks = divisors(self.out_h, 4)
        if self.lanes:
            space = {
                "co_block": divisors(self.out_channels // self.lanes, 8),
                "oh_block": oh_blocks,
                "ow_block": divisors(self.out_w, 16),
                "order": ["co_outer", "oh_outer"],
                "unroll_kw": [True, False],
            }
        else:
            space = {"oh_block": oh_blocks, "ow_block": divisors(self.out_w, 8 * self.spec.simd_width),
                     "unroll_kw": [True, False]}
        if self.pad_name:
            space["pad"] = ["stage", "inline"]
        return space

    def valid(self, knobs):
        rows = knobs.get("oh_block", 1)
        if self.lanes:
            return knobs["co_block"] * rows * knobs["ow_block"] <= accumulator_budget(self.spec)[1]
        return rows * knobs["ow_block"] <= 8 * self.spec.simd_width

    def default_knobs(self):
        knobs = {"unroll_kw": True, "oh_block": 1}
        if self.pad_name:
            knobs["pad"] = "stage"
        if not self.lanes:
            knobs["ow_block"] = max(divisors(self.out_w, 4 * self.spec.simd_width))
            return knobs
        # The weights of one channel tile are re-read for every column tile: keep them in half the L1 (measured on
        # resnet50's 3x3 convs: 4 channel vectors streaming from L2 ran at 92 GFLOP/s, 2 fitting L1 at 122).
        l1 = self.spec.cache_bytes[0] or 32 * 1024
        tile_bytes = self.reduce_volume * self.lanes * 4
        fits = [cb for cb in divisors(self.out_channels // self.lanes, 8) if cb == 1 or cb * tile_bytes <= l1 // 2]
        budget = accumulator_budget(self.spec)[0]
        best = max(
            ((cb, rows, ob) for cb in fits for rows in divisors(self.out_h, 4) for ob in divisors(self.out_w, 16)
             if cb * rows * ob <= budget),
            # most FMAs per tile, then fewest loads per FMA, then single rows (contiguous input reads)
            key=lambda t: (t[0] * t[1] * t[2], -(t[0] + t[1] * t[2]), -t[1]),
        )
        knobs["co_block"], knobs["oh_block"], knobs["ow_block"] = best
        # a channel tile's weights stay in L1 across all its rows (oh_outer measured slower on every resnet50 conv)
        knobs["order"] = "co_outer"
        return knobs

    # -- schedule ------------------------------------------------------------------------------------------

    def apply(self, sch, knobs):
        keep = (self.pad_name,) if knobs.get("pad") == "stage" else ()
        inline_injective(sch, keep=keep)
        conv = sch.get_sblock(self.conv_name)
        epilogue = tile_epilogue(sch, conv)
        if self.lanes:
            # accumulator vectors run over output channels: make them the innermost (contiguous) axis, or LLVM
            # gathers every accumulator from a strided tile on each FMA instead of keeping it in a register
            lanes = self.lanes
            sch.transform_layout(conv, ("write", 0), lambda n, c, h, w: (n, c // lanes, h, w, c % lanes))
        n, co, oh, ow, ci, kh, kw = sch.get_loops(conv)
        oho, ohi = sch.split(oh, [None, knobs.get("oh_block", 1)])
        owo, owi = sch.split(ow, [None, knobs["ow_block"]])
        if self.lanes:
            coo, cob, cov = sch.split(co, [None, knobs["co_block"], self.lanes])
            outer = [n, coo, oho] if knobs["order"] == "co_outer" else [n, oho, coo]
            sch.reorder(*outer, owo, ci, kh, kw, cob, ohi, owi, cov)
            for loop in (cob, ohi, owi):
                sch.unroll(loop)
            sch.vectorize(cov)
        else:
            outer = [n, co, oho]
            sch.reorder(*outer, owo, ci, kh, kw, ohi, owi)
            sch.unroll(ohi)
            sch.vectorize(owi)
        if knobs["unroll_kw"]:
            sch.unroll(kw)
        sch.reverse_compute_at(epilogue, owo)
        # the write-back runs once per tile: unrolled, LLVM keeps the accumulators in registers
        for loop in sch.get_loops(epilogue)[len(outer) + 1:]:
            sch.unroll(loop)
        parallelize(sch, outer, self.spec.cores)
        if keep:
            schedule_spatial(sch, sch.get_sblock(self.pad_name), self.spec.simd_width, self.spec.cores)
        sch.decompose_reduction(conv, ci)


__all__ = ["ConvTemplate"]
