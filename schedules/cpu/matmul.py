"""Matmul groups: a register tile of `mr` rows x `nr` vectors of output columns, the K loop inside the tile, the
fused epilogue (bias / activation / residual) at the tile's write-back.

Per k the tile loads nr vectors of B, broadcasts mr elements of A and does mr * nr FMAs into accumulators that
stay in registers. B comes in one of three layouts:
- packed ([N/V, K, V], constant weights, see legalize.py): each tile column panel is one contiguous stream;
- nn ([..., K, N], runtime operand): vectors load straight from rows of B, or from a packed copy (`pack_b`);
- nt ([..., N, K], e.g. attention's Q @ K^T, or any layout whose innermost axis is not N): copied to the packed
  layout first, since a vector over N would be a strided gather. Not for fewer than FEW_ROWS rows of A (a decode
  step's one query row): there the copy costs more than the product, and dot products along B's rows, each in
  vector lane partials (the generic schedule), take a quarter of the time. A symbolic M gets both schedules,
  chosen at run time by its rows.
Batch entries that share B (a Linear over a map of pixels) tile their rows as one M.
A constant B walked by panels (few rows of A per weight, as a transformer's Linear over 128 tokens) prefetches
each next panel into the L2 while the current one's later row tiles run (prefetch.py).
M = 1 (a GEMV, memory-bound) is the same schedule with mr = 1: every tile streams its own panels of the weight,
the tiles run in parallel and nr independent accumulators hide the FMA latency.
A symbolic M (a batch kept symbolic) has its rows padded to a multiple of a few rows by our lowering
(legalize.py), so the row tiles that divide the padding need no predicate; the write-back alone is predicated,
and only in the tiles that cross the output's edge (`finish`). Where no lowering padded it (TVM's own matmul or
einsum, e.g. attention over a symbolic sequence), and for a symbolic N, the schedule pads the iteration space
itself (`pad_einsum`: zero-filled copies of the operands) to whole tiles; under batch loops that give every core
work (attention's heads) each head's copies are made just before its tiles. A symbolic K just runs its loop.
"""

from __future__ import annotations

import math

from tvm import tirx

from ..analysis import main_reduction, mac_operands, root_blocks
from ..template import Declined, Knob
from . import nest, prefetch
from .common import (CpuTemplate, fuse_parallel, inline_injective, loop_extent, parallelize, schedule_spatial,
                     tile_epilogue, vector_registers)

MR_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
# the largest tile a symbolic M (rows) or N (vectors) is padded to here: more wastes work on short sequences
SYMBOLIC_PAD_LIMIT = 4
SYMBOLIC_PAD_VECTORS = 2
NR_CHOICES = (1, 2, 3, 4, 5, 6, 7, 8)
# on a matmul's write-back block: split its tiles into whole ones, unpredicated, and the rest (`finish`)
WHOLE_TILES = "xcomp.whole_tiles"
# below this many rows of A an "nt" B is read in place (module docstring); 12 heads x 193 cache rows of 64, two
# threads: 1-3 rows 24-45 us in place against 80 packed, 4 rows 79 against 84, 8 rows 180 against 116
FEW_ROWS = 4
# K steps per prefetch step (prefetch.py): the prefetches sit in a loop around this many steps, never among the
# FMAs of one step
PREFETCH_K_STEPS = 16
# K steps a default tile of several rows unrolls: LLVM unrolls the tile's K loop for some CPUs and not others
# (docs/decisions/matmul-unroll-k.md)
DEFAULT_UNROLL_K = 4


def _uses_all(load, *variables) -> bool:
    from tvm.tirx.analysis import undefined_vars

    used = [v for x in load.indices for v in undefined_vars(x)]
    return all(any(u.same_as(v) for u in used) for v in variables)


class MatmulTemplate(CpuTemplate):
    kind = "matmul"
    knobs = (Knob("mr", int, 10, "rows of the register tile"),
             Knob("nr", int, 11, "vectors of output columns in the register tile"),
             Knob("order", str, 13, "'n_outer' or 'm_outer': which tile loop is outer"),
             Knob("unroll_k", int, 20, "K steps unrolled in the tile's loop"),
             Knob("pack_b", bool, 15, "copy a runtime B into column panels first"))

    def __init__(self, func, ctx):
        from tvm import s_tir

        super().__init__(func, ctx)
        sch = s_tir.Schedule(func)
        inline_injective(sch)  # read the operands as apply() sees them: a transpose feeding B is folded in
        main = main_reduction(root_blocks(sch, symbolic=True))
        kinds = main.iter_kinds
        if len(kinds) < 3 or main.reduce_axes != [len(kinds) - 1]:
            raise Declined("expects (batch..., m, n, k) iteration")
        if str(main.write_buffer().dtype) != "float32":
            raise Declined("schedules float32 only")
        self.name = main.name
        *_, self.m, self.n, self.k = main.extents  # None: symbolic
        self.m_extent = main.block.iter_vars[-3].dom.extent
        # the output's rows: fewer than the matmul's where a lowering padded a symbolic M to whole tiles (None: an
        # output not of rows and columns)
        out = root_blocks(sch, symbolic=True)[-1].block.iter_vars
        self.rows = out[-2].dom.extent if len(out) >= 2 else None
        # a symbolic M no lowering padded: tiles of these many rows, the schedule padding the rows to them
        self.rows_padded_here = self.m is None and not self._rows_divisible_by(2)
        ivars = [iv.var for iv in main.block.iter_vars]
        i, j, k = ivars[-3:]
        a_load, b_load = self._operands(mac_operands(main.block), i, j)
        reads = [r.source for r in main.block.reads]
        self.b_index = next(n for n, buf in enumerate(reads) if buf.same_as(b_load.source))
        if not (_uses_all(a_load, i, k) and _uses_all(b_load, j, k)):
            raise Declined("matmul operands not indexed by (m, k) and (n, k)")
        indices = list(b_load.indices)
        plain = [n for n, x in enumerate(indices) if isinstance(x, tirx.Var)]
        if len(indices) == 3 and plain == [1] and indices[1].same_as(k):  # [j // V, k, j % V]
            self.layout = "packed"
        else:
            # positions of the N and K axes in B; the vector runs over N, so it must be B's innermost axis, or
            # B gets copied to the packed layout first
            self.b_axes = (next(n for n in plain if indices[n].same_as(j)),
                           next(n for n in plain if indices[n].same_as(k)))
            self.layout = "nn" if self.b_axes[0] == len(indices) - 1 else "nt"
        if self.layout == "nt" and self.m is not None and self.m < FEW_ROWS:
            raise Declined(f"A of {self.m} row(s) over a transposed B: dot products along B's rows (the generic "
                           "schedule) beat packing B")
        # an N no full vector divides (attention's scores over 197 or 1500 tokens) is padded to whole tiles of
        # full vectors, as a symbolic one is: a narrower vector that divides it ran at half the speed
        self.columns_padded_here = self.layout != "packed" and (
            self.n is None or self.n % self.spec.simd_width != 0 and bool(self._padded_nr(self.spec.simd_width)))
        batch = main.extents[:-3]
        # no batch entries beside the rows: a symbolic prefetch plan takes the row tiles from the tile loop
        self.batch_of_one = all(e == 1 for e in batch)
        # rows of every batch entry taken as one M where B is shared by them (a Linear over NHWC pixels: 7 x 7
        # rows of 768): tiles then span entries, and each panel of B is read once per row tile, not per entry
        self.flat_batch = (None not in main.extents and math.prod(batch) > 1
                           and not self.columns_padded_here  # pad_einsum needs plain indices
                           and not any(_uses_all(b_load, v) for v in ivars[:-3])
                           and [int(iv.dom.extent) for iv in out][:len(batch) + 2] == list(main.extents[:-1]))
        if self.flat_batch:
            self.m *= math.prod(batch)
        # a classifier's or a decode step's few rows stream B once; a GEMM's rows reuse it from the caches
        self.regime = "gemv" if self.m is not None and self.m < FEW_ROWS else "gemm"
        if self.layout == "packed":
            self.lanes = int(b_load.source.shape[-1])
        elif self.columns_padded_here:  # padded to whole tiles of full vectors in apply()
            self.lanes = self.spec.simd_width
        else:  # the widest vector (spec lanes down to 4) dividing N; 1: no vector, a scalar tile
            fits = [v for v in (self.spec.simd_width, self.spec.simd_width // 2, self.spec.simd_width // 4) if v >= 4]
            self.lanes = next((v for v in fits if self.n % v == 0), 1)
        self.registers = vector_registers(self.spec)

    @staticmethod
    def _operands(mac, i, j):
        """(A load, B load): B is the operand indexed by the output column, A the one indexed by the row."""
        if mac is None:
            raise Declined("matmul block is not a multiply-accumulate")
        lhs, rhs = mac
        b_uses = [_uses_all(load, j) for load in (lhs, rhs)]
        if b_uses == [False, True]:
            return lhs, rhs
        if b_uses == [True, False]:
            return rhs, lhs
        raise Declined("cannot tell the matmul operands apart")

    def _rows_divisible_by(self, mr: int) -> bool:
        from tvm.sym import Analyzer

        return Analyzer().can_prove(tirx.floormod(self.m_extent, mr) == 0)

    # -- knobs ---------------------------------------------------------------------------------------------

    def _mr_choices(self):
        if self.rows_padded_here:
            return [mr for mr in MR_CHOICES if mr <= SYMBOLIC_PAD_LIMIT]
        if self.m is None:  # only tiles that divide the (padded, see legalize.py) symbolic extent: no predicate
            return [mr for mr in MR_CHOICES if self._rows_divisible_by(mr)]
        return [mr for mr in MR_CHOICES if mr <= self.m]

    def _nr_choices(self):
        if self.n is None:  # padded to nr vectors: a wide tile wastes most of it on short sequences
            return [nr for nr in NR_CHOICES if nr <= SYMBOLIC_PAD_VECTORS]
        if self.columns_padded_here:
            return self._padded_nr(self.lanes)
        return [nr for nr in NR_CHOICES if (self.n // self.lanes) % nr == 0] or [1]

    def _padded_nr(self, lanes: int) -> list:
        """Tiles of nr vectors of `lanes` whose padding of a static N adds at most an eighth of it."""
        return [nr for nr in NR_CHOICES if -(-self.n // (nr * lanes)) * nr * lanes * 8 <= self.n * 9]

    def knob_space(self):
        space = {
            "mr": self._mr_choices(),
            "nr": self._nr_choices(),
            "order": ["n_outer", "m_outer"] if self.m is None or self.m > 1 else ["n_outer"],
            "unroll_k": [u for u in (1, 2, 4, 8) if self.k is not None and self.k % u == 0] or [1],
        }
        if self.layout == "nn":
            space["pack_b"] = [True, False]
        return space

    def valid(self, knobs):
        accumulators = knobs["mr"] * knobs["nr"]
        # accumulators + nr B vectors + a broadcast A element must fit in the register file
        return accumulators + knobs["nr"] + 1 <= self.registers

    def default_knobs(self):
        l2 = self.spec.cache_bytes[1] if self.spec.cache_bytes else 0
        # a symbolic M: its rows are padded to a whole number of the largest tile it allows (legalize.py), so
        # that many rows are computed at the least
        m = self.m or max(self._mr_choices())

        def cost(tile):
            mr, nr = tile
            # the tile's column panel of B (K x nr vectors) is re-read for every row tile: keep it in L2
            panel_fits = not l2 or (self.k or 0) * nr * self.lanes * 4 <= l2 * 3 // 4
            rows_used = m / (-(-m // mr) * mr)  # the last row tile may be partly empty
            # then most accumulators (FMAs per k step), then fewest loads per k step, a vector of B (streamed
            # from L2) counting as two broadcasts of A (from L1), then most rows
            return (panel_fits, mr * nr * rows_used, -(mr + 2 * nr), mr)

        most_rows = self._most_rows_of_a()
        tiles = [(mr, nr) for mr in self._mr_choices() if mr <= most_rows for nr in self._nr_choices()
                 if self.valid({"mr": mr, "nr": nr})]
        mr, nr = max(tiles, key=cost)
        # a GEMV over vectors: several panels per core (_gemv_nr); over scalar columns the widest tile, in few
        # tasks, ran faster
        if m < 4 and self.n is not None and self.lanes > 1:
            nr = self._gemv_nr(mr)
        # an unpadded symbolic M outermost: with it inside the fused parallel loop its row would be `fused % M`,
        # and the accumulator tile, not compacted through a symbolic modulo, became an M x N buffer per task
        unpadded = self.m is None and self._mr_choices() == [1]
        unroll_k = DEFAULT_UNROLL_K if mr > 1 and DEFAULT_UNROLL_K in self.knob_space()["unroll_k"] else 1
        knobs = {"mr": mr, "nr": nr, "order": "m_outer" if unpadded else "n_outer", "unroll_k": unroll_k}
        if self.layout == "nn":
            # the copy costs K * N loads, like N * K / (M / mr) tile steps: worth it once B is reused enough
            knobs["pack_b"] = m >= 4 * mr
        return knobs

    def _most_rows_of_a(self) -> float:
        """The most rows of A a default tile reads: A is read in place, and where its row stride is a multiple of the
        L1's set span (its size over its ways) every row of a tile maps to one set, so more rows than the set has
        ways evict each other on every k step (K = 8192 on an 8-way L1: 16 rows ran 2.1x slower than 8)."""
        l1, ways = self.spec.cache_bytes[0] if self.spec.cache_bytes else 0, self.spec.l1_ways
        if not (l1 and ways and self.k) or (self.k * 4) % (l1 // ways):
            return math.inf
        return ways

    def _gemv_nr(self, mr: int) -> int:
        """Vectors per tile of a GEMV (memory-bound): several weight panels per core keep the cores busy to the
        end."""
        panels_per_core = -(-self.n // self.lanes) // self.spec.cores
        return max(n for n in self._nr_choices()
                   if n <= max(1, panels_per_core // 4) and self.valid({"mr": mr, "nr": n}))

    # -- schedule ------------------------------------------------------------------------------------------

    def schedule(self, knobs=None):
        packed = super().schedule(knobs)
        if self.m is not None:
            return packed
        if self.layout == "nt":
            in_place = self.fallback_schedule()
            return packed if in_place is None else nest.either(self.m_extent < FEW_ROWS, in_place, packed)
        if self._rows_padded_by_lowering() and self.lanes > 1:
            return nest.either(self.rows == 1, self._one_row(knobs or self.default_knobs()), packed)
        return packed

    def _rows_padded_by_lowering(self) -> bool:
        from tvm.sym import Analyzer

        return (self.rows is not None and not self.rows_padded_here
                and not Analyzer().can_prove_equal(self.rows, self.m_extent))

    def _one_row(self, knobs):
        """A symbolic M that a lowering padded to whole tiles, scheduled for one row (a GEMV: a decode step, a
        batch of one): tiles of one row, each skipped where its row is padding. The padded tiles compute 4 rows
        for 1, which costs a weight held in cache over a quarter of its time. Two or three rows gain nothing: each
        extra pass over the weight costs what the padding does."""
        one_row = {**knobs, "mr": 1, "nr": knobs["nr"] if self.n is None else self._gemv_nr(1), "order": "n_outer"}
        if "pack_b" in one_row:
            one_row["pack_b"] = False
        func = super().schedule(one_row)
        body = nest.rebuild(func.body, lambda loop, body, path: _real_rows_only(loop, body, self.name, self.rows))
        return nest.in_ssa_form(func.with_body(body))

    def apply(self, sch, knobs):
        inline_injective(sch)
        mm = sch.get_sblock(self.name)
        rows = knobs["mr"] if self.rows_padded_here else 1
        columns = knobs["nr"] * self.lanes if self.columns_padded_here else 1
        if rows > 1 or columns > 1:
            self._pad_to_tiles(sch, mm, rows, columns)
        if self.layout == "nt" or (self.layout == "nn" and knobs["pack_b"]):
            self._pack_b(sch, mm)
        epilogue = tile_epilogue(sch, mm)
        if self.flat_batch:
            self._flatten_rows(sch, mm, epilogue)
        mr, nr, lanes = knobs["mr"], knobs["nr"], self.lanes
        *batch, i, j, k = sch.get_loops(mm)
        io, ir = sch.split(i, [None, mr])
        jo, jr, jv = sch.split(j, [None, nr, lanes])
        outer = [*batch, jo, io] if knobs["order"] == "n_outer" else [*batch, io, jo]
        prefetches = self._prefetches(knobs)
        inner = [k]
        if prefetches:
            inner = sch.split(k, [None, PREFETCH_K_STEPS])
        if knobs["unroll_k"] > 1:
            inner = [*inner[:-1], *sch.split(inner[-1], [None, knobs["unroll_k"]])]
        sch.reorder(*outer, *inner, ir, jr, jv)
        if knobs["unroll_k"] > 1:
            sch.unroll(inner[-1])
        sch.unroll(ir)
        sch.unroll(jr)
        if lanes > 1:
            sch.vectorize(jv)
        self._write_back_per_tile(sch, epilogue, outer, lanes)
        done = {self.name, sch.get(epilogue).name_hint}
        if self._copies_per_batch(sch, done, batch):
            self._copy_per_batch(sch, done, batch)
        else:
            self._copy_apart(sch, done, outer, inner[0] if prefetches else None, self._most_row_tiles(knobs))
        sch.decompose_reduction(mm, inner[0])

    def _prefetches(self, knobs) -> bool:
        """Does a config prefetch its next column panel of B (prefetch.py)? Where B is a packed constant (a weight),
        the tiles walk panels (n_outer) of several row tiles each, and few rows use each weight (prefetch.pays):
        inside a model the weights come from memory, and a panel's first row tile waits on their stream while the
        others read them from cache. Not a knob, for the reason the conv's is not
        (docs/decisions/software-prefetch.md)."""
        if not (self.layout == "packed" and self.k is not None and self.k % PREFETCH_K_STEPS == 0
                and knobs["order"] == "n_outer"):
            return False
        if self.m is None:  # a prompt's rows, known at run time: the prefetches check them (_most_row_tiles)
            return knobs["mr"] > 1 and self._most_row_tiles(knobs) >= 2 and self.batch_of_one
        return self.m // knobs["mr"] >= 2 and prefetch.pays(self.spec, self.m)

    def _most_row_tiles(self, knobs) -> int:
        """The most row tiles a panel may have for its prefetches to pay (prefetch.pays)."""
        return prefetch.most_uses(self.spec) // knobs["mr"]

    def finish(self, func):
        # the prefetches first: the whole-tile splits below copy the tile into both sides of a branch, and
        # nest.rebuild walks into neither; then the splits, ahead of the guard's copies (guard.insert), which it
        # does not walk into either
        func = prefetch.insert(func)
        body = nest.rebuild(func.body, _whole_tiles_unpredicated)
        body = nest.rebuild(body, lambda loop, body, path: _whole_tiles_accumulate_unpredicated(
            loop, body, path, self.name))
        return super().finish(func if body.same_as(func.body) else nest.in_ssa_form(func.with_body(body)))

    @staticmethod
    def _write_back_per_tile(sch, epilogue, outer, lanes):
        """The epilogue at each register tile. Cropped to a symbolic extent, it runs under a test per element,
        which leaves it scalar; `finish` gives the tiles that lie wholly inside a copy without the test
        (_whole_tiles_unpredicated)."""
        sch.reverse_compute_at(epilogue, outer[-1])
        sch.annotate(epilogue, WHOLE_TILES, 1)
        # the write-back runs once per tile: unrolled, LLVM keeps the accumulators in registers
        tile = sch.get_loops(epilogue)[len(outer):]  # unit loops are dropped: may be empty
        for loop in tile[:-1]:
            sch.unroll(loop)
        if tile and lanes > 1 and int(sch.get(tile[-1]).extent) % lanes == 0:
            colo, colv = sch.split(tile[-1], [None, lanes])
            sch.unroll(colo)
            sch.vectorize(colv)
        elif tile:
            sch.unroll(tile[-1])

    def _copy_apart(self, sch, done, outer, prefetch_step=None, most_row_tiles=0):
        """The tiles in parallel; the operand copies (and a constant fill a dropout left behind) each a nest of its
        own, in the generic spatial schedule. With `prefetch_step` (a K loop around the tile's FMAs), each step of
        a panel's later row tiles prefetches its share of the next panel; of a symbolic number of row tiles, only
        where there are at most `most_row_tiles`."""
        if prefetch_step is not None:
            *_, panels, rows = outer
            tiles, row_tiles = loop_extent(sch, panels), loop_extent(sch, rows)
            weight = sch.get(sch.get_sblock(self.name)).reads[self.b_index].source
            fused = fuse_parallel(sch, outer, self.spec.cores, symbolic=self.spec.cores)
            # [N/V, K, V]: a panel of nr vectors of columns is one contiguous run
            prefetch.mark(sch, fused, prefetch_step, weight.name, tiles, row_tiles,
                          math.prod(int(d) for d in weight.shape) // tiles,
                          most_rows=most_row_tiles)
        else:
            # a symbolic batch or sequence dim among the tiles: parallel, as for the sizes it usually has (a lone
            # row, the smallest, then pays a thread wake-up of a few microseconds)
            parallelize(sch, outer, self.spec.cores, symbolic=self.spec.cores)
        for info in root_blocks(sch, symbolic=True):
            if info.name not in done and not info.is_reduction:
                schedule_spatial(sch, info.rv, self.spec.simd_width, self.spec.cores)

    def _copies_per_batch(self, sch, done, batch) -> bool:
        """For a symbolic M or N under batch loops whose static extents give every core work (attention over a
        symbolic sequence, its heads), where the schedule copies an operand (padding, packing): _copy_per_batch."""
        if self.m is not None and self.n is not None or not batch:
            return False
        copies = [info for info in root_blocks(sch, symbolic=True)
                  if info.name not in done and not info.is_reduction and sch.get_consumers(info.rv)]
        static = [int(e) for e in (sch.get(loop).extent for loop in batch) if hasattr(e, "value")]
        return bool(copies) and math.prod(static) >= self.spec.cores

    def _copy_per_batch(self, sch, done, batch):
        """One parallel loop over the batch, each iteration making its operand copies and then its tiles: no
        parallel launch per copy, and the fused loop's index divided once per batch, not once per tile."""
        fused = sch.fuse(*batch) if len(batch) > 1 else batch[0]
        sch.parallel(fused)
        for info in reversed(root_blocks(sch, symbolic=True)):  # consumers first, as compute_at needs
            if info.name not in done:
                sch.compute_at(info.rv, fused)

    @staticmethod
    def _flatten_rows(sch, mm, epilogue):
        """The batch axes and M of the tile's accumulator, of `mm` and of its write-back fused into one row axis.
        The accumulator is a local buffer, so its layout is ours to choose. With it 2-D, the rows a tile writes
        are one range of the write-back's rows, so the write-back computed at the tile covers just those."""
        iter_vars = sch.get(mm).iter_vars
        extents = [int(iv.dom.extent) for iv in iter_vars[:-2]]  # batch..., M
        dtype = str(iter_vars[0].var.ty)

        def fused(*axes):  # (batch..., m, n[, k]) -> (row, n[, k])
            row = axes[0]
            for axis, extent in zip(axes[1:len(extents)], extents[1:]):
                row = row * extent + axis
            return [row, *axes[len(extents):]]

        def index_map(ndim):
            return tirx.IndexMap.from_func(fused, ndim=ndim, index_dtype=dtype)

        spatial = len(extents) + 1
        sch.transform_layout(mm, ("write", 0), index_map(spatial))
        sch.transform_block_layout(mm, index_map(spatial + 1))
        sch.transform_block_layout(epilogue, index_map(spatial))

    @staticmethod
    def _pad_to_tiles(sch, mm, rows, columns):
        """Pad the symbolic M / N of the iteration space to whole tiles: zero-filled operand copies, and a crop
        of the result folded into the epilogue, which alone is predicated."""
        *batch, _, _, _ = sch.get_loops(mm)
        sch.pad_einsum(mm, [1] * len(batch) + [rows, columns, 1])
        crop, = sch.get_consumers(mm)
        if sch.get_consumers(crop):  # an epilogue follows: it reads the padded result directly
            sch.compute_inline(crop)

    def _pack_b(self, sch, mm):
        """Copy B once into [..., N/V, K, V] so each tile's column panel is one contiguous stream."""
        lanes, (nax, kax) = self.lanes, self.b_axes

        def packed(*idx):
            rest = [x for n, x in enumerate(idx) if n not in (nax, kax)]
            return (*rest, idx[nax] // lanes, idx[kax], idx[nax] % lanes)

        sch.transform_layout(sch.cache_read(mm, self.b_index, "global"), ("write", 0), packed)


def _whole_tiles_unpredicated(loop, body, path):
    """A tile's write-back (the unrolled and vectorized loops of a block marked WHOLE_TILES) whose block is
    predicated, as `if <the tile's last row and column lie inside the output>: <the loops, the block
    unpredicated> else: <as it was>`. The block's bindings add the tile's loop variables to the tile's origin, so
    its last element is where each loop variable is at its largest."""
    from tvm import tirx
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import For, ForKind, IfThenElse

    tile_kinds = (ForKind.UNROLLED, ForKind.VECTORIZED)
    if loop.kind not in tile_kinds or path and path[-1].kind in tile_kinds:
        return nest.loop_with(loop, body)
    loops, inner = [loop], body
    while isinstance(inner, For) and inner.kind in tile_kinds:
        loops.append(inner)
        inner = inner.body
    if not (isinstance(inner, SBlockRealize) and WHOLE_TILES in (inner.block.annotations or {})):
        return nest.loop_with(loop, body)
    if isinstance(inner.predicate, tirx.IntImm) and int(inner.predicate):
        return nest.loop_with(loop, body)
    inside = [end < domain for value, end, domain in _at_last_step(inner, loops) if not end.same_as(value)]
    whole = SBlockRealize(inner.iter_values, tirx.const(True, "bool"), inner.block)
    for tile_loop in reversed(loops):
        whole = For(tile_loop.loop_var, tile_loop.min, tile_loop.extent, tile_loop.kind, whole,
                    tile_loop.thread_binding, tile_loop.annotations)
    original = nest.loop_with(loop, body)
    return IfThenElse(tirx.all(*inside), whole, original) if inside else original


def _whole_tiles_accumulate_unpredicated(loop, body, path, name):
    """The loop around one register tile (the accumulators' init, the K loop, the write-back) where the tile's init
    and update blocks are predicated, as where a static M is no multiple of the tile's rows: `if <the tile lies
    inside the iteration space>: <the tile, init and update unpredicated> else: <as it was>`. LLVM unswitches a
    predicate in the K loop only while the tile's code is small: behind an erf write-back it stayed there, with
    a spilled accumulator (docs/decisions/partial-tiles.md). The write-back's own split is
    `_whole_tiles_unpredicated`'s, made before this one."""
    from tvm.tirx import IfThenElse
    from tvm_ffi import structural_equal

    tile = _tile_blocks(body, name)
    if tile is None:
        return nest.loop_with(loop, body)
    inside, predicated = [], []
    for realize, loops in tile:
        bounds = _iteration_bounds(realize, loops, (*path, loop))
        if bounds is None:  # a predicate that says more than "inside the iteration space": kept in both branches
            continue
        inside += [b for b in bounds if not any(structural_equal(b, seen) for seen in inside)]
        predicated.append(realize)
    if not predicated:
        return nest.loop_with(loop, body)
    whole = tirx.all(*inside)
    return nest.loop_with(loop, IfThenElse(whole, _specialized(body, whole, True, predicated),
                                           _specialized(body, whole, False)))


def _tile_blocks(body, name):
    """[(realize, the loops between `body` and it)] of the matmul's init and update blocks, where `body` is a tile's:
    a sequence whose first statement is the init's loop nest. None for any other body. A branch in the tile (the
    write-back's split into whole tiles and the rest, a step's prefetches) is left as it is."""
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import DeclBuffer, For, IfThenElse, SeqStmt

    if _tile_init(body, name) is None:
        return None
    found = []

    def walk(stmt, loops):
        if isinstance(stmt, For):
            return walk(stmt.body, (*loops, stmt))
        if isinstance(stmt, SeqStmt):
            return all(walk(s, loops) for s in stmt.seq)
        if isinstance(stmt, SBlockRealize):
            if stmt.block.name_hint in (name + "_init", name + "_update"):
                found.append((stmt, loops))
            return True
        return isinstance(stmt, (IfThenElse, DeclBuffer))  # DeclBuffer: the view a step's prefetches read

    return found if walk(body, ()) else None


def _tile_init(body, name):
    """(the accumulators' init block, the loops down to it) where `body` is a register tile's: a sequence whose first
    statement is the init's loop nest; None for any other body."""
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import For, ForKind, SeqStmt

    first = body.seq[0] if isinstance(body, SeqStmt) else None
    inner = []
    while isinstance(first, For) and first.kind != ForKind.PARALLEL:
        inner.append(first)
        first = first.body
    if not (isinstance(first, SBlockRealize) and first.block.name_hint == name + "_init"):
        return None
    return first, inner


def _iteration_bounds(realize, loops, outer):
    """The conditions under which `realize`'s predicate holds at every step of `loops` (inside `outer`): each of
    its iterators, at the loops' last step, inside its domain. None where the predicate says more than that its
    iterators lie inside their domains, as a split of an extent the tile does not divide makes it. Bindings grow
    with the loop variables, as the schedule's splits and fuses make them."""
    from tvm.ir import Range
    from tvm.sym import Analyzer

    predicate = realize.predicate
    if isinstance(predicate, tirx.IntImm) and int(predicate):
        return None
    analyzer = Analyzer()
    for loop in (*outer, *loops):
        analyzer.bind(loop.loop_var, Range.from_min_extent(loop.min, loop.extent))
    steps = _at_last_step(realize, loops)
    with analyzer.constraint_scope(tirx.all(*(value < domain for value, _, domain in steps))):
        if not analyzer.can_prove(predicate):
            return None
    return [end < domain for _, end, domain in steps]


def _at_last_step(realize, loops):
    """(binding, its value at the last step of `loops`, its domain's end) for each of the block's iterators. The
    bindings add the loop variables to the tile's origin, so at the last step each is at its largest."""
    last = nest.substitute(realize.iter_values, {l.loop_var: l.min + l.extent - 1 for l in loops})
    return [(value, end, iv.dom.min + iv.dom.extent)
            for iv, value, end in zip(realize.block.iter_vars, realize.iter_values, last)]


def _specialized(stmt, condition, holds: bool, realizes=()):
    """`stmt` where `condition` is known to hold (or not, `holds`): a branch on the same condition (the write-back's
    whole-tile split) replaced by the side taken, and the blocks of `realizes` unpredicated."""
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import For, IfThenElse, SeqStmt
    from tvm_ffi import structural_equal

    if isinstance(stmt, For):
        return nest.loop_with(stmt, _specialized(stmt.body, condition, holds, realizes))
    if isinstance(stmt, SeqStmt):
        return SeqStmt([_specialized(s, condition, holds, realizes) for s in stmt.seq])
    if isinstance(stmt, IfThenElse) and stmt.else_case is not None and structural_equal(stmt.condition, condition):
        return _specialized(stmt.then_case if holds else stmt.else_case, condition, holds, realizes)
    if isinstance(stmt, SBlockRealize) and any(stmt.same_as(r) for r in realizes):
        return SBlockRealize(stmt.iter_values, tirx.const(True, "bool"), stmt.block)
    return stmt


def _real_rows_only(loop, body, name, rows):
    """The loop of one-row tiles (the one around the accumulators' init) with its body run only where the tile's
    row is below `rows`: the rows past it are a lowering's padding."""
    from tvm.tirx import IfThenElse

    init = _tile_init(body, name)
    if init is None:
        return nest.loop_with(loop, body)
    first, inner = init
    (row,) = nest.substitute([first.iter_values[-2]], {l.loop_var: l.min for l in inner})
    return nest.loop_with(loop, IfThenElse(row < rows, body, None))


__all__ = ["MatmulTemplate"]
