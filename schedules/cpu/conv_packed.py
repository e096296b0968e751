"""The NCHW conv on weights packed in vectors of output channels ([O/V, I/groups, KH, KW, V],
legalize.packed_conv2d), grouped or not: the channel-vector tile of conv.py, its output laid out in channel
vectors for the tile's accumulators."""

from __future__ import annotations

from .conv import ChannelTileConv


class PackedConvTemplate(ChannelTileConv):
    form = "packed"

    def _tile(self, sch, conv, knobs):
        lanes = self.lanes
        # accumulator vectors run over output channels: make them the innermost (contiguous) axis, or LLVM
        # gathers every accumulator from a strided tile on each FMA instead of keeping it in a register
        sch.transform_layout(conv, ("write", 0), lambda n, c, h, w: (n, c // lanes, h, w, c % lanes))
        n, co, oh, ow, ci, kh, kw = sch.get_loops(conv)
        channels = sch.split(co, [None, knobs["co_block"], lanes])
        return self._channel_tile(sch, knobs, n, channels, oh, ow, [ci, kh, kw], [])


__all__ = ["PackedConvTemplate"]
