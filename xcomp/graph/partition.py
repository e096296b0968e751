"""Partition a Relax model into operator groups: legalize, fuse, dedup.

After our graph passes, every `call_tir` in `main` calls one fused PrimFunc: an operator group (a conv with its
batch-norm/bias/relu epilogue, a reduction chain, an elementwise run, ...). Identical groups share one structural
key and are scheduled (and tuned) once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter

import numpy as np

from xcomp.errors import InternalError, UserError, describe


@dataclasses.dataclass
class OpGroup:
    """One unique fused PrimFunc and where it is used."""

    name: str  # the PrimFunc's global symbol in the compiled module
    kind: str  # conv, matmul, reduction, pool, injective, opaque
    key: str  # structural key: kind + hash of the func's structure (shapes, dtypes, ops)
    count: int  # call sites in the model
    flops: int  # per call (symbolic dims at 1)
    bytes: int  # per call: inputs read + outputs written, once each (symbolic dims at 1)
    signature: str  # "1x64x56x56xf32, 64x64x3x3xf32 -> 1x64x56x56xf32"; "Nx8xf32, ..." with a symbolic dim
    func: object = dataclasses.field(repr=False)  # tvm.tirx.PrimFunc, unscheduled
    symbols: tuple = ()  # symbolic dims in its shapes: it serves every size of them and is not tuned

    def to_dict(self):
        return {
            "name": self.name,
            "kind": self.kind,
            "key": self.key,
            "count": self.count,
            "flops": self.flops,
            "bytes": self.bytes,
            "signature": self.signature,
            "symbols": list(self.symbols),
        }

    @classmethod
    def from_dict(cls, d):
        """A group read back from a saved module: no func (artifacts from before symbolic dims have no symbols)."""
        return cls(func=None, **{**d, "symbols": tuple(d.get("symbols", ()))})


def graph_passes(spec, notes: list | None = None):
    """The Relax pass sequence that turns an imported model into fused operator groups for `spec`
    (run it inside the target's context: some passes dispatch on the target). A pass that leaves an
    optimisation out appends why to `notes`."""
    import tvm
    from tvm import relax

    from xcomp import schedules
    from xcomp.graph.attention import FuseAttention
    from xcomp.graph.const_fold import FoldConstantsNumpy
    from xcomp.graph.conv1d import Conv1dAsConv2d
    from xcomp.graph.fold_affine import FoldConvAffine
    from xcomp.graph.layout import BlockedConvLayout
    from xcomp.graph.scalar_kernels import isolate_scalar_arg_kernels
    from xcomp.graph.small_powers import MultiplyOutSmallPowers
    from xcomp.graph.transposed_matmul import ReadTransposedOperands

    # each FoldConstant after ours only sees what numpy could not fold (it builds every call with LLVM)
    fold = [FoldConstantsNumpy(), relax.transform.FoldConstant()]
    # GPU convs keep NCHW: their templates (dlight) expect it
    layout = [] if spec.is_gpu else [BlockedConvLayout(spec.simd_width, notes), *fold]
    # GPU matmul templates have not been measured reading a transposed operand in place
    operands = [] if spec.is_gpu else [ReadTransposedOperands()]
    # GPU attention keeps its three groups: no GPU template computes the fused one
    attention = [] if spec.is_gpu else [FuseAttention(spec)]
    return tvm.ir.transform.Sequential(
        [
            # sort, top-k, cumsum and friends have no LegalizeOps rule: lower them for the target first
            relax.backend.DispatchSortScan(),
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            Conv1dAsConv2d(),
            MultiplyOutSmallPowers(),  # before the first FoldConstant, which would build (and warn of) TVM's pow
            *fold,
            FoldConvAffine(),
            *layout,
            *attention,
            *operands,
            relax.transform.DeadCodeElimination(),
            relax.transform.LegalizeOps(customize_legalize_map=schedules.legalize_map(spec)),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            isolate_scalar_arg_kernels(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            # a group that only reshapes becomes a view of its input here, before scheduling: the VM lowering
            # does this too, but finds a pure reshape only in an unscheduled func (a symbolic one's schedule
            # hides the pattern, and it ran as a copy)
            relax.transform.RewriteDataflowReshape(),
            relax.transform.DeadCodeElimination(),
        ],
        name="xcomp.graph.partition",
    )


def _call_counts(mod) -> Counter:
    """How many times the Relax functions call each PrimFunc (by global symbol)."""
    import tvm
    from tvm import relax

    counts = Counter()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.args:
            callee = expr.args[0]
            if isinstance(callee, relax.GlobalVar):
                counts[callee.name_hint] += 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return counts


_ARITH = None


def _count_ops(expr) -> int:
    """Arithmetic operations in one evaluation of a TIR expression (calls such as exp count as one)."""
    global _ARITH
    import tvm
    from tvm import tirx

    if _ARITH is None:
        _ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Max, tirx.Min, tirx.FloorDiv, tirx.FloorMod)
    if isinstance(expr, _ARITH):
        return 1 + _count_ops(expr.a) + _count_ops(expr.b)
    if isinstance(expr, tvm.ir.Call):  # TIR intrinsics (exp, sqrt, ...) are ir.Call
        return 1 + sum(_count_ops(a) for a in expr.args)
    if isinstance(expr, tirx.Select):
        return 1 + _count_ops(expr.true_value) + _count_ops(expr.false_value)
    if isinstance(expr, tirx.Cast):
        return _count_ops(expr.value)
    return 0


def _block_stores(stmt):
    """BufferStores directly in a block body (looking through init-free SeqStmts)."""
    from tvm import tirx

    if isinstance(stmt, tirx.BufferStore):
        return [stmt]
    if isinstance(stmt, tirx.SeqStmt):
        return [s for child in stmt.seq for s in _block_stores(child)]
    return []


def _static(extent):
    """An int for a static extent, None for a symbolic one (a dim kept symbolic, or a data-dependent shape)."""
    return int(extent) if hasattr(extent, "value") or isinstance(extent, int) else None


def at_smallest(expr) -> int:
    """An expression of symbolic dims evaluated with each at 1: the smallest input a module serves, and the size
    `xcomp run`/`bench` use for a symbolic dim unless told otherwise."""
    from tvm.sym import Analyzer
    from tvm.tirx.analysis import undefined_vars

    analyzer = Analyzer()
    for var in undefined_vars(expr):
        analyzer.bind(var, 1)
    return max(0, int(analyzer.simplify(expr)))


def _product(dims):
    """The int64 product of static and symbolic dims, simplified."""
    from tvm import tirx
    from tvm.sym import Analyzer

    total = tirx.IntImm("int64", 1)
    for d in dims:
        total = total * (tirx.IntImm("int64", d) if isinstance(d, int) else tirx.Cast("int64", d))
    return Analyzer().simplify(total)


def expr_text(expr) -> str:
    """A TIR expression as a person reads it: `N * 128 + N * seq * seq * 3`, not `N * T.int64(128) + ...`."""
    return re.sub(r"T\.int(?:32|64)\((-?\d+)\)", r"\1", str(expr))


def flops_expr(func):
    """Arithmetic operations in one call: sum over leaf blocks of (iteration-space size x operations per
    iteration), or of the count a block states (analysis.FLOPS); an int64 expression of the func's symbolic dims
    (a constant when every shape is static)."""
    from tvm import s_tir, tirx
    from tvm.sym import Analyzer

    from xcomp.schedules.analysis import FLOPS

    sch = s_tir.Schedule(func)
    total = tirx.IntImm("int64", 0)
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []:
        block = sch.get(block_rv)
        extents = [iv.dom.extent for iv in block.iter_vars]
        stated = block.annotations.get(FLOPS)
        if stated is not None:  # its maker's count, to scale by the symbolic extents
            total = total + _product([e for e in extents if _static(e) is None]) * int(stated)
            continue
        ops = sum(_count_ops(store.value) for store in _block_stores(block.body))
        if ops:
            total = total + _product(extents) * ops
    return Analyzer().simplify(total)


def estimate_flops(func) -> int:
    """flops_expr with every symbolic dim at 1."""
    return at_smallest(flops_expr(func))


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:  # funcs without a root block (already lowered) have nothing to count
        return False


def _buffer_bytes(buf) -> int:
    """Bytes of a buffer, a symbolic dim at 1 (see at_smallest)."""
    n = at_smallest(_product(buf.shape))
    return n * np.dtype(str(buf.dtype)).itemsize if str(buf.dtype) != "bool" else n


def func_buffers(func) -> list:
    """A PrimFunc's buffer params (TVM 0.27 passes buffers directly; scalar shape vars are skipped)."""
    buffers = []
    for param in func.params:
        try:
            param.shape
        except AttributeError:
            continue
        buffers.append(param)
    return buffers


def _short_dtype(dtype: str) -> str:
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32",
            "int8": "i8", "uint8": "u8", "bool": "b1", "float64": "f64"}.get(dtype, dtype)


def _signature(func) -> str:
    parts = []
    for buf in func_buffers(func):
        shape = "x".join(str(_static(d)) if _static(d) is not None else expr_text(d) for d in buf.shape) or "scalar"
        parts.append(f"{shape}x{_short_dtype(str(buf.dtype))}")
    return ", ".join(parts[:-1]) + " -> " + parts[-1] if len(parts) > 1 else (parts[0] if parts else "")


def structural_key(func, kind: str) -> str:
    import tvm_ffi

    shape_and_ops = tvm_ffi.structural_hash(func.without_attr("global_symbol"), map_free_vars=True)
    digest = hashlib.sha1(str(shape_and_ops).encode())
    return f"{kind}-{digest.hexdigest()[:12]}"


def partition(imported_mod, spec, notes: list | None = None):
    """Run the graph passes; return (fused IRModule, [OpGroup] in first-use order). `notes`: see graph_passes."""
    from tvm import tirx

    from xcomp import schedules
    from xcomp.backends import backend_for_spec

    try:
        with backend_for_spec(spec).target():
            mod = graph_passes(spec, notes)(imported_mod)
    except Exception as err:
        symbols = _input_symbols(imported_mod)
        if symbols:  # most likely an op lowering that needs static shapes: the user can give them
            raise UserError(
                f"cannot compile the model with its dims {symbols} kept symbolic ({describe(err)}); specialize "
                "them with --input-shape NAME=D1,D2,... (Python: input_shapes={name: shape})"
            ) from None
        raise InternalError(f"graph partitioning failed: {describe(err)}") from err
    counts = _call_counts(mod)
    groups = []
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        kind = schedules.classify(func)
        groups.append(
            OpGroup(
                name=gv.name_hint,
                kind=kind,
                key=structural_key(func, kind),
                count=counts.get(gv.name_hint, 0),
                flops=estimate_flops(func),
                bytes=sum(_buffer_bytes(buf) for buf in func_buffers(func)),
                signature=_signature(func),
                func=func,
                symbols=tuple(schedules.symbolic_vars(func)),
            )
        )
    return mod, groups


def _input_symbols(mod) -> list:
    """Names of the symbolic dims in the Relax main's parameter shapes."""
    from tvm.tirx.analysis import undefined_vars

    names = set()
    for param in mod["main"].params:
        shape = getattr(param.ty, "shape", None)
        for dim in shape.values if shape is not None else ():
            names.update(v.name for v in undefined_vars(dim))
    return sorted(names)


def unique_groups(groups):
    """Groups merged by structural key: {key: (representative group, total call count)}."""
    merged = {}
    for g in groups:
        if g.key in merged:
            rep, total = merged[g.key]
            merged[g.key] = (rep, total + g.count)
        else:
            merged[g.key] = (g, g.count)
    return merged


def total_flops(groups) -> int:
    """Arithmetic operations per inference: each unique group's flops (symbolic dims at 1) x its calls."""
    return sum(rep.flops * count for rep, count in unique_groups(groups).values())
