"""Rebuilding a scheduled PrimFunc's loop nest after scheduling, for what schedule primitives cannot express
(prefetch.py's prefetches, guard.py's run-time parallel choice)."""

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


def loop_with(loop, body, drop=()):
    """`loop` with `body` and without the annotations named in `drop`: the loop itself where neither changes it
    (an on_loop callback's answer for a loop it leaves as it was)."""
    from tvm.tirx import For

    annotations = loop.annotations or {}
    keep = {k: v for k, v in annotations.items() if k not in drop}
    if body.same_as(loop.body) and len(keep) == len(annotations):
        return loop
    return For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, keep)


__all__ = ["rebuild", "loop_with"]
