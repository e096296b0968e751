"""Winograd convolution F(m x m, 3 x 3) for stride-1 3x3 convs on blocked (NCHW{V}c) data.

Each m x m output tile is computed from an (m+2) x (m+2) input tile with (m+2)^2 multiplies per input/output
channel pair instead of 9 m^2 (F(4x4, 3x3): 36 instead of 144). Four stages, each a block of the group's func:

  winograd_input_rows, winograd_input   Bt d B per input tile and channel (two 1-D passes; vector = V channels)
  winograd_gemm                         per (eps, nu) of the tile: [tiles x C] x [C x K], the weight U = G g Gt
                                        transformed at compile time (legalize), vectors of V output channels
  winograd_output_rows, winograd_output At M A per tile back to m x m outputs, into the conv's epilogue

The transforms are sums of constant multiples of loads, written out per (eps, nu) with the zero terms left out
(select on the index; the template unrolls those loops, so each select folds to its branch). The matrices come
from TVM's Cook-Toom construction with its low-error interpolation points.

It pays on 14x14 to 56x56 images with enough channels (MIN_CHANNEL_VECTORS). 7x7 images stay direct: four
tiles per image cannot repay a transformed weight four times the size of the direct one, and F(2x2), faster
there alone, loses inside a model, where its larger weight streams from memory. Measurements on an AVX2 and an
AVX-512 host: docs/decisions/winograd.md.
"""

from __future__ import annotations

import functools

import numpy as np

from ..analysis import FLOPS, WINOGRAD, main_reduction, root_blocks
from ..template import Declined, Knob
from . import prefetch
from .common import (MATERIALIZE, CpuTemplate, divisors, fuse_parallel, inline_injective, loop_extent, parallelize,
                     tile_fma_rate, vector_registers)

# Output tile edge: F(4x4, 3x3), since m = 2 saves too few multiplies and m = 6 pads 14 columns to 18
# (docs/decisions/winograd.md).
TILE = 4
# Smallest output image side worth it: a 7x7 image is 2 x 2 tiles of which 30% is padding (see module doc).
MIN_SIDE = 8
# Fewest input and output channel vectors worth it: with fewer the transforms cost more than the GEMM saves
# (docs/decisions/winograd.md).
MIN_CHANNEL_VECTORS = 4
# Tiles per image are padded to a multiple of this, so register tiles of up to this many tiles divide them.
TILE_ROUND = 4


@functools.lru_cache(maxsize=None)
def matrices(m: int, r: int = 3):
    """(A, B, G) of F(m, r) as float64 numpy, a = m + r - 1: A (a x m), B (a x a), G (a x r); an output tile is
    At [(G g Gt) * (Bt d B)] A."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    return tuple(np.asarray(x, np.float64) for x in _cook_toom_convolution(_interpolation_points(m + r - 2), m, r))


def winograd_tile(weight_shape, strides, dilation, groups: int, out_hw) -> int:
    """The output tile edge for a conv on a blocked weight [K/V, C/V, KH, KW, V, V], or 0 where Winograd does not
    apply or does not pay (MIN_SIDE, MIN_CHANNEL_VECTORS)."""
    kblocks, cblocks, *kernel = weight_shape[:4]
    if tuple(kernel) != (3, 3) or tuple(strides) != (1, 1) or tuple(dilation) != (1, 1) or groups != 1:
        return 0
    if min(out_hw) < MIN_SIDE or min(kblocks, cblocks) < MIN_CHANNEL_VECTORS:
        return 0
    return TILE


def transform_weight(weight: np.ndarray, m: int) -> np.ndarray:
    """A blocked conv weight [K/V, C/V, 3, 3, V(c), V(k)] -> U = G g Gt as [a, a, K/V, C, V(k)]."""
    _, _, g = matrices(m)
    kb, cb, _, _, vc, vk = weight.shape
    u = np.einsum("er,kcrsiv,ns->enkciv", g, weight.astype(np.float64), g)
    return np.ascontiguousarray(u.reshape(*u.shape[:3], cb * vc, vk)).astype(np.float32)


def _linear(coefficients, terms):
    """sum(c * t) over the nonzero coefficients, as a TIR expression."""
    from tvm import tirx

    total = None
    for c, t in zip(coefficients, terms):
        if c == 0:
            continue
        term = t if c == 1 else -t if c == -1 else t * tirx.const(float(c), "float32")
        total = term if total is None else total + term
    return total if total is not None else tirx.const(0.0, "float32")


def _by_index(index, expressions):
    """expressions[index] for a loop variable `index`: a select chain that folds once the loop is unrolled."""
    from tvm import tirx

    chosen = expressions[-1]
    for i in range(len(expressions) - 2, -1, -1):
        chosen = tirx.Select(index == i, expressions[i], chosen)
    return chosen


def winograd_conv2d(data, weight, padding, tile: int):
    """Blocked conv2d [N, C/V, H, W, V] (3x3, stride 1) with a transformed weight [a, a, K/V, C, V]
    (transform_weight) -> [N, K/V, OH, OW, V]; padding (top, left, bottom, right). The batch may be symbolic.
    The GEMM states the direct conv's FLOPs (FLOPS), so a model's rate compares with tools that count those."""
    from tvm import te, tirx

    a, b_matrix, _ = matrices(tile)
    alpha = tile + 2
    n, cblocks, h, w, lanes = data.shape[0], *(int(d) for d in data.shape[1:])
    kblocks, channels = int(weight.shape[2]), int(weight.shape[3])
    top, left, bottom, right = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    rows, cols = -(-oh // tile), -(-ow // tile)
    tiles = -(-rows * cols // TILE_ROUND) * TILE_ROUND
    zero = tirx.const(0.0, data.dtype)
    direct_flops = 2 * 9 * channels * kblocks * lanes * oh * ow * (int(n) if hasattr(n, "value") else 1)

    def pixel(b, c, y, x, v):  # the zero-padded input, out to whole tiles
        inside = tirx.all(y >= top, y < top + h, x >= left, x < left + w)
        y, x = tirx.min(tirx.max(y - top, 0), h - 1), tirx.min(tirx.max(x - left, 0), w - 1)
        return tirx.if_then_else(inside, data[b, c, y, x, v], zero)

    def input_rows(b, c, p, i, nu, v):  # (d Bt) row i: the tile's row i times B
        p = tirx.min(p, rows * cols - 1)  # the padding tiles repeat the last one
        y, x = p // cols * tile + i, p % cols * tile
        row = [pixel(b, c, y, x + j, v) for j in range(alpha)]
        return _by_index(nu, [_linear(b_matrix[:, k], row) for k in range(alpha)])

    def annotate(flops, materialize=True):  # the transforms' inputs are stages of their own, never inlined
        return {WINOGRAD: tile, FLOPS: flops, **({MATERIALIZE: 1} if materialize else {})}

    rows_d = te.compute((n, cblocks, tiles, alpha, alpha, lanes), input_rows, name="winograd_input_rows",
                        attrs=annotate(0))
    transformed = te.compute(
        (alpha, alpha, n, cblocks, tiles, lanes),
        lambda e, nu, b, c, p, v: _by_index(e, [_linear(b_matrix[:, k],
                                                        [rows_d[b, c, p, i, nu, v] for i in range(alpha)])
                                                for k in range(alpha)]),
        name="winograd_input", attrs=annotate(0))
    rc = te.reduce_axis((0, channels), "rc")
    product = te.compute(
        (alpha, alpha, n, kblocks, tiles, lanes),
        lambda e, nu, b, k, p, v: te.sum(transformed[e, nu, b, rc // lanes, p, rc % lanes] * weight[e, nu, k, rc, v],
                                         axis=rc),
        name="winograd_gemm", attrs=annotate(direct_flops, materialize=False))
    out_rows = te.compute(
        (n, kblocks, tiles, alpha, tile, lanes),
        lambda b, k, p, e, j, v: _by_index(j, [_linear(a[:, jj], [product[e, nu, b, k, p, v] for nu in range(alpha)])
                                               for jj in range(tile)]),
        name="winograd_output_rows", attrs=annotate(0))

    def output(b, k, y, x, v):
        p = y // tile * cols + x // tile
        return _by_index(y % tile, [_linear(a[:, i], [out_rows[b, k, p, e, x % tile, v] for e in range(alpha)])
                                    for i in range(tile)])

    return te.compute((n, kblocks, oh, ow, lanes), output, name="winograd_output", attrs=annotate(0, materialize=False))


def _stages(sch, infos):
    """The stages of winograd_conv2d in a group's blocks (BlockInfo): the names of the input rows' and the input
    transform's blocks, the GEMM's BlockInfo and the output rows' block name; None where they are not there. The
    GEMM is the one reduction marked WINOGRAD; the others are its marked neighbours along the data flow."""
    marked = {info.name: info for info in infos if WINOGRAD in info.block.annotations}
    gemm = main_reduction(list(marked.values()))

    def neighbour(name, step):  # the one marked block next to `name`, upstream or downstream
        found = [sch.get(rv).name_hint for rv in step(sch.get_sblock(name))]
        found = [block for block in found if block in marked]
        return found[0] if len(found) == 1 else None

    transform = gemm and neighbour(gemm.name, sch.get_producers)
    rows = transform and neighbour(transform, sch.get_producers)
    output_rows = gemm and neighbour(gemm.name, sch.get_consumers)
    return (rows, transform, gemm, output_rows) if rows and output_rows else None


class WinogradTemplate(CpuTemplate):
    """Knobs: the GEMM's register tile, `tile_block` Winograd tiles x `co_block` vectors of output channels
    (accumulators tile_block * co_block; per input channel co_block weight vectors and tile_block broadcasts)."""

    kind = "conv"
    knobs = (Knob("tile_block", int, 26, "Winograd tiles per register tile"),
             Knob("co_block", int, 3, "vectors of output channels per register tile"))

    def __init__(self, func, ctx):
        from tvm import s_tir

        super().__init__(func, ctx)
        sch = s_tir.Schedule(func)
        stages = _stages(sch, root_blocks(sch, symbolic=True))
        if stages is None:
            raise Declined("not a winograd_conv2d group")
        self.input_rows, self.input, gemm, self.output_rows = stages
        self.gemm = gemm.name
        alpha, _, _, self.kblocks, self.tiles, self.lanes, _ = gemm.extents
        self.tile_positions = alpha * alpha  # the (eps, nu) GEMMs
        self.tile = int(gemm.block.annotations[WINOGRAD])
        # each weight serves the image's tiles once: few of them and the GEMM waits on the weights (see
        # _mark_prefetch); not a knob, for the reason ChannelTileConv._prefetches gives
        self.prefetch_pays = prefetch.pays(self.spec, self.tiles)

    def knob_space(self):
        return {"tile_block": divisors(self.tiles, TILE_ROUND * 2), "co_block": divisors(self.kblocks, 8)}

    def valid(self, knobs):
        # the accumulators, co_block weight vectors and one broadcast in registers
        live = knobs["tile_block"] * knobs["co_block"] + knobs["co_block"] + 1
        return live <= vector_registers(self.spec)

    def default_knobs(self):
        """The register tile with the best FMA rate (tile_fma_rate), then the most channel vectors and fewest
        tiles: at equal loads LLVM schedules a wider broadcast set worse (docs/decisions/winograd.md)."""
        space = self.knob_space()
        tiles = [{"tile_block": t, "co_block": c} for t in space["tile_block"] for c in space["co_block"]]
        return max((k for k in tiles if self.valid(k)),
                   key=lambda k: (round(tile_fma_rate(self.spec, k["tile_block"] * k["co_block"],
                                                      k["tile_block"] + k["co_block"]), 1),
                                  k["co_block"], -k["tile_block"]))

    def finish(self, func):
        return prefetch.insert(super().finish(func))

    def apply(self, sch, knobs):
        inline_injective(sch)  # the padding into the rows; the output transform into the epilogue
        self._schedule_input(sch)
        self._schedule_gemm(sch, knobs["tile_block"], knobs["co_block"])
        self._schedule_output(sch)

    def _schedule_input(self, sch):
        block = sch.get_sblock(self.input)
        e, nu, b, c, p, v = sch.get_loops(block)
        sch.reorder(b, c, p, e, nu, v)
        outer = [b, c, p]
        parallelize(sch, outer, self.spec.cores)
        tile_loop = sch.get_loops(block)[-4]
        for loop in (e, nu):
            sch.unroll(loop)
        sch.vectorize(v)
        rows = sch.get_sblock(self.input_rows)
        sch.compute_at(rows, tile_loop)
        *_, i, nu, v = sch.get_loops(rows)
        sch.unroll(i)
        sch.unroll(nu)
        sch.vectorize(v)

    def _schedule_gemm(self, sch, tile_block, co_block):
        gemm = sch.get_sblock(self.gemm)
        e, nu, b, k, p, v, c = sch.get_loops(gemm)
        ko, ki = sch.split(k, [None, co_block])
        po, pi = sch.split(p, [None, tile_block])
        # the batch outermost: a core's (eps, nu, channel tile) items then read consecutive weight slabs
        sch.reorder(b, e, nu, ko, po, c, pi, ki, v)
        if self.prefetch_pays:
            # prefetches inside the channel loop would keep LLVM from holding the accumulators in registers
            # across it (the prefetch may read them, for all it knows): they go one loop out, per V channels
            c, inner = sch.split(c, [None, self.lanes])
            sch.reorder(c, inner, pi, ki, v)
        write_back = sch.cache_write(gemm, 0, "local")
        sch.reverse_compute_at(write_back, po)
        for loop in (pi, ki):
            sch.unroll(loop)
        sch.vectorize(v)
        *_, last = loops = sch.get_loops(write_back)
        for loop in loops[5:-1]:
            sch.unroll(loop)
        sch.vectorize(last)
        if self.prefetch_pays:
            self._mark_prefetch(sch, gemm, [b, e, nu, ko, po], c, co_block)
        else:
            parallelize(sch, [b, e, nu, ko], self.spec.cores)
        sch.decompose_reduction(gemm, c)

    def _mark_prefetch(self, sch, gemm, outer, channel, co_block):
        """Run the (batch, eps, nu, channel tile, tile pass) loops as one parallel loop and mark it and the
        input-channel loop for prefetch.insert: every pass of a channel tile prefetches its share of the next
        one's weights (an [input channels x co_block vectors] slab, contiguous in [a, a, K/V, C, V]). Each weight
        serves only the image's few tiles, so without it the first pass over a slab waits on the weights' stream,
        while the later ones find the slab in cache (docs/decisions/software-prefetch.md)."""
        weight = next(r.source for r in sch.get(gemm).reads if len(r.source.shape) == 5)  # [a, a, K/V, C, V]
        channels = int(weight.shape[3])
        tiles = self.tile_positions * self.kblocks // co_block
        passes = loop_extent(sch, outer[-1])
        fused = fuse_parallel(sch, outer, self.spec.cores)
        prefetch.mark(sch, fused, channel, weight.name, tiles, passes, co_block * channels * self.lanes,
                      first_row=0)

    def _schedule_output(self, sch):
        rows = sch.get_sblock(self.output_rows)
        consumers = sch.get_consumers(rows)
        if len(consumers) != 1:
            raise ValueError("winograd_output_rows feeds several blocks")
        out = consumers[0]
        loops = sch.get_loops(out)
        if len(loops) != 5:
            raise ValueError(f"the conv's epilogue {sch.get(out).name_hint} is not in the blocked output layout")
        b, k, y, x, v = loops
        yo, yi = sch.split(y, [None, self.tile])
        xo, xi = sch.split(x, [None, self.tile])
        sch.reorder(b, k, yo, xo, yi, xi, v)
        for loop in (yi, xi):
            sch.unroll(loop)
        sch.vectorize(v)
        sch.compute_at(rows, xo)
        *_, e, j, lanes = sch.get_loops(rows)
        sch.unroll(e)
        sch.unroll(j)
        sch.vectorize(lanes)
        parallelize(sch, [b, k, yo], self.spec.cores)


__all__ = ["WinogradTemplate", "winograd_conv2d", "winograd_tile", "transform_weight", "matrices"]
