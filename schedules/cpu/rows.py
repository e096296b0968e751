"""Row-wise groups (softmax and log-softmax over the last axis, vector_math.py): every stage of a row computed in
one parallel iteration over the rows, so the row stays in L1 from its max to its normalized values.

Scheduled stage by stage at the root instead, each stage is a pass over the whole tensor, and the exponentials a
whole intermediate tensor: attention's 1x6x1500x1500 scores (54 MB) went through memory five times
(docs/decisions/vector-math.md). Within the row, a lane-partial reduction (ROW_PARTIALS) runs its vector of
partials over the row's vectors, and an elementwise stage runs whole vectors with its tail (the columns past the
last whole vector) as a scalar loop of its own.

While a row computes its exponentials, it prefetches the next row's lines of the input and output: the row
computes long enough for them to arrive, and without them each row's first pass waited on memory line by line
(whisper's 1x6x1500x1500 scores: 11.4 -> 6.9 ms, docs/decisions/vector-math.md).
"""

from __future__ import annotations

import math

from ..analysis import ROLE, ROW_PARTIALS, root_blocks
from ..template import Declined
from . import nest, prefetch
from .common import CpuTemplate, inline_injective, loop_extent, parallelize


def has_row_partials(func, kind, ctx) -> bool:  # noqa: ARG001 - the marker is in the func
    """A rule's claims: a reduction group with a lane-partial row reduction (vector_math's softmax)."""
    from tvm import s_tir

    return kind == "reduction" and any(info.block.annotations.get(ROLE) == ROW_PARTIALS
                                       for info in root_blocks(s_tir.Schedule(func), symbolic=True))

# on a row's column loop of symbolic extent: the vector width `finish` splits it into (_split_vector_tail)
VECTOR_TAIL = "xcomp.vector_tail"
# on the loop over a row's whole vectors that prefetches the next row, a line per step: the vector width
NEXT_ROW = "xcomp.prefetch_next_row"


class RowTemplate(CpuTemplate):
    kind = "reduction"
    knobs = ()

    def __init__(self, func, ctx):
        from tvm import s_tir
        from tvm.sym import Analyzer

        super().__init__(func, ctx)
        sch = s_tir.Schedule(func)
        infos = root_blocks(sch, symbolic=True)
        self.shape = list(infos[-1].write_buffer().shape)
        self.rows = len(self.shape) - 1
        same = Analyzer().can_prove_equal
        for info in infos:
            extents = [iv.dom.extent for iv in info.block.iter_vars[:self.rows]]
            if len(extents) < self.rows or not all(map(same, extents, self.shape)):
                raise Declined("a stage that does not run over the output's rows")

    def knob_space(self):
        return {}

    def default_knobs(self):
        return {}

    def apply(self, sch, knobs):  # noqa: ARG002 - no knobs
        inline_injective(sch)
        infos = root_blocks(sch, symbolic=True)
        row_loops = sch.get_loops(infos[-1].rv)[:self.rows]
        outer = self._parallel_rows(sch, row_loops)
        rows = [sch.fuse(*outer) if len(outer) > 1 else outer[0], *row_loops[len(outer):]]
        for info in reversed(infos[:-1]):  # consumers first: each producer then lands ahead of them in the row
            sch.compute_at(info.rv, rows[-1])
        # rows a symbolic dim counts (a batch, a sequence): parallel always. guard.py's run-time choice copies the
        # loop, which left the row's scratch buffers (its exponentials) shared by both copies at the root, at
        # the whole tensor's size, where TVM otherwise compacts them to a row (docs/decisions/symbolic-shapes.md)
        parallelize(sch, rows[:1], self.spec.cores, symbolic=self.spec.cores)
        first_elementwise = True  # softmax's exponentials: the stage that computes the longest
        for info in root_blocks(sch, symbolic=True):
            inner = sch.get_loops(info.rv)[len(rows):]
            if info.block.annotations.get(ROLE) == ROW_PARTIALS:
                vectorize_partials(sch, info.rv, inner)
            elif not info.is_reduction and inner:
                self._vectorize_columns(sch, inner[-1], prefetch_next_row=first_elementwise)
                first_elementwise = False

    def _parallel_rows(self, sch, row_loops) -> list:
        """The row loops to fuse into the parallel one: all, or where a symbolic one is among them and those in
        front of the last give every core work, those only. The last then stays a loop of its own, and a row's
        index needs no division by the symbolic extents per row."""
        extents = [sch.get(loop).extent for loop in row_loops]
        if all(hasattr(e, "value") for e in extents) or len(row_loops) < 2:
            return row_loops
        static_front = math.prod(int(e) for e in extents[:-1] if hasattr(e, "value"))
        return row_loops[:-1] if static_front >= self.spec.cores else row_loops

    def _vectorize_columns(self, sch, columns, prefetch_next_row: bool) -> None:
        """Whole vectors of the row's columns, then the rest as a scalar loop. A symbolic row length is marked
        and split so in `finish`: loop_partition takes static extents only."""
        lanes = self.spec.simd_width
        count = loop_extent(sch, columns)
        if count is None:
            sch.annotate(columns, VECTOR_TAIL, lanes)
            if prefetch_next_row:
                sch.annotate(columns, NEXT_ROW, lanes)
            return
        vectors = split_whole_vectors(sch, columns, lanes)
        if vectors is not None and prefetch_next_row:
            sch.annotate(vectors, NEXT_ROW, lanes)

    def finish(self, func):
        from tvm.sym import Analyzer

        same = Analyzer().can_prove_equal
        row_buffers = [p for p in func.params if hasattr(p, "shape") and len(p.shape) == len(self.shape)
                       and all(map(same, p.shape, self.shape))]  # buffers are params here
        body = nest.rebuild(func.body, _split_vector_tail)
        body = nest.rebuild(body, lambda loop, inner, path: _prefetch_next_row(loop, inner, path, row_buffers))
        # the partition copies a stage's body, and with it the variables its Lets bind (vector_math's exp):
        # each copy gets its own
        return super().finish(nest.in_ssa_form(func.with_body(body)))


def vectorize_partials(sch, block, inner) -> None:
    """A ROW_PARTIALS block's lanes vectorized inside its steps over the row's vectors; `inner` are its loops
    inside the rows (..., lanes, the row's vectors)."""
    *_, lane, step = inner
    sch.reorder(step, lane)
    sch.vectorize(lane)
    sch.decompose_reduction(block, step)


def split_whole_vectors(sch, columns, lanes: int):
    """A static column loop as whole vectors (its inner loop vectorized) and then a scalar loop over the rest; the
    loop over the whole vectors, or None when the row is shorter than a vector."""
    count = loop_extent(sch, columns)
    whole = count // lanes * lanes
    if not whole:
        return None
    body = sch.loop_partition(columns, [whole, None])[0] if count != whole else columns
    vectors, lane = sch.split(body, [None, lanes])
    sch.vectorize(lane)
    return vectors


def _prefetch_next_row(loop, body, path, buffers):
    """The NEXT_ROW loop with, ahead of each step, a prefetch of the next row's line at the step's columns in each
    of `buffers` (the rows' input and output). The loops around it are the rows' (RowTemplate.apply)."""
    from tvm import tirx
    from tvm.tirx import DeclBuffer, IfThenElse, SeqStmt

    lanes = loop.annotations.get(NEXT_ROW) if loop.annotations else None
    if lanes is None or not path or not buffers:
        return nest.loop_with(loop, body, drop=(NEXT_ROW,))
    row, rows = path[0].loop_var - path[0].min, path[0].extent
    for inner in path[1:]:
        row, rows = row * inner.extent + inner.loop_var - inner.min, rows * inner.extent
    fetches = []
    for buffer in buffers:
        flat = tirx.decl_buffer((math.prod(buffer.shape),), buffer.dtype, name=f"{buffer.name}_rows",
                                data=buffer.data)
        start = (row + 1) * buffer.shape[-1] + (loop.loop_var - loop.min) * int(lanes)
        fetches += [DeclBuffer(flat, data=buffer.data), prefetch.instruction(flat, start)]
    body = SeqStmt([IfThenElse(row + 1 < rows, SeqStmt(fetches), None), body])
    return nest.loop_with(loop, body, drop=(NEXT_ROW,))


def _split_vector_tail(loop, body, path):  # noqa: ARG001 (nest.rebuild's callback)
    """A loop marked VECTOR_TAIL as whole vectors (vectorized) and then a scalar loop over the rest. Its body is
    one stage's block, whose bindings alone use the loop's variable."""
    from tvm import tirx
    from tvm.s_tir.stmt import SBlockRealize
    from tvm.tirx import For, ForKind, SeqStmt

    lanes = loop.annotations.get(VECTOR_TAIL) if loop.annotations else None
    if lanes is None or not isinstance(body, SBlockRealize):
        return nest.loop_with(loop, body, drop=(VECTOR_TAIL,))
    var = loop.loop_var
    dtype = str(var.ty)
    zero, lanes = tirx.const(0, dtype), tirx.const(int(lanes), dtype)
    vectors = tirx.floordiv(loop.extent, lanes)
    outer, lane, rest = (tirx.Var(f"{var.name}_{part}", dtype) for part in ("o", "v", "t"))
    marks = {k: v for k, v in loop.annotations.items() if k == NEXT_ROW}  # the whole vectors prefetch, if any
    whole = For(outer, zero, vectors, ForKind.SERIAL,
                For(lane, zero, lanes, ForKind.VECTORIZED, _bound(body, var, loop.min + outer * lanes + lane)),
                None, marks)
    tail = For(rest, zero, loop.extent - vectors * lanes, ForKind.SERIAL,
               _bound(body, var, loop.min + vectors * lanes + rest))
    return SeqStmt([whole, tail])


def _bound(realize, var, value):
    """The block `realize` with `var` in its bindings and predicate replaced by `value` (a copy of a block keeps
    its iterators; RowTemplate.finish's SSA form gives each copy its own)."""
    from tvm.s_tir.stmt import SBlockRealize

    bindings = nest.substitute(realize.iter_values, {var: value})
    predicate, = nest.substitute([realize.predicate], {var: value})
    return SBlockRealize(bindings, predicate, realize.block)


__all__ = ["RowTemplate", "has_row_partials", "split_whole_vectors", "vectorize_partials"]
