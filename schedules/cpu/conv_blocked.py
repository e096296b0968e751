"""The conv writing blocked channels (NCHW{V}c, legalize.blocked_conv2d), from blocked data or, in a stem, from
NCHW data: the channel-vector tile of conv.py, and on blocked data passes over the input channels (ci_chunk)."""

from __future__ import annotations

from ..template import Knob
from .common import divisors
from .conv import CI_CHUNK, ChannelTileConv, ci_chunk

UNROLL_CI = Knob("unroll_ci", int, 30, "steps of the input channel vector's loop unrolled in the tile")
# LLVM leaves the 16-step loop over an input vector's channels rolled for some CPUs (rocketlake) and unrolls it
# for others; unrolled by 4 in the schedule it is one loop body everywhere (docs/decisions/matmul-unroll-k.md)
DEFAULT_UNROLL_CI = 4


class BlockedConvTemplate(ChannelTileConv):
    form = "blocked"
    knobs = (*ChannelTileConv.knobs, CI_CHUNK, UNROLL_CI)
    iteration = ("n", "co/V", "oh", "ow", "V", "ci", "kh", "kw")

    def _read_shape(self, main, infos):  # noqa: ARG002 - its shape is all in the conv's iteration
        _, blocks, self.out_h, self.out_w, self.lanes = main.extents[:5]
        self.out_channels = blocks * self.lanes
        # on blocked data the weight is [O/V, I/V, KH, KW, V, V]; on NCHW data [O/V, I, KH, KW, V]
        self.blocked_input = any(len(r.source.shape) == 6 for r in main.block.reads)
        self.weight_rank = 6 if self.blocked_input else 5
        self.ci_blocks = main.extents[-3] // self.lanes  # input-channel vectors, for ci_chunk
        # input-channel passes need blocked data and more than one input vector to split
        self.has_passes = self.blocked_input and self.ci_blocks > 1

    def _tile_space(self):
        space = super()._tile_space()
        if self.has_passes:  # vectors per input-channel pass
            space["ci_chunk"] = [0] + divisors(self.ci_blocks, min(64, self.ci_blocks - 1))
        if self.blocked_input:
            space["unroll_ci"] = [u for u in (1, 2, 4, 8, 16) if self.lanes % u == 0]
        return space

    def _default_tile(self):
        knobs = super()._default_tile()
        if self.blocked_input and self.lanes % DEFAULT_UNROLL_CI == 0:
            knobs["unroll_ci"] = DEFAULT_UNROLL_CI
        return knobs

    def _default_passes(self, co_block):
        if not self.has_passes:
            return {}
        return {"ci_chunk": ci_chunk(self.spec, self.lanes, co_block, self.ci_blocks, self.taps)}

    def _tile(self, sch, conv, knobs):
        n, co, oh, ow, cov, ci, kh, kw = sch.get_loops(conv)
        coo, cob = sch.split(co, [None, knobs["co_block"]])
        if not self.blocked_input:
            return self._channel_tile(sch, knobs, n, (coo, cob, cov), oh, ow, [ci, kh, kw], [])
        # the input's channel vector innermost of the reduction: V contiguous loads per tap
        cio, cii = sch.split(ci, [None, self.lanes])
        passes = []
        if knobs.get("ci_chunk"):
            # input-channel passes (see ci_chunk): partial sums wait in the output tile between passes
            chunk, cio = sch.split(cio, [None, knobs["ci_chunk"]])
            passes = [chunk]
        # records from before the knob existed measured the loop rolled
        unroll = knobs.get("unroll_ci", 1)
        cii = sch.split(cii, [None, unroll]) if unroll > 1 else [cii]
        laid_out = self._channel_tile(sch, knobs, n, (coo, cob, cov), oh, ow, [cio, kh, kw, *cii], passes)
        if unroll > 1:
            sch.unroll(cii[-1])
        return laid_out


__all__ = ["BlockedConvTemplate"]
