"""Keep kernels that take a scalar argument out of fused groups.

A legalized op whose input is a scalar computed from shapes (`shape_to_tensor(past_len)`, a decoder's position
offset) becomes a kernel called with that scalar as an argument. Fused with kernels that read a symbolic size
only through the group's `tir_vars`, it makes TVM 0.27's FuseTIR fail ("VarRemapGet(source) == nullptr"). Such a
kernel computes a handful of scalars, so it loses nothing running alone: this pass marks it opaque before
FuseOps, and its result then enters the fused group as a tensor.

A scalar that only sizes the kernel's buffers (the `past` of a `past + seq` dim, which no buffer shape binds
alone) is no such value: it reaches the fused group as one of its sizes, and the kernel stays fusable. Else every
kernel over a KV cache ran alone: attention's scale, mask and softmax, each with its own call and allocation.
"""

from __future__ import annotations

OPAQUE = 8  # TVM's kOpaque op pattern: FuseOps never fuses such a kernel


def isolate_scalar_arg_kernels():
    """A module pass: every PrimFunc called by `call_tir` with a non-tensor argument gets op_pattern OPAQUE."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")

    @tvm.transform.module_pass(opt_level=0, name="xcomp.IsolateScalarArgKernels")
    def _pass(mod, ctx):  # noqa: ARG001
        callees = set()

        def visit(expr):
            if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
                args = expr.args[1]
                fields = args.fields if isinstance(args, relax.Tuple) else [args]
                if any(not isinstance(arg.ty, relax.TensorType) for arg in fields) and _takes_a_value(
                        mod[expr.args[0]]):
                    callees.add(expr.args[0])

        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                relax.analysis.post_order_visit(func, visit)
        for gv in callees:
            mod[gv] = mod[gv].with_attr("op_pattern", OPAQUE)
        return mod

    return _pass


def _takes_a_value(func) -> bool:
    """Some scalar param of the PrimFunc appears in none of its buffer shapes: the kernel computes with it."""
    from tvm.tirx.analysis import undefined_vars

    sizes = {v for param in func.params for dim in getattr(param, "shape", ()) for v in undefined_vars(dim)}
    return any(not hasattr(param, "shape") and not any(param.same_as(v) for v in sizes) for param in func.params)
