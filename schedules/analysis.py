"""What a fused PrimFunc computes, read from its blocks: the group kind, and the facts templates share.

Fused funcs from FuseTIR are a flat list of blocks under the root, each in its own perfect loop nest whose loops
bind one-to-one to the block's iter vars. Everything here reads that shape; funcs that do not have it (no root
block, opaque iter vars) are "opaque". A symbolic extent (a model's batch or sequence dim kept symbolic) is None:
the kind is still read, but only templates that accept `symbolic=True` (the generic one) may schedule it.
"""

from __future__ import annotations

import dataclasses

SPATIAL, REDUCE = 0, 2  # tirx.IterVar.DataPar, tirx.IterVar.CommReduce

KINDS = ("conv", "matmul", "reduction", "pool", "injective", "opaque")

# Block annotations our lowerings set (te.compute attrs; they survive fusion):
# WINOGRAD: the output tile edge, on every stage of a Winograd conv (cpu/winograd.py): the group is a conv.
# FLOPS: the block's operations with every symbolic extent at 1, where counting its arithmetic would mislead
# (a Winograd conv states the direct conv's count on its GEMM and 0 on its transforms).
# ROLE: what a stage is to the template of its group, where its shape and place in the data flow do not say it;
# its value is one of the roles below. Templates find a stage by it (with_role), never by the block's name.
WINOGRAD, FLOPS, ROLE = "xcomp.winograd", "xcomp.flops", "xcomp.role"
# a depthwise conv's input copied into channel vectors (cpu/legalize.py's packed_depthwise_conv2d)
DEPTHWISE_INPUT = "depthwise_input"
# a row reduced into vector-lane partials (cpu/vector_math.py's softmax): its reads mix the lane and the reduced
# index as a pooling window's do, but it is a plain reduction
ROW_PARTIALS = "row_partials"


@dataclasses.dataclass
class BlockInfo:
    """One root-level block: its schedule handle and the facts templates decide on."""

    name: str
    rv: object  # s_tir.SBlockRV
    iter_kinds: list  # SPATIAL / REDUCE per iter var, in order
    extents: list  # int per iter var; None where symbolic
    block: object = dataclasses.field(repr=False)  # the s_tir SBlock node

    @property
    def is_reduction(self) -> bool:
        return REDUCE in self.iter_kinds

    @property
    def reduce_axes(self) -> list:
        return [i for i, k in enumerate(self.iter_kinds) if k == REDUCE]

    @property
    def spatial_axes(self) -> list:
        return [i for i, k in enumerate(self.iter_kinds) if k == SPATIAL]

    def write_buffer(self):
        return self.block.writes[0].source


def root_blocks(sch, symbolic: bool = False) -> list:
    """BlockInfo for every block directly under the root, in program order.

    Raises ValueError when the func is not in the flat, one-loop-per-iter form templates expect, or has a symbolic
    extent and `symbolic` is False (tiling templates size everything from static extents)."""
    root = sch.get_sblock("root")
    infos = []
    for rv in sch.get_child_blocks(root):
        block = sch.get(rv)
        kinds, extents = [], []
        for iv in block.iter_vars:
            if int(iv.iter_type) not in (SPATIAL, REDUCE):
                raise ValueError(f"block {block.name_hint}: opaque iter var")
            static = hasattr(iv.dom.extent, "value")
            if not static and not symbolic:
                raise ValueError(f"block {block.name_hint}: symbolic extent")
            kinds.append(int(iv.iter_type))
            extents.append(int(iv.dom.extent.value) if static else None)
        if len(block.writes) != 1:
            raise ValueError(f"block {block.name_hint}: writes {len(block.writes)} buffers")
        infos.append(BlockInfo(block.name_hint, rv, kinds, extents, block))
    return infos


def _is_load(expr) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.expr.TensorLoad)  # tirx.BufferLoad builds one (TVM 0.27)


def _strip_cast(expr):
    from tvm import tirx

    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return expr


def mac_operands(block):
    """(lhs load, rhs load) when the block body is `C[...] = C[...] + A[...] * B[...]`, else None."""
    from tvm import tirx

    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return None
    value = store.value
    if not isinstance(value, tirx.Add):
        return None
    for acc, prod in ((value.a, value.b), (value.b, value.a)):
        acc, prod = _strip_cast(acc), _strip_cast(prod)
        if not (_is_load(acc) and acc.source.same_as(store.buffer)):
            continue
        if isinstance(prod, tirx.Mul):
            a, b = _strip_cast(prod.a), _strip_cast(prod.b)
            if _is_load(a) and _is_load(b):
                return a, b
    return None


def _vars_in(expr) -> set:
    from tvm.tirx.analysis import undefined_vars

    return {v.name for v in undefined_vars(expr)}


def has_sliding_window(block) -> bool:
    """Some read index mixes a spatial and a reduction iter var (`y * stride + ky`): a conv/pool window."""
    spatial = {iv.var.name for iv in block.iter_vars if int(iv.iter_type) == SPATIAL}
    reduce = {iv.var.name for iv in block.iter_vars if int(iv.iter_type) == REDUCE}
    for region in block.reads:
        for rng in region.region:
            names = _vars_in(rng.min)
            if names & spatial and names & reduce:
                return True
    return False


def subexpressions(expr):
    """`expr` and every expression inside it: operands, call arguments, load indices, a Let's value and body."""
    import tvm

    pending = [expr]
    while pending:
        node = pending.pop()
        yield node
        for field in ("a", "b", "value", "body", "condition", "true_value", "false_value"):
            child = getattr(node, field, None)
            if isinstance(child, tvm.ir.expr.Expr):
                pending.append(child)
        pending.extend(getattr(node, "args", ()))
        pending.extend(getattr(node, "indices", ()))


def branch_conditions(expr):
    """The conditions of every if_then_else in `expr` (a block's stored value)."""
    import tvm

    for node in subexpressions(expr):
        if isinstance(node, tvm.ir.expr.Call) and getattr(node.op, "name", "").endswith("if_then_else"):
            yield node.args[0]


def branches_along(block, axis: int) -> bool:
    """Whether the block's value picks between branches by its iter var `axis` (a concat along that axis):
    neighbouring elements along it may take different branches."""
    var = block.iter_vars[axis].var.name
    value = getattr(block.body, "value", None)
    return value is not None and any(var in _vars_in(cond) for cond in branch_conditions(value))


def main_reduction(infos):
    """The reduction block doing the most work (the conv / matmul / pool itself), or None."""
    reductions = [b for b in infos if b.is_reduction]
    if not reductions:
        return None
    return max(reductions, key=lambda b: _volume(b.extents))


def _volume(extents) -> int:
    """Iterations per unit of the symbolic extents (a symbolic one counts 1: it scales every block alike)."""
    n = 1
    for e in extents:
        n *= e if e is not None else 1
    return n


def with_role(infos, role: str):
    """The first block (BlockInfo) of `infos` annotated ROLE `role`, or None."""
    return next((info for info in infos if info.block.annotations.get(ROLE) == role), None)


def is_winograd(infos) -> bool:
    """Are these blocks a Winograd conv's stages (cpu/winograd.py)?"""
    return any(WINOGRAD in info.block.annotations for info in infos)


def classify_blocks(infos) -> str:
    if is_winograd(infos):
        return "conv"
    main = main_reduction(infos)
    if main is None:
        return "injective"
    if main.block.annotations.get(ROLE) == ROW_PARTIALS:
        return "reduction"
    if mac_operands(main.block) is not None:
        return "conv" if len(main.reduce_axes) >= 2 and has_sliding_window(main.block) else "matmul"
    return "pool" if has_sliding_window(main.block) else "reduction"


def classify(func) -> str:
    """One of KINDS for a fused PrimFunc."""
    from tvm import s_tir

    try:
        return classify_blocks(root_blocks(s_tir.Schedule(func), symbolic=True))
    except Exception:  # no root block or opaque iteration: no template may assume anything
        return "opaque"


def symbolic_vars(func) -> list:
    """Names of the symbolic dims in a PrimFunc's buffer shapes and of its scalar params (a size it takes as an
    argument, such as a KV cache's length), sorted; empty when everything is static."""
    from tvm.tirx.analysis import undefined_vars

    names = set()
    for param in func.params:  # TVM 0.27 passes buffers as params; scalar params have no .shape
        if not hasattr(param, "shape"):
            names.add(param.name)
        for dim in getattr(param, "shape", ()):
            names.update(v.name for v in undefined_vars(dim))
    return sorted(names)


__all__ = ["KINDS", "WINOGRAD", "FLOPS", "ROLE", "DEPTHWISE_INPUT", "ROW_PARTIALS", "BlockInfo", "root_blocks",
           "mac_operands", "has_sliding_window", "subexpressions", "branches_along", "main_reduction", "with_role",
           "is_winograd", "classify_blocks", "classify", "symbolic_vars"]
