"""Direct NCHW conv2d: what the templates of its forms share. Each form has a rule in cpu/__init__.py and a module
of its own; `conv_form` tells them apart:

- blocked (conv_blocked.py): NCHW{V}c output from blocked or NCHW data (legalize.blocked_conv2d).
- packed (conv_packed.py): NCHW data and output with weights packed [O/V, I/groups, KH, KW, V], grouped or not
  (legalize.packed_conv2d).
- depthwise (conv_depthwise.py): the input first copied into channel vectors (legalize.packed_depthwise_conv2d).
- depthwise_blocked (conv_depthwise.py): the same from and to blocked channels (legalize.blocked_depthwise_conv2d).
- unpacked (conv_unpacked.py): plain OIHW weights, the conv TVM lowers: grouped convs whose groups are too
  narrow to pack (e.g. 34 channels), and what legalize.py leaves to TVM.

Each has a register-blocked accumulator tile with the conv's epilogue (bias / batch norm / residual / relu) fused
into the tile's write-back, one of two kinds:
- ChannelTileConv, on packed weights: `ow_block` output columns x `co_block` vectors of V output channels. Per
  (ci, kh, kw) it loads co_block weight vectors, broadcasts ow_block inputs and does co_block * ow_block FMAs into
  accumulators that stay in registers.
- PixelTileConv, on unpacked weights: `co_block` channels of one group x `pixel_block` vectors of output pixels,
  each weight broadcast. A 1x1 stride-1 conv runs over all pixels of a channel as one contiguous axis (28x28 = 49
  vectors of 16), others over each row's columns.
A depthwise conv has both (its `vectorize` knob).
"""

from __future__ import annotations

import abc
import math

from ..analysis import DEPTHWISE_INPUT, is_winograd, main_reduction, root_blocks, with_role
from ..template import Declined, Knob
from . import prefetch
from .common import (CpuTemplate, divisors, fuse_parallel, inline_injective, is_pure_copy, loop_extent,
                     parallelize, schedule_spatial, tile_epilogue, tile_fma_rate, vector_registers)


def accumulator_budget(spec) -> tuple:
    """(default, most) accumulator vectors in a pixel-vector tile, and the default of a channel-vector tile on
    NCHW data. Default: half the vector registers, since tiles near the full register file spilled
    (docs/decisions/conv-register-tiles.md); the tuner may try up to all registers but two (a weight vector and a
    broadcast input). Channel-vector tiles are bounded by registers_fit instead."""
    registers = vector_registers(spec)
    return registers // 2, registers - 2


def registers_fit(spec, co_block: int, pixels: int, spare: int = 0) -> bool:
    """A channel-vector tile's live vectors fit the register file with `spare` registers left: its
    accumulators, the co_block weight vectors every pixel reuses and one input broadcast (the tile runs
    pixel-major, see apply). With one channel vector nothing separates the pixels' broadcasts, and LLVM hoists
    them all ahead of the FMAs: every pixel then holds two registers, and a tile that ignores it spills
    (docs/decisions/conv-register-tiles.md)."""
    live = 2 * pixels + 1 if co_block == 1 else co_block * pixels + co_block + 1
    return live + spare <= vector_registers(spec)


def ci_chunk(spec, lanes: int, co_block: int, ci_blocks: int, taps: int) -> int:
    """Input-channel vectors per pass of a conv on blocked input (0: one pass over all of them). A channel tile
    reloads its weights for every pixel tile; when they take more than a quarter of the L2 they compete with the
    input rows for it and come from further out. In passes whose weights take at most half the L1, each pass's
    weights serve every pixel tile of the row from L1, and the partial sums wait in the output tile between
    passes. That paid for vgg19's 512-channel convs; smaller weights (resnet50, inception, densenet) gained
    nothing measurable (docs/decisions/conv-register-tiles.md)."""
    l1, l2 = spec.cache_bytes[:2]
    per_vector = co_block * taps * lanes * lanes * 4
    if not taps or ci_blocks < 2 or per_vector * ci_blocks <= l2 // 4:
        return 0
    return max((d for d in divisors(ci_blocks, ci_blocks - 1) if per_vector * d <= l1 // 2), default=0)


def channel_tile(spec, lanes: int, co_blocks: int, rows: int, width: int, reduce_volume: int,
                 blocked_input: bool, taps: int = 0):
    """The default register tile (co_block, oh_block, ow_block) of a conv on weights packed in vectors of `lanes`
    channels, writing `co_blocks` of them over `rows` x `width` pixels, with the FMA rate (tile_fma_rate) it
    sustains: (rate, (co_block, oh_block, ow_block)).

    The weights of one channel tile are re-read for every column tile: keep them in half the L2. Each channel
    tile re-reads the whole input, so wider tiles save input traffic, which in a model (inputs not already in
    cache) costs more than L1 misses on weights.
    On blocked data the tile may fill the register file; convs reading NCHW (stems, grouped convs) ran slower
    with such tiles and keep half of it, and so do 1x1 convs (one tap), whose full tiles lost to half-size ones
    (docs/decisions/conv-register-tiles.md).
    On 16 registers the tile with most FMAs is load-bound (1 x 14: a weight vector and 14 input broadcasts per
    14 FMAs), so tiles are ranked by the FMA rate the core can sustain first (to a tenth: the model is rough),
    then single rows (contiguous input reads), then most FMAs, then fewest loads per FMA. A default leaves one
    register spare: tiles filling all 16 spilled. Measurements: docs/decisions/conv-register-tiles.md."""
    l2 = spec.cache_bytes[1]
    tile_bytes = reduce_volume * lanes * 4
    ci_blocks = reduce_volume // taps // lanes if blocked_input and taps else 0

    def pass_bytes(cb):  # a channel tile's weights per pass over the input channels (see ci_chunk)
        chunk = ci_chunk(spec, lanes, cb, ci_blocks, taps) if ci_blocks else 0
        return cb * tile_bytes * chunk // ci_blocks if chunk else cb * tile_bytes

    co_choices = [cb for cb in divisors(co_blocks, 8) if cb == 1 or pass_bytes(cb) <= l2 // 2]
    budget = accumulator_budget(spec)[0]
    tiles = [(cb, oh, ow) for cb in co_choices for oh in divisors(rows, 4) for ow in divisors(width, 16)
             if registers_fit(spec, cb, oh * ow, spare=1) and (blocked_input and taps != 1 or cb * oh * ow <= budget)]

    def rate(tile):
        return channel_tile_rate(spec, tile[0], tile[1] * tile[2], pass_bytes(tile[0]))

    best = max(tiles or [(1, 1, 1)],
               key=lambda t: (round(rate(t), 1), -t[1], t[0] * t[1] * t[2], -(t[0] + t[1] * t[2])))
    return rate(best), best


# Bytes per cycle a core's L2 sustains into its L1 under a conv's weight stream: one 256-bit vector, half a
# 512-bit one (docs/decisions/conv-register-tiles.md, "Weights from the L2").
L2_BYTES_PER_CYCLE = 32


def channel_tile_rate(spec, co_block: int, pixels: int, weight_bytes: int) -> float:
    """tile_fma_rate of a channel-vector tile whose weights (over the whole reduction) take `weight_bytes`.
    Weights beyond the L1 stream from L2 at L2_BYTES_PER_CYCLE, not at spec.load_ports vectors: a tile of many
    channel vectors and few pixels waits on them (docs/decisions/conv-register-tiles.md)."""
    loads = co_block + pixels
    if weight_bytes > spec.cache_bytes[0]:
        cycles = co_block * max(1, spec.vector_bytes // L2_BYTES_PER_CYCLE)
        loads = max(loads, spec.load_ports * cycles)
    return tile_fma_rate(spec, co_block * pixels, loads)


# Columns a conv's output rows may be padded by, and the FMA-rate gain that pays for the wasted columns.
MAX_PADDED_COLUMNS, MIN_PADDING_GAIN = 3, 1.05


def padded_width(spec, lanes: int, co_blocks: int, rows: int, width: int, reduce_volume: int,
                 blocked_input: bool) -> int:
    """Output columns to compute a packed conv over (legalize.blocked_conv2d crops the extra ones): tiles must
    divide the row, and rows of 13 or 27 columns leave only narrow or load-bound ones. The width whose best
    tile does the most useful FMAs per cycle (its rate x the share of columns that are real), when that beats
    the row's own width by MIN_PADDING_GAIN (docs/decisions/conv-register-tiles.md)."""
    def useful_rate(w):
        return channel_tile(spec, lanes, co_blocks, rows, w, reduce_volume, blocked_input)[0] * width / w

    own = useful_rate(width)
    best = max(range(width, width + MAX_PADDED_COLUMNS + 1), key=lambda w: (useful_rate(w), -w))
    return best if useful_rate(best) >= own * MIN_PADDING_GAIN else width


def conv_form(infos) -> str:
    """The form of a conv group's blocks (root_blocks): "winograd" (cpu/winograd.py), "depthwise",
    "depthwise_blocked", "blocked", "packed" or "unpacked" (see the module doc)."""
    if is_winograd(infos):
        return "winograd"
    main = main_reduction(infos)
    if with_role(infos, DEPTHWISE_INPUT) is not None:
        return "depthwise_blocked" if len(main.extents) == 8 else "depthwise"
    if len(main.extents) == 8:
        return "blocked"
    return "packed" if any(len(read.source.shape) == 5 for read in main.block.reads) else "unpacked"


def of_form(form: str):
    """A rule's claims: a conv group of `form`."""
    from tvm import s_tir

    def claims(func, kind, ctx):  # noqa: ARG001 - the form is in the func
        return kind == "conv" and conv_form(root_blocks(s_tir.Schedule(func), symbolic=True)) == form

    return claims


CO_BLOCK = Knob("co_block", int, 3, "output channels (vectors of them where the tile runs over channels) per tile")
OH_BLOCK = Knob("oh_block", int, 12, "output rows per tile")
UNROLL_KW = Knob("unroll_kw", bool, 21, "unroll the kernel-width loop")
PAD = Knob("pad", str, 16, "'stage': the padded input copied first; 'inline': padding tested at each read")
OW_BLOCK = Knob("ow_block", int, 14, "output columns per tile")
ORDER = Knob("order", str, 13, "'co_outer' or 'oh_outer': which tile loop is outer")
CI_CHUNK = Knob("ci_chunk", int, 2, "input-channel vectors per pass over the output tile (0: all in one)")
VECTOR = Knob("vector", int, 22, "output pixels per vector")
PIXEL_BLOCK = Knob("pixel_block", int, 18, "pixel vectors per tile")
VECTORIZE = Knob("vectorize", str, 23, "'channels' or 'columns': what a depthwise tile's vectors run over")


def _bytes_per_batch(buffer) -> int:
    """A buffer's bytes with a symbolic dim (a batch kept symbolic) counted once, as the tiles are sized."""
    return math.prod(int(d) if hasattr(d, "value") else 1 for d in buffer.shape) * buffer.dtype.bits // 8


class DirectConvTemplate(CpuTemplate):
    """The conv's shape, its padding stage, and the schedule around the register tile a subclass lays out
    (`_tile`), from the fused epilogue's write-back to the padding copy."""

    kind = "conv"
    knobs = (CO_BLOCK, OH_BLOCK, UNROLL_KW, PAD)
    form = ""  # the conv_form this template schedules
    iteration = ("n", "co", "oh", "ow", "ci", "kh", "kw")  # the conv block's iter vars

    def __init__(self, func, ctx):
        from tvm import s_tir

        super().__init__(func, ctx)
        sch = s_tir.Schedule(func)
        infos = root_blocks(sch, symbolic=True)
        form = conv_form(infos)
        if form != self.form:
            raise Declined(f"a {form} conv, not {self.form}")
        main = main_reduction(infos)
        if len(main.extents) != len(self.iteration):
            raise Declined(f"expects ({', '.join(self.iteration)}) iteration")
        # a symbolic batch stays the outermost loop; tiles are sized from the static rest
        if any(None in info.extents[1:] for info in infos):
            raise Declined("needs every extent but the batch static")
        self.conv_name = main.name
        self._read_shape(main, infos)
        output = main.write_buffer()
        # (rank, bytes) of each buffer the conv reads but its own output: the input (or its padded copy), weights
        self.operands = [(len(r.source.shape), _bytes_per_batch(r.source)) for r in main.block.reads
                         if not r.source.same_as(output)]
        ci, kh, kw = main.extents[-3:]
        self.reduce_volume, self.taps = ci * kh * kw, kh * kw
        producers = {sch.get(rv).name_hint for rv in sch.get_producers(main.rv)}
        # a real padding stage (a zero-width one is a copy and gets inlined)
        self.pad_name = next((b.name for b in infos if b.name in producers and not b.is_reduction
                              and not is_pure_copy(b)), None)

    def _read_shape(self, main, infos):  # noqa: ARG002 - the depthwise form reads its input copy
        """Output channels, rows and columns, and the lanes of the packed weights (0: not packed), of an NCHW
        conv."""
        _, self.out_channels, self.out_h, self.out_w = main.extents[:4]
        weights = [r.source for r in main.block.reads if len(r.source.shape) == 5]
        self.lanes = int(weights[0].shape[-1]) if weights else 0

    # -- knobs ---------------------------------------------------------------------------------------------

    def knob_space(self):
        space = self._tile_space()
        if self.pad_name:
            space["pad"] = ["stage", "inline"]
        return space

    def default_knobs(self):
        knobs = {"unroll_kw": True, "oh_block": 1}
        if self.pad_name:
            knobs["pad"] = "stage"
        knobs.update(self._default_tile())
        return knobs

    @abc.abstractmethod
    def _tile_space(self) -> dict:
        """knob name -> values of the tile's knobs."""

    @abc.abstractmethod
    def _default_tile(self) -> dict:
        """The tile's knobs in the default config."""

    # -- schedule ------------------------------------------------------------------------------------------

    def apply(self, sch, knobs):
        keep = (self.pad_name,) if knobs.get("pad") == "stage" else ()
        inline_injective(sch, keep=keep)
        conv = sch.get_sblock(self.conv_name)
        epilogue = tile_epilogue(sch, conv)
        outer, tile, reduction, passes = self._tile(sch, conv, knobs)
        if knobs["unroll_kw"]:
            sch.unroll(reduction[2])
        if passes:  # the epilogue waits for the last pass
            sch.reverse_compute_at(epilogue, outer[-1])
            sch.vectorize(sch.get_loops(epilogue)[-1])
            write_back = []
        else:
            sch.reverse_compute_at(epilogue, tile)
            # the write-back runs once per tile: unrolled, LLVM keeps the accumulators in registers
            write_back = self._write_back(sch, sch.get_loops(epilogue)[len(outer) + 1:], knobs)
        for loop in write_back:
            sch.unroll(loop)
        self._parallelize(sch, conv, outer, reduction, knobs)
        # a broadcasting epilogue (common.broadcasts) is left at the root: a spatial loop nest of its own
        done = {self.conv_name, sch.get(epilogue).name_hint, self.pad_name}
        for info in root_blocks(sch, symbolic=True):
            if info.name not in done and not info.is_reduction:
                schedule_spatial(sch, info.rv, self.spec.simd_width, self.spec.cores)
        if keep:
            self._schedule_pad(sch, sch.get_sblock(self.pad_name), knobs)
        sch.decompose_reduction(conv, (passes or reduction)[0])

    @abc.abstractmethod
    def _tile(self, sch, conv, knobs) -> tuple:
        """Lay out the register tile of `conv`'s loops: returns (the loops outside the tile, outermost first; the
        loop over tiles the write-back goes in; the reduction loops (ci, kh, kw, ...); the loops over
        input-channel passes, if any)."""

    def _write_back(self, sch, loops, knobs) -> list:  # noqa: ARG002 - a pixel tile vectorizes its own
        """The write-back's loops to unroll."""
        return loops

    def _parallelize(self, sch, conv, outer, reduction, knobs):  # noqa: ARG002 - a channel tile may prefetch
        parallelize(sch, outer, self.spec.cores)

    def _schedule_pad(self, sch, stage, knobs):  # noqa: ARG002 - the depthwise copy's layout follows the tile
        if loop_extent(sch, sch.get_loops(stage)[-1]) % self.spec.simd_width:
            # a padded NCHW row (226 columns of a 224 image): one vector loop per row, LLVM finishes the
            # remainder. schedule_spatial would fuse it into one parallel loop of single elements, each with a
            # div/mod and a bounds check (docs/decisions/conv-padding-copy.md)
            *rows, columns = sch.get_loops(stage)
            sch.vectorize(columns)
            parallelize(sch, rows, self.spec.cores)
        else:
            schedule_spatial(sch, stage, self.spec.simd_width, self.spec.cores)


class ChannelTileConv(DirectConvTemplate):
    """The tile over vectors of output channels, on packed weights."""

    knobs = (*DirectConvTemplate.knobs, OW_BLOCK, ORDER)
    weight_rank = 5  # [O/V, I, KH, KW, V]
    blocked_input = False  # the input in channel vectors too (NCHW{V}c)

    def __init__(self, func, ctx):
        super().__init__(func, ctx)
        self.prefetch_pays = prefetch.pays(self.spec, self.out_h * self.out_w)  # each weight serves every pixel once

    def _tile_space(self):
        # oh_block stacks output rows in the tile: the way to a full register tile when rows are short (7, 13, 14)
        return {"co_block": divisors(self.out_channels // self.lanes, 8), "oh_block": divisors(self.out_h, 4),
                "ow_block": divisors(self.out_w, 16), "order": ["co_outer", "oh_outer"], "unroll_kw": [True, False]}

    def valid(self, knobs):
        return registers_fit(self.spec, knobs["co_block"], knobs.get("oh_block", 1) * knobs["ow_block"])

    def _default_tile(self):
        co_block, oh_block, ow_block = channel_tile(
            self.spec, self.lanes, self.out_channels // self.lanes, self.out_h, self.out_w, self.reduce_volume,
            self.blocked_input, self.taps)[1]
        return {"co_block": co_block, "oh_block": oh_block, "ow_block": ow_block, **self._default_passes(co_block),
                "order": self._default_order(co_block)}

    def _default_order(self, co_block: int) -> str:
        """co_outer keeps a channel tile's weights in cache across all its rows but reads the whole input once
        per channel tile; oh_outer reads each row's input once for every channel tile, and all the weights once
        per row. Where the input outgrows half a core's L2 and all the weights fit in half of it, oh_outer's
        re-reads come from the L2 and co_outer's from further out (docs/decisions/conv-register-tiles.md)."""
        l2 = self.spec.cache_bytes[1]
        weights = sum(size for rank, size in self.operands if rank == self.weight_rank)
        data = sum(size for rank, size in self.operands if rank != self.weight_rank)
        tiles = self.out_channels // self.lanes // co_block
        return "oh_outer" if tiles > 1 and l2 and data > l2 // 2 and weights <= l2 // 2 else "co_outer"

    def _default_passes(self, co_block: int) -> dict:  # noqa: ARG002 - only blocked data has passes
        """The knobs of input-channel passes (conv_blocked.py) in the default config."""
        return {}

    def _channel_tile(self, sch, knobs, n, channels, oh, ow, reduction, passes):
        """The tile over `channels`' (tiles, vectors in a tile, lanes) loops and ow's columns (of oh's rows)."""
        coo, cob, cov = channels
        oho, ohi = sch.split(oh, [None, knobs.get("oh_block", 1)])
        owo, owi = sch.split(ow, [None, knobs["ow_block"]])
        outer = [n, coo, oho] if knobs["order"] == "co_outer" else [n, oho, coo]
        # pixel-major inside the tile: each input broadcast feeds co_block FMAs at once and dies, so the live
        # registers are the accumulators, co_block weight vectors and one broadcast (channel-major would keep
        # every pixel's broadcast live across the channel loop: docs/decisions/conv-register-tiles.md)
        sch.reorder(*outer, *passes, owo, *reduction, ohi, owi, cob, cov)
        for loop in (cob, ohi, owi):
            sch.unroll(loop)
        sch.vectorize(cov)
        return outer, owo, reduction, passes

    def _prefetches(self, knobs) -> bool:
        """Does a config prefetch its next channel tile's weights (prefetch.py)? Where it pays on this hardware
        (prefetch.pays: few pixels per weight) and the config walks channel tiles of several rows each, which
        it needs to prefetch in. Not a knob: cold timing with the weights in the L3 does not see what it saves
        inside a model, where part of them come from memory (docs/decisions/software-prefetch.md)."""
        return (self.prefetch_pays and knobs["order"] == "co_outer"
                and self.out_h // knobs.get("oh_block", 1) >= 2)

    def _parallelize(self, sch, conv, outer, reduction, knobs):
        if self._prefetches(knobs):
            self._mark_prefetch(sch, conv, outer, reduction[1], knobs["co_block"])
        else:
            super()._parallelize(sch, conv, outer, reduction, knobs)

    def _mark_prefetch(self, sch, conv, outer, kh, co_block: int) -> None:
        """Fuse the (batch, channel tile, row) loops, run them in parallel, and mark them and the kernel-row loop
        for prefetch.insert (in `finish`): each kernel row of a tile's later rows prefetches its share of the
        next tile's weights. The same for a single core (the fused loop is then serial)."""
        _, coo, oho = outer
        tiles, rows = loop_extent(sch, coo), loop_extent(sch, oho)
        weight = next(r.source for r in sch.get(conv).reads if len(r.source.shape) == self.weight_rank)
        fused = fuse_parallel(sch, outer, self.spec.cores)
        slab = math.prod(int(d) for d in weight.shape[1:])  # one vector of output channels: [O/V, ...]
        prefetch.mark(sch, fused, kh, weight.name, tiles, rows, co_block * slab)

    def finish(self, func):
        return prefetch.insert(super().finish(func))


class PixelTileConv(DirectConvTemplate):
    """The tile over vectors of output pixels, each weight broadcast. Subclasses set `groups`, `fused_pixels`
    (1x1 stride-1 unpadded: a channel's pixels are one contiguous run, so vectors need not fit in a row) and
    `pixels` (the vectorized pixel axis' extent)."""

    knobs = (*DirectConvTemplate.knobs, VECTOR, PIXEL_BLOCK)

    def _tile_space(self):
        return {"co_block": divisors(self.out_channels // self.groups, 8),
                "oh_block": [1] if self.fused_pixels else divisors(self.out_h, 4),
                "vector": self._vector_choices(), "pixel_block": list(range(1, 9)), "unroll_kw": [True, False]}

    def valid(self, knobs):
        return (self._tile_fits(knobs["vector"], knobs["pixel_block"])
                and knobs["co_block"] * knobs.get("oh_block", 1) * knobs["pixel_block"]
                <= accumulator_budget(self.spec)[1])

    def _vector_choices(self) -> list:
        """Lanes of the pixel vector: divisors of the pixel axis up to the SIMD width (7 and 14 included: a row
        of 7 or 14 columns is better one short vector than scalars)."""
        return [d for d in divisors(self.pixels, self.spec.simd_width) if d > 1] or [1]

    def _tile_fits(self, vector: int, pixel_block: int) -> bool:
        """The pixel tile divides the pixel axis; over fused pixels it must also be whole rows, or the fused
        epilogue's (y, x) region would not be the tile's."""
        tile = vector * pixel_block
        return self.pixels % tile == 0 and (not self.fused_pixels or tile % self.out_w == 0)

    def _default_tile(self):
        # the widest vector, then most accumulators within the default budget, favouring more channels (each
        # input vector then feeds more FMAs)
        space = self.knob_space()
        budget = accumulator_budget(self.spec)[0]
        vector, co_block, pixel_block = max(
            ((v, cb, pb) for v in space["vector"] for cb in space["co_block"] for pb in space["pixel_block"]
             if cb * pb <= budget and self._tile_fits(v, pb)),
            key=lambda t: (t[0], t[1] * t[2], t[1]), default=(space["vector"][-1], 1, 1))
        return {"vector": vector, "co_block": co_block, "pixel_block": pixel_block}

    def _tile(self, sch, conv, knobs):
        n, co, oh, ow, ci, kh, kw = sch.get_loops(conv)
        # channels split by group first, so the input channel (group * in_per_group + ci) is loop-invariant
        # across the channel tile
        group, in_group = sch.split(co, [self.groups, None])
        cgo, cb = sch.split(in_group, [None, knobs["co_block"]])
        if self.fused_pixels:
            outer, rows, pixels = [n, group, cgo], [], sch.fuse(oh, ow)
        else:
            oho, ohi = sch.split(oh, [None, knobs["oh_block"]])
            outer, rows, pixels = [n, group, cgo, oho], [ohi], ow
        tile, pb, pv = sch.split(pixels, [None, knobs["pixel_block"], knobs["vector"]])
        sch.reorder(*outer, tile, ci, kh, kw, cb, *rows, pb, pv)
        for loop in (cb, *rows, pb):
            sch.unroll(loop)
        sch.vectorize(pv)
        return outer, tile, [ci, kh, kw], []

    def _write_back(self, sch, loops, knobs):
        # pixel vectors: written back as vectors too (LLVM leaves an unrolled row scalar)
        *rest, last = loops
        vectors, lanes = sch.split(last, [None, knobs["vector"]])
        sch.vectorize(lanes)
        return [*rest, vectors]


__all__ = ["DirectConvTemplate", "ChannelTileConv", "PixelTileConv", "conv_form", "of_form", "channel_tile",
           "padded_width"]
