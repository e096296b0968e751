"""Rebuilding a scheduled PrimFunc's loop nest after scheduling, for what schedule primitives cannot express
(prefetch.py's prefetches, guard.py's run-time parallel choice, matmul.py's run-time choice of a schedule)."""

from __future__ import annotations


def rebuild(stmt, on_loop, path=()):
    """`stmt` with each For loop replaced by on_loop(loop, body, path): `body` the loop's body already rebuilt,
    `path` the loops around it, outermost first. Walks loops, sequences and blocks; parts left as they were are
    returned as they were (the same object)."""
    from tvm.s_tir.stmt import SBlock, SBlockRealize
    from tvm.tirx import For, SeqStmt

    if isinstance(stmt, For):
        return on_loop(stmt, rebuild(stmt.body, on_loop, (*path, stmt)), path)
    if isinstance(stmt, SeqStmt):
        seq = [rebuild(s, on_loop, path) for s in stmt.seq]
        return stmt if all(a.same_as(b) for a, b in zip(seq, stmt.seq)) else SeqStmt(seq)
    if isinstance(stmt, SBlockRealize):
        block = stmt.block
        body = rebuild(block.body, on_loop, path)
        if body.same_as(block.body):
            return stmt
        block = SBlock(block.iter_vars, block.reads, block.writes, block.name_hint, body, block.init,
                       block.alloc_buffers, block.match_buffers, block.annotations)
        return SBlockRealize(stmt.iter_values, stmt.predicate, block)
    return stmt


def substitute(exprs, mapping) -> list:
    """`exprs` with the variables in `mapping` replaced by their values, simplified."""
    from tvm.sym import Analyzer

    analyzer = Analyzer()
    for var, value in mapping.items():
        analyzer.bind(var, value)
    return [analyzer.simplify(e) for e in exprs]


def loop_with(loop, body, drop=()):
    """`loop` with `body` and without the annotations named in `drop`: the loop itself where neither changes it
    (an on_loop callback's answer for a loop it leaves as it was)."""
    from tvm.tirx import For

    annotations = loop.annotations or {}
    keep = {k: v for k, v in annotations.items() if k not in drop}
    if body.same_as(loop.body) and len(keep) == len(annotations):
        return loop
    return For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, keep)


def either(condition, then_func, else_func):
    """One PrimFunc running `then_func`'s body where `condition` (an expression of the params' size vars) holds
    at run time and `else_func`'s elsewhere: two schedules of the same func, so both read the same params. Each
    branch allocates its own scratch buffers, in a block of its own."""
    from tvm import tirx
    from tvm.s_tir.stmt import SBlock, SBlockRealize

    def branch(func, name):
        root = func.body.block
        return SBlockRealize([], tirx.const(True, "bool"), SBlock([], [], [], name, root.body, None,
                                                                   root.alloc_buffers))

    body = tirx.IfThenElse(condition, branch(then_func, "then"), branch(else_func, "else"))
    # both bodies define the loop variables and block iterators of the one func both were scheduled from
    return in_ssa_form(else_func.with_body(SBlockRealize([], tirx.const(True, "bool"),
                                                          SBlock([], [], [], "root", body))))


def in_ssa_form(func):
    """`func` with every variable defined once: loop variables, Let variables and block iterators that a rebuild
    copied get names of their own (TIR's well-formedness check, and so s_tir.Schedule, rejects a second
    definition)."""
    import tvm

    convert = tvm.get_global_func("s_tir.transform.ConvertSSA")()
    return convert(tvm.IRModule({"main": func}))["main"]


__all__ = ["rebuild", "substitute", "loop_with", "either", "in_ssa_form"]
