"""Fold per-channel affine epilogues (bias, inference batch norm, scale) into the conv2d they follow.

After DecomposeOpsForInference and FoldConstant a conv + batch norm reads
`conv2d(x, W) [+ b] - mean) / sqrt(var + eps) * gamma + beta`: four per-channel operations per output element,
one of them a division, in every conv's write-back. As `conv2d(x, W * s) + t` it is one add. TVM's
FoldBatchnormToConv2D only sees a batch_norm right after the conv (not after the conv's bias add, not once
batch norm is decomposed), so we fold the decomposed chain ourselves.
"""

from __future__ import annotations

import numpy as np

from xcomp.schedules.cpu.legalize import constant_f32

_AFFINE_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _channel_vector(expr, channels: int):
    """The per-output-channel values (shape [channels]) of a constant that broadcasts over an NCHW tensor along
    the channel axis only, else None."""
    value = constant_f32(expr)
    if value is None or value.ndim > 4:
        return None
    shape = (1,) * (4 - value.ndim) + value.shape
    if shape[0] != 1 or shape[2] != 1 or shape[3] != 1 or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


def _conv_weight(call):
    """The weight array of an NCHW/OIHW float32 conv2d with a constant weight, else None."""
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    return constant_f32(call.args[1])


def _use_counts(func) -> dict:
    from tvm.relax.expr_functor import PyExprVisitor, visitor

    counts = {}

    @visitor
    class _Counter(PyExprVisitor):
        def visit_var_(self, var):  # noqa: N802 (TVM's visitor naming)
            counts[var] = counts.get(var, 0) + 1

        def visit_dataflow_var_(self, var):  # noqa: N802
            counts[var] = counts.get(var, 0) + 1

    _Counter().visit_expr(func)
    return counts


def _chains(func) -> dict:
    """{var: (conv call, weight, scale, shift)} for each var that is the last link of a conv's per-channel chain:
    var == conv2d(data, weight) * scale + shift, per output channel."""
    import tvm
    from tvm import relax

    uses = _use_counts(func)
    chains, starts, extended = {}, set(), set()
    for block in getattr(func.body, "blocks", []):
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                continue
            if value.op.name == "relax.nn.conv2d":
                weight = _conv_weight(value)
                if weight is not None:
                    channels = weight.shape[0]
                    chains[binding.var] = (value, weight, np.ones(channels, np.float32),
                                           np.zeros(channels, np.float32))
                    starts.add(binding.var)
                continue
            link = _link(value, chains, uses)
            if link is not None:
                source, scale, shift = link
                conv, weight = chains[source][:2]
                chains[binding.var] = (conv, weight, scale, shift)
                extended.add(source)
    # a bare conv needs no folding; a link that a later link extends is dead once that one is rewritten
    return {var: entry for var, entry in chains.items() if var not in extended and var not in starts}


def _link(call, chains, uses):
    """(source var, scale, shift) when `call` applies a per-channel constant to a chain var with no other user."""
    name = call.op.name
    if name not in _AFFINE_OPS or len(call.args) != 2:
        return None
    def extends(var):
        return var in chains and uses.get(var, 0) == 1

    source, operand = call.args
    if not extends(source):
        if name not in ("relax.add", "relax.multiply"):  # commutative: the chain var may come second
            return None
        operand, source = call.args
        if not extends(source):
            return None
    _, weight, scale, shift = chains[source]
    vector = _channel_vector(operand, weight.shape[0])
    if vector is None:
        return None
    if name == "relax.add":
        return source, scale, shift + vector
    if name == "relax.subtract":
        return source, scale, shift - vector
    if name == "relax.multiply":
        return source, scale * vector, shift * vector
    if np.any(vector == 0):
        return None
    return source, scale / vector, shift / vector


def fold_conv_affine(func):
    """`func` with every conv2d -> chain of per-channel add/subtract/multiply/divide rewritten as one conv2d on
    scaled weights plus one bias add. A link whose result has another user ends the chain (nothing is computed
    twice); a divisor with a zero is left alone. The replaced links are left dead for DeadCodeElimination."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    ends = _chains(func)
    if not ends:
        return func

    @mutator
    class _Folder(PyExprMutator):
        def visit_var_binding_(self, binding):  # noqa: N802 (TVM's visitor naming)
            if binding.var not in ends:
                return super().visit_var_binding_(binding)
            conv, weight, scale, shift = ends[binding.var]
            scaled = relax.const(np.ascontiguousarray(weight * scale.reshape(-1, 1, 1, 1)))
            folded = self.builder_.emit(relax.Call(conv.op, [self.visit_expr(conv.args[0]), scaled], conv.attrs))
            bias = relax.const(shift.reshape(1, -1, 1, 1))
            value = self.builder_.normalize(relax.op.add(folded, bias))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))

    return _Folder().visit_expr(func)


def FoldConvAffine():  # noqa: N802 (named like the TVM passes it sits among)
    """The Relax function pass running fold_conv_affine on every function."""
    from xcomp.graph.passes import function_pass

    return function_pass(fold_conv_affine, "xcomp.FoldConvAffine")
