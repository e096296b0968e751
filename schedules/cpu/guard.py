"""Parallel loops over a symbolic extent, guarded at run time.

A template sizes its parallel decisions by the smallest input a module serves, a symbolic extent counting 1
(common.least_iterations), so a nest over a sequence or a KV cache length ran serial although it usually spans
hundreds of rows: attention's KV concat, its K transpose, the padded copies of its operands. Such a nest is
marked while scheduling (`parallelize`): the loop is made parallel and annotated with the least number of
elements that repays a parallel launch. `insert` (a template's finish step) turns each marked loop into
`if <its nest's elements> >= least: <the loop, parallel> else: <the same loop, serial>`, so a decode step's lone
new row and a tiny prompt keep running serial while a long cache is shared among the cores.
"""

from __future__ import annotations

import math

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
    import tvm

    body = _rebuild(func.body)
    if body.same_as(func.body):
        return func
    # both copies define the loop's variables and block iterators: SSA form gives each copy its own
    ssa = tvm.get_global_func("s_tir.transform.ConvertSSA")()
    return ssa(tvm.IRModule({"main": func.with_body(body)}))["main"]


def _rebuild(stmt):
    from tvm.s_tir.stmt import SBlock, SBlockRealize
    from tvm.tirx import For, ForKind, IfThenElse, SeqStmt

    if isinstance(stmt, For):
        least = stmt.annotations.get(GUARD) if stmt.annotations else None
        if least is None:
            body = _rebuild(stmt.body)
            return stmt if body.same_as(stmt.body) else For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                                                             stmt.thread_binding, stmt.annotations)
        keep = {k: v for k, v in stmt.annotations.items() if k != GUARD}
        parallel = For(stmt.loop_var, stmt.min, stmt.extent, ForKind.PARALLEL, stmt.body, stmt.thread_binding, keep)
        serial = For(stmt.loop_var, stmt.min, stmt.extent, ForKind.SERIAL, stmt.body, None, keep)
        elements = stmt.extent * _nest_elements(stmt.body)
        return IfThenElse(elements >= int(least), parallel, serial)
    if isinstance(stmt, SeqStmt):
        seq = [_rebuild(s) for s in stmt.seq]
        return stmt if all(a.same_as(b) for a, b in zip(seq, stmt.seq)) else SeqStmt(seq)
    if isinstance(stmt, SBlockRealize):
        block = stmt.block
        body = _rebuild(block.body)
        if body.same_as(block.body):
            return stmt
        block = SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                       block.alloc_buffers, block.match_buffers, block.annotations)
        return SBlockRealize(stmt.iter_values, stmt.predicate, block)
    return stmt


def _nest_elements(stmt):
    """Iterations of the loops directly nested in `stmt` (the first of a sequence of stages)."""
    from tvm.tirx import For, SeqStmt

    if isinstance(stmt, SeqStmt):
        return _nest_elements(stmt.seq[0])
    if isinstance(stmt, For):
        return stmt.extent * _nest_elements(stmt.body)
    return 1


__all__ = ["GUARD", "parallelize", "insert"]
