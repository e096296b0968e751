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

log = logging.getLogger(__name__)


def _blockable(call) -> bool:
    """A conv2d that can run blocked once its output channels are whole vectors: fp32, NCHW/OIHW, no groups,
    static channels and image size."""
    attrs = call.attrs
    data, weight = call.args[0].ty, call.args[1].ty
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return False
    if str(data.dtype) != "float32" or int(attrs.groups) != 1 or data.ndim != 4 or weight.ndim != 4:
        return False
    return all(hasattr(d, "value") for d in [*list(data.shape)[1:], weight.shape[0]])


def _depthwise_blockable(call, lanes: int) -> bool:
    """A depthwise conv2d (one input channel per output channel) over whole vectors of channels, fp32, NCHW/OIHW,
    static channels and image size: blocked, each channel vector convolves on its own."""
    attrs = call.attrs
    data, weight = call.args[0].ty, call.args[1].ty
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return False
    if str(data.dtype) != "float32" or data.ndim != 4 or weight.ndim != 4:
        return False
    if not all(hasattr(d, "value") for d in [*list(data.shape)[1:], *list(weight.shape)[:2]]):
        return False
    channels = int(data.shape[1])
    return (int(attrs.groups) == channels == int(weight.shape[0]) and int(weight.shape[1]) == 1
            and channels % lanes == 0)


def conv_layouts(call, lanes: int) -> list:
    """[data, kernel, output] layouts for a conv2d call. Blocked output when it is `_blockable` and its output
    channels are whole vectors; blocked input too when its input channels are (else the conv reads NCHW, as the
    RGB stem of a CNN does, and its weights are OIHW{V}o). A `_depthwise_blockable` conv is blocked on both
    sides, its weights OIHW{V}o ([C/V, 1, KH, KW, V])."""
    if _depthwise_blockable(call, lanes):
        return [f"NCHW{lanes}c", f"OIHW{lanes}o", f"NCHW{lanes}c"]
    if not _blockable(call) or int(call.args[1].ty.shape[0]) % lanes:
        return ["NCHW", "OIHW", "NCHW"]
    if int(call.args[0].ty.shape[1]) % lanes:
        return ["NCHW", f"OIHW{lanes}o", f"NCHW{lanes}c"]
    return [f"NCHW{lanes}c", f"OIHW{lanes}i{lanes}o", f"NCHW{lanes}c"]


_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
           "relax.power")
# ops a channel slice may move past (_slice_after): elementwise, so they compute the padding channels too
_ELEMENTWISE = (*_BINARY, "relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu")


def _scalar_constant(expr) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant) and expr.value.numpy().size == 1


def _paddable(conv, lanes: int) -> bool:
    """A `_blockable` conv2d whose output channels `padded_channels` would round up."""
    if not _blockable(conv):
        return False
    channels = int(conv.args[1].ty.shape[0])
    return channels > lanes and padded_channels(channels, lanes) != channels


def padded_channels(channels: int, lanes: int) -> int:
    """Output channels a `_paddable` conv runs with: whole vectors, and above 8 vectors whole pairs of them: an
    odd count of channel vectors leaves the conv template only odd channel tiles, which cost more than the padding
    (docs/decisions/blocked-layout.md)."""
    unit = 2 * lanes if channels > 8 * lanes else lanes
    return -(-channels // unit) * unit


def _pad_channels(conv, weight, lanes: int):
    """(conv2d on weights zero-padded to whole vectors of output channels, the channels to keep), or None when
    the conv is not `_paddable` or its weight (`weight`: the constant it is bound to) is not a constant."""
    import numpy as np
    from tvm import relax

    from xcomp.schedules.cpu.legalize import constant_f32

    if not _paddable(conv, lanes):  # before reading the weight: most convs need no padding
        return None
    value = constant_f32(weight)
    if value is None:
        return None
    channels = value.shape[0]
    padded = np.zeros((padded_channels(channels, lanes), *value.shape[1:]), np.float32)
    padded[:channels] = value
    return relax.Call(conv.op, [conv.args[0], relax.const(padded)], conv.attrs), channels


def prepare_for_layout(func, lanes: int):
    """`func` rewritten where TVM's ConvertLayout would stop the blocked layout for no reason:
    - a conv whose output channels are not whole vectors (a classifier's 1000) runs on zero-padded weights, its
      bias add too, and the padding channels are sliced off after that;
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
    import numpy as np
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

    from xcomp.graph.passes import bound_value
    from xcomp.schedules.cpu.legalize import constant_f32

    padded = {}  # var of a channel-padded result -> the channels to keep

    @mutator
    class _Preparer(PyExprMutator):
        def _slice(self, value, channels):
            var = self.builder_.emit(value)
            padded[var] = channels
            return relax.op.strided_slice(var, axes=[1], begin=[0], end=[channels])

        def _bias_before_slice(self, call):
            """add(slice(padded), bias) -> slice(add(padded, padded bias)): the bias stays in the conv's group."""
            source, bias = (bound_value(self, a) for a in call.args)
            if getattr(getattr(source, "op", None), "name", None) != "relax.strided_slice":
                return None
            channels = padded.get(source.args[0])
            value = constant_f32(bias)
            if channels is None or value is None or value.size != channels:
                return None
            if value.shape != (1, channels, 1, 1)[-value.ndim:]:
                return None
            width = int(source.args[0].ty.shape[1])
            vector = np.zeros((1, width, 1, 1), np.float32)
            vector[0, :channels, 0, 0] = value.reshape(-1)
            return self._slice(relax.op.add(source.args[0], relax.const(vector)), channels)

        def _slice_after(self, call):
            """op(slice(padded), scalar...) -> slice(op(padded, scalar...)) for an elementwise op whose other
            operands are one-element constants or slices of as many channels of as wide a padded tensor (SiLU's
            x * sigmoid(x)): the op then fuses into the conv's group, and the slice that is left sits between
            blocked tensors (see blocked_channel_slices). None where that does not apply."""
            sources = [bound_value(self, a) for a in call.args]
            sliced = {n: v.args[0] for n, v in enumerate(sources)
                      if getattr(getattr(v, "op", None), "name", None) == "relax.strided_slice"
                      and v.args[0] in padded}
            kept = {padded[var] for var in sliced.values()}
            widths = {int(var.ty.shape[1]) for var in sliced.values()}
            if not sliced or len(kept) != 1 or len(widths) != 1:
                return None
            if not all(_scalar_constant(a) for n, a in enumerate(call.args) if n not in sliced):
                return None
            args = [sliced.get(n, a) for n, a in enumerate(call.args)]
            return self._slice(relax.Call(call.op, args, call.attrs), kept.pop())

        def _lift(self, call):
            """`call`, or its slice moved after it (_slice_after)."""
            lifted = self._slice_after(call)
            return call if lifted is None else lifted

        def _clip_as_min_max(self, call):
            data, *bounds = call.args  # the bounds are IntImm / FloatImm arguments
            dtype = getattr(data.ty, "dtype", None)
            if dtype is None or not all(isinstance(b, (tirx.IntImm, tirx.FloatImm)) for b in bounds):
                return call
            upper = self.builder_.emit(self._lift(relax.op.minimum(data, relax.const(bounds[1].value, dtype))))
            return self._lift(relax.op.maximum(upper, relax.const(bounds[0].value, dtype)))

        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name == "relax.nn.conv2d":
                padding = _pad_channels(call, bound_value(self, call.args[1]), lanes)
                return call if padding is None else self._slice(*padding)
            if name == "relax.add":
                lifted = self._bias_before_slice(call)
                if lifted is not None:
                    return lifted
            if name == "relax.nn.dropout":
                data = call.args[0]
                return relax.Tuple([data, relax.op.ones_like(data)])
            if name in _ELEMENTWISE:
                lifted = self._slice_after(call)
                if lifted is not None:
                    return lifted
            if name in _BINARY and len(call.args) == 2:
                ndim = max(getattr(a.ty, "ndim", -1) for a in call.args)
                if ndim > 0:
                    lhs, rhs = call.args
                    return relax.Call(call.op, [ranked(lhs, rhs, ndim), ranked(rhs, lhs, ndim)], call.attrs)
            if name == "relax.clip":
                return self._clip_as_min_max(call)
            return call

    return _Preparer().visit_expr(func)


def _ints(expr) -> list:
    """The ints of a relax tuple of PrimValues (strided_slice's axes, begin, end)."""
    return [int(field.value) for field in expr.fields]


def blocked_channel_slices(func, lanes: int):
    """`func` with each round trip through NCHW for a channel slice of whole vectors,
    layout_transform(strided_slice(layout_transform(x, NCHW{V}c -> NCHW), channels 0..C), NCHW -> NCHW{V}c),
    replaced by a slice of x's first C/V channel vectors. ConvertLayout cannot slice the blocked channel axis, so
    it leaves the round trip wherever a conv's output is padded to whole pairs of vectors (padded_channels) and
    sliced back for a blocked consumer (a depthwise conv)."""
    from tvm import relax, tirx
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from xcomp.graph.passes import bound_value

    def unblock(n, c, h, w, v):
        return n, c * lanes + v, h, w

    def block(n, c, h, w):
        return n, c // lanes, h, w, c % lanes

    def is_transform(expr, index_map, ndim) -> bool:
        return (getattr(getattr(expr, "op", None), "name", None) == "relax.layout_transform"
                and expr.attrs.index_map.is_equivalent_to(tirx.IndexMap.from_func(index_map, index_dtype="int64"))
                and getattr(expr.args[0].ty, "ndim", -1) == ndim)

    @mutator
    class _Rewriter(PyExprMutator):
        def visit_call_(self, call):  # noqa: N802 (TVM's visitor naming)
            call = super().visit_call_(call)
            if not is_transform(call, block, 4):
                return call
            sliced = bound_value(self, call.args[0])
            if getattr(getattr(sliced, "op", None), "name", None) != "relax.strided_slice" or len(sliced.args) != 4:
                return call
            source = bound_value(self, sliced.args[0])
            axes, begin, end = (_ints(a) for a in sliced.args[1:])
            if axes != [1] or begin != [0] or end[0] % lanes or not is_transform(source, unblock, 5):
                return call
            return relax.op.strided_slice(source.args[0], axes=[1], begin=[0], end=[end[0] // lanes])

    return _Rewriter().visit_expr(func)


def _has_blocked_conv(mod, lanes: int) -> bool:
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            found.append(conv_layouts(expr, lanes)[-1] != "NCHW" or _paddable(expr, lanes))

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
