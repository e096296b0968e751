"""Parallel loops over a symbolic extent, guarded at run time.

A template sizes its parallel decisions by the smallest input a module serves, a symbolic extent counting 1
(common.least_iterations), so a nest over a sequence or a KV cache length ran serial although it usually spans
hundreds of rows: attention's KV concat, its K transpose, the padded copies of its operands. Such a nest is
marked while scheduling (`parallelize`): the loop is made parallel and annotated with the least number of
elements that repays a parallel launch. `insert` (a template's finish step) turns each marked loop into
`if <its nest's elements> >= least: <the loop, parallel> else: <the same loop, serial>`, so a decode step's lone
new row and a tiny prompt keep running serial while a long cache is shared among the cores
(docs/decisions/kv-cache-decoding.md).
"""

from __future__ import annotations

import math

from . import nest

# on a parallel loop: the least elements (of its whole nest) to run it in parallel; an int, since a schedule's
# annotation cannot hold an expression of the func's size vars
GUARD = "xcomp.parallel_from"


def parallelize(sch, loops, cores: int, min_elements: int) -> bool:
    """Make the nest `loops` (outermost first, at least one with a symbolic extent) parallel when it does at
    least `min_elements` elements at run time (its loops' extents and those of the loops inside). Fuses the
    static loops in front of the first symbolic one when they give every core work (12 heads: the symbolic
    length stays a plain inner loop, with no division per element by it), else those and the symbolic loop.
    Returns False, marking nothing, for a static nest (common.parallelize decides those) or a single core."""
    extents = [sch.get(loop).extent for loop in loops]
    first = next((n for n, e in enumerate(extents) if not hasattr(e, "value")), None)
    if first is None or cores < 2:
        return False
    static_front = math.prod(int(e) for e in extents[:first])
    fused = loops[:first] if static_front >= cores else loops[:first + 1]
    loop = sch.fuse(*fused) if len(fused) > 1 else fused[0]
    sch.parallel(loop)
    sch.annotate(loop, GUARD, min_elements)
    return True


def insert(func):
    """`func` with every marked loop split into a parallel and a serial copy behind the test of its elements;
    unchanged when it has none."""
    body = nest.rebuild(func.body, _guarded)
    if body.same_as(func.body):
        return func
    # both copies define the loop's variables and block iterators: SSA form gives each copy its own
    return nest.in_ssa_form(func.with_body(body))


def _guarded(loop, body, path):  # noqa: ARG001 (nest.rebuild's callback)
    from tvm.tirx import For, ForKind, IfThenElse

    least = loop.annotations.get(GUARD) if loop.annotations else None
    if least is None:
        return nest.loop_with(loop, body)
    keep = {k: v for k, v in loop.annotations.items() if k != GUARD}
    parallel = For(loop.loop_var, loop.min, loop.extent, ForKind.PARALLEL, body, loop.thread_binding, keep)
    serial = For(loop.loop_var, loop.min, loop.extent, ForKind.SERIAL, body, None, keep)
    return IfThenElse(loop.extent * _nest_elements(body) >= int(least), parallel, serial)


def _nest_elements(stmt):
    """Iterations of the loops directly nested in `stmt` (the first of a sequence of stages)."""
    from tvm.tirx import For, SeqStmt

    if isinstance(stmt, SeqStmt):
        return _nest_elements(stmt.seq[0])
    if isinstance(stmt, For):
        return stmt.extent * _nest_elements(stmt.body)
    return 1


__all__ = ["GUARD", "parallelize", "insert"]
