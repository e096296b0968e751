"""Which GPU thread writes and which reads each element of a thread-local buffer, in a scheduled PrimFunc.

A `local` buffer lives in one thread's registers: a thread that reads an element some other thread wrote reads
garbage, and nothing on the CPU shows it. `foreign_local_reads` enumerates the loops of one thread block (the
block index at 0) with numpy, so a check needs no GPU. A cross-thread reduction (a reduce axis bound to
threadIdx) hands its result to every thread it spans, so those thread axes do not count for its buffer.
"""

from __future__ import annotations

import numpy as np

LIMIT = 400_000  # loop iterations enumerated per block, at most

_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
           "FloorMod": np.mod, "Min": np.minimum, "Max": np.maximum, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal, "EQ": np.equal, "NE": np.not_equal,
           "And": np.logical_and, "Or": np.logical_or}


def foreign_local_reads(func) -> list:
    """[(buffer, reading block, elements)] read from a thread-local buffer by threads that did not write them."""
    uses, broadcast = {}, {}
    for block in _blocks(func):
        for buffer, indices, is_write in block["accesses"]:
            if buffer.scope() == "local":
                uses.setdefault(buffer.name, []).append((block, indices, is_write))
                if is_write:
                    broadcast.setdefault(buffer.name, set()).update(block["allreduce"])
    found = []
    for name, accesses in uses.items():
        written, reads = set(), []
        for block, indices, is_write in accesses:
            keys = _thread_element_pairs(block, indices, skip=broadcast.get(name, set()))
            if keys is None:
                continue  # symbolic or too many iterations: not checked
            if is_write:
                written |= keys
            else:
                reads.append((block["name"], keys))
        found += [(name, reader, len(keys - written)) for reader, keys in reads if keys - written]
    return found


def _thread_element_pairs(block, indices, skip):
    """{(thread coordinates..., element indices...)} of one access over one thread block's iterations."""
    loops = block["loops"]
    free = [(var, extent) for var, extent, tag in loops if not tag.startswith("blockIdx")]
    if any(extent is None for _, extent in free) or np.prod([e for _, e in free] or [1]) > LIMIT:
        return None
    grids = np.meshgrid(*[np.arange(e) for _, e in free], indexing="ij")
    env = {var: grid.ravel() for (var, _), grid in zip(free, grids)}
    env.update({var: 0 for var, _, tag in loops if tag.startswith("blockIdx")})
    size = int(np.prod([e for _, e in free] or [1]))
    env.update({var: _evaluate(value, env) for var, value in block["iters"].items()})
    try:
        elements = [np.broadcast_to(_evaluate(i, env), (size,)) for i in indices]
    except KeyError:  # an access of a block nested in this one: checked with that block
        return None
    mask = np.broadcast_to(_evaluate(block["predicate"], env), (size,)).astype(bool)
    threads = {tag: var for var, _, tag in loops if tag.startswith("threadIdx") and tag not in skip}
    columns = [np.broadcast_to(env[threads[tag]], (size,)) for tag in sorted(threads)] + elements
    return set(zip(*[c[mask] for c in columns]))


def _evaluate(expr, env):
    from tvm import tirx

    kind = type(expr).__name__
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return env[expr]
    if kind == "Cast":
        return _evaluate(expr.value, env)
    if kind == "Not":
        return np.logical_not(_evaluate(expr.a, env))
    if kind in _BINARY:
        return _BINARY[kind](_evaluate(expr.a, env), _evaluate(expr.b, env))
    raise NotImplementedError(f"index expression {kind}")


def _blocks(func) -> list:
    """Every block with the loops around it [(var, extent or None, thread tag or "")], its iter values, predicate,
    buffer accesses [(buffer, indices, is_write)], and the thread tags its reduce axes are bound to."""
    import tvm_ffi
    from tvm import tirx
    from tvm.s_tir.stmt import SBlockRealize

    probe = tirx.decl_buffer((1,), "float32")
    load_type = type(tirx.BufferLoad(probe, [tirx.IntImm("int32", 0)]))
    found = []

    def visit(stmt, loops):
        if isinstance(stmt, tirx.For):
            tag = stmt.thread_binding.thread_tag if stmt.thread_binding is not None else ""
            extent = int(stmt.extent.value) if isinstance(stmt.extent, tirx.IntImm) else None
            visit(stmt.body, loops + [(stmt.loop_var, extent, tag)])
        elif isinstance(stmt, tirx.SeqStmt):
            for part in stmt.seq:
                visit(part, loops)
        elif isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, loops)
            if stmt.else_case is not None:
                visit(stmt.else_case, loops)
        elif isinstance(stmt, SBlockRealize):
            block, accesses, reduce_vars = stmt.block, [], set()
            for part in [block.body] + ([block.init] if block.init is not None else []):
                tvm_ffi.structural_map(part, [
                    (tirx.BufferStore, lambda n: accesses.append((n.buffer, list(n.indices), True)) or n),
                    (load_type, lambda n: accesses.append((n.source, list(n.indices), False)) or n)])
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                if int(iv.iter_type) == 2:  # a reduce axis
                    tvm_ffi.structural_map(value, [(tirx.Var, lambda v: reduce_vars.add(v) or v)])
            found.append({"name": block.name_hint, "loops": loops, "predicate": stmt.predicate, "accesses": accesses,
                          "iters": {iv.var: v for iv, v in zip(block.iter_vars, stmt.iter_values)},
                          "allreduce": {t for v, _, t in loops if t.startswith("threadIdx") and v in reduce_vars}})
            visit(block.body, loops)
        elif hasattr(stmt, "body"):
            visit(stmt.body, loops)

    visit(func.body, [])
    return found
