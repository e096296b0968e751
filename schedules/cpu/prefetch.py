"""Software prefetch of a conv's next channel tile of weights, or a matmul's next column panel: the one thing in
these schedules that no schedule primitive can place.

A direct conv that walks output-channel tiles (order co_outer) reads a tile's weights from memory during the
tile's first output row and from the L2 during the others. Inside a model the weights were last used an
inference ago, so that first row stalls on the stream while the other rows leave the memory bus idle (resnet50's
7x7 stage streams 4-9 MB of weights per conv). So from the tile's second row on, each core prefetches into its
L2 the weights of the tile it runs next, a few cache lines per step of a reduction loop, spread evenly over the
rest of the tile. The Winograd GEMM is alike with passes over a slab of tiles for rows, except that every pass
may prefetch: its first finds the slab in the L2 when the slab before it prefetched it, and otherwise waits on
the stream (docs/decisions/software-prefetch.md). Weights of one channel tile are contiguous in both packed
layouts ([O/V, ...], [a, a, K/V, C, V]), so the next tile's are the `tile_elems` after this one's. A matmul
walking the column panels of a packed weight ([N/V, K, V]) is the direct conv's case with row tiles for rows.

The template marks two loops while scheduling (`mark`): the loop over (channel tile, row) pairs and the reduction
loop to prefetch from, whose annotation carries the plan. `insert` turns the marks into prefetch instructions
on the scheduled PrimFunc and removes them. The reduction loop must not be the innermost one: a prefetch among
the FMAs keeps LLVM from holding the accumulators in registers (it stores them after every FMA).
"""

from __future__ import annotations

import math

import numpy as np

from . import nest

TILE_ROWS = "xcomp.prefetch_tile_rows"  # the loop over (channel tile, row) pairs: tile-major, `rows` per tile
STEP = "xcomp.prefetch_next_tile"  # the loop whose every iteration prefetches a few lines
LINE_BYTES = 64
L2_HINT = 2  # tirx.prefetch locality 2: x86 prefetcht1, into the L2
# Least share of its arithmetic time a kernel spends streaming weights for prefetching them to pay (pays).
STREAM_SHARE = 1 / 16


def pays(spec, uses: int) -> bool:
    """Is a prefetch worth its instructions: does streaming weights from memory take at least STREAM_SHARE of the
    time of the arithmetic they feed, each weight serving `uses` FMAs? Inside a model the weights come from
    memory (they were last used an inference ago), and the tile that streams its own waits on them; with many
    uses per weight that wait is a small part of the tile and the prefetches cost more than they hide. The
    threshold comes from resnet50 measured on an AVX2 and an AVX-512 host (docs/decisions/software-prefetch.md)."""
    return uses <= most_uses(spec)


def most_uses(spec) -> int:
    """The most uses per weight at which a prefetch pays (pays); 0 where the spec gives no peak or bandwidth."""
    peak, bandwidth = spec.peak(), spec.mem_bandwidth
    if not peak or not bandwidth:
        return 0
    # streaming an fp32 weight (4 bytes / bandwidth) against STREAM_SHARE of its arithmetic (2 FLOPs a use); the
    # 1e-9 keeps a bound that is a whole number whole through the float division
    return math.floor(4 * peak / (2 * bandwidth * STREAM_SHARE) * (1 + 1e-9))


def mark(sch, tile_rows, step, weight: str, tiles: int, rows: int | None, tile_elems: int, first_row: int = 1,
         most_rows: int = 0) -> None:
    """Plan a prefetch: `tile_rows` runs tiles x rows iterations (tile-major, the batch may be outside or fused
    in front), `step` is a loop inside it, `weight` the buffer name of the weights, of which each tile reads
    the next `tile_elems` elements (tile t: elements [t * tile_elems, (t + 1) * tile_elems)). The prefetches
    spread over rows first_row.. of each tile: from the second on where the first is the one that streams its
    own weights (a direct conv's), over all where every row reads its tile's weights from cache once they are
    there (the Winograd GEMM's passes). rows None: symbolic, `tile_rows`' extent over `tiles` (no batch fused
    in), and the prefetches run only where there are at most `most_rows` of them (pays, at run time)."""
    sch.annotate(tile_rows, TILE_ROWS, 1)
    sch.annotate(step, STEP, {"weight": weight, "tiles": tiles, "rows": rows or 0, "tile_elems": tile_elems,
                              "first_row": first_row, "most_rows": most_rows})


def insert(func, emit=None):
    """`func` with its marks turned into prefetches; unchanged when it has none. emit(lines, index) -> Stmt makes
    each prefetch of element `index` of `lines` (the weight viewed flat); by default the prefetch instruction
    (a test makes it record what would be prefetched)."""
    from tvm.tirx import SeqStmt

    params = {getattr(p, "name", None): p for p in func.params}
    emit = emit or instruction

    def on_loop(loop, body, path):
        plan = loop.annotations.get(STEP) if loop.annotations else None
        if plan is not None:
            prefetch = _prefetch([*path, loop], plan, params, emit)
            if prefetch is not None:
                body = SeqStmt([*prefetch, body])
        return nest.loop_with(loop, body, drop=(TILE_ROWS, STEP))

    body = nest.rebuild(func.body, on_loop)
    return func if body.same_as(func.body) else func.with_body(body)


def instruction(lines, index):
    """Prefetch element `index` of buffer `lines` into the L2."""
    from tvm import tirx

    address = tirx.address_of(tirx.BufferLoad(lines, [index]))
    return tirx.Evaluate(tirx.call_intrin("", "tirx.prefetch", address, 0, L2_HINT, 1))


def _prefetch(path, plan, params, emit):
    """[DeclBuffer, IfThenElse] prefetching this step's share of the next tile, or None when the plan cannot
    hold (no marked tile loop around it, a symbolic step loop)."""
    from tvm import tirx
    from tvm.tirx import DeclBuffer, For, ForKind, IfThenElse

    outer = next((i for i, loop in enumerate(path) if loop.annotations and TILE_ROWS in loop.annotations), None)
    weight = params.get(str(plan["weight"]))
    steps_loops = path[outer + 1:] if outer is not None else []
    if weight is None or not steps_loops or not all(hasattr(loop.extent, "value") for loop in steps_loops):
        return None
    tiles, rows, tile_elems = int(plan["tiles"]), int(plan["rows"]), int(plan["tile_elems"])
    first_row = int(plan["first_row"])
    shape = [int(d) for d in weight.shape]
    per_line = max(1, LINE_BYTES // np.dtype(str(weight.dtype)).itemsize)
    lines = -(-tile_elems // per_line)
    steps = math.prod(int(loop.extent) for loop in steps_loops)
    tile_row = path[outer].loop_var
    dtype = str(tile_row.ty)

    def const(x):
        return tirx.const(x, dtype)

    worth = []
    if rows:
        if rows <= first_row:
            return None
        per_step = const(-(-lines // ((rows - first_row) * steps)))
        rows = const(rows)
    else:  # symbolic: a division per prefetch step, where the prefetches pay for this many rows
        from tvm.sym import Analyzer

        rows = Analyzer().simplify(tirx.floordiv(path[outer].extent, const(tiles)))
        spread = tirx.max((rows - first_row) * steps, const(1))
        per_step = tirx.floordiv(const(lines) + spread - 1, spread)
        worth = [rows <= const(int(plan["most_rows"]))]

    step = const(0)
    for loop in steps_loops:
        step = step * loop.extent + (loop.loop_var - loop.min)
    row, tile = tile_row % rows, tile_row // rows % tiles
    t = tirx.Var("prefetch_line", dtype)
    line = ((row - first_row) * steps + step) * per_step + t
    flat = tirx.decl_buffer((math.prod(shape),), weight.dtype, name=f"{weight.name}_lines", data=weight.data)
    fetch = emit(flat, (tile + 1) * tile_elems + line * per_line)
    lines_loop = For(t, const(0), per_step, ForKind.SERIAL, IfThenElse(line < lines, fetch, None))
    return [DeclBuffer(flat, data=weight.data),
            IfThenElse(tirx.all(*worth, row >= first_row, tile + 1 < tiles), lines_loop, None)]


__all__ = ["pays", "most_uses", "mark", "insert", "instruction"]
