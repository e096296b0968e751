"""Elementwise and reduction ops: PRelu, IsInf, Pow, Celu, Clip, ReduceMax / ReduceMin."""

from __future__ import annotations

import numpy as np

from .common import const_value, dtype_of, relax_api, string_attr


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
    magnitudes an int64 holds in 53 bits), a float base takes the exponent in its own type. (The graph passes
    multiply out a constant exponent of 2 to 4: xcomp/graph/small_powers.py.)"""
    relax = relax_api()
    base, exponent = inputs[0], inputs[1]
    base_type, exponent_type = dtype_of(base), dtype_of(exponent)
    if base_type.startswith(("float", "bfloat")):
        return stock() if exponent_type == base_type else relax.op.power(base, relax.op.astype(exponent, base_type))
    raised = relax.op.power(relax.op.astype(base, "float64"), relax.op.astype(exponent, "float64"))
    return relax.op.astype(raised, base_type)


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
    """ReduceMax / ReduceMin, mending three cases TVM gets wrong. Over an axis of size 0, ONNX gives -inf / +inf
    (the lowest / highest value of an integer type), and TVM's reduction leaves such an output unwritten
    (garbage): the result is then a constant. TVM has no max/min of bool: it reduces uint8 instead. And a float
    max of values that are all -inf is -inf (_infinite_extreme)."""

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
            return _infinite_extreme(bb, inputs, result, extreme, stock)
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


def _infinite_extreme(bb, inputs, result, extreme, stock):
    """TVM's float max (min) starts from the lowest (highest) finite value, so a max over values that are all
    -inf came out as -FLT_MAX: where no value exceeds -inf (for min: is below +inf), the result is -inf (+inf).
    Whether one does is the same reduction (TVM's, so the same axes) of an int8 indicator: one more pass over the
    data, for float types only."""
    relax = relax_api()
    data = inputs[0]
    dtype = dtype_of(data)
    if not dtype.startswith(("float", "bfloat")):
        return result
    infinity = relax.const(-np.inf if extreme == "max" else np.inf, dtype)
    beyond = bb.normalize(relax.op.astype(relax.op.not_equal(data, infinity), "int8"))  # NaN counts as beyond
    any_beyond = bb.normalize(stock([beyond, *inputs[1:]]) if extreme == "max" else
                              relax.op.negative(stock([bb.normalize(relax.op.negative(beyond)), *inputs[1:]])))
    return relax.op.where(relax.op.greater(any_beyond, relax.const(0, "int8")), result, infinity)


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


def convert_swish(bb, inputs, attrs, opset, stock=None):
    """Swish (opset 24): x * sigmoid(alpha * x)."""
    relax = relax_api()
    data = inputs[0]
    alpha = attrs.get("alpha", 1.0)
    scaled = data if alpha == 1.0 else relax.op.multiply(data, relax.const(alpha, dtype_of(data)))
    return relax.op.multiply(data, relax.op.sigmoid(scaled))


def convert_swiglu(bb, inputs, attrs, opset, stock=None):
    """SwiGLU (opset 28): Swish_alpha(A) * B, with A and B of one shape (the spec does not broadcast)."""
    relax = relax_api()
    gate, linear = inputs[0], inputs[1]
    if gate.ty.shape is not None and linear.ty.shape is not None and \
            [str(d) for d in gate.ty.shape.values] != [str(d) for d in linear.ty.shape.values]:
        raise ValueError(f"A {list(gate.ty.shape.values)} and B {list(linear.ty.shape.values)} differ in shape")
    return relax.op.multiply(convert_swish(bb, [gate], attrs, opset), linear)


def convert_bit_shift(bb, inputs, attrs, opset, stock=None):
    """BitShift with the semantics opset 28 spells out, which hold for the unsigned types of earlier opsets
    too: a shift by a negative amount or by the type's width or more gives 0 (-1 for a right shift of a
    negative signed value), where the machine's shift is undefined; a signed right shift is arithmetic, a signed
    left shift wraps (done on the unsigned bits)."""

    relax = relax_api()
    data, amount = inputs[0], inputs[1]
    dtype = dtype_of(data)
    info = np.iinfo(dtype)
    direction = string_attr(attrs, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"direction {direction!r} is not LEFT or RIGHT")
    outside = relax.op.logical_or(relax.op.less(amount, relax.const(0, dtype)),
                                  relax.op.greater_equal(amount, relax.const(info.bits, dtype)))
    safe = bb.normalize(relax.op.clip(amount, 0, info.bits - 1))
    signed = info.min < 0
    if direction == "RIGHT":
        shifted = relax.op.right_shift(data, safe)
        fill = relax.op.where(relax.op.less(data, relax.const(0, dtype)), relax.const(-1, dtype),
                              relax.const(0, dtype)) if signed else relax.const(0, dtype)
    else:
        unsigned = f"uint{info.bits}"
        bits = relax.op.left_shift(relax.op.astype(data, unsigned), relax.op.astype(safe, unsigned)) \
            if signed else relax.op.left_shift(data, safe)
        shifted = relax.op.astype(bits, dtype) if signed else bits
        fill = relax.const(0, dtype)
    return relax.op.where(outside, fill, shifted)


def convert_cum_prod(bb, inputs, attrs, opset, stock=None):
    """CumProd (opset 26), with exclusive (the product of the elements before) and reverse (from the end)."""
    relax = relax_api()
    data, axis = inputs[0], const_value(inputs[1])
    if axis is None:
        raise NotImplementedError("CumProd's axis must be a constant (give it with --input-value)")
    rank = data.ty.ndim
    axis = int(np.asarray(axis).reshape(-1)[0])
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is outside rank {rank}")
    axis %= rank
    reverse, exclusive = bool(attrs.get("reverse", 0)), bool(attrs.get("exclusive", 0))
    if reverse:
        data = bb.normalize(relax.op.flip(data, axis))
    result = bb.normalize(relax.op.cumprod(data, axis=axis, exclusive=exclusive))
    return relax.op.flip(result, axis) if reverse else result


def convert_bit_cast(bb, inputs, attrs, opset, stock=None):
    """BitCast (opset 26): the same bits read as another type of the same width."""
    import onnx
    from tvm import topi

    relax = relax_api()
    data = inputs[0]
    try:
        target = str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(attrs["to"])))
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"'to' {attrs.get('to')} is not a data type xcomp holds") from None
    if target in ("bool", "object") or dtype_of(data) in ("bool",):
        raise NotImplementedError(f"BitCast between {dtype_of(data)} and {target}")
    if np.dtype(target).itemsize != np.dtype(dtype_of(data)).itemsize:
        raise ValueError(f"BitCast from {dtype_of(data)} to {target}: the widths differ")
    return bb.emit_te(topi.reinterpret, data, target)


def convert_elu(bb, inputs, attrs, opset, stock=None):
    """Elu as where(x > 0, x, alpha (exp(x) - 1)) in x's own type (TVM's converter mixes a float32 constant into
    float16 arithmetic, which Relax refuses)."""
    relax = relax_api()
    data = inputs[0]
    dtype = dtype_of(data)
    negative = relax.op.multiply(relax.const(attrs.get("alpha", 1.0), dtype),
                                 relax.op.subtract(relax.op.exp(data), relax.const(1, dtype)))
    return relax.op.where(relax.op.greater(data, relax.const(0, dtype)), data, negative)


def convert_mod(bb, inputs, attrs, opset, stock):
    """Mod. fmod=0 on floats (allowed from opset 28) is floor modulo with numpy's special cases: the result
    takes the sign of B, a zero one too, and an infinite B gives A when the signs agree, else B. TVM's floor_mod
    computes A - floor(A / B) * B, which is NaN for an infinite B: it is computed here from fmod instead."""
    relax = relax_api()
    a, b = inputs[0], inputs[1]
    dtype = dtype_of(a)
    if attrs.get("fmod", 0) or not dtype.startswith(("float", "bfloat")):
        return stock()
    zero = relax.const(0, dtype)
    remainder = bb.normalize(relax.op.mod(a, b))  # fmod: the sign of A
    b_negative = relax.op.less(b, zero)
    wrong_sign = relax.op.logical_and(relax.op.not_equal(remainder, zero),
                                      relax.op.logical_xor(relax.op.less(remainder, zero), b_negative))
    result = relax.op.where(wrong_sign, relax.op.add(remainder, b), remainder)
    signed_zero = relax.op.where(b_negative, relax.const(-0.0, dtype), zero)
    return relax.op.where(relax.op.equal(remainder, zero), signed_zero, result)
