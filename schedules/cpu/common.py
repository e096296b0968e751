"""What every CPU template shares: the fallback chain, divisor helpers, inlining, and the generic per-block
schedule (parallel outer loops, vectorized inner loop) used for everything a template does not tile itself."""

from __future__ import annotations

import logging

from ..analysis import REDUCE, SPATIAL, branches_along, main_reduction, root_blocks, subexpressions
from ..template import Knob, Knobs, Template
from . import guard

log = logging.getLogger(__name__)

# Below this many output elements a parallel loop costs more (thread wake-up) than it saves.
MIN_PARALLEL_ELEMENTS = 4096

# Block annotation (te.compute attrs) of a spatial stage to compute once and store rather than inline into its
# consumers: costly per element and read by several (softmax's exp feeds both the sum and the division).
MATERIALIZE = "xcomp.materialize"


def tile_fma_rate(spec, accumulators: int, loads: int) -> float:
    """FMAs per cycle of a register tile's reduction step that does `accumulators` FMAs (one per accumulator
    vector) and `loads` vector loads or broadcasts on a core of `spec`: bound by the FMA pipes, by the load
    ports, and by the FMA latency, since each accumulator waits for its previous FMA."""
    return accumulators / max(accumulators / spec.fma_pipes, loads / spec.load_ports, spec.fma_latency)


def divisors(n: int, limit: int | None = None) -> list:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]


def vector_registers(spec) -> int:
    """Vector registers a register tile may plan with: the spec's, or 16 (SSE/AVX2) for a hand-made spec that
    leaves them out."""
    return spec.vector_registers or 16


def loop_extent(sch, loop) -> int | None:
    """A loop's extent; None when it is symbolic (a batch or sequence dim kept symbolic)."""
    extent = sch.get(loop).extent
    return int(extent) if hasattr(extent, "value") else None


def least_iterations(sch, loops, symbolic: int = 1) -> int:
    """Iterations of a loop nest at its smallest: a symbolic extent counts `symbolic` (by default 1). Thresholds
    (is this worth a parallel launch?) use it, so a module never pays thread wake-ups the smallest input it
    serves cannot repay."""
    total = 1
    for loop in loops:
        total *= loop_extent(sch, loop) or symbolic
    return total


class CpuTemplate(Template):
    """A CPU template. Where its own configs fail, the generic schedule is the safe fallback (the pipeline's
    chain: the database's config, the default, this, the unscheduled func; compile must not fail because of a
    schedule)."""

    def fallback_schedule(self):
        from tvm import s_tir

        sch = s_tir.Schedule(self.func)
        try:
            generic_schedule(sch, self.spec, GENERIC_DEFAULTS)
            return self.finish(sch.mod["main"])
        except Exception as err:  # the generic schedule's assumptions do not hold either
            log.debug("generic schedule failed: %s", err)
            return None

    def finish(self, func):
        return guard.insert(func)


# -- inlining ----------------------------------------------------------------------------------------------


def output_names(sch) -> set:
    """Blocks writing one of the func's parameters."""
    return {sch.get(rv).name_hint for rv in sch.get_output_blocks(sch.get_sblock("root"))}


def inline_injective(sch, keep=()) -> None:
    """Inline every spatial block that is not an output into its consumers (epilogue chains collapse into the
    last block); blocks named in `keep` (a pad stage a template wants materialised) or annotated MATERIALIZE
    stay, and so does a costly block that a consumer broadcasts: inlined, a squeeze-excite's sigmoid of 144
    channel gates ran once per element of the 56x56 map it scales."""
    outputs = output_names(sch)
    for info in root_blocks(sch, symbolic=True):
        if info.is_reduction or info.name in keep or info.name in outputs or MATERIALIZE in info.block.annotations:
            continue
        if is_costly(getattr(sch.get(info.rv).body, "value", None)) and _spatially_broadcast(sch, info.rv):
            continue
        try:
            sch.compute_inline(info.rv)
        except Exception:  # e.g. its consumer is a reduction that cannot absorb it: it stays a stage
            pass


def _spatially_broadcast(sch, block) -> bool:
    """A spatial consumer of `block` runs over more points than it (a reduction consumer, such as a conv reading
    its padded input, reads each point several times by design)."""
    return any(all(int(iv.iter_type) == SPATIAL for iv in sch.get(consumer).iter_vars)
               and broadcasts(sch, block, consumer) for consumer in sch.get_consumers(block))


def is_costly(expr) -> bool:
    """A division or an intrinsic call (exp, floor, ...) anywhere in the TIR expression `expr` (None: no)."""
    import tvm
    from tvm import tirx

    return expr is not None and any(isinstance(node, (tirx.Div, tvm.ir.Call)) for node in subexpressions(expr))


def is_pure_copy(info) -> bool:
    """A spatial block storing an unconditioned load (a zero-width pad): free to inline."""
    import tvm

    value = getattr(info.block.body, "value", None)
    return not info.is_reduction and isinstance(value, tvm.ir.expr.TensorLoad)


def tile_epilogue(sch, block):
    """The block that writes a register tile out: the fused epilogue, or a cache-write stage when `block` writes
    the output itself or its epilogue broadcasts (`broadcasts`). `block`'s own buffer becomes a tile-sized local
    accumulator; a broadcasting epilogue stays a root block for the template to schedule apart."""
    consumers = sch.get_consumers(block)
    if not consumers or len(consumers) == 1 and broadcasts(sch, block, consumers[0]):
        return sch.cache_write(block, 0, "local")
    if len(consumers) != 1:
        raise ValueError(f"{sch.get(block).name_hint} result feeds several blocks")
    sch.set_scope(block, 0, "local")
    return consumers[0]


def broadcasts(sch, block, consumer) -> bool:
    """`consumer` runs over more points than `block` writes (a squeeze-excite's 1x1 conv scaling a whole feature
    map). Computed at a register tile, it would run over the whole map once per tile, fully unrolled as a tile's
    write-back is: far more code than LLVM compiles in reasonable time."""
    from tvm.sym import Analyzer

    def points(rv, spatial_only):
        total = 1
        for iv in sch.get(rv).iter_vars:
            if not spatial_only or int(iv.iter_type) == SPATIAL:
                total = total * iv.dom.extent
        return total

    return Analyzer().can_prove(points(consumer, False) > points(block, True))


# -- the generic schedule ----------------------------------------------------------------------------------

GENERIC_DEFAULTS = {"vector": 1, "parallel": True}
GENERIC_SPACE = {"vector": [0, 1, 2], "parallel": [True, False]}  # vector: 0 off, else times the spec's lanes


def schedule_spatial(sch, rv, lanes: int, cores: int, parallel: bool = True) -> None:
    """Parallel fused outer loops and a vectorized split of the innermost loop when it divides evenly; otherwise
    the innermost loop stays whole inside the parallel ones where those give every core work."""
    loops = sch.get_loops(rv)
    if not loops:
        return
    wanted, parallel = parallel, parallel and least_iterations(sch, loops) >= MIN_PARALLEL_ELEMENTS
    inner = loops[-1]
    outer = list(loops[:-1])
    # A concat along the innermost axis branches per element: TVM's vectorizer would run the split loop one
    # element at a time, and LLVM 22 miscompiles its own vectors over such a loop of one vector's length
    # (docs/decisions/avx512-width.md). Left whole, LLVM vectorizes it correctly.
    block = sch.get(rv)
    if lanes and branches_along(block, len(block.iter_vars) - 1):
        lanes = 0
    kept = []  # an innermost loop left out of the parallel fusion
    if lanes and _splits_into_vectors(sch, inner, lanes):
        io, ii = sch.split(inner, [None, lanes])
        outer.append(io)
        sch.vectorize(ii)
    elif outer and least_iterations(sch, outer) >= cores:
        # a row of no whole number of vectors stays a loop of its own inside the parallel rows: LLVM vectorizes
        # it with a remainder, where fused into them each element would pay a division for its row's index
        kept = [inner]
    else:
        outer.append(inner)
    if wanted and not parallel and guard.parallelize(sch, outer + kept, cores, MIN_PARALLEL_ELEMENTS):
        return  # a symbolic nest: parallel when its size at run time repays it (guard.py)
    parallelize(sch, outer, cores if parallel else 1)


def _splits_into_vectors(sch, loop, lanes: int) -> bool:
    """An extent that is a whole number of vectors: static, or symbolic and a multiple by construction (a length
    padded to whole tiles); any other symbolic one would need a tail loop."""
    extent = loop_extent(sch, loop)
    if extent is None:
        from tvm import tirx
        from tvm.sym import Analyzer

        return Analyzer().can_prove(tirx.floormod(sch.get(loop).extent, lanes) == 0)
    return extent >= lanes and extent % lanes == 0


def parallelize(sch, loops, cores: int, symbolic: int = 1) -> None:
    """Fuse `loops` (outermost first) and run them in parallel when there is enough work to share; a symbolic
    extent counts `symbolic` iterations (see least_iterations)."""
    if _worth_parallel(sch, loops, cores, symbolic):
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        sch.parallel(fused)


def fuse_parallel(sch, loops, cores: int, symbolic: int = 1):
    """Fuse `loops` into one loop, run in parallel as parallelize would run them; returns the fused loop. The
    decision counts the loops before fusing: a symbolic batch fused in would make the whole extent symbolic."""
    parallel = _worth_parallel(sch, loops, cores, symbolic)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if parallel:
        sch.parallel(fused)
    return fused


def _worth_parallel(sch, loops, cores: int, symbolic: int) -> bool:
    return cores > 1 and least_iterations(sch, loops, symbolic) >= cores


def schedule_reduction(sch, info, lanes: int, cores: int, parallel: bool = True) -> None:
    """Parallel over the outer spatial loops. A reduction along its input's contiguous axis (softmax, layer norm,
    a mean over the last axis) sums each row in vector lanes (_vector_partial_sums). Otherwise, when the
    innermost spatial loop splits into vectors (a pool: a window reduction per output column), the reduction
    loops move outside it so it can be vectorized."""
    loops = sch.get_loops(info.rv)
    if len(loops) != len(info.iter_kinds):  # not the one-loop-per-iter-var nest this expects
        return
    spatial = [loop for loop, k in zip(loops, info.iter_kinds) if k != REDUCE]
    reduce = [loop for loop, k in zip(loops, info.iter_kinds) if k == REDUCE]
    # the widest vector, down to a quarter of the spec's, that the innermost spatial loop splits into (a head
    # of 8 values under attention's P V is half a 16-lane vector)
    widths = [w for w in (lanes, lanes // 2, lanes // 4) if w >= 4] if lanes else []
    if spatial and _reduces_contiguous_axis(info):
        # at least two vectors a row: partial sums over one vector would only copy it
        width = next((w for w in widths if _splits_into_vectors(sch, reduce[-1], 2 * w)), 0)
        if width:
            _vector_partial_sums(sch, info, len(spatial), reduce[-1], width, cores if parallel else 1)
            return
    lanes = next((w for w in widths if spatial and _splits_into_vectors(sch, spatial[-1], w)), 0)
    vectorize = bool(lanes)
    # a symbolic innermost spatial loop (attention's key positions) stays out of the parallel fusion, whose
    # index it would turn into a division per element: a plain inner loop
    symbolic_inner = not vectorize and len(spatial) > 1 and loop_extent(sch, spatial[-1]) is None
    outer = spatial[:-1] if vectorize or symbolic_inner else spatial
    if vectorize:
        sch.reorder(*outer, *reduce, spatial[-1])
        _, vi = sch.split(spatial[-1], [None, lanes])
        sch.vectorize(vi)
    if outer and parallel:
        parallelize(sch, outer, cores)
    if vectorize:  # the init must get its own (vectorized) loop; decompose last (see TVM notes)
        sch.decompose_reduction(info.rv, reduce[0])


def _reduces_contiguous_axis(info) -> bool:
    """The innermost loop reduces along the innermost axis of a buffer it reads: vector lanes belong along that
    axis, where vectors across rows would gather one element per row."""
    if not info.iter_kinds or info.iter_kinds[-1] != REDUCE:
        return False
    var = info.block.iter_vars[-1].var
    return any(read.region[-1].min.same_as(var) for read in info.block.reads)


def _vector_partial_sums(sch, info, spatial_count: int, innermost, width: int, cores: int) -> None:
    """Each row reduced as `width` partial sums in one vector (rfactor over the innermost loop's lanes), then the
    lanes summed, the rows in parallel."""
    _, lane = sch.split(innermost, [None, width])
    partial = sch.rfactor(lane, factor_axis=len(info.write_buffer().shape))  # the lanes as the last axis
    sch.compute_at(partial, sch.get_loops(info.rv)[spatial_count - 1])
    lanes_loop, *rest = sch.get_loops(partial)[spatial_count:]  # rfactor puts the lane loop first
    sch.reorder(*rest, lanes_loop)
    sch.vectorize(lanes_loop)
    parallelize(sch, sch.get_loops(info.rv)[:spatial_count], cores)
    sch.decompose_reduction(partial, rest[0])


def generic_schedule(sch, spec, knobs: Knobs, skip=()) -> None:
    """Every root block not named in `skip`, scheduled on its own (after inlining what can be inlined)."""
    inline_injective(sch)
    lanes = spec.simd_width * knobs["vector"]
    for info in root_blocks(sch, symbolic=True):
        if info.name in skip:
            continue
        if info.is_reduction:
            schedule_reduction(sch, info, lanes, spec.cores, knobs["parallel"])
        else:
            schedule_spatial(sch, info.rv, lanes, spec.cores, knobs["parallel"])


class GenericTemplate(CpuTemplate):
    """Injective, reduction, pool and opaque groups: each block parallel + vectorized on its own."""

    knobs = (Knob("vector", int, 22, "vector width in multiples of the spec's lanes (0: not vectorized)"),
             Knob("parallel", bool, 17, "run the outer loops in parallel"))

    def __init__(self, func, ctx, kind: str):
        super().__init__(func, ctx)
        self.kind = kind

    @classmethod
    def create(cls, func, ctx, kind: str) -> GenericTemplate:
        return cls(func, ctx, kind)

    def knob_space(self):
        return dict(GENERIC_SPACE) if self.kind != "opaque" else {}

    def default_knobs(self):
        return dict(GENERIC_DEFAULTS) if self.kind != "opaque" else {}

    def apply(self, sch, knobs):
        if self.kind != "opaque":
            generic_schedule(sch, self.spec, knobs)


__all__ = ["CpuTemplate", "GenericTemplate", "divisors", "inline_injective", "tile_epilogue", "is_pure_copy",
           "schedule_spatial", "schedule_reduction", "parallelize", "generic_schedule", "main_reduction"]
