"""The depthwise conv, its input copied into channel vectors first (a padded copy, legalize._depthwise_input):
- on NCHW data (legalize.packed_depthwise_conv2d), either tile of conv.py (`vectorize`): "channels" runs the
  channel-vector tile, "columns" the pixel-vector tile on the copy laid out as a padded NCHW image again (wide
  rows fill vectors without scattering every output vector across channel planes);
- on blocked data (legalize.blocked_depthwise_conv2d, xcomp/graph/layout.py), the channel-vector tile, reading
  and writing whole vectors."""

from __future__ import annotations

from ..analysis import DEPTHWISE_INPUT, with_role
from .common import divisors, parallelize
from .conv import (PIXEL_BLOCK, VECTOR, VECTORIZE, DirectConvTemplate, PixelTileConv, accumulator_budget,
                   registers_fit)
from .conv_blocked import BlockedConvTemplate
from .conv_packed import PackedConvTemplate


def _schedule_channel_copy(sch, stage, cores: int):
    """The input's padded copy in channel vectors ([n, c/V, h, w, V]): one vector per pixel."""
    loops = sch.get_loops(stage)
    sch.vectorize(loops[-1])
    parallelize(sch, loops[:3], cores)


class DepthwiseConvTemplate(PackedConvTemplate, PixelTileConv):
    form = "depthwise"
    knobs = (*PackedConvTemplate.knobs, VECTOR, PIXEL_BLOCK, VECTORIZE)

    def _read_shape(self, main, infos):
        super()._read_shape(main, infos)
        # the "columns" tile: vectors along each row; each channel reads its own input channel
        self.groups, self.fused_pixels, self.pixels = 1, False, self.out_w
        padded_w = int(with_role(infos, DEPTHWISE_INPUT).write_buffer().shape[3])
        self.unit_stride = padded_w - (main.extents[-1] - 1) == self.out_w

    @staticmethod
    def _channels(knobs) -> bool:
        """Does `knobs` run the channel-vector tile?"""
        return knobs.get("vectorize", "channels") == "channels"

    # -- knobs ---------------------------------------------------------------------------------------------

    def _tile_space(self):
        # co_block: channel vectors for "channels", channels for "columns"
        return {**super()._tile_space(), "vectorize": ["channels", "columns"], "vector": self._vector_choices(),
                "pixel_block": list(range(1, 9))}

    def valid(self, knobs):
        # a config of one tile leaves the other's knobs at their first value: one config each
        if self._channels(knobs):
            return ((knobs["vector"], knobs["pixel_block"]) == (self._vector_choices()[0], 1)
                    and PackedConvTemplate.valid(self, knobs))
        return (knobs["ow_block"], knobs["order"]) == (1, "co_outer") and PixelTileConv.valid(self, knobs)

    def _default_tile(self):
        knobs = {**super()._default_tile(), "vectorize": "channels", "vector": self._vector_choices()[0],
                 "pixel_block": 1}
        if self.unit_stride and self.out_w >= self.spec.simd_width:
            knobs.update(self._default_columns())
        return knobs

    def _default_columns(self):
        """Depthwise over rows that hold a whole SIMD vector, at stride 1: there pixel vectors along the rows beat
        channel vectors, which win on shorter rows and at stride 2 (docs/decisions/conv-pixel-vectors.md). The
        vector: a power of two of at least half the SIMD width when one divides the row, else the widest; then
        the most accumulators within the default budget, the most of them along the row."""
        space = self.knob_space()
        budget = accumulator_budget(self.spec)[0]
        even = [v for v in space["vector"] if v & (v - 1) == 0 and 2 * v >= self.spec.simd_width]
        vector = max(even or space["vector"])
        pixel_block, rows = max(((pb, oh) for pb in space["pixel_block"] for oh in space["oh_block"]
                                 if pb * oh <= budget and self._tile_fits(vector, pb)),
                                key=lambda t: (t[0] * t[1], t[0]), default=(1, 1))
        return dict(vectorize="columns", vector=vector, pixel_block=pixel_block, oh_block=rows, co_block=1,
                    ow_block=1, order="co_outer")

    # -- schedule ------------------------------------------------------------------------------------------

    def _tile(self, sch, conv, knobs):
        if self._channels(knobs):
            return super()._tile(sch, conv, knobs)
        return PixelTileConv._tile(self, sch, conv, knobs)

    def _write_back(self, sch, loops, knobs):
        if self._channels(knobs):
            return DirectConvTemplate._write_back(self, sch, loops, knobs)
        return PixelTileConv._write_back(self, sch, loops, knobs)

    def _prefetches(self, knobs) -> bool:  # noqa: ARG002 - one tap per channel: too few weights to stream
        return False

    def _schedule_pad(self, sch, stage, knobs):
        if self._channels(knobs):
            _schedule_channel_copy(sch, stage, self.spec.cores)
            return
        # "columns" reads rows: the copy becomes a padded NCHW image again ([n, c/V, V, h, w])
        sch.transform_layout(stage, ("write", 0), lambda n, cb, h, w, v: (n, cb, v, h, w))
        b, cb, h, w, v = sch.get_loops(stage)
        sch.reorder(b, cb, v, h, w)
        sch.vectorize(w)  # padded rows (58) are rarely whole vectors: LLVM finishes each with a remainder
        parallelize(sch, [b, cb, v], self.spec.cores)


class BlockedDepthwiseConvTemplate(BlockedConvTemplate):
    """The blocked conv's channel-vector tile (on NCHW-like weights: one input channel per output), each tap a
    vector of the padded copy times a weight vector."""

    form = "depthwise_blocked"

    def default_knobs(self):
        knobs = super().default_knobs()
        if self.pad_name:  # a padded copy is one more pass over an input the conv reads only once
            knobs["pad"] = "inline"
        return knobs

    def _default_tile(self):
        # one channel vector: each pixel loads its own input vector, so more channels share nothing; then the
        # widest run of pixels that fits the registers (docs/decisions/blocked-layout.md)
        width = max(d for d in divisors(self.out_w, 16) if registers_fit(self.spec, 1, d, spare=1))
        return {"co_block": 1, "oh_block": 1, "ow_block": width, "order": "co_outer"}

    def _prefetches(self, knobs) -> bool:  # noqa: ARG002 - one tap per channel: too few weights to stream
        return False

    def _schedule_pad(self, sch, stage, knobs):  # noqa: ARG002 - one layout of the copy
        _schedule_channel_copy(sch, stage, self.spec.cores)


__all__ = ["DepthwiseConvTemplate", "BlockedDepthwiseConvTemplate"]
