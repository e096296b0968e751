"""Blocked channel layout between convs: NCHW{V}c activations, V = the SIMD width.

With plain NCHW activations every conv reads its input one channel plane apart per reduction step (hundreds of
concurrent streams, a TLB entry each) and writes its output vectors scattered across planes, which costs most
inside a model, where the previous group left the input in another core's cache (docs/decisions/blocked-layout.md). As
NCHW{V}c the V channels of a pixel are one vector: convs read and write whole vectors, and the adds, relus, pools
and concats between them run unchanged on the blocked tensors. TVM's ConvertLayout propagates the layout and
inserts the transforms where it must stop (an op with no blocked form such as LRN or a grouped conv that is not
depthwise, the reshape before a classifier). A depthwise conv over whole vectors of channels runs blocked too: each
channel vector convolves on its own.
"""

from __future__ import annotations

import logging

from xcomp.errors import describe
from xcomp.graph.channel_padding import (ChannelSlices, blockable, blocked_channel_slices, paddable,
                                         static_nchw_conv)

log = logging.getLogger(__name__)


def _depthwise_blockable(call, lanes: int) -> bool:
    """A depthwise conv2d (one input channel per output channel) over whole vectors of channels, fp32, NCHW/OIHW,
    static channels and image size: blocked, each channel vector convolves on its own."""
    if not static_nchw_conv(call, 2):
        return False
    channels, weight = int(call.args[0].ty.shape[1]), call.args[1].ty
    return (int(call.attrs.groups) == channels == int(weight.shape[0]) and int(weight.shape[1]) == 1
            and channels % lanes == 0)


def conv_layouts(call, lanes: int) -> list:
    """[data, kernel, output] layouts for a conv2d call. Blocked output when it is `blockable` and its output
    channels are whole vectors; blocked input too when its input channels are (else the conv reads NCHW, as the
    RGB stem of a CNN does, and its weights are OIHW{V}o). A `_depthwise_blockable` conv is blocked on both
    sides, its weights OIHW{V}o ([C/V, 1, KH, KW, V])."""
    if _depthwise_blockable(call, lanes):
        return [f"NCHW{lanes}c", f"OIHW{lanes}o", f"NCHW{lanes}c"]
    if not blockable(call) or int(call.args[1].ty.shape[0]) % lanes:
        return ["NCHW", "OIHW", "NCHW"]
    if int(call.args[0].ty.shape[1]) % lanes:
        return ["NCHW", f"OIHW{lanes}o", f"NCHW{lanes}c"]
    return [f"NCHW{lanes}c", f"OIHW{lanes}i{lanes}o", f"NCHW{lanes}c"]


_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
           "relax.power")


def prepare_for_layout(func, lanes: int):
    """`func` rewritten where TVM's ConvertLayout would stop the blocked layout for no reason:
    - a conv whose output channels are not whole vectors (a classifier's 1000) runs on zero-padded weights, and
      the padding channels go on to the consumers that take them (channel_padding.py);
    - nn.dropout (an identity at inference) becomes its input and an all-ones mask: ConvertLayout cannot pass a
      layout through dropout's (output, mask) tuple;
    - a constant operand of a binary op gets the other operand's rank ([C, 1, 1] -> [1, C, 1, 1], the same
      broadcast): ConvertLayout converts only operands of equal rank (otherwise pre-activation batch norms, as
      in densenet, send every conv input back to NCHW and forth);
    - but a one-element constant (a scalar, [1], [1, 1, 1, 1]) becomes or stays a 0-d scalar: ConvertLayout
      broadcasts a scalar against any layout, while its layout inference fails on a [1, 1, 1, 1] operand beside
      a blocked one ("Cannot broadcast from 5 to 4") and the whole model stays NCHW (the 3 and 6 of hardswish,
      x * clip(x + 3, 0, 6) / 6);
    - clip(x, lo, hi) becomes maximum(minimum(x, hi), lo) on scalars (topi.clip's order): TVM has no layout
      inference for clip, so every clip (hardswish, hardsigmoid, relu6) would run NCHW between transforms."""
    import tvm
    from tvm import relax, tirx
    from tvm.relax.expr_functor import PyExprMutator, mutator

    def ranked(expr, other, ndim):
        """`expr`, one operand of a binary op, reshaped as the docstring says; `other` is the other operand and
        `ndim` the higher of the two ranks."""
        if not isinstance(expr, tvm.ir.expr.Constant):
            return expr
        value = expr.value.numpy()
        if value.size == 1 and value.ndim <= getattr(other.ty, "ndim", -1):  # the output shape is other's
            return relax.const(value.reshape(())) if value.ndim else expr
        return relax.const(value.reshape((1,) * (ndim - value.ndim) + value.shape)) if value.ndim < ndim else expr

    @mutator
    class _Preparer(PyExprMutator):
        def __init__(self):
            super().__init__()
            self.channels = ChannelSlices(self, lanes)

        def _clip_as_min_max(self, call):
            data, *bounds = call.args  # the bounds are IntImm / FloatImm arguments
            dtype = getattr(data.ty, "dtype", None)
            if dtype is None or not all(isinstance(b, (tirx.IntImm, tirx.FloatImm)) for b in bounds):
                return call
            upper = relax.op.minimum(data, relax.const(bounds[1].value, dtype))
            upper = self.builder_.emit(self.channels.lifted(upper))
            return self.channels.lifted(relax.op.maximum(upper, relax.const(bounds[0].value, dtype)))

        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name is None:
                return call
            rewritten = self.channels.rewrite(call)
            if rewritten is not None:
                return rewritten
            if name == "relax.nn.dropout":
                data = call.args[0]
                return relax.Tuple([data, relax.op.ones_like(data)])
            if name in _BINARY and len(call.args) == 2:
                ndim = max(getattr(a.ty, "ndim", -1) for a in call.args)
                if ndim > 0:
                    lhs, rhs = call.args
                    return relax.Call(call.op, [ranked(lhs, rhs, ndim), ranked(rhs, lhs, ndim)], call.attrs)
            if name == "relax.clip":
                return self._clip_as_min_max(call)
            return call

    return _Preparer().visit_expr(func)


def _has_blocked_conv(mod, lanes: int) -> bool:
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            found.append(conv_layouts(expr, lanes)[-1] != "NCHW" or paddable(expr, lanes))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return any(found)


def BlockedConvLayout(lanes: int, notes: list | None = None):  # noqa: N802 (named like the TVM passes)
    """The Relax pass giving every conv the layouts `conv_layouts` picks. A model without a blocked conv is
    left as it is, and so is one whose other ops TVM's layout inference cannot take (the layout is an
    optimisation: it must never cost a model its compile); that case appends a line to `notes` for the user."""
    import tvm
    from tvm import relax

    from xcomp.graph.passes import function_pass

    def desired(call):
        return {"relax.nn.conv2d": conv_layouts(call, lanes)} if call.op.name == "relax.nn.conv2d" else {}

    prepare = function_pass(lambda func: prepare_for_layout(func, lanes), "xcomp.PrepareForLayout")
    slices = function_pass(lambda func: blocked_channel_slices(func, lanes), "xcomp.BlockedChannelSlices")
    convert = tvm.ir.transform.Sequential(
        [prepare, relax.transform.CanonicalizeBindings(), relax.transform.ConvertLayout({}, desired), slices])

    @tvm.ir.transform.module_pass(opt_level=0, name="xcomp.BlockedConvLayout")
    def _pass(mod, ctx):  # noqa: ARG001
        if not _has_blocked_conv(mod, lanes):
            return mod
        try:
            return convert(mod)
        except Exception as err:  # a TVM layout-inference gap in some other op: keep NCHW
            note = f"convs run in NCHW, not blocked (slower): TVM's layout inference failed: {describe(err)}"
            log.info(note)
            if notes is not None:
                notes.append(note)
            return mod

    return _pass
