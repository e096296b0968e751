"""Rewrite 1-D convolutions as 2-D ones over a height of 1.

TVM lowers conv1d with a plain loop nest that no CPU conv template tiles (Whisper's 384x384x3 stride-2 front
conv ran at 3 GFLOP/s). As conv2d on [N, C, 1, W] the conv templates, the epilogue folding and the blocked
layout apply unchanged; the squeeze back to [N, C, W] is an injective epilogue fused into the conv's group.
"""

from __future__ import annotations


def conv1d_as_conv2d(func):
    """`func` with every NCW/OIW conv1d replaced by expand_dims -> conv2d (NCHW/OIHW) -> squeeze."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Rewriter(PyExprMutator):
        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            attrs = call.attrs
            if (getattr(call.op, "name", None) != "relax.nn.conv1d"
                    or (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCW", "OIW", "NCW")):
                return call
            data, weight = (relax.op.expand_dims(arg, 2) for arg in call.args)
            (stride,), (left, right), (dilation,) = attrs.strides, attrs.padding, attrs.dilation
            conv = relax.op.nn.conv2d(data, weight, strides=(1, stride), padding=(0, left, 0, right),
                                      dilation=(1, dilation), groups=attrs.groups, out_dtype=attrs.out_dtype)
            return relax.op.squeeze(conv, axis=[2])

    return _Rewriter().visit_expr(func)


def Conv1dAsConv2d():  # noqa: N802 (named like the TVM passes it sits among)
    """The Relax function pass running conv1d_as_conv2d on every function."""
    from xcomp.graph.passes import function_pass

    return function_pass(conv1d_as_conv2d, "xcomp.Conv1dAsConv2d")
