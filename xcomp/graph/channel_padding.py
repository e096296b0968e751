"""Convs whose output channels are no whole vectors, padded to whole ones for the blocked layout (layout.py).

A `paddable` conv runs on zero-padded weights and its result is sliced back to its own channels. The slice then
moves on towards the consumers, through elementwise ops, pools and depthwise convs, which compute the padding
channels too, until a conv absorbs it (its weights zero-padded along their input channels) or it slices whole
vectors, which `blocked_channel_slices` does in the blocked layout. So mobilenet_v3's 72 and efficientnet's 40
channels run as 80 and 48 from one conv to the next, with no trip through NCHW
(docs/decisions/blocked-layout.md).
"""

from __future__ import annotations

# ops a channel slice may move past (ChannelSlices.after_elementwise): elementwise, so they compute the padding
# channels too, and finite there (a conv that absorbs the slice multiplies them by zero weights): no power, no
# division by a slice
ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
               "relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu")
# ops a channel slice may move past that reduce or pool over the spatial axes only
SPATIAL = ("relax.mean", "relax.nn.avg_pool2d", "relax.nn.max_pool2d", "relax.nn.adaptive_avg_pool2d")


def static_nchw_conv(call, weight_dims: int) -> bool:
    """A float32 conv2d in NCHW / OIHW whose channels and image size are static, and the first `weight_dims`
    dims of its weight: what a conv needs to run blocked (this module's `blockable`, layout.py's depthwise)."""
    attrs = call.attrs
    data, weight = call.args[0].ty, call.args[1].ty
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return False
    if str(data.dtype) != "float32" or data.ndim != 4 or weight.ndim != 4:
        return False
    return all(hasattr(d, "value") for d in [*list(data.shape)[1:], *list(weight.shape)[:weight_dims]])


def blockable(call) -> bool:
    """A conv2d that can run blocked once its output channels are whole vectors: `static_nchw_conv`, no
    groups."""
    return static_nchw_conv(call, 1) and int(call.attrs.groups) == 1


def paddable(conv, lanes: int) -> bool:
    """A `blockable` conv2d whose output channels `padded_channels` would round up."""
    if not blockable(conv):
        return False
    channels = int(conv.args[1].ty.shape[0])
    return channels > lanes and padded_channels(channels, lanes) != channels


def padded_channels(channels: int, lanes: int) -> int:
    """Output channels a `paddable` conv runs with: whole vectors, and above 8 vectors whole pairs of them: an
    odd count of channel vectors leaves the conv template only odd channel tiles, which cost more than the padding
    (docs/decisions/blocked-layout.md)."""
    unit = 2 * lanes if channels > 8 * lanes else lanes
    return -(-channels // unit) * unit


def _padded(value, axis: int, width: int, fill: float = 0.0):
    """`value` padded with `fill` along `axis` to `width`."""
    import numpy as np

    pad = [(0, 0)] * value.ndim
    pad[axis] = (0, width - value.shape[axis])
    return np.pad(value, pad, constant_values=fill).astype(np.float32)


def _pad_output_channels(conv, weight, lanes: int):
    """(conv2d on weights zero-padded to whole vectors of output channels, the channels to keep), or None when
    the conv is not `paddable` or its weight (`weight`: the constant it is bound to) is not a constant."""
    from tvm import relax

    from xcomp.schedules.cpu.legalize import constant_f32

    if not paddable(conv, lanes):  # before reading the weight: most convs need no padding
        return None
    value = constant_f32(weight)
    if value is None:
        return None
    channels = value.shape[0]
    wide = _padded(value, 0, padded_channels(channels, lanes))
    return relax.Call(conv.op, [conv.args[0], relax.const(wide)], conv.attrs), channels


def _widened(expr, channels: int, width: int, fill: float):
    """A constant operand beside a slice of `channels` of `width` padded channels, for the op on all of them: a
    one-element constant as it is, a per-channel one ([1, C, 1, 1] or [C, 1, 1]) padded with `fill` to `width`
    channels; else (not a constant, another shape) None."""
    import numpy as np
    import tvm
    from tvm import relax

    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    value = expr.value.numpy()
    if value.size == 1:
        return expr
    if value.dtype != np.float32 or value.size != channels or value.shape != (1, channels, 1, 1)[-value.ndim:]:
        return None
    return relax.const(_padded(value, value.ndim - 3, width, fill))


class ChannelSlices:
    """The channel padding of one function, as a PyExprMutator (`mutator`) rewrites it bottom-up: `rewrite` is
    given each call after its arguments and returns what replaces it, or None."""

    def __init__(self, mutator, lanes: int):
        self.mutator, self.lanes = mutator, lanes
        self.padded = {}  # var of a channel-padded result -> the channels to keep

    def _bound(self, expr):
        from xcomp.graph.passes import bound_value

        return bound_value(self.mutator, expr)

    def slice(self, value, channels):
        """strided_slice of `value`'s first `channels`, `value` bound to a var known as padded."""
        from tvm import relax

        var = self.mutator.builder_.emit(value)
        self.padded[var] = channels
        return relax.op.strided_slice(var, axes=[1], begin=[0], end=[channels])

    def source(self, expr):
        """The padded var `expr` slices (a slice `slice` made), else None."""
        value = self._bound(expr)
        if getattr(getattr(value, "op", None), "name", None) != "relax.strided_slice":
            return None
        return value.args[0] if value.args[0] in self.padded else None

    def rewrite(self, call):
        """The replacement of `call` (see the module doc), or None."""
        name = call.op.name
        if name == "relax.nn.conv2d":
            absorbed = self.absorbed_conv(call)
            if absorbed is not None and int(call.attrs.groups) > 1:
                return absorbed  # a depthwise conv: already sliced
            call = call if absorbed is None else absorbed
            padding = _pad_output_channels(call, self._bound(call.args[1]), self.lanes)
            return call if padding is None else self.slice(*padding)
        if name in SPATIAL:
            return self.after_spatial(call)
        if name in ELEMENTWISE:
            return self.after_elementwise(call)
        return None

    def lifted(self, call):
        """`call`, or its slice moved after it (after_elementwise)."""
        lifted = self.after_elementwise(call)
        return call if lifted is None else lifted

    def after_elementwise(self, call):
        """op(slice(padded), c...) -> slice(op(padded, c'...)) for an elementwise op whose other operands are
        one-element constants, per-channel constants c (padded to c', the bias of a padded conv) or slices of as
        many channels of as wide a padded tensor (SiLU's x * sigmoid(x), a residual add): the op then fuses into
        the conv's group, and the slice moves on. None where that does not apply."""
        from tvm import relax

        sources = [self.source(a) for a in call.args]
        sliced = {n: var for n, var in enumerate(sources) if var is not None}
        kept = {self.padded[var] for var in sliced.values()}
        widths = {int(var.ty.shape[1]) for var in sliced.values()}
        divide = call.op.name == "relax.divide"
        if not sliced or len(kept) != 1 or len(widths) != 1 or (divide and 0 not in sliced):
            return None
        channels, width = kept.pop(), widths.pop()
        fill = 1.0 if divide else 0.0
        args = [sliced[n] if n in sliced else _widened(self._bound(a), channels, width, fill)
                for n, a in enumerate(call.args)]
        if any(a is None for a in args):
            return None
        return self.slice(relax.Call(call.op, args, call.attrs), channels)

    def after_spatial(self, call):
        """pool(slice(padded)) -> slice(pool(padded)) for a mean, pool or global pool over the spatial axes."""
        from tvm import relax

        source = self.source(call.args[0])
        if source is None or getattr(call.args[0].ty, "ndim", -1) != 4:
            return None
        attrs = call.attrs
        if call.op.name == "relax.mean":
            axes = [int(a) for a in attrs.axis or [1]]
            if not attrs.keepdims or 0 in axes or 1 in axes:
                return None
        elif attrs.layout != "NCHW" or attrs.out_layout != "NCHW":
            return None
        return self.slice(relax.Call(call.op, [source, *call.args[1:]], call.attrs), self.padded[source])

    def absorbed_conv(self, call):
        """conv2d(slice(padded), w) -> conv2d(padded, w'): a conv reading all channels of `padded`, on weights
        zero-padded to them (w' along input channels; a depthwise conv's along output channels, its output then
        sliced in turn), where the slice keeps no whole number of vectors. Its input is then whole vectors, so it
        reads the blocked layout, and no slice is left between the convs. None where that does not apply."""
        from tvm import relax

        from xcomp.schedules.cpu.legalize import constant_f32

        source = self.source(call.args[0])
        weight = constant_f32(self._bound(call.args[1]))
        attrs = call.attrs
        if source is None or weight is None or weight.ndim != 4:
            return None
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return None
        channels, width = self.padded[source], int(source.ty.shape[1])
        if channels % self.lanes == 0:  # the slice takes whole vectors, fused into the producer's group: cheaper
            return None
        groups = int(attrs.groups)
        if groups == 1:
            return relax.Call(call.op, [source, relax.const(_padded(weight, 1, width))], attrs)
        if not groups == channels == weight.shape[0] or weight.shape[1] != 1:
            return None
        out_dtype = None if attrs.out_dtype is None or str(attrs.out_dtype) in ("", "void") else attrs.out_dtype
        conv = relax.op.nn.conv2d(source, relax.const(_padded(weight, 0, width)), attrs.strides,
                                  attrs.padding, attrs.dilation, width, attrs.data_layout, attrs.kernel_layout,
                                  attrs.out_layout, out_dtype)
        return self.slice(conv, channels)


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


__all__ = ["ChannelSlices", "static_nchw_conv", "blockable", "paddable", "padded_channels", "blocked_channel_slices"]
