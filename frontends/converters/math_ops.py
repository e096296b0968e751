"""Elementwise and reduction ops: PRelu, IsInf, Pow, Celu, Clip, ReduceMax / ReduceMin."""

from __future__ import annotations

import numpy as np

from .common import const_value, dtype_of, relax_api


def convert_prelu(bb, inputs, attrs, opset, stock):
    """PReLU as where(x < 0, x * slope, x). Before opset 7 a [C] slope runs along the channel axis (axis 1),
    which TVM's converter gets wrong (it asserts while legalizing; torch exported nn.PReLU(num_parameters=C)
    that way); from opset 7 the slope broadcasts to x as in numpy, so the elementwise ops take it as it is."""
    relax = relax_api()
    data, slope = inputs[0], inputs[1]
    ndim, slope_shape = data.ty.ndim, list(slope.ty.shape)
    if opset < 7 and len(slope_shape) == 1 and ndim > 2:
        slope = bb.normalize(relax.op.reshape(slope, [slope_shape[0]] + [1] * (ndim - 2)))
    negative = relax.op.less(data, relax.const(0, dtype_of(data)))
    return relax.op.where(negative, relax.op.multiply(data, slope), data)


def convert_is_inf(bb, inputs, attrs, opset, stock):
    """TVM's IsInf ignores detect_positive / detect_negative (it flagged -inf when asked for +inf only)."""
    relax = relax_api()
    positive, negative = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if positive and negative:
        return stock()
    data = inputs[0]
    zero = relax.const(0, dtype_of(data))
    sign = relax.op.greater(data, zero) if positive else relax.op.less(data, zero) if negative else \
        relax.op.not_equal(data, data)  # neither: never true for an infinity
    return relax.op.logical_and(relax.op.isinf(data), sign)


def convert_pow(bb, inputs, attrs, opset, stock):
    """Pow's exponent may have another type than its base, and both may be integers; TVM's power wants one
    float type. The result has the base's type (the spec): integers are raised in float64 (exact for the
    magnitudes an int64 holds in 53 bits), a float base takes the exponent in its own type."""
    relax = relax_api()
    base, exponent = inputs[0], inputs[1]
    base_type, exponent_type = dtype_of(base), dtype_of(exponent)
    if base_type.startswith(("float", "bfloat")):
        return stock() if exponent_type == base_type else relax.op.power(base, relax.op.astype(exponent, base_type))
    power = relax.op.power(relax.op.astype(base, "float64"), relax.op.astype(exponent, "float64"))
    return relax.op.astype(power, base_type)


def convert_clip(bb, inputs, attrs, opset, stock):
    """Clip as Relax maximum then minimum (a min above the max gives the max, as the spec says). TVM's converter
    emits the two as opaque call_tir kernels, which the graph passes cannot see into: the blocked conv layout
    would stop at each one (relu6, a decomposed hardswish). A NaN bound means no bound, as in onnxruntime."""
    relax = relax_api()
    data = inputs[0]
    dtype = dtype_of(data)
    floating = dtype.startswith(("float", "bfloat"))
    if opset < 11:
        bounds = [attrs.get(name) for name in ("min", "max")]
        bounds = [None if b is None else relax.const(b, dtype) for b in bounds]
    else:
        bounds = [inputs[i] if len(inputs) > i else None for i in (1, 2)]
    result = data
    for bound, op, unbounded in zip(bounds, (relax.op.maximum, relax.op.minimum), (-np.inf, np.inf)):
        if bound is None:
            continue
        value = const_value(bound)
        if value is None and floating:
            bound = relax.op.where(relax.op.isnan(bound), relax.const(unbounded, dtype), bound)
        elif value is not None and value.size == 1 and (np.isnan(value.item()) or value.item() == unbounded):
            continue
        result = bb.normalize(op(result, bound))
    return result


def reduce_extreme(extreme):
    """ReduceMax / ReduceMin, mending two cases TVM gets wrong. Over an axis of size 0, ONNX gives -inf / +inf
    (the lowest / highest value of an integer type), and TVM's reduction leaves such an output unwritten
    (garbage): the result is then a constant. And TVM has no max/min of bool: it reduces uint8 instead."""

    def convert(bb, inputs, attrs, opset, stock):
        import tvm

        relax = relax_api()
        data = inputs[0]
        if dtype_of(data) == "bool":
            as_bytes = bb.normalize(relax.op.astype(data, "uint8"))
            return relax.op.astype(convert(bb, [as_bytes, *inputs[1:]], attrs, opset,
                                           lambda: stock([as_bytes, *inputs[1:]])), "bool")
        result = stock()
        shape = data.ty.shape.values if data.ty.shape is not None else None
        if shape is None or not any(isinstance(d, tvm.tirx.IntImm) and int(d) == 0 for d in shape):
            return result
        result = bb.normalize(result)
        out_shape = result.ty.shape
        if out_shape is None or any(not isinstance(d, tvm.tirx.IntImm) for d in out_shape.values):
            raise NotImplementedError("a reduction over an empty axis with a symbolic output shape")
        dtype = dtype_of(data)
        if np.dtype(dtype).kind == "f":
            fill = -np.inf if extreme == "max" else np.inf
        else:
            fill = np.iinfo(dtype).min if extreme == "max" else np.iinfo(dtype).max
        return relax.const(np.full([int(d) for d in out_shape.values], fill, dtype))

    return convert


def convert_celu(bb, inputs, attrs, opset, stock=None):
    """Celu (TVM has no converter): max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    relax = relax_api()
    data = inputs[0]
    dtype = dtype_of(data)
    alpha = relax.const(attrs.get("alpha", 1.0), dtype)
    zero = relax.const(0, dtype)
    negative = relax.op.multiply(alpha, relax.op.subtract(relax.op.exp(relax.op.divide(data, alpha)),
                                                          relax.const(1, dtype)))
    return relax.op.add(relax.op.maximum(data, zero), relax.op.minimum(negative, zero))
